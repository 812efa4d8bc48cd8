//! The ZIP container of NumPy's `.npz` files: a writer of stored (uncompressed) members, as
//! `numpy.savez` writes them, and a reader of the central directory that finds one member and
//! returns its bytes (stored, or deflated as `numpy.savez_compressed` writes them).
//!
//! Written files use ZIP64 records only where a size or offset needs them (Python's `zipfile`,
//! which NumPy uses, reads both). Each member is produced twice by its body: once into a
//! counter that computes its CRC-32 and length (which the local header, written first, must
//! hold), once into the file; so nothing of the size of a member is buffered.
//!
//! The reader takes untrusted bytes: every offset and size is checked against the file before
//! use, a deflated member may not expand past a bound derived from its declared size, and
//! encrypted, multi-disk or otherwise compressed members are refused with a clear message.

use std::io::{self, Write};
use std::ops::Range;
use std::sync::Arc;

use crate::error::{bail, Parsed, Problem};
use crate::formats::Inflated;

/// A member's contents, written on demand (twice: see the module documentation).
pub(crate) type Fill<'a> = Box<dyn Fn(&mut dyn Write) -> io::Result<()> + 'a>;

const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
const END64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;
const MAX32: u64 = 0xFFFF_FFFF;
/// 1980-01-01 00:00, the earliest ZIP time, so that equal results give equal files.
const DOS_DATE: u16 = (1 << 5) | 1;

/// Counts the bytes written and their CRC-32.
struct Measure {
    crc: crc32fast::Hasher,
    len: u64,
}

impl Write for Measure {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.crc.update(buf);
        self.len += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Counts what passes through to the file, for the offsets the directory records.
struct Counted<'w> {
    inner: &'w mut dyn Write,
    at: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.at += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A 32-bit field, or the ZIP64 marker when the value does not fit.
fn field32(v: u64) -> u32 {
    v.min(MAX32) as u32
}

/// Writes a ZIP archive of stored members, in the order given.
pub(crate) fn write_stored(w: &mut dyn Write, members: &[(String, Fill<'_>)]) -> io::Result<()> {
    let mut out = Counted { inner: w, at: 0 };
    let mut directory = Vec::new();
    for (name, fill) in members {
        let mut m = Measure {
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        fill(&mut m)?;
        let (crc, len) = (m.crc.finalize(), m.len);
        let offset = out.at;
        let big = len >= MAX32;
        let mut head = Vec::with_capacity(64 + name.len());
        put32(&mut head, LOCAL);
        put16(&mut head, if big { 45 } else { 20 });
        put16(&mut head, 0); // flags
        put16(&mut head, 0); // stored
        put16(&mut head, 0); // time
        put16(&mut head, DOS_DATE);
        put32(&mut head, crc);
        put32(&mut head, field32(if big { MAX32 } else { len }));
        put32(&mut head, field32(if big { MAX32 } else { len }));
        put16(&mut head, name.len() as u16);
        put16(&mut head, if big { 20 } else { 0 });
        head.extend_from_slice(name.as_bytes());
        if big {
            put16(&mut head, 1);
            put16(&mut head, 16);
            put64(&mut head, len);
            put64(&mut head, len);
        }
        out.write_all(&head)?;
        let before = out.at;
        fill(&mut out)?;
        if out.at - before != len {
            return Err(io::Error::other(format!(
                "member {name} changed size between its two passes"
            )));
        }
        // The central record: ZIP64 fields for both sizes and the offset whenever one needs it.
        let wide = big || offset >= MAX32;
        put32(&mut directory, CENTRAL);
        put16(&mut directory, if wide { 45 } else { 20 }); // made by
        put16(&mut directory, if wide { 45 } else { 20 }); // needed
        put16(&mut directory, 0);
        put16(&mut directory, 0);
        put16(&mut directory, 0);
        put16(&mut directory, DOS_DATE);
        put32(&mut directory, crc);
        let (size32, offset32) = if wide {
            (MAX32 as u32, MAX32 as u32)
        } else {
            (len as u32, offset as u32)
        };
        put32(&mut directory, size32);
        put32(&mut directory, size32);
        put16(&mut directory, name.len() as u16);
        put16(&mut directory, if wide { 28 } else { 0 });
        put16(&mut directory, 0); // comment
        put16(&mut directory, 0); // disk
        put16(&mut directory, 0); // internal attributes
        put32(&mut directory, 0o100644 << 16); // a regular file, rw-r--r--
        put32(&mut directory, offset32);
        directory.extend_from_slice(name.as_bytes());
        if wide {
            put16(&mut directory, 1);
            put16(&mut directory, 24);
            put64(&mut directory, len);
            put64(&mut directory, len);
            put64(&mut directory, offset);
        }
    }
    let cd_offset = out.at;
    let cd_size = directory.len() as u64;
    let count = members.len() as u64;
    let mut tail = directory;
    let wide = cd_offset >= MAX32 || count >= 0xFFFF;
    if wide {
        let end64 = cd_offset + cd_size;
        put32(&mut tail, END64);
        put64(&mut tail, 44);
        put16(&mut tail, 45);
        put16(&mut tail, 45);
        put32(&mut tail, 0);
        put32(&mut tail, 0);
        put64(&mut tail, count);
        put64(&mut tail, count);
        put64(&mut tail, cd_size);
        put64(&mut tail, cd_offset);
        put32(&mut tail, LOCATOR64);
        put32(&mut tail, 0);
        put64(&mut tail, end64);
        put32(&mut tail, 1);
    }
    put32(&mut tail, END);
    put16(&mut tail, 0);
    put16(&mut tail, 0);
    put16(&mut tail, count.min(0xFFFF) as u16);
    put16(&mut tail, count.min(0xFFFF) as u16);
    put32(&mut tail, field32(cd_size));
    put32(&mut tail, field32(cd_offset));
    put16(&mut tail, 0);
    out.write_all(&tail)
}

/// One member as the central directory describes it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub name: String,
    method: u16,
    flags: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    local: u64,
}

fn get<const N: usize>(bytes: &[u8], at: u64) -> Parsed<[u8; N]> {
    usize::try_from(at)
        .ok()
        .and_then(|a| bytes.get(a..a.checked_add(N)?))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| Problem::from("the ZIP directory points past the end of the file"))
}
fn u16_at(b: &[u8], at: u64) -> Parsed<u16> {
    get::<2>(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: u64) -> Parsed<u32> {
    get::<4>(b, at).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], at: u64) -> Parsed<u64> {
    get::<8>(b, at).map(u64::from_le_bytes)
}

/// The members listed in the central directory, in order.
pub(crate) fn entries(bytes: &[u8]) -> Parsed<Vec<Entry>> {
    // The end record is in the last 22 + 65535 bytes (its comment is at most 65535 bytes).
    let len = bytes.len();
    if len < 22 {
        bail!("too short for a ZIP archive (an .npz file is one)");
    }
    let lowest = len.saturating_sub(22 + 0xFFFF);
    let end = (lowest..=len - 22)
        .rev()
        .find(|&i| bytes[i..i + 4] == END.to_le_bytes())
        .ok_or_else(|| Problem::from("not a ZIP archive (no end of central directory)"))?
        as u64;
    if u16_at(bytes, end + 4)? != 0 || u16_at(bytes, end + 6)? != 0 {
        bail!("multi-disk ZIP archives are not supported");
    }
    let mut count = u64::from(u16_at(bytes, end + 10)?);
    let mut cd_size = u64::from(u32_at(bytes, end + 12)?);
    let mut cd_offset = u64::from(u32_at(bytes, end + 16)?);
    if end >= 20 && u32_at(bytes, end - 20)? == LOCATOR64 {
        let at = u64_at(bytes, end - 12)?;
        if u32_at(bytes, at)? != END64 {
            bail!("the ZIP64 locator does not point to a ZIP64 end record");
        }
        count = u64_at(bytes, at + 32)?;
        cd_size = u64_at(bytes, at + 40)?;
        cd_offset = u64_at(bytes, at + 48)?;
    }
    if cd_offset
        .checked_add(cd_size)
        .is_none_or(|e| e > len as u64)
    {
        bail!("the ZIP central directory runs past the end of the file");
    }
    // Each record is at least 46 bytes: a count beyond that is a lie, refused before allocating.
    if count > cd_size / 46 {
        bail!("the ZIP directory declares {count} members in {cd_size} bytes");
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut at = cd_offset;
    for _ in 0..count {
        if u32_at(bytes, at)? != CENTRAL {
            bail!("damaged ZIP central directory (bad record signature)");
        }
        let flags = u16_at(bytes, at + 8)?;
        let method = u16_at(bytes, at + 10)?;
        let crc = u32_at(bytes, at + 16)?;
        let mut compressed = u64::from(u32_at(bytes, at + 20)?);
        let mut size = u64::from(u32_at(bytes, at + 24)?);
        let name_len = u64::from(u16_at(bytes, at + 28)?);
        let extra_len = u64::from(u16_at(bytes, at + 30)?);
        let comment_len = u64::from(u16_at(bytes, at + 32)?);
        let mut local = u64::from(u32_at(bytes, at + 42)?);
        let name_at = at + 46;
        let name_bytes = usize::try_from(name_at)
            .ok()
            .and_then(|a| bytes.get(a..a + name_len as usize))
            .ok_or_else(|| Problem::from("a ZIP member name runs past the end of the file"))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        // ZIP64 extra field: the 64-bit values of the fields marked 0xFFFFFFFF, in order.
        let mut x = name_at + name_len;
        let extra_end = x + extra_len;
        while x + 4 <= extra_end {
            let id = u16_at(bytes, x)?;
            let size_here = u64::from(u16_at(bytes, x + 2)?);
            if id == 1 {
                let mut f = x + 4;
                for v in [&mut size, &mut compressed, &mut local] {
                    if *v == MAX32 && f + 8 <= x + 4 + size_here {
                        *v = u64_at(bytes, f)?;
                        f += 8;
                    }
                }
            }
            x += 4 + size_here;
        }
        out.push(Entry {
            name,
            method,
            flags,
            crc,
            compressed,
            size,
            local,
        });
        at = extra_end + comment_len;
    }
    Ok(out)
}

/// Where a member's bytes are: a window of the archive (stored), or inflated into memory.
pub(crate) enum Member {
    Stored(Range<usize>),
    Inflated(Arc<Inflated>),
}

/// The bytes of `entry`: a stored member in place, a deflated one inflated into exactly the
/// size its directory entry declares, which may not exceed `budget` bytes (a bound the caller
/// names in the message; `None`: no bound). Its CRC-32 is checked either way.
pub(crate) fn member(bytes: &[u8], entry: &Entry, budget: Option<usize>) -> Parsed<Member> {
    if entry.flags & 1 != 0 {
        bail!("member {} is encrypted", entry.name);
    }
    let at = entry.local;
    if u32_at(bytes, at)? != LOCAL {
        bail!("member {}: damaged local header", entry.name);
    }
    let start = at + 30 + u64::from(u16_at(bytes, at + 26)?) + u64::from(u16_at(bytes, at + 28)?);
    let range = usize::try_from(start)
        .ok()
        .zip(usize::try_from(entry.compressed).ok())
        .and_then(|(s, n)| Some(s..s.checked_add(n)?))
        .filter(|r| r.end <= bytes.len())
        .ok_or_else(|| {
            Problem::from(format!(
                "member {} runs past the end of the file",
                entry.name
            ))
        })?;
    let out = match entry.method {
        0 => {
            if entry.size != entry.compressed {
                bail!("member {}: stored sizes disagree", entry.name);
            }
            Member::Stored(range)
        }
        8 => Member::Inflated(Arc::new(inflate(&bytes[range], entry, budget)?)),
        m => bail!(
            "member {} uses ZIP compression method {m}; only stored and deflated members are \
             supported",
            entry.name
        ),
    };
    let mut crc = crc32fast::Hasher::new();
    crc.update(match &out {
        Member::Stored(r) => &bytes[r.clone()],
        Member::Inflated(b) => b.bytes(),
    });
    if crc.finalize() != entry.crc {
        bail!("member {}: CRC-32 mismatch (damaged file)", entry.name);
    }
    Ok(out)
}

/// Inflates a deflated member into one buffer of its declared size, allocated once: the
/// declared size must be possible for the compressed size (deflate expands at most about
/// 1032:1) and within `budget`, and the data must fill it exactly.
fn inflate(data: &[u8], entry: &Entry, budget: Option<usize>) -> Parsed<Inflated> {
    use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
    use miniz_oxide::inflate::TINFLStatus;
    let name = &entry.name;
    if entry.size / 1100 > entry.compressed {
        bail!(
            "member {name}: declared size {} is impossible for {} compressed bytes",
            entry.size,
            entry.compressed
        );
    }
    if let Some(limit) = budget.filter(|&b| entry.size > b as u64) {
        bail!(
            "member {name} inflates to {}, more than the memory budget of {} (--memory), \
             which bounds what an archive's compressed members take in memory; give a larger \
             --memory, or save the archive with numpy.savez (stored members are read in place)",
            bytes_text(entry.size),
            bytes_text(limit as u64)
        );
    }
    let size = usize::try_from(entry.size)
        .map_err(|_| Problem::from(format!("member {name} is too large for this machine")))?;
    let mut out = Inflated::zeroed(size).ok_or_else(|| {
        Problem::machine(format!(
            "cannot allocate {} to inflate member {name}",
            bytes_text(entry.size)
        ))
    })?;
    let mut state = DecompressorOxide::new();
    let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, _, written) = decompress(&mut state, data, out.bytes_mut(), 0, flags);
    match status {
        TINFLStatus::Done if written == size => Ok(out),
        TINFLStatus::Done => {
            bail!("member {name}: holds {written} bytes, its directory entry says {size}")
        }
        TINFLStatus::HasMoreOutput => {
            bail!("member {name}: holds more than the {size} bytes its directory entry says")
        }
        e => bail!("member {name}: bad deflate data ({e:?})"),
    }
}

/// A size for messages: `1.5 GiB`, `4 MiB`, `512 bytes`.
fn bytes_text(n: u64) -> String {
    const UNITS: [(&str, u32); 3] = [("GiB", 30), ("MiB", 20), ("KiB", 10)];
    match UNITS.iter().find(|(_, shift)| n >= 1 << shift) {
        Some((unit, shift)) => {
            let v = n as f64 / (1u64 << shift) as f64;
            let text = format!("{v:.1}");
            format!("{} {unit}", text.trim_end_matches(".0"))
        }
        None => format!("{n} bytes"),
    }
}

/// The uncompressed bytes of `entry`, copied (for tests).
#[cfg(test)]
pub(crate) fn contents(bytes: &[u8], entry: &Entry) -> Parsed<Vec<u8>> {
    Ok(match member(bytes, entry, None)? {
        Member::Stored(r) => bytes[r].to_vec(),
        Member::Inflated(b) => b.bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_back() {
        let a: Fill = Box::new(|w| w.write_all(b"hello"));
        let b: Fill = Box::new(|w| w.write_all(&[7u8; 1000]));
        let mut file = Vec::new();
        write_stored(&mut file, &[("a.npy".into(), a), ("b.npy".into(), b)]).unwrap();
        let e = entries(&file).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].name, "a.npy");
        assert_eq!(contents(&file, &e[0]).unwrap(), b"hello");
        assert_eq!(contents(&file, &e[1]).unwrap(), vec![7u8; 1000]);
    }

    #[test]
    fn damaged_archives_are_problems() {
        let a: Fill = Box::new(|w| w.write_all(b"hello"));
        let mut file = Vec::new();
        write_stored(&mut file, &[("a.npy".into(), a)]).unwrap();
        for cut in 0..file.len() {
            let short = &file[..cut];
            if let Ok(e) = entries(short) {
                for x in &e {
                    let _ = contents(short, x);
                }
            }
        }
        assert!(entries(b"not a zip file at all, really").is_err());
    }
}
