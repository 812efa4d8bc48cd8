//! What the Python package says about CUDA: [`cuda_info`] (`voisin.cuda_info()`), the report of
//! `voisin_cuda::cuda_info` as a dict, and [`hand_over_python_path`], which gives the CUDA
//! library search the interpreter's `sys.path` at import, so that cuBLAS and NVRTC are found in
//! the `nvidia-*` wheels installed beside voisin.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Hands `sys.path` to the CUDA library search (before anything loads CUDA).
pub fn hand_over_python_path(py: Python<'_>) -> PyResult<()> {
    let path = py.import("sys")?.getattr("path")?;
    let entries: Vec<PathBuf> = path
        .try_iter()?
        .filter_map(|e| e.ok()?.extract::<String>().ok())
        .filter(|e| !e.is_empty())
        .map(PathBuf::from)
        .collect();
    voisin_cuda::set_python_path(entries);
    Ok(())
}

/// What voisin finds of CUDA here, as a dict: `gpu` (whether `device="auto"` uses a GPU),
/// `reason` (why not, else None); `driver`, `cublas`, `nvrtc` (each None or a dict of `path`,
/// `version`, `source`: "system", "wheel" or "override"); `devices` (`ordinal`, `name`,
/// `arch`, `memory_bytes`); `prebuilt_kernels` (the GPU targets compiled into this build),
/// `prebuilt_nvrtc`; `kernel_cache` (the folder of kernels compiled at run time, or None);
/// `searched` (the places searched for cuBLAS and NVRTC, in order) and `notes`.
#[pyfunction]
pub fn cuda_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let info = py.detach(voisin_cuda::cuda_info);
    let d = PyDict::new(py);
    d.set_item("gpu", info.gpu_unused_because.is_none())?;
    d.set_item("reason", info.gpu_unused_because.clone())?;
    for (key, lib) in [
        ("driver", &info.driver),
        ("cublas", &info.cublas),
        ("nvrtc", &info.nvrtc),
    ] {
        let value = match lib {
            Some(l) => {
                let e = PyDict::new(py);
                e.set_item("path", l.path.display().to_string())?;
                e.set_item("version", &l.version)?;
                e.set_item("source", &l.source)?;
                e.into_any()
            }
            None => py.None().into_bound(py),
        };
        d.set_item(key, value)?;
    }
    let devices = PyList::empty(py);
    for dev in &info.devices {
        let e = PyDict::new(py);
        e.set_item("ordinal", dev.ordinal)?;
        e.set_item("name", &dev.name)?;
        e.set_item("arch", &dev.arch)?;
        e.set_item("memory_bytes", dev.memory_bytes)?;
        devices.append(e)?;
    }
    d.set_item("devices", devices)?;
    d.set_item("prebuilt_kernels", &info.prebuilt_kernels)?;
    d.set_item("prebuilt_nvrtc", &info.prebuilt_nvrtc)?;
    d.set_item(
        "kernel_cache",
        info.kernel_cache.as_ref().map(|p| p.display().to_string()),
    )?;
    d.set_item("searched", &info.searched)?;
    d.set_item("notes", &info.notes)?;
    Ok(d)
}
