//! Compiled kernel images on disk: a module compiled once at run time (for a GPU the build made
//! no image for, or by a build without NVRTC) is loaded, not compiled again, by every later
//! process; the build script keeps its images the same way, so that the debug, release and
//! wheel builds of one tree compile each image once (`build.rs` includes this file by path, so
//! it reads only `std`).
//!
//! One file per image, `<module>.<target>.<key>.bin` (the key hashes the sources, the options,
//! the target and NVRTC's version: `modules.rs`, `Module::key`), holding a header (magic, the
//! payload's length and FNV-1a hash) and the image. A file is written under a temporary name in
//! the same folder and renamed into place, so that a reader sees a whole file or none whatever
//! other processes do at the time; a file that fails its check is ignored and replaced by the
//! next writer.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable naming the run-time cache folder (`off`: no cache).
pub(crate) const DIR_VAR: &str = "VOISIN_CACHE_DIR";

const MAGIC: &[u8; 8] = b"VOISINK1";

/// The run-time cache folder: `$VOISIN_CACHE_DIR` (`off` or empty: none), else
/// `$XDG_CACHE_HOME/voisin/kernels`, else `$HOME/.cache/voisin/kernels`.
pub(crate) fn run_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = std::env::var_os(DIR_VAR) {
        return (!dir.is_empty() && dir != "off").then(|| PathBuf::from(dir));
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("voisin/kernels"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache/voisin/kernels"))
}

/// The file of one image in `dir`.
pub(crate) fn file(dir: &Path, module: &str, target: &str, key: &str) -> PathBuf {
    dir.join(format!("{module}.{target}.{key}.bin"))
}

/// The image in `path`, if the file is there and whole.
pub(crate) fn read(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let (head, payload) = bytes.split_at_checked(24)?;
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    let hash = u64::from_le_bytes(head[16..24].try_into().ok()?);
    let whole = &head[..8] == MAGIC && len == payload.len() as u64 && hash == fnv1a(payload);
    whole.then(|| payload.to_vec())
}

/// Stores `image` at `path` (creating its folder): written beside it, then renamed into place.
pub(crate) fn write(path: &Path, image: &[u8]) -> std::io::Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("image");
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&(image.len() as u64).to_le_bytes())?;
        f.write_all(&fnv1a(image).to_le_bytes())?;
        f.write_all(image)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_comes_back_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(dir.path(), "select-block", "sm_90", "00ff");
        assert!(read(&path).is_none());
        write(&path, b"cubin bytes").unwrap();
        assert_eq!(read(&path).as_deref(), Some(&b"cubin bytes"[..]));
        // A truncated or altered file is not an image.
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
        assert!(read(&path).is_none());
        let mut altered = whole.clone();
        *altered.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &altered).unwrap();
        assert!(read(&path).is_none());
        // The next writer replaces it; no temporary file is left behind.
        write(&path, b"cubin bytes").unwrap();
        assert_eq!(read(&path).as_deref(), Some(&b"cubin bytes"[..]));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn concurrent_writers_leave_one_whole_image() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(dir.path(), "m", "sm_80", "k");
        let image: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..5 {
                        write(&path, &image).unwrap();
                        assert!(read(&path).as_ref() == Some(&image));
                    }
                });
            }
        });
        assert_eq!(read(&path), Some(image));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
