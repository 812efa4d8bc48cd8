//! NVRTC, the CUDA run-time compiler, opened from one library file: its version and the
//! compilation of one module into a cubin or PTX. Used by the registry when a module has no
//! image for the GPU at hand (`kernels.rs`) and by the build script, which includes this file by
//! path to compile the kernels ahead of time (`build.rs`), so it reads only `std` and
//! `libloading`. NVRTC needs no GPU and no driver.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

type Program = *mut c_void;
type Status = c_int;

/// An NVRTC library, open.
pub(crate) struct Nvrtc {
    lib: libloading::Library,
    path: PathBuf,
    version: (i32, i32),
}

impl Nvrtc {
    /// Opens the NVRTC library at `path` (its folder's `libnvrtc-builtins` is found by the
    /// library itself) and reads its version.
    pub fn open(path: &Path) -> Result<Nvrtc, String> {
        // SAFETY: loading NVRTC runs no initialisation with preconditions of ours.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut nv = Nvrtc {
            lib,
            path: path.to_path_buf(),
            version: (0, 0),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion(int *major, int *minor).
        let status = unsafe {
            let f = nv.symbol::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status>(
                b"nvrtcVersion\0",
            )?;
            f(&mut major, &mut minor)
        };
        if status != 0 {
            return Err(format!(
                "{}: nvrtcVersion failed ({status})",
                path.display()
            ));
        }
        nv.version = (major, minor);
        Ok(nv)
    }

    /// The library's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// (major, minor), e.g. (12, 9).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// # Safety
    /// `T` is the C signature of the NVRTC function `name` (NUL-terminated).
    unsafe fn symbol<T: Copy>(&self, name: &[u8]) -> Result<T, String> {
        // SAFETY: the caller's promise on `T`.
        unsafe { self.lib.get::<T>(name) }
            .map(|s| *s)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Compiles the translation unit `root` (named `voisin_kernels.cu`) with `headers` (name,
    /// text) and `options`; returns the cubin, or the PTX text without its NUL, as NVRTC's
    /// `--gpu-architecture` in `options` asks (`sm_XY`: cubin; `compute_XY`: PTX). An error is
    /// NVRTC's log.
    pub fn compile(
        &self,
        root: &str,
        headers: &[(&str, &str)],
        options: &[String],
        cubin: bool,
    ) -> Result<Vec<u8>, String> {
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("a NUL byte in {s:.40}"));
        let names = headers
            .iter()
            .map(|(n, _)| cstr(n))
            .collect::<Result<Vec<_>, _>>()?;
        let texts = headers
            .iter()
            .map(|(_, t)| cstr(t))
            .collect::<Result<Vec<_>, _>>()?;
        let opts = options
            .iter()
            .map(|o| cstr(o))
            .collect::<Result<Vec<_>, _>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let text_ptrs: Vec<*const c_char> = texts.iter().map(|c| c.as_ptr()).collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();
        let (root, root_name) = (cstr(root)?, cstr("voisin_kernels.cu")?);
        type Create = unsafe extern "C" fn(
            *mut Program,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> Status;
        type Compile = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
        type Size = unsafe extern "C" fn(Program, *mut usize) -> Status;
        type Get = unsafe extern "C" fn(Program, *mut c_char) -> Status;
        type Destroy = unsafe extern "C" fn(*mut Program) -> Status;
        // SAFETY: the signatures of nvrtc.h; every pointer handed over is a NUL-terminated string
        // (or an array of `headers.len()` of them) alive until the program is destroyed below.
        unsafe {
            let create = self.symbol::<Create>(b"nvrtcCreateProgram\0")?;
            let compile = self.symbol::<Compile>(b"nvrtcCompileProgram\0")?;
            let destroy = self.symbol::<Destroy>(b"nvrtcDestroyProgram\0")?;
            let (size, get): (Size, Get) = if cubin {
                (
                    self.symbol(b"nvrtcGetCUBINSize\0")?,
                    self.symbol(b"nvrtcGetCUBIN\0")?,
                )
            } else {
                (
                    self.symbol(b"nvrtcGetPTXSize\0")?,
                    self.symbol(b"nvrtcGetPTX\0")?,
                )
            };
            let mut prog: Program = std::ptr::null_mut();
            let n = headers.len() as c_int;
            let made = create(
                &mut prog,
                root.as_ptr(),
                root_name.as_ptr(),
                n,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            );
            if made != 0 {
                return Err(format!("NVRTC could not create the program ({made})"));
            }
            let out = if compile(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) != 0 {
                Err(self.log(prog))
            } else {
                let mut len = 0usize;
                let mut out = Vec::new();
                if size(prog, &mut len) == 0 {
                    out = vec![0u8; len];
                }
                if out.is_empty() || get(prog, out.as_mut_ptr().cast()) != 0 {
                    Err("NVRTC compiled but gave no image".to_string())
                } else {
                    if !cubin {
                        while out.last() == Some(&0) {
                            out.pop();
                        }
                    }
                    Ok(out)
                }
            };
            destroy(&mut prog);
            out
        }
    }

    /// The compile log of `prog`.
    ///
    /// # Safety
    /// `prog` is a live program of this library.
    unsafe fn log(&self, prog: Program) -> String {
        type Size = unsafe extern "C" fn(Program, *mut usize) -> Status;
        type Get = unsafe extern "C" fn(Program, *mut c_char) -> Status;
        // SAFETY: the signatures of nvrtc.h, on a live program; the buffer has the size NVRTC
        // asked for.
        let text = unsafe {
            match (
                self.symbol::<Size>(b"nvrtcGetProgramLogSize\0"),
                self.symbol::<Get>(b"nvrtcGetProgramLog\0"),
            ) {
                (Ok(size), Ok(get)) => {
                    let mut len = 0usize;
                    size(prog, &mut len);
                    let mut buf = vec![0u8; len.max(1)];
                    get(prog, buf.as_mut_ptr().cast());
                    CStr::from_bytes_until_nul(&buf)
                        .map(|c| c.to_string_lossy().into_owned())
                        .unwrap_or_default()
                }
                _ => String::new(),
            }
        };
        format!("NVRTC could not compile the kernels: {text}")
    }
}
