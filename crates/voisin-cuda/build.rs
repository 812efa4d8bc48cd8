//! Compiles the CUDA kernels ahead of time, so that a process loads machine code for its GPU
//! instead of compiling at its first call: every module of `src/runtime/modules.rs` for every
//! target of `AOT_TARGETS` (cubins for sm_80, sm_86, sm_89 and sm_90, and PTX of compute_90 for
//! newer GPUs), by the NVRTC found here (no GPU needed), deflated and embedded in the crate
//! (`$OUT_DIR/aot.rs`, read by `src/runtime/kernels.rs`). The kernel sources stay the one
//! truth: nothing compiled is committed.
//!
//! When: `VOISIN_AOT=1` always (and the build fails without NVRTC), `VOISIN_AOT=0` never, unset
//! in release builds where NVRTC is found. `VOISIN_AOT_ARCHS=sm_90,compute_90` names fewer
//! targets. Without images the engine compiles what it launches at run time and keeps it in its
//! disk cache.
//!
//! Which NVRTC: `VOISIN_NVRTC` (the library, or its folder), else the places the engine
//! searches at run time (`src/runtime/libs.rs`: `VOISIN_CUDA_LIBS`; the `nvidia-*` wheels of
//! `$VIRTUAL_ENV`, `$CONDA_PREFIX` and maturin's interpreter `$PYO3_PYTHON`; the system),
//! preferring CUDA 12's: its images load under CUDA 12 and 13 drivers, CUDA 13's under 13 only.
//! Images are kept in `<target dir>/voisin-kernels/` by the key of their inputs, so the
//! release, test and wheel builds of one tree compile each once.

#[path = "src/runtime/abi.rs"]
#[allow(dead_code)]
mod abi;
#[path = "src/runtime/cache.rs"]
#[allow(dead_code)]
mod cache;
#[path = "src/runtime/libs.rs"]
#[allow(dead_code)]
mod libs;
#[path = "src/runtime/modules.rs"]
#[allow(dead_code)]
mod modules;
#[path = "src/runtime/nvrtc.rs"]
#[allow(dead_code)]
mod nvrtc;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use modules::Module;
use nvrtc::Nvrtc;

/// NVRTC's file names, CUDA 12's first (the most drivers run its images).
const NVRTC_FILES: libs::Kind = libs::Kind {
    name: "NVRTC",
    files: &["libnvrtc.so.12", "libnvrtc.so.13"],
};

fn main() {
    for path in [
        "build.rs",
        "kernels",
        "src/runtime/abi.rs",
        "src/runtime/cache.rs",
        "src/runtime/libs.rs",
        "src/runtime/modules.rs",
        "src/runtime/nvrtc.rs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-env-changed=VOISIN_AOT");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let policy = std::env::var("VOISIN_AOT").unwrap_or_default();
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let (wanted, required) = match policy.as_str() {
        "0" | "off" => (false, false),
        "1" | "on" => (true, true),
        _ => (release, false),
    };
    let mut built = Built::default();
    if wanted {
        for var in [
            "VOISIN_NVRTC",
            "VOISIN_AOT_ARCHS",
            "VOISIN_CUDA_LIBS",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "PYO3_PYTHON",
            "CUDA_HOME",
            "CUDA_PATH",
            "LD_LIBRARY_PATH",
        ] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        match find_nvrtc() {
            Ok(nv) => {
                println!("cargo:rerun-if-changed={}", nv.path().display());
                built = compile_all(&nv, &out);
            }
            Err(why) if required => panic!("VOISIN_AOT=1: {why}"),
            Err(why) => println!(
                "cargo:warning=kernels not compiled ahead of time ({why}); the engine compiles \
                 them at first use (VOISIN_AOT=0 silences this)"
            ),
        }
    }
    std::fs::write(out.join("aot.rs"), built.source()).expect("writing aot.rs");
}

/// The NVRTC this build compiles with.
fn find_nvrtc() -> Result<Nvrtc, String> {
    if let Some(given) = std::env::var_os("VOISIN_NVRTC").filter(|v| !v.is_empty()) {
        let given = PathBuf::from(given);
        let path = if given.is_dir() {
            NVRTC_FILES
                .files
                .iter()
                .map(|f| given.join(f))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    format!("VOISIN_NVRTC: no libnvrtc.so.12/13 in {}", given.display())
                })?
        } else {
            given
        };
        return Nvrtc::open(&path).map_err(|e| format!("VOISIN_NVRTC: {e}"));
    }
    // maturin's interpreter, e.g. a venv's bin/python: its environment's wheels.
    let mut python = Vec::new();
    if let Some(exe) = std::env::var_os("PYO3_PYTHON") {
        if let Some(prefix) = Path::new(&exe).parent().and_then(Path::parent) {
            python.extend(libs::site_packages(prefix));
        }
    }
    let places = libs::places(&python);
    let found = libs::find(&NVRTC_FILES, &places, None).ok_or_else(|| {
        "no NVRTC found: pip install nvidia-cuda-nvrtc-cu12 into the build's Python \
         environment, or set VOISIN_NVRTC"
            .to_string()
    })?;
    Nvrtc::open(&found.path)
}

/// The targets to compile for: `VOISIN_AOT_ARCHS` or all of `AOT_TARGETS`.
fn targets() -> Vec<String> {
    let Ok(list) = std::env::var("VOISIN_AOT_ARCHS") else {
        return modules::AOT_TARGETS.iter().map(|t| t.to_string()).collect();
    };
    let targets: Vec<String> = list
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    for t in &targets {
        let number = t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_"));
        assert!(
            number.is_some_and(|n| n.parse::<u32>().is_ok()),
            "VOISIN_AOT_ARCHS: {t} is not sm_XY or compute_XY"
        );
    }
    targets
}

/// What the build compiled: per module and target, the deflated image's file in `$OUT_DIR`.
#[derive(Default)]
struct Built {
    nvrtc: Option<(i32, i32)>,
    targets: Vec<String>,
    images: Vec<(String, String, PathBuf)>,
}

impl Built {
    /// The generated `aot.rs`.
    fn source(&self) -> String {
        let mut s = String::from("// Generated by build.rs.\n");
        s += &format!(
            "pub(crate) const NVRTC: Option<(i32, i32)> = {:?};\n",
            self.nvrtc
        );
        s += &format!("pub(crate) const TARGETS: &[&str] = &{:?};\n", self.targets);
        s += "pub(crate) static IMAGES: &[(&str, &str, &[u8])] = &[\n";
        for (m, t, path) in &self.images {
            s += &format!(
                "    ({m:?}, {t:?}, include_bytes!({:?})),\n",
                path.display().to_string()
            );
        }
        s + "];\n"
    }
}

/// Compiles every module for every target on `NUM_JOBS` threads, through the build cache.
fn compile_all(nv: &Nvrtc, out: &Path) -> Built {
    let targets = targets();
    let bench = std::env::var_os("CARGO_FEATURE_BENCH_VARIANTS").is_some();
    let jobs: Vec<(Module, String)> = modules::modules(bench)
        .into_iter()
        .flat_map(|m| targets.iter().map(move |t| (m, t.clone())))
        .collect();
    let dir = out.join("aot");
    std::fs::create_dir_all(&dir).expect("creating $OUT_DIR/aot");
    let store = build_cache(out);
    let threads = std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(2)
        .clamp(1, jobs.len().max(1));
    let next = Mutex::new(0usize);
    let images = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some((m, target)) = jobs.get(i) else {
                    return;
                };
                let image = deflated(nv, *m, target, &store);
                let path = dir.join(format!("{}.{target}.z", m.file_name()));
                std::fs::write(&path, image).expect("writing a kernel image");
                images
                    .lock()
                    .unwrap()
                    .push((m.file_name(), target.clone(), path));
            });
        }
    });
    let mut images = images.into_inner().unwrap();
    images.sort();
    Built {
        nvrtc: Some(nv.version()),
        targets,
        images,
    }
}

/// The build cache: `voisin-kernels/` in the target folder (the first folder above `$OUT_DIR`
/// holding cargo's `CACHEDIR.TAG`), shared by every profile and target triple of the tree.
fn build_cache(out: &Path) -> PathBuf {
    let root = out
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out);
    root.join("voisin-kernels")
}

/// The deflated image of `m` for `target`: from the build cache, or compiled and kept there.
fn deflated(nv: &Nvrtc, m: Module, target: &str, store: &Path) -> Vec<u8> {
    let key = m.key(target, nv.version());
    let file = cache::file(store, &m.file_name(), target, &key);
    if let Some(image) = cache::read(&file) {
        return image;
    }
    let headers = m.headers();
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let raw = nv
        .compile(
            &m.root(),
            &headers,
            &m.options(target),
            modules::is_cubin(target),
        )
        .unwrap_or_else(|e| {
            panic!(
                "{} for {target} by {}: {e}",
                m.file_name(),
                nv.path().display()
            )
        });
    let image = miniz_oxide::deflate::compress_to_vec(&raw, 6);
    // A cache that cannot be written costs the next build a compile.
    let _ = cache::write(&file, &image);
    image
}
