//! Where the CUDA libraries are: the places searched, in order, and the library file of each
//! kind found there. Reads only `std` and `libloading`, so that the build script includes it by
//! path to find the NVRTC it compiles with (`build.rs`); what the process loads is decided in
//! `loaded.rs`.
//!
//! The places, in this order:
//! 1. `VOISIN_CUDA_LIBS`, a `:`-separated list of folders: when set, the only place searched
//!    for NVRTC and cuBLAS.
//! 2. The `nvidia-*` wheels of the Python environment: `site-packages/nvidia/*/lib` of every
//!    entry of the running interpreter's `sys.path` (the Python package hands them over), and
//!    of `$VIRTUAL_ENV` and `$CONDA_PREFIX`.
//! 3. The system: the dynamic loader's own search (`LD_LIBRARY_PATH`, `ld.so.cache`, the
//!    default folders), then `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`, `/usr/local/cuda/lib64`.
//!
//! The driver (`libcuda.so.1`) comes with the NVIDIA kernel module and is only looked for where
//! the loader finds it.

use std::path::{Path, PathBuf};

/// The variable whose folders replace the search for NVRTC and cuBLAS.
pub(crate) const OVERRIDE_VAR: &str = "VOISIN_CUDA_LIBS";

/// One place libraries are looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// A folder of `VOISIN_CUDA_LIBS`.
    Override(PathBuf),
    /// The `lib` folder of an `nvidia-*` wheel.
    Wheel(PathBuf),
    /// The dynamic loader's search by file name.
    Loader,
    /// A CUDA toolkit's folder.
    Toolkit(PathBuf),
}

impl Place {
    /// How a report names the place.
    pub fn describe(&self) -> String {
        match self {
            Place::Override(d) => format!("{OVERRIDE_VAR} folder {}", d.display()),
            Place::Wheel(d) => format!("wheel {}", d.display()),
            Place::Loader => "the system's loader (LD_LIBRARY_PATH, ld.so.cache)".to_string(),
            Place::Toolkit(d) => format!("toolkit {}", d.display()),
        }
    }

    /// The short kind: `override`, `wheel`, `system`.
    pub fn kind(&self) -> &'static str {
        match self {
            Place::Override(_) => "override",
            Place::Wheel(_) => "wheel",
            Place::Loader | Place::Toolkit(_) => "system",
        }
    }
}

/// The places searched, in order, given the entries of the Python path (`sys.path`; none
/// outside Python).
pub(crate) fn places(python_path: &[PathBuf]) -> Vec<Place> {
    if let Some(list) = std::env::var_os(OVERRIDE_VAR).filter(|v| !v.is_empty()) {
        return std::env::split_paths(&list).map(Place::Override).collect();
    }
    let mut out: Vec<Place> = wheel_dirs(python_path)
        .into_iter()
        .map(Place::Wheel)
        .collect();
    out.push(Place::Loader);
    let toolkits = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
        .map(|root| PathBuf::from(root).join("lib64"))
        .chain([PathBuf::from("/usr/local/cuda/lib64")]);
    for dir in toolkits {
        let place = Place::Toolkit(dir);
        if !out.contains(&place) {
            out.push(place);
        }
    }
    out
}

/// The `lib` folders of the `nvidia-*` wheels under the Python path and the environments of
/// `$VIRTUAL_ENV` and `$CONDA_PREFIX`, each once, in that order (within one `nvidia` folder, by
/// name).
pub(crate) fn wheel_dirs(python_path: &[PathBuf]) -> Vec<PathBuf> {
    let mut sites: Vec<PathBuf> = python_path.to_vec();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            sites.extend(site_packages(Path::new(&prefix)));
        }
    }
    let mut out = Vec::new();
    for site in sites {
        let Ok(entries) = std::fs::read_dir(site.join("nvidia")) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path().join("lib")))
            .filter(|d| d.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The `site-packages` folders of the Python environment at `prefix`
/// (`lib/python3.*/site-packages`).
pub(crate) fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|d| d.is_dir())
        .collect();
    out.sort();
    out
}

/// One kind of library: its name in reports and its file names, newest major first.
pub(crate) struct Kind {
    pub name: &'static str,
    pub files: &'static [&'static str],
}

pub(crate) const NVRTC: Kind = Kind {
    name: "NVRTC",
    files: &["libnvrtc.so.13", "libnvrtc.so.12"],
};
pub(crate) const CUBLAS: Kind = Kind {
    name: "cuBLAS",
    files: &["libcublas.so.13", "libcublas.so.12"],
};
/// The major version a library file name ends with (`libnvrtc.so.12` → 12).
pub(crate) fn major_of(file: &str) -> Option<i32> {
    file.rsplit('.').next()?.parse().ok()
}

/// A library found: its file (the path opened, or for the loader the file name it resolves),
/// where, and its major version.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub path: PathBuf,
    pub place: Place,
    pub major: i32,
}

/// The first library of `kind` in `places` whose major is at most `max_major`: the newest such
/// major first, and within one major the first place that holds it. The loader's search is
/// tried by opening the file name (a library it finds stays loaded).
pub(crate) fn find(kind: &Kind, places: &[Place], max_major: Option<i32>) -> Option<Found> {
    for file in kind.files {
        let major = major_of(file)?;
        if max_major.is_some_and(|m| major > m) {
            continue;
        }
        for place in places {
            if let Some(path) = locate(place, file) {
                return Some(Found {
                    path,
                    place: place.clone(),
                    major,
                });
            }
        }
    }
    None
}

/// The file `file` at `place`, if it is there.
pub(crate) fn locate(place: &Place, file: &str) -> Option<PathBuf> {
    match place {
        Place::Override(d) | Place::Wheel(d) | Place::Toolkit(d) => {
            let p = d.join(file);
            p.is_file().then_some(p)
        }
        // SAFETY: loading a CUDA library runs no initialisation with preconditions of ours; it
        // stays loaded (as it will be used).
        Place::Loader => unsafe { libloading::Library::new(file) }.ok().map(|lib| {
            std::mem::forget(lib);
            mapped_path(file).unwrap_or_else(|| PathBuf::from(file))
        }),
    }
}

/// The file a loaded library whose name starts with `file` was mapped from
/// (`/proc/self/maps`), e.g. `libcublas.so.12` → `/usr/lib/…/libcublas.so.12.9.1.3`.
pub(crate) fn mapped_path(file: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(file))
        })
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, file: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), b"").unwrap();
    }

    #[test]
    fn wheels_are_found_under_each_site_folder() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        touch(&site.join("nvidia/cu13/lib"), "libnvrtc.so.13");
        touch(&site.join("nvidia/cublas/lib"), "libcublas.so.12");
        std::fs::create_dir_all(site.join("nvidia/no_lib")).unwrap();
        let dirs = wheel_dirs(std::slice::from_ref(&site));
        let want = [site.join("nvidia/cu13/lib"), site.join("nvidia/cublas/lib")];
        assert!(dirs.starts_with(&want), "{dirs:?}");
    }

    #[test]
    fn the_newest_major_the_driver_takes_wins_then_the_first_place() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        touch(&a, "libcublas.so.12");
        touch(&b, "libcublas.so.12");
        touch(&b, "libcublas.so.13");
        let places = [Place::Wheel(a.clone()), Place::Wheel(b.clone())];
        let got = find(&CUBLAS, &places, None).unwrap();
        assert_eq!((got.path, got.major), (b.join("libcublas.so.13"), 13));
        // A CUDA 12 driver: 13 is out, and the first place holding 12 wins.
        let got = find(&CUBLAS, &places, Some(12)).unwrap();
        assert_eq!(
            (got.path, got.place),
            (a.join("libcublas.so.12"), places[0].clone())
        );
        assert!(find(&CUBLAS, &places, Some(11)).is_none());
        assert!(find(&NVRTC, &places, None).is_none());
    }

    #[test]
    fn site_packages_of_a_prefix() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("lib/python3.11/site-packages")).unwrap();
        std::fs::create_dir_all(root.path().join("lib/other")).unwrap();
        assert_eq!(
            site_packages(root.path()),
            vec![root.path().join("lib/python3.11/site-packages")]
        );
        assert!(site_packages(&root.path().join("missing")).is_empty());
    }

    #[test]
    fn majors_come_from_the_file_name() {
        assert_eq!(major_of("libnvrtc.so.12"), Some(12));
        assert_eq!(major_of("libcublasLt.so.13"), Some(13));
        assert_eq!(major_of("libnvrtc.so"), None);
    }
}
