//! What a path in an HDF5 file links to: hdf5-pure resolves hard links only (a soft link
//! `train`, as some ann-benchmarks exports have, was refused as "unexpected EOF" in the old group
//! format and as missing in the new one), so this module reads groups' links itself: the symbol
//! table of the old format (B-tree, symbol nodes, local heap) and the link messages of the new
//! one, in object headers of version 1 or 2 with their continuation blocks, and walks a path
//! through them ([`resolve`]), following soft links at any depth. Anything else (dense link
//! storage, unknown versions) answers `None`, and the caller goes on as before. Every read is
//! bounded by the file; every walk by a count.

/// Where a name in a group points.
#[derive(Debug, PartialEq)]
pub(crate) enum Link {
    /// The object header's address.
    Hard(u64),
    /// A path within the file.
    Soft(String),
    /// A file and a path in it.
    External(String, String),
}

/// Most object header blocks, B-tree nodes or symbol nodes one lookup visits.
const MAX_BLOCKS: usize = 4096;

struct Reader<'a> {
    bytes: &'a [u8],
    base: u64,
    offset_size: usize,
    length_size: usize,
}

impl Reader<'_> {
    fn slice(&self, at: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(at).ok()?;
        self.bytes.get(start..start.checked_add(len)?)
    }

    fn uint(&self, at: u64, size: usize) -> Option<u64> {
        let b = self.slice(at, size)?;
        Some(
            b.iter()
                .rev()
                .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
        )
    }

    /// An address stored at `at`, made absolute; `None` for the undefined address.
    fn addr(&self, at: u64) -> Option<u64> {
        let a = self.uint(at, self.offset_size)?;
        let undefined = if self.offset_size == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * self.offset_size)) - 1
        };
        if a == undefined {
            return None;
        }
        a.checked_add(self.base)
    }

    fn cstr(&self, at: u64) -> Option<String> {
        let start = usize::try_from(at).ok()?;
        let rest = self.bytes.get(start..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        String::from_utf8(rest[..end].to_vec()).ok()
    }
}

/// The root group of a file: its object header, and for the old format the symbol table
/// (B-tree, local heap) cached in the superblock.
struct Root<'a> {
    r: Reader<'a>,
    header: u64,
    table: Option<(u64, u64)>,
    /// The end-of-file address, made absolute.
    end: u64,
}

/// The link named `name` in the group with object header `header` (and cached symbol table
/// `table`), if the group could be read and holds it.
fn group_link(r: &Reader<'_>, header: u64, table: Option<(u64, u64)>, name: &str) -> Option<Link> {
    if let Some((tree, heap)) = table {
        // Links the symbol table cannot hold (external ones) sit in the header.
        if let Some(link) = symbol_table(r, tree, heap, name) {
            return Some(link);
        }
    }
    header_link(r, header, name)
}

/// The link named `name` in the root group, if the group could be read and holds it.
#[cfg(test)]
pub(crate) fn root_link(bytes: &[u8], name: &str) -> Option<Link> {
    let root = open(bytes)?;
    group_link(&root.r, root.header, root.table, name)
}

/// Where a path leads, walked link by link from the root.
#[derive(Debug, PartialEq)]
pub(crate) enum Resolved {
    /// The root group could not be read here (or the path names nothing before any soft link):
    /// left to the library.
    Unknown,
    /// The same object by hard links only, for the library.
    Hard(String),
    /// A soft link (its path, and its target) leads to no object that could be found here;
    /// `rest` is where the walk stopped, for the library to try.
    Dangling {
        link: String,
        target: String,
        rest: String,
    },
    /// An external link (its path), to `path` in `file`.
    External {
        link: String,
        file: String,
        path: String,
    },
    /// Soft links in a loop (the one followed last).
    Loop(String),
}

/// Most soft links one path may go through.
const MAX_HOPS: usize = 32;

/// Walks `path` (absolute, or relative to the root) from the root group, following soft links
/// (absolute, or relative to the group holding them) wherever they are.
pub(crate) fn resolve(bytes: &[u8], path: &str) -> Resolved {
    let Some(root) = open(bytes) else {
        return Resolved::Unknown;
    };
    let split = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect()
    };
    let join = |c: &[String]| format!("/{}", c.join("/"));
    // Components still to walk (in reverse, so the next one is last), and where the walk is.
    let mut todo: Vec<String> = split(path).into_iter().rev().collect();
    let (mut at, mut table, mut done) = (root.header, root.table, Vec::<String>::new());
    let mut followed: Option<(String, String)> = None;
    // The soft links followed so far: one met twice is a loop.
    let mut seen: Vec<String> = Vec::new();
    while let Some(name) = todo.pop() {
        let here = {
            let mut p = done.clone();
            p.push(name.clone());
            join(&p)
        };
        match group_link(&root.r, at, table, &name) {
            Some(Link::Hard(addr)) => {
                done.push(name);
                at = addr;
                // Groups below the root keep their symbol table in their header.
                table = None;
            }
            Some(Link::Soft(target)) => {
                if seen.contains(&here) || seen.len() == MAX_HOPS {
                    return Resolved::Loop(here);
                }
                seen.push(here.clone());
                let start = if target.starts_with('/') {
                    Vec::new()
                } else {
                    done.clone()
                };
                todo.extend(split(&target).into_iter().rev());
                todo.extend(start.into_iter().rev());
                (at, table, done) = (root.header, root.table, Vec::new());
                followed = Some((here, target));
            }
            Some(Link::External(file, path)) => {
                return Resolved::External {
                    link: here,
                    file,
                    path,
                }
            }
            None => {
                let Some((link, target)) = followed else {
                    return Resolved::Unknown;
                };
                done.push(name);
                done.extend(todo.into_iter().rev());
                return Resolved::Dangling {
                    link,
                    target,
                    rest: join(&done),
                };
            }
        }
    }
    Resolved::Hard(join(&done))
}

/// Where the superblock says the file ends (its end-of-file address), if it could be read. A
/// shorter file was cut: HDF5 writes every object below that address.
pub(crate) fn declared_end(bytes: &[u8]) -> Option<u64> {
    open(bytes).map(|root| root.end)
}

/// The root group of the file in `bytes`, if its superblock could be read.
fn open(bytes: &[u8]) -> Option<Root<'_>> {
    let sb = (0..)
        .map(|i| if i == 0 { 0usize } else { 256 << i })
        .take_while(|&at| at < bytes.len())
        .find(|&at| bytes.get(at..at + 8) == Some(b"\x89HDF\r\n\x1a\n"))?;
    let version = *bytes.get(sb + 8)?;
    let mut r = Reader {
        bytes,
        base: 0,
        offset_size: 8,
        length_size: 8,
    };
    match version {
        0 | 1 => {
            r.offset_size = usize::from(*bytes.get(sb + 13)?);
            r.length_size = usize::from(*bytes.get(sb + 14)?);
            let fixed = sb as u64 + 24 + if version == 1 { 4 } else { 0 };
            check_sizes(&r)?;
            r.base = r.uint(fixed, r.offset_size)?;
            // Base, free-space and end-of-file addresses, then the driver block's.
            let end = r.addr(fixed + 2 * r.offset_size as u64)?;
            // The root's symbol table entry follows four addresses.
            let entry = fixed + 4 * r.offset_size as u64;
            let header = r.addr(entry + r.offset_size as u64)?;
            let cache = r.uint(entry + 2 * r.offset_size as u64, 4)?;
            let scratch = entry + 2 * r.offset_size as u64 + 8;
            let table = match cache {
                1 => Some((r.addr(scratch)?, r.addr(scratch + r.offset_size as u64)?)),
                _ => None,
            };
            Some(Root {
                r,
                header,
                table,
                end,
            })
        }
        2 | 3 => {
            r.offset_size = usize::from(*bytes.get(sb + 9)?);
            r.length_size = usize::from(*bytes.get(sb + 10)?);
            check_sizes(&r)?;
            let at = sb as u64 + 12;
            r.base = r.uint(at, r.offset_size)?;
            // Base, superblock extension and end-of-file addresses, then the root's header.
            let end = r.addr(at + 2 * r.offset_size as u64)?;
            let header = r.addr(at + 3 * r.offset_size as u64)?;
            Some(Root {
                r,
                header,
                table: None,
                end,
            })
        }
        _ => None,
    }
}

fn check_sizes(r: &Reader<'_>) -> Option<()> {
    let ok = |s: usize| matches!(s, 2 | 4 | 8);
    (ok(r.offset_size) && ok(r.length_size)).then_some(())
}

/// Looks for `name` among the messages of the object header at `at` (versions 1 and 2) and
/// their continuation blocks: link messages, or a symbol table message.
fn header_link(r: &Reader<'_>, at: u64, name: &str) -> Option<Link> {
    let o = r.offset_size as u64;
    // (start, end, version) of the message blocks still to read.
    let mut blocks: Vec<(u64, u64, u8)> = Vec::new();
    if r.slice(at, 4)? == b"OHDR" {
        let flags = *r.slice(at + 5, 1)?.first()?;
        let mut p = at + 6;
        if flags & 0x20 != 0 {
            p += 16;
        }
        if flags & 0x10 != 0 {
            p += 4;
        }
        let width = 1usize << (flags & 3);
        let size = r.uint(p, width)?;
        p += width as u64;
        blocks.push((p, p.checked_add(size)?, 2 | (flags & 0x04) << 4));
    } else {
        if r.slice(at, 1)? != [1] {
            return None;
        }
        let size = r.uint(at + 8, 4)?;
        blocks.push((at + 16, (at + 16).checked_add(size)?, 1));
    }
    let mut visited = 0;
    while let Some((start, end, kind)) = blocks.pop() {
        visited += 1;
        if visited > MAX_BLOCKS {
            return None;
        }
        let v2 = kind & 0x0f == 2;
        let ordered = kind & 0x40 != 0;
        let mut p = start;
        // Version 2 blocks end with a checksum.
        let stop = if v2 { end.saturating_sub(4) } else { end };
        while p + if v2 { 4 } else { 8 } <= stop {
            let (ty, size, data) = if v2 {
                let ty = r.uint(p, 1)?;
                let size = r.uint(p + 1, 2)?;
                let data = p + 4 + if ordered { 2 } else { 0 };
                (ty, size, data)
            } else {
                (r.uint(p, 2)?, r.uint(p + 2, 2)?, p + 8)
            };
            match ty {
                0x06 => {
                    if let Some((n, link)) = link_message(r, data, size, o as usize) {
                        if n == name {
                            return Some(link);
                        }
                    }
                }
                0x11 => {
                    let tree = r.addr(data)?;
                    let heap = r.addr(data + o)?;
                    if let Some(link) = symbol_table(r, tree, heap, name) {
                        return Some(link);
                    }
                }
                0x10 => {
                    let cont = r.addr(data)?;
                    let len = r.uint(data + o, r.length_size)?;
                    if v2 {
                        if r.slice(cont, 4)? != b"OCHK" {
                            return None;
                        }
                        blocks.push((cont + 4, cont.checked_add(len)?, kind));
                    } else {
                        blocks.push((cont, cont.checked_add(len)?, kind));
                    }
                }
                _ => {}
            }
            p = data.checked_add(size)?;
        }
    }
    None
}

/// A link message (type 6) of `size` bytes at `at`: its name and target (addresses of
/// `offset_size` bytes).
fn link_message(r: &Reader<'_>, at: u64, size: u64, offset_size: usize) -> Option<(String, Link)> {
    let msg = r.slice(at, usize::try_from(size).ok()?)?;
    let (&version, rest) = msg.split_first()?;
    if version != 1 {
        return None;
    }
    let (&flags, mut rest) = rest.split_first()?;
    let mut kind = 0u8;
    if flags & 0x08 != 0 {
        kind = *rest.first()?;
        rest = rest.get(1..)?;
    }
    if flags & 0x04 != 0 {
        rest = rest.get(8..)?;
    }
    if flags & 0x10 != 0 {
        rest = rest.get(1..)?;
    }
    let width = 1usize << (flags & 3);
    let len = rest
        .get(..width)?
        .iter()
        .rev()
        .fold(0usize, |a, &b| (a << 8) | usize::from(b));
    rest = rest.get(width..)?;
    let name = String::from_utf8(rest.get(..len)?.to_vec()).ok()?;
    rest = rest.get(len..)?;
    let link = match kind {
        0 => {
            let a = rest
                .get(..offset_size)?
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            Link::Hard(a.checked_add(r.base)?)
        }
        1 => {
            let n = usize::from(u16::from_le_bytes(rest.get(..2)?.try_into().ok()?));
            Link::Soft(String::from_utf8(rest.get(2..2 + n)?.to_vec()).ok()?)
        }
        64 => {
            let n = usize::from(u16::from_le_bytes(rest.get(..2)?.try_into().ok()?));
            // A version/flags byte, then the file name and the object path, NUL-terminated.
            let body = rest.get(3..2 + n)?;
            let mut parts = body.split(|&b| b == 0);
            let file = String::from_utf8(parts.next()?.to_vec()).ok()?;
            let path = String::from_utf8(parts.next()?.to_vec()).ok()?;
            Link::External(file, path)
        }
        _ => return None,
    };
    Some((name, link))
}

/// Looks for `name` in an old-format group: a B-tree (version 1) of symbol nodes whose names
/// live in the local heap at `heap`.
fn symbol_table(r: &Reader<'_>, tree: u64, heap: u64, name: &str) -> Option<Link> {
    let (o, l) = (r.offset_size as u64, r.length_size as u64);
    if r.slice(heap, 4)? != b"HEAP" {
        return None;
    }
    let data = r.addr(heap + 8 + 2 * l)?;
    let mut nodes = vec![tree];
    let mut visited = 0;
    while let Some(node) = nodes.pop() {
        visited += 1;
        if visited > MAX_BLOCKS {
            return None;
        }
        match r.slice(node, 4)? {
            b"TREE" => {
                let used = r.uint(node + 6, 2)?;
                let first = node + 8 + 2 * o;
                for i in 0..used {
                    // Keys (l bytes) and children (o bytes) alternate, a key first.
                    nodes.push(r.addr(first + l + i * (l + o))?);
                }
                if nodes.len() > MAX_BLOCKS {
                    return None;
                }
            }
            b"SNOD" => {
                let count = r.uint(node + 6, 2)?;
                let entry_size = 2 * o + 24;
                for i in 0..count {
                    let e = node + 8 + i * entry_size;
                    let at = r.uint(e, r.offset_size)?.checked_add(data)?;
                    if r.cstr(at)? != name {
                        continue;
                    }
                    let cache = r.uint(e + 2 * o, 4)?;
                    if cache != 2 {
                        return Some(Link::Hard(r.addr(e + o)?));
                    }
                    let value = r.uint(e + 2 * o + 8, 4)?.checked_add(data)?;
                    return Some(Link::Soft(r.cstr(value)?));
                }
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        std::fs::read(dir.join(name)).unwrap()
    }

    #[test]
    fn links_of_both_group_formats() {
        for file in ["soft_v1.hdf5", "soft_v2.h5"] {
            let b = fixture(file);
            assert_eq!(
                root_link(&b, "train"),
                Some(Link::Soft("/data/base".into()))
            );
            assert!(
                matches!(root_link(&b, "test"), Some(Link::Hard(_))),
                "{file}"
            );
            assert_eq!(root_link(&b, "loop"), Some(Link::Soft("/loop".into())));
            assert_eq!(root_link(&b, "absent"), None);
        }
        let b = fixture("external.hdf5");
        assert_eq!(
            root_link(&b, "train"),
            Some(Link::External("ann.hdf5".into(), "/train".into()))
        );
        for file in ["ann.hdf5", "ann_latest.h5"] {
            let link = root_link(&fixture(file), "train");
            assert!(matches!(link, Some(Link::Hard(_))), "{file}");
        }
    }

    #[test]
    fn damaged_files_answer_none_without_panicking() {
        let good = fixture("soft_v1.hdf5");
        for cut in (0..good.len()).step_by(7) {
            let _ = root_link(&good[..cut], "train");
        }
        for at in (0..good.len()).step_by(3) {
            let mut v = good.clone();
            v[at] ^= 0xFF;
            let _ = root_link(&v, "train");
        }
    }
}
