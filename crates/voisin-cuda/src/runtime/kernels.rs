//! The kernel registry: every kernel source of the crate, compiled once per process by NVRTC into
//! one module, and every kernel function the engine launches.
//!
//! Sources live in `kernels/`, in folders by role (`select/`, `distance/`, `finish/`, `index/`,
//! `strings/`); what several kernels share is in headers (`common/*.cuh`, `index/space.cuh`)
//! that each source includes by name. NVRTC gets every file as a named in-memory header, plus
//! the generated `common/abi.cuh` (src/runtime/abi.rs), so the same sources also compile from disk with
//! a host compiler and `-I kernels` (the CPU simulation, kernel-sim/).

use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, Ptx};
use voisin::{Error, Result};

use crate::runtime::abi;
use crate::runtime::context::dev;
use crate::runtime::elem::Storage;

/// Every kernel source and header, by its path under `kernels/`.
pub(crate) const SOURCES: &[(&str, &str)] = &[
    (
        "common/keys.cuh",
        include_str!("../../kernels/common/keys.cuh"),
    ),
    (
        "common/loads.cuh",
        include_str!("../../kernels/common/loads.cuh"),
    ),
    (
        "common/bitonic.cuh",
        include_str!("../../kernels/common/bitonic.cuh"),
    ),
    (
        "common/elem.cuh",
        include_str!("../../kernels/common/elem.cuh"),
    ),
    (
        "common/append.cuh",
        include_str!("../../kernels/common/append.cuh"),
    ),
    (
        "common/mma.cuh",
        include_str!("../../kernels/common/mma.cuh"),
    ),
    (
        "common/half.cuh",
        include_str!("../../kernels/common/half.cuh"),
    ),
    (
        "common/exact.cuh",
        include_str!("../../kernels/common/exact.cuh"),
    ),
    (
        "index/space.cuh",
        include_str!("../../kernels/index/space.cuh"),
    ),
    (
        "strings/myers.cuh",
        include_str!("../../kernels/strings/myers.cuh"),
    ),
    (
        "select/block.cu",
        include_str!("../../kernels/select/block.cu"),
    ),
    (
        "select/cols.cu",
        include_str!("../../kernels/select/cols.cu"),
    ),
    (
        "select/radix.cu",
        include_str!("../../kernels/select/radix.cu"),
    ),
    (
        "select/heap.cu",
        include_str!("../../kernels/select/heap.cu"),
    ),
    (
        "select/quick.cu",
        include_str!("../../kernels/select/quick.cu"),
    ),
    (
        "select/fused_filter.cu",
        include_str!("../../kernels/select/fused_filter.cu"),
    ),
    (
        "select/survivors.cu",
        include_str!("../../kernels/select/survivors.cu"),
    ),
    (
        "select/pair_filter.cu",
        include_str!("../../kernels/select/pair_filter.cu"),
    ),
    (
        "select/locality.cu",
        include_str!("../../kernels/select/locality.cu"),
    ),
    (
        "distance/vector_tile.cu",
        include_str!("../../kernels/distance/vector_tile.cu"),
    ),
    (
        "distance/transpose.cu",
        include_str!("../../kernels/distance/transpose.cu"),
    ),
    (
        "distance/prepare.cu",
        include_str!("../../kernels/distance/prepare.cu"),
    ),
    (
        "distance/scaled_half.cu",
        include_str!("../../kernels/distance/scaled_half.cu"),
    ),
    (
        "finish/range.cu",
        include_str!("../../kernels/finish/range.cu"),
    ),
    (
        "finish/exact.cu",
        include_str!("../../kernels/finish/exact.cu"),
    ),
    (
        "finish/rerank.cu",
        include_str!("../../kernels/finish/rerank.cu"),
    ),
    (
        "index/lc_search.cu",
        include_str!("../../kernels/index/lc_search.cu"),
    ),
    (
        "index/sss_search.cu",
        include_str!("../../kernels/index/sss_search.cu"),
    ),
    (
        "index/cover_pairs.cu",
        include_str!("../../kernels/index/cover_pairs.cu"),
    ),
    (
        "index/cover.cuh",
        include_str!("../../kernels/index/cover.cuh"),
    ),
    (
        "index/cover_net.cu",
        include_str!("../../kernels/index/cover_net.cu"),
    ),
    (
        "index/lc_build.cu",
        include_str!("../../kernels/index/lc_build.cu"),
    ),
    (
        "strings/levenshtein.cu",
        include_str!("../../kernels/strings/levenshtein.cu"),
    ),
];

/// Kernels of the benchmark-only variants (`Select::Heap`, `Select::Quick`), compiled only
/// with the `bench-variants` feature. (The fused filter is the product's: `Fusion::Auto` fuses
/// small batches.)
const BENCH_ONLY: &[&str] = &["select/heap.cu", "select/quick.cu"];

/// The generated header's name, as the sources include it.
const ABI_HEADER: &str = "common/abi.cuh";

/// The sources that read stored rows (common/elem.cuh): compiled once more per half storage
/// type, with `VOISIN_ELEM` set, into a module of their own ([`ElemKernels`]).
const ELEM_SOURCES: &[&str] = &["distance/prepare.cu", "finish/exact.cu", "finish/rerank.cu"];

/// The translation unit NVRTC compiles: every kernel source (`.cu`) of this build included by
/// name.
pub(crate) fn root_source() -> String {
    SOURCES
        .iter()
        .filter(|(name, _)| name.ends_with(".cu"))
        .filter(|(name, _)| cfg!(feature = "bench-variants") || !BENCH_ONLY.contains(name))
        .map(|(name, _)| format!("#include \"{name}\"\n"))
        .collect()
}

/// The translation unit of one storage type other than f32's [`ElemKernels`].
fn elem_source() -> String {
    ELEM_SOURCES
        .iter()
        .map(|name| format!("#include \"{name}\"\n"))
        .collect()
}

/// The kernels loaded on `ctx`'s device, shared by every engine of the process on it: each
/// engine loading its own module paid the driver's (lazy) loading of every kernel again at its
/// first launches, which a one-shot call (a fresh engine per call, as the Python functions
/// make) saw as part of its time. Engines on one device share its primary context, so one
/// module serves them all.
pub(crate) fn shared(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
    static LOADED: Mutex<Vec<(usize, Arc<Kernels>)>> = Mutex::new(Vec::new());
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    let device = ctx.ordinal();
    if let Some((_, k)) = loaded.iter().find(|(d, _)| *d == device) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kernels::load(ctx)?);
    loaded.push((device, k.clone()));
    Ok(k)
}

/// The NVRTC output, shared by every context of the process.
pub(crate) fn ptx() -> Result<Ptx> {
    static PTX: OnceLock<std::result::Result<Ptx, String>> = OnceLock::new();
    PTX.get_or_init(|| compile(&root_source(), Storage::F32))
        .clone()
        .map_err(Error::device)
}

/// The NVRTC output of the element kernels for `storage`, shared by every context of the
/// process (f32's are in [`ptx`]).
fn elem_ptx(storage: Storage) -> Result<Ptx> {
    static PTX: [OnceLock<std::result::Result<Ptx, String>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match storage {
        Storage::F32 => return ptx(),
        Storage::F16 => &PTX[0],
        Storage::Bf16 => &PTX[1],
        Storage::U8 => &PTX[2],
    };
    slot.get_or_init(|| compile(&elem_source(), storage))
        .clone()
        .map_err(Error::device)
}

/// Compiles `root` with every source and the ABI header as named headers, for compute_90
/// (Hopper), without fast math (it would change powf and division; the exactness bounds
/// assume IEEE operations), with stored rows of type `storage` (common/elem.cuh).
fn compile(root: &str, storage: Storage) -> std::result::Result<Ptx, String> {
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("cuda: a NUL byte in {s:.40}"));
    let abi = abi::header();
    let mut names = vec![cstr(ABI_HEADER)?];
    let mut texts = vec![cstr(&abi)?];
    for (name, text) in SOURCES {
        names.push(cstr(name)?);
        texts.push(cstr(text)?);
    }
    let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
    let text_ptrs: Vec<*const c_char> = texts.iter().map(|c| c.as_ptr()).collect();
    let root = cstr(root)?;
    let root_name = cstr("voisin_kernels.cu")?;
    let mut prog = std::mem::MaybeUninit::uninit();
    // SAFETY: every pointer is a NUL-terminated string that outlives the program (the CStrings
    // above are dropped after `destroy_program`); the two arrays have `names.len()` entries.
    unsafe {
        nvrtc_sys::nvrtcCreateProgram(
            prog.as_mut_ptr(),
            root.as_ptr(),
            root_name.as_ptr(),
            names.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
        .result()
        .map_err(|e| format!("cuda: NVRTC could not create the program: {e:?}"))?;
    }
    // SAFETY: a program just created.
    let prog = unsafe { prog.assume_init() };
    let elem = format!("-DVOISIN_ELEM={}", storage.code());
    let options = ["--gpu-architecture=compute_90", elem.as_str()];
    // SAFETY: `prog` is live until `destroy_program` below, called once.
    let out = unsafe {
        match nvrtc::compile_program(prog, &options) {
            Ok(()) => nvrtc::get_ptx(prog)
                .map(|p| Ptx::from_src(text_of(&p)))
                .map_err(|e| format!("cuda: NVRTC gave no PTX: {e:?}")),
            Err(_) => Err(format!(
                "cuda: NVRTC could not compile the kernels: {}",
                nvrtc::get_program_log(prog)
                    .map(|l| text_of(&l))
                    .unwrap_or_default()
            )),
        }
    };
    // SAFETY: as above.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// A NUL-terminated C string from NVRTC as Rust text.
fn text_of(s: &[c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Declares [`Kernels`] with one field per kernel function, named as the function.
macro_rules! registry {
    ($($(#[$cfg:meta])* $name:ident),* $(,)?) => {
        /// Every kernel the engine launches, loaded into one context.
        pub(crate) struct Kernels {
            $($(#[$cfg])* pub $name: CudaFunction,)*
            /// The element kernels of f32 rows (from the same module).
            f32: ElemKernels,
            /// Those of f16, bf16 and u8 rows, loaded at their first use.
            other: [OnceLock<ElemKernels>; 3],
            ctx: Arc<CudaContext>,
            /// The module they come from.
            #[allow(dead_code)]
            module: Arc<CudaModule>,
        }

        impl Kernels {
            /// Loads the module into `ctx` and finds every kernel.
            pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
                let module = ctx.load_module(ptx()?).map_err(dev("loading the kernels"))?;
                let f = |name: &str| module.load_function(name).map_err(dev("finding a kernel"));
                let k = Kernels {
                    $($(#[$cfg])* $name: f(stringify!($name))?,)*
                    f32: ElemKernels::find(&module)?,
                    other: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
                    ctx: ctx.clone(),
                    module,
                };
                k.opt_in()?;
                Ok(k)
            }
        }

        /// Every kernel function's name.
        #[cfg(test)]
        pub(crate) const NAMES: &[&str] = &[$($(#[$cfg])* stringify!($name)),*];
    };
}

registry! {
    select_block, fill_lists, seed_lists, list_prefix, select_cols, select_radix,
    #[cfg(feature = "bench-variants")] select_heap,
    #[cfg(feature = "bench-variants")] select_quick,
    fused_filter_fp32, fused_filter_tf32, tile_filter, merge_survivors, merge_survivors_warp,
    pair_filter_tf32, pair_filter_f16, pair_filter_f16_scaled, pair_filter_f16_split,
    pair_filter_bf16, pair_filter_s8,
    pair_filter_tf32_rows, pair_filter_f16_rows, pair_filter_f16_scaled_rows,
    pair_filter_f16_split_rows, pair_filter_bf16_rows, pair_filter_s8_rows,
    gather_rows, block_spheres, pair_blocks,
    vector_tile, transpose, scaled_half_rows, unscale_tile,
    range_count, range_fill,
    lc_search, sss_search, lc_sort_rows,
    lc_build_scan, lc_build_scan_lev, lc_build_collect, lc_build_gather,
    lc_build_to_refs,
    lev_range,
    cover_pairs_lev,
    cover_net_block_vec, cover_net_block_lev, cover_net_round_vec, cover_net_round_lev,
}

impl Kernels {
    /// Lets the kernels that need more than the 48 KiB of shared memory a launch gets by
    /// default have it (the fused tile pair's slabs, ops/pair.rs).
    fn opt_in(&self) -> Result<()> {
        for f in [
            &self.pair_filter_tf32,
            &self.pair_filter_f16,
            &self.pair_filter_f16_scaled,
            &self.pair_filter_f16_split,
            &self.pair_filter_bf16,
            &self.pair_filter_s8,
            &self.pair_filter_tf32_rows,
            &self.pair_filter_f16_rows,
            &self.pair_filter_f16_scaled_rows,
            &self.pair_filter_f16_split_rows,
            &self.pair_filter_bf16_rows,
            &self.pair_filter_s8_rows,
        ] {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                abi::PF_SHARED_BYTES as i32,
            )
            .map_err(dev("giving a kernel its shared memory"))?;
        }
        Ok(())
    }
}

/// The kernels that read stored rows (kernels/common/elem.cuh), for one element type.
pub(crate) struct ElemKernels {
    pub prepare_rows: CudaFunction,
    pub exact_keys: CudaFunction,
    pub exact_keys_staged: CudaFunction,
    pub rerank: CudaFunction,
    /// The module they come from (the main one for f32).
    #[allow(dead_code)]
    module: Arc<CudaModule>,
}

/// The element kernels' names.
#[cfg(test)]
const ELEM_NAMES: &[&str] = &["prepare_rows", "exact_keys", "exact_keys_staged", "rerank"];

impl ElemKernels {
    fn find(module: &Arc<CudaModule>) -> Result<Self> {
        let f = |name: &str| module.load_function(name).map_err(dev("finding a kernel"));
        Ok(ElemKernels {
            prepare_rows: f("prepare_rows")?,
            exact_keys: f("exact_keys")?,
            exact_keys_staged: f("exact_keys_staged")?,
            rerank: f("rerank")?,
            module: module.clone(),
        })
    }
}

impl Kernels {
    /// The element kernels of rows stored as `storage` (compiled and loaded at the first call
    /// for a type other than f32; calls on one device are serialised by its engines' GPU lock, and a
    /// race would only load the module twice).
    pub fn elem(&self, storage: Storage) -> Result<&ElemKernels> {
        let slot = match storage {
            Storage::F32 => return Ok(&self.f32),
            Storage::F16 => &self.other[0],
            Storage::Bf16 => &self.other[1],
            Storage::U8 => &self.other[2],
        };
        if let Some(k) = slot.get() {
            return Ok(k);
        }
        let module = self
            .ctx
            .load_module(elem_ptx(storage)?)
            .map_err(dev("loading the element kernels"))?;
        let _ = slot.set(ElemKernels::find(&module)?);
        Ok(slot.get().expect("set above"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#include "…"` of a source names a registered file or the ABI header.
    #[test]
    fn includes_resolve() {
        for (file, text) in SOURCES {
            for line in text
                .lines()
                .filter(|l| l.trim_start().starts_with("#include"))
            {
                let name = line.split('"').nth(1).unwrap_or("");
                assert!(
                    name == ABI_HEADER || SOURCES.iter().any(|(n, _)| *n == name),
                    "{file}: {line} names no registered source"
                );
            }
        }
    }

    /// Every kernel file on disk is registered, and every registered kernel is defined.
    #[test]
    fn registry_is_complete() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
        let mut on_disk = Vec::new();
        for sub in std::fs::read_dir(dir).unwrap() {
            let sub = sub.unwrap().path();
            for f in std::fs::read_dir(&sub).unwrap() {
                let f = f.unwrap().path();
                let rel = f.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                on_disk.push(rel);
            }
        }
        for f in &on_disk {
            assert!(SOURCES.iter().any(|(n, _)| n == f), "{f} is not registered");
        }
        let all: String = SOURCES.iter().map(|(_, t)| *t).collect();
        for name in NAMES.iter().chain(ELEM_NAMES) {
            // Defined as a function, or by a macro given the name first (pair_filter.cu's
            // entry points, one per MMA kind).
            assert!(
                all.contains(&format!("void {name}("))
                    || all.contains(&format!("{name}(const"))
                    || all.contains(&format!("\n    {name}("))
                    || all.contains(&format!("\nPAIR_FILTER({name}, ")),
                "kernel {name} is not defined in any source"
            );
        }
    }

    /// No generic lambdas (`[&](auto x)`) in device code: the device machine's NVRTC 13 takes
    /// an unannotated generic lambda's call operator for a host function and refuses it in JIT
    /// mode, while the NVRTC here compiles it, so `compiles_with_nvrtc_when_present` cannot
    /// catch it (a1d20d5 broke every kernel on the GPU that way). A struct with a templated
    /// `__device__` call operator does the same job (common/exact.cuh `ExactWalkOf`).
    #[test]
    fn no_generic_lambdas_in_device_code() {
        for (path, src) in SOURCES {
            for (i, line) in src.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
                assert!(
                    !squeezed.contains("](auto") && !squeezed.contains("](constauto"),
                    "{path}:{}: a generic lambda, which the device's NVRTC refuses: {line}",
                    i + 1
                );
            }
        }
    }

    /// With NVRTC on the library path (no GPU needed), the registry compiles and every kernel is
    /// in the PTX. Skipped where NVRTC cannot be loaded.
    #[test]
    fn compiles_with_nvrtc_when_present() {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("NVRTC not found: compile check skipped");
            return;
        }
        let ptx = ptx().unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for name in NAMES.iter().chain(ELEM_NAMES) {
            assert!(
                text.contains(&format!(".entry {name}(")),
                "{name} missing from the PTX"
            );
        }
        // The element kernels compile for each other storage type too.
        for storage in [Storage::F16, Storage::Bf16, Storage::U8] {
            let text = elem_ptx(storage)
                .unwrap_or_else(|e| panic!("{storage:?}: {e}"))
                .to_src();
            for name in ELEM_NAMES {
                assert!(
                    text.contains(&format!(".entry {name}(")),
                    "{name} missing from the {storage:?} PTX"
                );
            }
        }
    }

    /// The CPU simulation of the kernels (kernel-sim/: selection networks, radix passes, range
    /// and tile kernels, the device finish) against plain C++ answers, on the sources as
    /// registered, with the generated ABI header. Skipped where g++ is missing.
    #[test]
    fn kernel_simulation() {
        if std::process::Command::new("g++")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("g++ not found: kernel simulation skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("voisin-abi-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("common")).unwrap();
        std::fs::write(dir.join(ABI_HEADER), abi::header()).unwrap();
        let sim = concat!(env!("CARGO_MANIFEST_DIR"), "/kernel-sim");
        for script in [
            "run.sh",
            "select_variants.sh",
            "rerank.sh",
            "cover_pairs.sh",
            "cover_net.sh",
            "lc_build.sh",
        ] {
            let out = std::process::Command::new("bash")
                .arg(format!("{sim}/{script}"))
                .env("VOISIN_ABI_DIR", &dir)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && !text.contains("FAIL"),
                "kernel-sim/{script} failed:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
