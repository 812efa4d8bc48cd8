//! The kernel modules: which sources compile together, for which GPU targets, with which NVRTC
//! options, and the key that names one compiled image. The one truth for both the registry
//! (`kernels.rs`, loading at run time) and the build script (`build.rs`, compiling ahead of
//! time), which includes this file by path: it reads only `std` and `abi`.
//!
//! A module is one kernel source (`.cu`) compiled alone, so that a call compiles (where it must
//! compile at all) only the modules whose kernels it launches. The element kernels
//! ([`ELEM_SOURCES`]) are one module per storage type, compiled with `VOISIN_ELEM` set.
//! NVRTC gets the module's translation unit and, as named in-memory headers, every file it
//! includes (transitively) plus the generated `common/abi.cuh` (`abi.rs`), so the same sources
//! also compile from disk with a host compiler and `-I kernels` (the CPU simulation,
//! kernel-sim/).

use super::abi;

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
pub(crate) const BENCH_ONLY: &[&str] = &["select/heap.cu", "select/quick.cu"];

/// The generated header's name, as the sources include it.
pub(crate) const ABI_HEADER: &str = "common/abi.cuh";

/// The sources that read stored rows (common/elem.cuh): one module per storage type.
pub(crate) const ELEM_SOURCES: &[&str] =
    &["distance/prepare.cu", "finish/exact.cu", "finish/rerank.cu"];

/// The storage types of the element modules, as named in cache files, with their
/// `VOISIN_ELEM` codes (`numerics::plan::Storage::code`; a test in kernels.rs checks them).
pub(crate) const ELEMS: &[(&str, i32)] = &[("f32", 0), ("f16", 1), ("bf16", 2), ("u8", 3)];

/// The targets compiled ahead of time, when the build finds NVRTC (build.rs): the cubins of
/// Ampere (sm_80, sm_86), Ada (sm_89) and Hopper (sm_90), and the PTX of compute_90, which the
/// driver compiles for newer GPUs. The build's `VOISIN_AOT_ARCHS` may name fewer.
#[allow(dead_code)] // read by build.rs
pub(crate) const AOT_TARGETS: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90", "compute_90"];

/// Whether NVRTC makes a cubin (machine code of one GPU) for `target`, rather than PTX.
pub(crate) fn is_cubin(target: &str) -> bool {
    target.starts_with("sm_")
}

/// One unit of compilation and loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Module {
    /// A kernel source, by its path under `kernels/`.
    Source(&'static str),
    /// The element kernels of one storage type (an index into [`ELEMS`]).
    Elem(usize),
}

/// Every module of a build (with the benchmark-only sources when `bench`).
pub(crate) fn modules(bench: bool) -> Vec<Module> {
    let sources = SOURCES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| name.ends_with(".cu") && !ELEM_SOURCES.contains(name))
        .filter(|name| bench || !BENCH_ONLY.contains(name))
        .map(Module::Source);
    sources.chain((0..ELEMS.len()).map(Module::Elem)).collect()
}

impl Module {
    /// The module's name in file names: `select-block`, `elem-f16`.
    pub fn file_name(self) -> String {
        match self {
            Module::Source(path) => path.trim_end_matches(".cu").replace('/', "-"),
            Module::Elem(i) => format!("elem-{}", ELEMS[i].0),
        }
    }

    /// The translation unit: the module's sources included by name.
    pub fn root(self) -> String {
        let sources = match self {
            Module::Source(path) => vec![path],
            Module::Elem(_) => ELEM_SOURCES.to_vec(),
        };
        sources
            .iter()
            .map(|name| format!("#include \"{name}\"\n"))
            .collect()
    }

    /// The `VOISIN_ELEM` code the module is compiled with (f32's outside the element modules).
    pub fn elem_code(self) -> i32 {
        match self {
            Module::Source(_) => 0,
            Module::Elem(i) => ELEMS[i].1,
        }
    }

    /// NVRTC's options for `target` (`sm_XY` or `compute_XY`): no fast math (it would change
    /// powf and division; the exactness bounds assume IEEE operations).
    pub fn options(self, target: &str) -> Vec<String> {
        vec![
            format!("--gpu-architecture={target}"),
            format!("-DVOISIN_ELEM={}", self.elem_code()),
        ]
    }

    /// The headers NVRTC needs for this module: every source the translation unit includes,
    /// transitively, in the order first met, then the generated ABI header.
    pub fn headers(self) -> Vec<(&'static str, String)> {
        let mut names: Vec<&'static str> = Vec::new();
        let root = self.root();
        let mut todo: Vec<&str> = includes(&root).into_iter().rev().collect();
        while let Some(name) = todo.pop() {
            if name == ABI_HEADER || names.contains(&name) {
                continue;
            }
            let Some((name, text)) = SOURCES.iter().find(|(n, _)| *n == name) else {
                continue;
            };
            names.push(name);
            todo.extend(includes(text).into_iter().rev());
        }
        let mut out: Vec<(&'static str, String)> = names
            .into_iter()
            .map(|n| (n, source(n).to_string()))
            .collect();
        out.push((ABI_HEADER, abi::header()));
        out
    }

    /// The key of the module's image for `target` made by NVRTC `nvrtc` (major, minor): a hash
    /// of everything the image depends on (the sources it includes, the ABI header, the
    /// options, the compiler's version), 32 hex digits.
    pub fn key(self, target: &str, nvrtc: (i32, i32)) -> String {
        let mut parts = vec![
            "voisin-kernels 1".to_string(),
            self.file_name(),
            self.root(),
        ];
        for (name, text) in self.headers() {
            parts.push(name.to_string());
            parts.push(text);
        }
        parts.extend(self.options(target));
        parts.push(format!("nvrtc {}.{}", nvrtc.0, nvrtc.1));
        let (a, b) = (
            fnv(&parts, 0xcbf2_9ce4_8422_2325),
            fnv(&parts, 0x84222325_cbf29ce4),
        );
        format!("{a:016x}{b:016x}")
    }
}

/// The text of a registered source.
pub(crate) fn source(name: &str) -> &'static str {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, t)| t)
}

/// The names `text` includes with `#include "…"`, in order.
pub(crate) fn includes(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("#include"))
        .filter_map(|l| l.split('"').nth(1))
        .collect()
}

/// FNV-1a (64 bits) over `parts`, each followed by a zero byte, from `seed`.
pub(crate) fn fnv(parts: &[String], seed: u64) -> u64 {
    let mut h = seed;
    for p in parts {
        for &b in p.as_bytes().iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
