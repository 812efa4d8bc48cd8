//! What this process loads of CUDA, decided once, and the report of it ([`cuda_info`]).
//!
//! The driver (`libcuda.so.1`, from the system) is opened first and says which CUDA it runs
//! (`cuDriverGetVersion`). NVRTC and cuBLAS are then searched as `libs.rs` says, taking the
//! newest major the driver runs (13, then 12) from the first place that holds it, and opened
//! by full path; voisin's own bindings call them from that file (`blas.rs`, `nvrtc.rs`), so
//! the library reported is the one that runs. The driver is called through the CUDA bindings
//! (cudarc, `dynamic-loading`, CUDA 13.0's), which look every symbol up by name at its first
//! call; the calls the engine makes exist in CUDA 12 drivers too, but one: the event timer of
//! 13.0 (`cuEventElapsedTime_v2`, from 12.8), for which [`elapsed_ms`] falls back to the older
//! one.
//!
//! NVRTC is only needed for kernels the build did not compile ahead of time for the GPU at hand
//! (`kernels.rs`).

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{result as cu, sys, CudaEvent, DriverError};

use crate::runtime::blas::BlasCalls;
use crate::runtime::kernels;
use crate::runtime::libs::{self, Found, Place};
use crate::runtime::nvrtc::Nvrtc;

/// Entries of the Python path (`sys.path`) handed over by the Python package, searched for the
/// `nvidia-*` wheels; to take effect, set before CUDA is first used.
static PYTHON_PATH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Tells the library search where the running Python looks for packages (its `sys.path`), so
/// that cuBLAS and NVRTC are found in the `nvidia-*` wheels installed there. Without effect
/// once CUDA was looked for in this process.
pub fn set_python_path(entries: Vec<PathBuf>) {
    *PYTHON_PATH.lock().unwrap_or_else(|p| p.into_inner()) = entries;
}

/// The driver, open.
pub(crate) struct Driver {
    lib: libloading::Library,
    path: PathBuf,
    /// As `cuDriverGetVersion` gives it: 13000 for CUDA 13.0.
    version: i32,
}

/// A library opened from a place.
pub(crate) struct Opened {
    found: Found,
    version: String,
}

/// What the process found, once.
pub(crate) struct Loaded {
    places: Vec<Place>,
    driver: Result<Driver, String>,
    nvrtc: Result<(Opened, Nvrtc), String>,
    cublas: Result<(Opened, BlasCalls), String>,
}

/// The process's CUDA libraries, searched and opened at the first call.
pub(crate) fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let python = PYTHON_PATH
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let places = libs::places(&python);
        let driver = open_driver();
        let max = driver.as_ref().ok().map(|d| d.version / 1000);
        let nvrtc = open_nvrtc(&places, max);
        let cublas = open_cublas(&places, max);
        Loaded {
            places,
            driver,
            nvrtc,
            cublas,
        }
    })
}

fn open_driver() -> Result<Driver, String> {
    let path = PathBuf::from("libcuda.so.1");
    // SAFETY: loading the driver library runs its own initialisation only.
    let lib = unsafe { libloading::Library::new(&path) }.map_err(|_| {
        "the CUDA driver (libcuda) cannot be loaded: libcuda.so.1 is not on the system's loader \
         path (it comes with the NVIDIA driver, not with a wheel)"
            .to_string()
    })?;
    let mut version: c_int = 0;
    // SAFETY: cuDriverGetVersion(int *) needs no cuInit.
    let status = unsafe {
        lib.get::<unsafe extern "C" fn(*mut c_int) -> sys::CUresult>(b"cuDriverGetVersion\0")
            .map(|f| f(&mut version))
    };
    if !matches!(status, Ok(sys::CUresult::CUDA_SUCCESS)) || version < 12000 {
        return Err(format!(
            "the NVIDIA driver runs CUDA {} (voisin needs CUDA 12 or 13)",
            dotted(version)
        ));
    }
    let path = libs::mapped_path("libcuda.so").unwrap_or(path);
    Ok(Driver { lib, path, version })
}

fn open_nvrtc(places: &[Place], max: Option<i32>) -> Result<(Opened, Nvrtc), String> {
    let found = libs::find(&libs::NVRTC, places, max).ok_or_else(|| missing(&libs::NVRTC, max))?;
    let nv = Nvrtc::open(&found.path)?;
    let (major, minor) = nv.version();
    let opened = Opened {
        found,
        version: format!("{major}.{minor}"),
    };
    Ok((opened, nv))
}

fn open_cublas(places: &[Place], max: Option<i32>) -> Result<(Opened, BlasCalls), String> {
    let found =
        libs::find(&libs::CUBLAS, places, max).ok_or_else(|| missing(&libs::CUBLAS, max))?;
    // cuBLAS needs cuBLASLt of its major: from its own folder where it came from one (the
    // loader then answers cuBLAS's need of it by its name).
    let lt = format!("libcublasLt.so.{}", found.major);
    let open = |p: &std::path::Path| {
        // SAFETY: loading a CUDA library runs no initialisation with preconditions of ours.
        unsafe { libloading::Library::new(p) }.map_err(|e| format!("{}: {e}", p.display()))
    };
    if let Some(dir) = found.path.parent().filter(|d| d.join(&lt).is_file()) {
        std::mem::forget(open(&dir.join(&lt))?);
    }
    let lib = open(&found.path)?;
    let version = cublas_version(&lib).unwrap_or_else(|| found.major.to_string());
    let calls = BlasCalls::of(lib).map_err(|e| format!("{}: {e}", found.path.display()))?;
    Ok((Opened { found, version }, calls))
}

/// Why a library of `kind` was not found.
fn missing(kind: &libs::Kind, max: Option<i32>) -> String {
    let majors = match max {
        Some(12) => "12".to_string(),
        _ => "13 or 12".to_string(),
    };
    format!(
        "{} (CUDA {majors}) not found: pip install 'voisin[cuda12]' (or [cuda13]), or \
         name its folder in {}",
        kind.name,
        libs::OVERRIDE_VAR
    )
}

/// cuBLAS's version, `major.minor.patch` (cublasGetProperty needs no handle).
fn cublas_version(lib: &libloading::Library) -> Option<String> {
    type Get = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    // SAFETY: cublasGetProperty(libraryPropertyType, int *); 0, 1, 2 are MAJOR, MINOR, PATCH.
    unsafe {
        let get = lib.get::<Get>(b"cublasGetProperty\0").ok()?;
        let mut v = [0; 3];
        for (i, slot) in v.iter_mut().enumerate() {
            (get(i as c_int, slot) == 0).then_some(())?;
        }
        Some(format!("{}.{}.{}", v[0], v[1], v[2]))
    }
}

/// `13000` → `13.0`.
fn dotted(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

impl Loaded {
    /// NVRTC, where one was found.
    pub fn nvrtc(&self) -> Option<&Nvrtc> {
        self.nvrtc.as_ref().ok().map(|(_, nv)| nv)
    }

    /// cuBLAS's calls, where one was found.
    pub fn blas(&self) -> Option<&BlasCalls> {
        self.cublas.as_ref().ok().map(|(_, calls)| calls)
    }

    /// Why the engine cannot load CUDA here (devices aside), if it cannot.
    pub fn problem(&self) -> Option<String> {
        if let Err(e) = &self.driver {
            return Some(e.clone());
        }
        self.cublas.as_ref().err().cloned()
    }

    /// The driver's CUDA version (13000 for 13.0), where a driver loaded.
    pub fn driver_version(&self) -> Option<i32> {
        self.driver.as_ref().ok().map(|d| d.version)
    }
}

/// The time between two recorded events, in milliseconds, on any CUDA 12 or 13 driver: the
/// bindings' timer calls `cuEventElapsedTime_v2`, which drivers older than 12.8 lack.
pub(crate) fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32, DriverError> {
    let old = match &loaded().driver {
        Ok(d) if d.version < 12080 => Some(&d.lib),
        _ => None,
    };
    let Some(lib) = old else {
        return start.elapsed_ms(end);
    };
    start.synchronize()?;
    end.synchronize()?;
    type Elapsed = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;
    let mut ms = 0f32;
    // SAFETY: cuEventElapsedTime(float *, CUevent, CUevent) on two live, completed events.
    unsafe {
        let f = lib
            .get::<Elapsed>(b"cuEventElapsedTime\0")
            .map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND))?;
        f(&mut ms, start.cu_event(), end.cu_event()).result()?;
    }
    Ok(ms)
}

/// One library in the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryInfo {
    /// The file opened.
    pub path: PathBuf,
    /// Its version (`13.0` for the driver's CUDA, `12.9` for NVRTC, `12.9.1` for cuBLAS).
    pub version: String,
    /// `system`, `wheel` or `override` (`VOISIN_CUDA_LIBS`).
    pub source: String,
}

/// One GPU in the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The CUDA device number.
    pub ordinal: usize,
    /// The device's name, as the driver reports it.
    pub name: String,
    /// `sm_90` for compute capability 9.0.
    pub arch: String,
    /// The device's total memory.
    pub memory_bytes: usize,
}

/// What voisin found of CUDA on this machine and whether it will use a GPU: the answer of
/// `voisin.cuda_info()` and `voisin doctor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaInfo {
    /// The CUDA driver library, where one was opened.
    pub driver: Option<LibraryInfo>,
    /// NVRTC, the run-time kernel compiler, where one was found.
    pub nvrtc: Option<LibraryInfo>,
    /// cuBLAS, where one was found.
    pub cublas: Option<LibraryInfo>,
    /// Every GPU the driver lists.
    pub devices: Vec<DeviceInfo>,
    /// The GPU targets of the kernels compiled into this build (`sm_90`, `compute_90`: PTX for
    /// newer GPUs), none when the build found no NVRTC.
    pub prebuilt_kernels: Vec<String>,
    /// The NVRTC version that compiled them.
    pub prebuilt_nvrtc: Option<String>,
    /// Where kernels compiled at run time are kept (`VOISIN_CACHE_DIR`), if anywhere.
    pub kernel_cache: Option<PathBuf>,
    /// The places searched for NVRTC and cuBLAS, in order.
    pub searched: Vec<String>,
    /// What each library search found wanting (a library not found, a driver too old).
    pub notes: Vec<String>,
    /// Why `device="auto"` will not use a GPU; `None` when it will.
    pub gpu_unused_because: Option<String>,
}

/// What voisin finds of CUDA here (searching for it, once per process, at the first call).
/// Never panics.
pub fn cuda_info() -> CudaInfo {
    let l = loaded();
    let lib = |o: &Opened| LibraryInfo {
        path: o.found.path.clone(),
        version: o.version.clone(),
        source: o.found.place.kind().to_string(),
    };
    let driver = l.driver.as_ref().ok().map(|d| LibraryInfo {
        path: d.path.clone(),
        version: dotted(d.version),
        source: "system".into(),
    });
    let mut notes: Vec<String> = [
        l.driver.as_ref().err(),
        l.nvrtc.as_ref().err(),
        l.cublas.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    if !kernels::use_built() {
        notes.push(format!(
            "{}=off: the kernels built in are not used",
            kernels::PREBUILT_VAR
        ));
    }
    let devices = devices(l, &mut notes);
    let (targets, nvrtc_built) = kernels::prebuilt();
    CudaInfo {
        driver,
        nvrtc: l.nvrtc.as_ref().ok().map(|(o, _)| lib(o)),
        cublas: l.cublas.as_ref().ok().map(|(o, _)| lib(o)),
        gpu_unused_because: unused_because(l, &devices),
        devices,
        prebuilt_kernels: targets.iter().map(|t| t.to_string()).collect(),
        prebuilt_nvrtc: nvrtc_built.map(|(a, b)| format!("{a}.{b}")),
        kernel_cache: crate::runtime::cache::run_dir(),
        searched: l.places.iter().map(Place::describe).collect(),
        notes,
    }
}

/// The GPUs the driver shows (none without a driver), noting a driver that fails.
fn devices(l: &Loaded, notes: &mut Vec<String>) -> Vec<DeviceInfo> {
    if l.driver.is_err() {
        return Vec::new();
    }
    let count = match cu::init().and_then(|_| cu::device::get_count()) {
        Ok(n) => n.max(0),
        Err(e) => {
            notes.push(format!("the driver does not start: {e:?}"));
            return Vec::new();
        }
    };
    (0..count)
        .filter_map(|i| {
            let dev = cu::device::get(i).ok()?;
            let attr = |a| {
                // SAFETY: a device the driver just gave.
                unsafe { cu::device::get_attribute(dev, a) }.unwrap_or(0)
            };
            use sys::CUdevice_attribute as A;
            let (major, minor) = (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            );
            Some(DeviceInfo {
                ordinal: i as usize,
                name: cu::device::get_name(dev).unwrap_or_default(),
                arch: format!("sm_{major}{minor}"),
                // SAFETY: as above.
                memory_bytes: unsafe { cu::device::total_mem(dev) }.unwrap_or(0),
            })
        })
        .collect()
}

/// Why no GPU will be used, if none will.
fn unused_because(l: &Loaded, devices: &[DeviceInfo]) -> Option<String> {
    if let Some(p) = l.problem() {
        return Some(p);
    }
    let Some(first) = devices.first() else {
        return Some("the NVIDIA driver sees no GPU".into());
    };
    if !kernels::obtainable(&first.arch, l.driver_version(), l.nvrtc().is_some()) {
        let (targets, _) = kernels::prebuilt();
        return Some(format!(
            "no kernels for {} ({}): this build has kernels for [{}], and NVRTC was not found",
            first.name,
            first.arch,
            targets.join(", ")
        ));
    }
    None
}

/// Whether the engine can run here: a driver with a GPU, cuBLAS, and kernels for it.
pub fn gpu_available() -> bool {
    static GPU: OnceLock<bool> = OnceLock::new();
    *GPU.get_or_init(|| cuda_info().gpu_unused_because.is_none())
}

/// How many CUDA devices the driver sees (0 without a usable CUDA). Never panics.
pub fn device_count() -> usize {
    if loaded().problem().is_some() {
        return 0;
    }
    match cu::init().and_then(|_| cu::device::get_count()) {
        Ok(n) => n.max(0) as usize,
        Err(_) => 0,
    }
}

impl std::fmt::Display for CudaInfo {
    /// The report `voisin doctor` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lib = |f: &mut std::fmt::Formatter<'_>, name: &str, l: &Option<LibraryInfo>| match l {
            Some(l) => writeln!(
                f,
                "{name:<8} {} {} ({})",
                l.version,
                l.path.display(),
                l.source
            ),
            None => writeln!(f, "{name:<8} not found"),
        };
        lib(f, "driver", &self.driver)?;
        lib(f, "cuBLAS", &self.cublas)?;
        lib(f, "NVRTC", &self.nvrtc)?;
        for d in &self.devices {
            let gib = d.memory_bytes as f64 / (1u64 << 30) as f64;
            writeln!(
                f,
                "GPU {}    {} ({}, {gib:.0} GiB)",
                d.ordinal, d.name, d.arch
            )?;
        }
        match (&self.prebuilt_nvrtc, self.prebuilt_kernels.is_empty()) {
            (Some(v), false) => writeln!(
                f,
                "kernels  built for {} (NVRTC {v})",
                self.prebuilt_kernels.join(", ")
            )?,
            _ => writeln!(f, "kernels  none built in: compiled by NVRTC at first use")?,
        }
        match &self.kernel_cache {
            Some(d) => writeln!(f, "cache    {}", d.display())?,
            None => writeln!(f, "cache    off")?,
        }
        writeln!(f, "searched, in order:")?;
        for s in &self.searched {
            writeln!(f, "  {s}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        match &self.gpu_unused_because {
            None => writeln!(f, "GPU: used under device auto"),
            Some(why) => writeln!(f, "GPU: not used: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cuBLAS and NVRTC of the places searched here (the wheels of `$VIRTUAL_ENV`, as
    /// scripts/test-all sets it, and the system) exports what the engine calls, whatever its
    /// major; none found, nothing to check.
    #[test]
    fn every_library_found_exports_what_the_engine_calls() {
        let places = libs::places(&[]);
        let nvrtc_calls = [
            "nvrtcVersion",
            "nvrtcCreateProgram",
            "nvrtcCompileProgram",
            "nvrtcGetCUBINSize",
            "nvrtcGetCUBIN",
            "nvrtcGetPTXSize",
            "nvrtcGetPTX",
            "nvrtcGetProgramLogSize",
            "nvrtcGetProgramLog",
            "nvrtcDestroyProgram",
        ];
        let nvrtc = |lib: libloading::Library, path: &std::path::Path| {
            for call in nvrtc_calls {
                let name = format!("{call}\0");
                // SAFETY: only the symbol is looked up.
                let found = unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_ok();
                assert!(found, "{} lacks {call}", path.display());
            }
        };
        // cuBLAS: the version call and every call the engine looks up (`BlasCalls::of`).
        let cublas = |lib: libloading::Library, path: &std::path::Path| {
            assert!(
                cublas_version(&lib).is_some(),
                "{}: no version",
                path.display()
            );
            if let Err(e) = BlasCalls::of(lib) {
                panic!("{}: {e}", path.display());
            }
        };
        type Check<'a> = &'a dyn Fn(libloading::Library, &std::path::Path);
        let mut checked = 0;
        for (kind, check) in [(&libs::CUBLAS, &cublas as Check), (&libs::NVRTC, &nvrtc)] {
            for file in kind.files {
                for place in &places {
                    let Some(path) = libs::locate(place, file) else {
                        continue;
                    };
                    // SAFETY: only symbols are looked up.
                    let lib = unsafe { libloading::Library::new(&path) }.unwrap();
                    check(lib, &path);
                    checked += 1;
                }
            }
        }
        eprintln!("{checked} CUDA libraries checked");
    }

    #[test]
    fn versions_read_as_cuda_writes_them() {
        assert_eq!(dotted(13000), "13.0");
        assert_eq!(dotted(12080), "12.8");
    }
}
