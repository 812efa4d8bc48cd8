//! HDF5 `train`/`test` reached through links (issue 14): a soft link within the file is
//! followed in both group formats and at any depth (inside groups, in chains, relative to its
//! group), an external link, a loop of soft links or a soft link to nothing is refused in one
//! line. Fixtures made by h5py (gen_fixtures.py), and files built here from hdf5-pure's output
//! with links patched in ([`with_links`]).

mod common;

use common::*;
use voisin::Dataset;
use voisin_io::Role;

#[test]
fn soft_links_are_followed_in_both_group_formats() {
    for name in ["soft_v1.hdf5", "soft_v2.h5"] {
        for mmap in [true, false] {
            let base = read_with(&fixture(name), Role::Base, mmap).unwrap();
            assert_eq!(as_f32(&base), (20, 5, values(20, 5)), "{name}");
            let queries = read_with(&fixture(name), Role::Query, mmap).unwrap();
            assert_eq!(as_f32(&queries), (3, 5, values(3, 5)), "{name}");
        }
    }
}

#[test]
fn external_links_are_refused_in_one_line() {
    let path = fixture("external.hdf5");
    let err = read(&path).unwrap_err();
    assert!(err.is_user_error());
    assert_eq!(
        err.message(),
        "dataset 'train' is an external link to '/train' in ann.hdf5; voisin reads one file \
         (copy that dataset into this one)"
    );
    // The queries of the same file are a plain dataset.
    let queries = read_with(&path, Role::Query, true).unwrap();
    assert_eq!(as_f32(&queries), (3, 5, values(3, 5)));
}

/// Links to write: (group, "" for the root or "g"; name; target).
type Links = Vec<(&'static str, &'static str, Made)>;

/// A link the builder below writes in place of a placeholder.
enum Made {
    Soft(&'static str),
    External(&'static str, &'static str),
}

impl Made {
    /// The body of the link message (version 1, link type present), at least `min` bytes
    /// long: a creation order (8 bytes) and a character set (1 byte) are added as needed.
    fn message(&self, name: &str, min: usize) -> Vec<u8> {
        let (kind, value) = match self {
            Made::Soft(path) => (1u8, path.as_bytes().to_vec()),
            Made::External(file, path) => {
                let mut v = vec![0u8];
                for part in [file, path] {
                    v.extend_from_slice(part.as_bytes());
                    v.push(0);
                }
                (64, v)
            }
        };
        let plain = 6 + name.len() + value.len();
        let order = plain < min;
        let charset = plain + 8 < min;
        let flags = 0x08 | if order { 0x04 } else { 0 } | if charset { 0x10 } else { 0 };
        let mut m = vec![1, flags, kind];
        if order {
            m.extend_from_slice(&[0; 8]);
        }
        if charset {
            m.push(0);
        }
        m.push(name.len() as u8);
        m.extend_from_slice(name.as_bytes());
        m.extend_from_slice(&(value.len() as u16).to_le_bytes());
        m.extend_from_slice(&value);
        m
    }
}

/// Jenkins' lookup3 (`hashlittle`, initial value 0), the checksum of HDF5's version 2 headers.
fn lookup3(data: &[u8]) -> u32 {
    fn word(b: &[u8]) -> u32 {
        u32::from_le_bytes(b.try_into().unwrap())
    }
    let mut a = 0xdead_beefu32.wrapping_add(data.len() as u32);
    let (mut b, mut c) = (a, a);
    let mut k = data;
    while k.len() > 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        for (x, z, y, r) in [
            (0, 2, 1, 4),
            (1, 0, 2, 6),
            (2, 1, 0, 8),
            (0, 2, 1, 16),
            (1, 0, 2, 19),
            (2, 1, 0, 4),
        ] {
            // x -= z; x ^= rot(z, r); z += y, on (a, b, c) by index.
            let mut v = [a, b, c];
            v[x] = v[x].wrapping_sub(v[z]) ^ v[z].rotate_left(r);
            v[z] = v[z].wrapping_add(v[y]);
            [a, b, c] = v;
        }
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    let mut t = [0u8; 12];
    t[..k.len()].copy_from_slice(k);
    a = a.wrapping_add(word(&t[0..4]));
    b = b.wrapping_add(word(&t[4..8]));
    c = c.wrapping_add(word(&t[8..12]));
    for (x, y, r) in [
        (2, 1, 14),
        (0, 2, 11),
        (1, 0, 25),
        (2, 1, 16),
        (0, 2, 4),
        (1, 0, 14),
        (2, 1, 24),
    ] {
        // x ^= y; x -= rot(y, r)
        let mut v = [a, b, c];
        v[x] = (v[x] ^ v[y]).wrapping_sub(v[y].rotate_left(r));
        [a, b, c] = v;
    }
    c
}

/// An HDF5 file (hdf5-pure, new group format) holding `/test` (3 × 5), `/g/h/data` (20 × 5)
/// and the `links` (group: "" for the root or "g", name, target). hdf5-pure writes hard links
/// only, so each link is first a placeholder dataset whose name is as long as makes its hard
/// link message the size of the wanted one; that message is then rewritten in place and its
/// object header's checksum recomputed.
fn with_links(links: &[(&str, &str, Made)]) -> Vec<u8> {
    let holder = |i: usize, len: usize| format!("{i}{}", "q".repeat(len - 1));
    let build = |lens: &[usize]| {
        let mut f = hdf5_pure::FileBuilder::new();
        f.create_dataset("test")
            .with_f32_data(&values(3, 5))
            .with_shape(&[3, 5]);
        let mut g = f.create_group("g");
        let mut h = g.create_group("h");
        h.create_dataset("data")
            .with_f32_data(&values(20, 5))
            .with_shape(&[20, 5]);
        g.add_group(h.finish());
        for (i, (group, _, _)) in links.iter().enumerate() {
            let ds = match *group {
                "" => f.create_dataset(&holder(i, lens[i])),
                _ => g.create_dataset(&holder(i, lens[i])),
            };
            ds.with_f32_data(&[0.0]).with_shape(&[1, 1]);
        }
        f.add_group(g.finish());
        f.finish().unwrap()
    };
    // Where a placeholder's message starts and how long it is: the name's length byte comes
    // right before it, and the object address (8 bytes) right after.
    let find = |bytes: &[u8], name: &str| -> (usize, usize) {
        let at = bytes
            .windows(name.len() + 1)
            .position(|w| w[0] as usize == name.len() && &w[1..] == name.as_bytes())
            .expect("placeholder written")
            + 1;
        let start = (at.saturating_sub(16)..at - 2)
            .rev()
            .find(|&s| {
                bytes[s] == 1 && bytes[s + 1] & 0x03 == 0 && {
                    let f = bytes[s + 1];
                    let head = 2
                        + 8 * usize::from(f & 0x04 != 0)
                        + usize::from(f & 0x08 != 0)
                        + usize::from(f & 0x10 != 0)
                        + 1;
                    s + head == at
                }
            })
            .expect("a link message");
        (start, at + name.len() + 8 - start)
    };
    let probe = build(&vec![12; links.len()]);
    let lens: Vec<usize> = links
        .iter()
        .enumerate()
        .map(|(i, (_, name, made))| {
            // A hard link message is `head` bytes, the name and an address.
            let (_, size) = find(&probe, &holder(i, 12));
            let head = size - 12;
            made.message(name, head + 1).len() - head
        })
        .collect();
    let mut bytes = build(&lens);
    for (i, (_, name, made)) in links.iter().enumerate() {
        let (start, size) = find(&bytes, &holder(i, lens[i]));
        let message = made.message(name, size);
        assert_eq!(message.len(), size);
        // The version 2 header holding it: its checksum follows its first chunk.
        let ohdr = bytes[..start]
            .windows(4)
            .rposition(|w| w == b"OHDR")
            .expect("a version 2 header");
        let flags = bytes[ohdr + 5];
        let mut p = ohdr + 6 + if flags & 0x20 != 0 { 16 } else { 0 };
        p += if flags & 0x10 != 0 { 4 } else { 0 };
        let width = 1usize << (flags & 3);
        let chunk = bytes[p..p + width]
            .iter()
            .rev()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        let end = p + width + chunk;
        assert!(start + size <= end, "the message lies in the first chunk");
        let stored = u32::from_le_bytes(bytes[end..end + 4].try_into().unwrap());
        assert_eq!(
            lookup3(&bytes[ohdr..end]),
            stored,
            "checksum before the patch"
        );
        bytes[start..start + size].copy_from_slice(&message);
        let sum = lookup3(&bytes[ohdr..end]);
        bytes[end..end + 4].copy_from_slice(&sum.to_le_bytes());
    }
    bytes
}

/// Reads `train` (and `test`) of a file built by [`with_links`], mapped and copied.
fn read_built(links: &[(&str, &str, Made)]) -> Result<Dataset, voisin_io::IoError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("links.h5");
    std::fs::write(&path, with_links(links)).unwrap();
    let queries = read_with(&path, Role::Query, true).unwrap();
    assert_eq!(as_f32(&queries), (3, 5, values(3, 5)));
    let copied = read_with(&path, Role::Base, false);
    let mapped = read_with(&path, Role::Base, true);
    assert_eq!(
        copied.as_ref().map(as_f32).map_err(|e| e.message()),
        mapped.as_ref().map(as_f32).map_err(|e| e.message())
    );
    mapped
}

#[test]
fn soft_links_inside_groups_are_followed() {
    let cases: Vec<Links> = vec![
        // A soft link to a soft link inside a group, relative to that group.
        vec![
            ("", "train", Made::Soft("/g/s")),
            ("g", "s", Made::Soft("h/data")),
        ],
        // A soft link in the middle of the path.
        vec![
            ("", "train", Made::Soft("/g/l/data")),
            ("g", "l", Made::Soft("/g/h")),
        ],
        // A chain of three, with `.` and doubled slashes.
        vec![
            ("", "train", Made::Soft("g/./a")),
            ("g", "a", Made::Soft("/b")),
            ("", "b", Made::Soft("//g/h//data")),
        ],
        // Straight to the nested dataset.
        vec![("", "train", Made::Soft("/g/h/data"))],
    ];
    for links in cases {
        let base = read_built(&links).unwrap();
        assert_eq!(as_f32(&base), (20, 5, values(20, 5)));
    }
}

#[test]
fn dangling_looping_and_external_links_inside_groups_are_refused_in_one_line() {
    let cases: Vec<(Links, &str)> = vec![
        (
            vec![
                ("", "train", Made::Soft("/g/d")),
                ("g", "d", Made::Soft("/g/h/absent")),
            ],
            "dataset 'train' leads through the soft link '/g/d' to '/g/h/absent', where there \
             is no object",
        ),
        (
            vec![("", "train", Made::Soft("/nowhere/data"))],
            "dataset 'train' leads through the soft link '/train' to '/nowhere/data', where \
             there is no object",
        ),
        (
            vec![
                ("", "train", Made::Soft("/g/a")),
                ("g", "a", Made::Soft("b")),
                ("g", "b", Made::Soft("/g/a")),
            ],
            "dataset 'train' leads through soft links in a loop (at '/g/a')",
        ),
        (
            vec![("", "train", Made::Soft("/train"))],
            "dataset 'train' is a soft link in a loop",
        ),
        (
            vec![
                ("", "train", Made::Soft("/g/e")),
                ("g", "e", Made::External("other.h5", "/x")),
            ],
            "dataset 'train' leads through '/g/e', an external link to '/x' in other.h5; \
             voisin reads one file (copy that dataset into this one)",
        ),
    ];
    for (links, want) in cases {
        let err = read_built(&links).unwrap_err();
        assert!(err.is_user_error(), "{want}");
        assert_eq!(err.message(), want);
        // One line, naming the file (the CLI prints it and exits 2 for a user error).
        let line = err.to_string();
        assert!(line.ends_with(&format!("links.h5: {want}")), "{line}");
        assert!(!line.contains('\n'));
    }
}

/// A file cut anywhere is refused in one line, even where the datasets asked for lie before the
/// cut (the superblock's end-of-file address says the file is short), mapped or copied.
#[test]
fn hdf5_files_cut_short_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.h5");
    let built = with_links(&[("", "train", Made::Soft("/g/h/data"))]);
    for name in [
        "ann.hdf5",
        "ann_latest.h5",
        "ann_gzip.hdf5",
        "soft_v1.hdf5",
        "train_u8.hdf5",
    ] {
        let full = std::fs::read(fixture(name)).unwrap();
        for bytes in [&full, &built] {
            for cut in [1, 2, 9, bytes.len() / 3, bytes.len() / 2] {
                std::fs::write(&path, &bytes[..bytes.len() - cut]).unwrap();
                for (role, mmap) in [(Role::Base, true), (Role::Query, false)] {
                    let err = read_with(&path, role, mmap).unwrap_err();
                    assert!(err.is_user_error(), "{name} cut {cut}: {err}");
                    assert!(!err.to_string().contains('\n'), "{err}");
                    assert!(err.to_string().contains("cut.h5: "), "{err}");
                }
            }
        }
    }
    let err = {
        std::fs::write(&path, &built[..built.len() - 1]).unwrap();
        read_with(&path, Role::Query, true).unwrap_err()
    };
    assert_eq!(
        err.message(),
        format!(
            "the file is cut short: its superblock says it ends at byte {}, but it holds {} bytes",
            built.len(),
            built.len() - 1
        )
    );
}
