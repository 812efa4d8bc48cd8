//! What a caller chooses about how the CUDA engine runs: [`CudaOptions`] and the knobs it holds
//! ([`Select`], [`Precision`], [`Fusion`]), with their names on the command line and their limits.
//!
//! A leaf: every layer reads these, none of them is read back here. What a choice does lives
//! in one place: the route (search/route.rs) resolves the precision to an arithmetic and
//! decides per pass whether and how to fuse; `ops::select` launches the selections.

use std::str::FromStr;

use voisin::{Error, Result};

/// How the CUDA engine runs.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Selection kernel (`--select`).
    pub select: Select,
    /// Bytes of device memory for distance tiles and candidate lists (inputs excluded); capped
    /// at a quarter of the free memory; halved and retried when an allocation fails.
    pub tile_bytes: usize,
    /// Device memory the engine may use, in bytes (default: whatever is free). The engine
    /// holds the rest of the free memory as ballast, so it behaves exactly as on a smaller GPU:
    /// a base that does not fit is streamed through in shards. For tests and for sharing a GPU.
    pub device_memory: Option<usize>,
    /// Arithmetic of the GEMM tiles (`--precision`); results are exact either way.
    pub precision: Precision,
    /// Fused distance + selection for small k (benchmarks); results are exact either way.
    pub fusion: Fusion,
    /// Looked at between query blocks, shards and passes; once set, calls end with
    /// `Error::Cancelled`.
    pub cancel: Option<voisin::engine::Cancel>,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            select: Select::Auto,
            tile_bytes: 1 << 30,
            device_memory: None,
            precision: Precision::Auto,
            fusion: Fusion::Auto,
            cancel: None,
        }
    }
}

/// Arithmetic of the GEMM tiles (`--precision`).
///
/// Whatever the choice, results are exact: the precision only changes how wide the approximate
/// pass's error bound is, and so how many candidates the exact re-rank sees (or how often a
/// query is widened). SIMT metrics (cityblock, chebyshev, minkowski) always run in fp32.
/// docs/design/tensor-core-inputs.md says which arithmetic `Auto` picks for which data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The fastest arithmetic whose bound proves the answer for the data: the stored type's
    /// tensor cores for f16/bf16 sets (euclidean, sqeuclidean, inner product), int8 tensor
    /// cores for u8 sets under euclidean and sqeuclidean; for the other
    /// inputs under the GEMM metrics (cosine and correlation included), TF32 or fp32 as a pilot
    /// on the device decides once the base is up: TF32 where the exact evaluations its wider
    /// bound adds on 32 pilot queries cost less than the tile time it saves (TF32 was about 2×
    /// faster on normal data), fp32 where they do not (TF32 lost 5.8× to fp32 on a clustered
    /// graph); for a graph where TF32 loses, `Fp16x3` by the same rule with its own bound (the
    /// clustered graph about 8× faster than fp32). The pilot runs for the
    /// k-NN search of a resident base (a prepared base decides at its first search and keeps
    /// the choice) and for graphs built by one process; streamed bases, k-NN over several GPUs,
    /// range searches and the graphs of MPI ranks keep fp32. SIMT metrics run fp32.
    /// `--stats` reports what ran. See docs/design/tensor-core-inputs.md.
    #[default]
    Auto,
    /// Strict fp32 products (cuBLAS sgemm on the SIMT cores).
    Fp32,
    /// TF32 tensor-core products with fp32 accumulation: inputs keep 10 explicit mantissa
    /// bits, about 2^-10 relative error each, covered by a wider bound.
    Tf32,
    /// Three f16 tensor-core products per f32 product: each prepared f32 row scaled by a power
    /// of two and split into two f16 halves, hi + lo, and hi·hi′ + hi·lo′ + lo·hi′ summed in
    /// fp32, within about 3·2^-22 of each product where TF32 errs by 2^-9: near-fp32 candidate
    /// sets (data whose norms dwarf the gaps between near neighbours, as clustered data of low
    /// intrinsic dimension) at three f16 MMAs per value. Runs where the graph's (and the large
    /// k-NN batches') fused tile pairs run; the other tiles of such a search are fp32, inside
    /// the same bound. GEMM metrics on f32 rows, as `Tf32`.
    Fp16x3,
    /// f16 tensor cores on f16 storage (the rows stay f16 on the device; products exact, fp32
    /// accumulation). Only for f16 sets under euclidean, sqeuclidean or inner product.
    Fp16,
    /// bf16 tensor cores on bf16 storage, as `Fp16`.
    Bf16,
    /// int8 tensor cores with int32 accumulation on u8 storage: each row goes to the tiles as
    /// its values minus 128 (exact in i8), so the dot products and the squared distances are
    /// exact integers; only the key's final f32 roundings are bounded. Only for u8 sets under
    /// euclidean or sqeuclidean (docs/design/tensor-core-inputs.md).
    Int8,
}

impl Precision {
    /// The name on the command line and in `--stats`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16x3 => "fp16x3",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }

    /// Whether this arithmetic runs on its own storage type only (an explicit half or int8
    /// precision), so a scaled copy of a set must keep the stored type.
    pub fn needs_stored_type(self) -> bool {
        matches!(self, Precision::Fp16 | Precision::Bf16 | Precision::Int8)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Precision::Auto),
            "fp32" => Ok(Precision::Fp32),
            "tf32" => Ok(Precision::Tf32),
            "fp16x3" | "f16x3" => Ok(Precision::Fp16x3),
            "fp16" | "f16" => Ok(Precision::Fp16),
            "bf16" => Ok(Precision::Bf16),
            "int8" | "i8" => Ok(Precision::Int8),
            _ => Err(Error::invalid(format!(
                "unknown precision '{s}' (known: auto, fp32, tf32, fp16x3, fp16, bf16, int8)"
            ))),
        }
    }
}

/// Whether candidate passes fuse distances and selection (set in `CudaOptions`; no CLI flag
/// yet, gpu_bench has `-fused`, `-auto` and `-off` variants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fusion {
    /// Fused where it is measured faster than tiles through memory: k-NN passes of at most
    /// 512 queries on fused_filter (small batches against a large base; larger ones lost to
    /// cuBLAS + block select there), larger k-NN passes on tensor cores on the graph's fused
    /// tile pair, rows only (docs/design/fused-selection.md), and the k-NN graph's warm tile
    /// pairs on tensor cores (TF32, f16, bf16, int8, fp16x3; docs/design/graph-tile-filter.md).
    #[default]
    Auto,
    /// Never: every tile goes through device memory.
    Off,
    /// Whenever the pass allows it (GEMM metric, small list, base large enough; the graph as
    /// under `Auto`).
    On,
}

impl FromStr for Fusion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Fusion::Auto),
            "off" => Ok(Fusion::Off),
            "on" => Ok(Fusion::On),
            _ => Err(Error::invalid(format!(
                "unknown fusion '{s}' (known: auto, off, on)"
            ))),
        }
    }
}

/// Largest list the block-select kernel keeps per row (shared memory: 2 × kp × 8 bytes).
pub const BLOCK_MAX_K: usize = 2048;
/// Largest list of the heap kernel: every lane of its warp holds a heap of the full list size
/// (33 × kp × 8 bytes of shared memory per row, 68 KiB at 256).
pub const HEAP_MAX_K: usize = 256;
/// Largest list of the quick-select kernel (two arrays of kp + 2048 entries in shared memory).
pub const QUICK_MAX_K: usize = 4096;

/// Which selection kernel produces candidates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Select {
    /// Block select while the list fits (k up to about 1800), radix select beyond.
    #[default]
    Auto,
    /// Per-row block select with a threshold filter and bitonic merges (kernels/select/block.cu).
    Block,
    /// Per-row radix select over whole rows, any k up to n (kernels/select/radix.cu).
    Radix,
    /// Per-lane max-heaps with a warp-shared gate, one warp per row (kernels/select/heap.cu);
    /// lists up to [`HEAP_MAX_K`].
    Heap,
    /// Threshold filter plus warp-ballot quick-select, one block per row
    /// (kernels/select/quick.cu); lists up to [`QUICK_MAX_K`].
    Quick,
}

impl FromStr for Select {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Select::ALL
            .into_iter()
            .find(|v| v.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown selection '{s}' (known: auto, block, radix, heap, quick)"
                ))
            })
    }
}

impl std::fmt::Display for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Select {
    /// Every value, `Auto` first.
    pub const ALL: [Select; 5] = [
        Select::Auto,
        Select::Block,
        Select::Radix,
        Select::Heap,
        Select::Quick,
    ];

    /// The name `--select` takes.
    pub fn name(self) -> &'static str {
        match self {
            Select::Auto => "auto",
            Select::Block => "block",
            Select::Radix => "radix",
            Select::Heap => "heap",
            Select::Quick => "quick",
        }
    }

    /// The largest list (candidates per query) the variant keeps; `None`: any.
    pub fn max_list(self) -> Option<usize> {
        match self {
            Select::Auto | Select::Radix => None,
            Select::Block => Some(BLOCK_MAX_K),
            Select::Heap => Some(HEAP_MAX_K),
            Select::Quick => Some(QUICK_MAX_K),
        }
    }

    /// The largest k the variant accepts (its list of k plus the margin fits); `None`: any.
    pub fn max_k(self) -> Option<usize> {
        let max = self.max_list()?;
        (1..=max).rev().find(|&k| self.width(list_size(k)) <= max)
    }

    /// The variant that runs for a list of `kp` entries.
    pub(crate) fn resolve(self, kp: usize) -> Result<Select> {
        match self {
            Select::Auto if kp <= BLOCK_MAX_K => Ok(Select::Block),
            Select::Auto => Ok(Select::Radix),
            s => match s.max_list() {
                Some(max) if s.width(kp) > max => Err(Error::invalid(format!(
                    "{s} selection keeps at most {max} candidates per query (k too large); \
                     use --select radix or auto"
                ))),
                _ => Ok(s),
            },
        }
    }

    /// Whether this build has the variant's kernel: heap and quick are benchmark variants,
    /// built with the `bench-variants` feature only.
    pub fn built(self) -> bool {
        cfg!(feature = "bench-variants") || !matches!(self, Select::Heap | Select::Quick)
    }

    /// The error for a variant this build does not have.
    pub fn not_built(self) -> Error {
        Error::invalid(format!(
            "--select {self} is a benchmark variant not built into this binary (build \
             voisin-cuda with the bench-variants feature)"
        ))
    }

    /// Whether the kernel selects over whole rows (one tile spans the base) instead of keeping
    /// running lists across tiles.
    pub(crate) fn whole_rows(self) -> bool {
        self == Select::Radix
    }

    /// The list width in memory for a wanted list of `kp`: block and heap lists are merged with
    /// bitonic networks and are sized to a power of two; radix and quick keep exactly `kp` (at
    /// k=1000 that is 1125 entries instead of 2048: half the download and the host sort).
    pub fn width(self, kp: usize) -> usize {
        match self {
            Select::Radix | Select::Quick => kp,
            _ => kp.next_power_of_two(),
        }
    }
}

/// The candidate list size for k: k plus a margin, so that the f32 bound rarely forces a
/// widening pass. Variants that need a power of two round it up ([`Select::width`]).
pub fn list_size(k: usize) -> usize {
    k + (k / 8).max(8)
}
