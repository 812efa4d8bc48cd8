//! How a candidate pass runs, decided in one place. A [`Route`] names every choice of a pass:
//! the arithmetic of its tiles, the lists it keeps, its tiles' sizes, how its pairs of row
//! blocks run (written tiles and selection, the tile filter, fused_filter, the fused tile pair
//! of a kind, which fixes the rows it reads: prepared f32, scaled or split f16, stored half,
//! int8), the product of its written tiles, the scaled copy it makes, how its lists are warmed
//! and, for a graph, the order of its items and whether the device proves its lists.
//! [`choose`] makes them for a k-NN pass or a graph share; the searches (search/knn.rs,
//! search/graph.rs) run what it says, and ops/ takes the route's values and decides nothing.
//!
//! Here too: the arithmetic a precision option resolves to for the data ([`numerics`]), the
//! forms `--precision auto` may switch to ([`auto_form`]), the pilots' rules (which searches
//! get a list pilot, [`list_pilot`]; what the arithmetic pilot looks at, [`auto_pilot`], and
//! takes from what it measured, [`auto_arithmetic`]), and the cost model, with the measured
//! constants it prices by, that those rules weigh ([`tf32_list`], [`tensor_list`]).
//!
//! Reads `numerics` (the plan and its bound), `ops` (what the kernels take: their kinds,
//! limits and buffer sizes) and `options` (what the caller asked); the searches ask it.

use voisin::data::ElemType;
use voisin::{Error, Result};

use crate::numerics::plan::{
    int8_exact, Arithmetic, Numerics, Storage, TileKey, TileKind, TileRows, K_CHUNK,
};
use crate::ops::exact;
use crate::ops::fused::{self, FilterKernel};
use crate::ops::pair::PairKind;
use crate::ops::select::{self, list_size, Select};
use crate::ops::survivors::{self, MERGE_SLOTS};
use crate::ops::tile::Product;
use crate::options::{CudaOptions, Fusion, Precision};
use crate::runtime::abi;

#[cfg(test)]
mod grid;
#[cfg(test)]
mod tests;

/// `plan` with the arithmetic `precision` resolves to for a base stored as `base` and
/// queries stored as `queries` (the same for a graph), on the pair's [`Storage`]; an
/// explicit choice the data cannot take is refused in one line.
/// docs/design/tensor-core-inputs.md:
/// - f16/bf16 storage, GEMM metric without unit rows (euclidean, sqeuclidean, inner
///   product): `Auto`, `Fp16`/`Bf16` tile the stored values on their tensor cores;
/// - u8 storage under euclidean or sqeuclidean: `Auto`, `Int8` tile the values minus 128 on
///   the int8 tensor cores, whose int32 dot products are exact;
/// - `Auto` otherwise: fp32 tiles here. Where those are GEMM tiles on f32 rows (f32, u8
///   and f64 storage, mixed pairs, cosine and correlation included; not the SIMT metrics),
///   the search of a resident base (k-NN, graph) runs a pilot on the device once the base
///   is up and switches to TF32 ([`auto_form`]) when TF32's bound proves the pilot
///   queries cheaply ([`tf32_list`]). TF32 was about 2× faster than fp32 at
///   1M×128 on normal, far-from-origin and duplicate-heavy data, but 5.8× slower on a
///   clustered graph, where its interval kept 48× more candidates
///   (docs/design/tensor-core-inputs.md): the pilot tells such data apart;
/// - `Fp32`, `Tf32`: as asked, on f32 rows prepared on the device from the stored ones.
///
/// Call it once, on a fresh plan ([`Numerics::new`]).
pub(crate) fn numerics(
    plan: Numerics,
    precision: Precision,
    base: ElemType,
    queries: ElemType,
) -> Result<Numerics> {
    let plan = plan.on_storage(base, queries);
    let own = plan.own_cores();
    let explicit = |p: Precision| match p {
        Precision::Fp16 => Some(Arithmetic::Fp16),
        Precision::Bf16 => Some(Arithmetic::Bf16),
        Precision::Int8 => Some(Arithmetic::Int8),
        _ => None,
    };
    match (precision, own) {
        (Precision::Auto, Some(_)) => Ok(plan.on_own_cores()),
        (Precision::Auto, None) => Ok(plan.in_arithmetic(Arithmetic::Fp32)),
        (Precision::Fp32, _) => Ok(plan.in_arithmetic(Arithmetic::Fp32)),
        (Precision::Tf32, _) => Ok(plan.in_arithmetic(Arithmetic::Tf32)),
        (Precision::Fp16x3, _) => Ok(plan.in_arithmetic(Arithmetic::Fp16x3)),
        (Precision::Fp16 | Precision::Bf16 | Precision::Int8, Some(own))
            if Some(Arithmetic::own(own)) == explicit(precision) =>
        {
            Ok(plan.on_own_cores())
        }
        (Precision::Fp16 | Precision::Bf16 | Precision::Int8, _) => {
            let (want, metrics) = match precision {
                Precision::Fp16 => ("f16", "euclidean, sqeuclidean and inner product"),
                Precision::Bf16 => ("bf16", "euclidean, sqeuclidean and inner product"),
                _ => ("u8", "euclidean and sqeuclidean"),
            };
            let why = if base != queries {
                format!("a {} base with {} queries", base.name(), queries.name())
            } else if base.name() != want {
                format!("{} data", base.name())
            } else if precision == Precision::Int8 && !int8_exact(plan.dim) {
                format!("{} dimensions (int32 sums hold up to 131071)", plan.dim)
            } else {
                format!("this metric (it takes {metrics})")
            };
            Err(Error::invalid(format!(
                "--precision {precision} runs on {want} storage only and cannot take {why}; \
                 use --precision auto"
            )))
        }
    }
}

/// Under `--precision auto` (`asked`), `plan`'s form in `arithmetic` (TF32, or fp16x3) when a
/// pilot may switch to it: the plan resolved to fp32 GEMM tiles on f32 rows ([`numerics`]'s
/// `Auto` without half storage). `None` for an explicit precision, tiles on half storage and
/// SIMT metrics. The prepared rows are the same for both, so a search may switch after its
/// base went up.
pub(crate) fn auto_form(
    plan: &Numerics,
    asked: Precision,
    arithmetic: Arithmetic,
) -> Option<Numerics> {
    (asked == Precision::Auto && plan.fp32_gemm()).then(|| plan.clone().in_arithmetic(arithmetic))
}

/// [`auto_form`] in TF32.
pub(crate) fn auto_tf32(plan: &Numerics, asked: Precision) -> Option<Numerics> {
    auto_form(plan, asked, Arithmetic::Tf32)
}

// ---- What the kernels take of a plan ----

/// The smallest dimension whose written tiles run on the scaled rows under TF32. Bringing a
/// tile back to the rows' scale is one more read and write of it; at d = 15876 the f16 GEMM ran
/// at 566–674 TFLOP/s against TF32's 280–303 (bench/RESULTS.md), while near d = 128 the tile's
/// own traffic is most of its time and the extra pass would cost more than the GEMM saves.
pub(crate) const TILE_MIN_DIM: usize = 1024;

/// Whether `plan`'s tiles can run on a scaled f16 copy of its rows (ops/scaled.rs): dot
/// products of prepared f32 rows under TF32, or split under fp16x3 (GEMM tiles whose key is
/// made from the dot product).
fn scaled_rows(plan: &Numerics) -> bool {
    plan.tile == TileKind::Gemm
        && plan.key != TileKey::Direct
        && matches!(plan.arithmetic, Arithmetic::Tf32 | Arithmetic::Fp16x3)
        && plan.tile_rows() == TileRows::F32
}

/// Whether `plan`'s scaled rows are split (fp16x3: each value as two f16 halves, which only the
/// fused tile pair reads).
fn split_rows(plan: &Numerics) -> bool {
    plan.arithmetic == Arithmetic::Fp16x3
}

/// Whether `plan`'s written tiles run on the scaled copy (where one exists): TF32 plans of
/// wide rows. cuBLAS takes whole f16 rows, not split ones: fp16x3's written tiles run fp32.
pub(crate) fn written_on_copy(plan: &Numerics) -> bool {
    scaled_rows(plan) && !split_rows(plan) && plan.dim >= TILE_MIN_DIM
}

/// The fused tile pair `plan`'s tiles take (ops/pair.rs), or `None` when they must go through a
/// written tile: only GEMM tiles on tensor cores (TF32 plans on scaled f16 rows, fp16x3 on
/// split ones, f16/bf16 on the stored rows, int8 on prepared int8 rows) with a key formed from
/// the dot product, rows the kernel takes ([`PairKind::fits`]: whole 16-byte groups, at most
/// one accumulation chunk but for split rows).
pub(crate) fn pair_kind(plan: &Numerics) -> Option<PairKind> {
    if plan.tile != TileKind::Gemm || plan.key == TileKey::Direct {
        return None;
    }
    let kind = match (plan.tile_rows(), plan.arithmetic) {
        _ if split_rows(plan) && scaled_rows(plan) => PairKind::F16Split,
        _ if scaled_rows(plan) => PairKind::F16Scaled,
        (TileRows::Stored, Arithmetic::Fp16) => PairKind::F16,
        (TileRows::Stored, Arithmetic::Bf16) => PairKind::Bf16,
        (TileRows::I8, Arithmetic::Int8) => PairKind::S8,
        _ => return None,
    };
    kind.fits(plan).then_some(kind)
}

/// The kind that runs instead of `kind` where its scaled copy did not fit on the device: TF32
/// on the prepared rows for scaled f16 rows (where the kernel takes them), nothing for split
/// rows (TF32 is outside an fp16x3 plan's bound: its tiles are written, in fp32).
fn without_copy(plan: &Numerics, kind: PairKind) -> Option<PairKind> {
    let kind = match kind {
        PairKind::F16Scaled => PairKind::Tf32,
        PairKind::F16Split => return None,
        kind => kind,
    };
    kind.fits(plan).then_some(kind)
}

/// The copy a pass makes of its rows for `kind` (and its written tiles, `written`).
fn copy_for(kind: Option<PairKind>, written: bool) -> RowCopy {
    match kind {
        Some(PairKind::F16Split) => RowCopy::Split,
        Some(PairKind::F16Scaled) => RowCopy::Scaled,
        _ if written => RowCopy::Scaled,
        _ => RowCopy::None,
    }
}

/// The product a written tile of `plan` computes (ops/tile.rs), on the scaled copy where
/// `on_copy`.
pub(crate) fn product(plan: &Numerics, on_copy: bool) -> Product {
    match plan.tile {
        TileKind::Simt(kind, p) => Product::Simt(kind, p),
        TileKind::Gemm if on_copy => Product::ScaledF16,
        TileKind::Gemm => match plan.arithmetic {
            // fp16x3 plans write their tiles in fp32 (their bound covers it).
            Arithmetic::Fp32 | Arithmetic::Fp16x3 => Product::Sgemm,
            Arithmetic::Tf32 => Product::Tf32,
            Arithmetic::Fp16 => Product::F16,
            Arithmetic::Bf16 => Product::Bf16,
            Arithmetic::Int8 => Product::Int8,
        },
    }
}

/// The fused_filter kernel of `plan`'s k-NN passes (ops/fused.rs): fp32, whose error is inside
/// an fp16x3 plan's bound too, or TF32.
fn filter_kernel(plan: &Numerics) -> FilterKernel {
    match plan.arithmetic {
        Arithmetic::Tf32 => FilterKernel::Tf32,
        _ => FilterKernel::Fp32,
    }
}

/// Whether the graph of `n` items in tiles of `t` under `plan` may run in locality order
/// (ops/locality.rs): split rows (fp16x3, what `auto` takes where TF32's pilot finds keys too
/// close for its bound: clustered data; where TF32 wins, as on normal, far and duplicate-heavy
/// data, the spheres of a block overlap nearly every other, and the order cost 55 ms and left
/// no tile out of a 1M graph, docs/design/graph-tile-filter.md), L2 keys (exact key ≥ dmin²)
/// on f32 rows as given (the spheres are of the stored values, whose exact keys the plan
/// bounds; rows rounded from f64 are not the values the bound speaks of), tiles of whole
/// kernel blocks, and ids that fit the lists.
fn locality(plan: &Numerics, n: usize, t: usize) -> bool {
    plan.arithmetic == Arithmetic::Fp16x3
        && plan.key == TileKey::L2
        && plan.storage == Storage::F32
        && plan.tile_rows() == TileRows::F32
        && !plan.widened()
        && t.is_multiple_of(abi::PF_BM)
        && abi::PF_BM == abi::PF_BN
        && n < u32::MAX as usize
}

// ---- Lists ----

/// The first list size to try for k.
pub(crate) fn first_list(k: usize) -> usize {
    list_size(k)
}

/// The list a pass keeps for a wanted list of `kp`.
///
/// TF32's bound is ~200× wider than fp32's: with list_size's margin of k/8 the k-th and the
/// last key of lists of 64–256 are often closer than the bound, and two thirds of the queries
/// were widened at k=100 (bench/NOTES.md, "Fused"). Twice the list costs little at that size.
/// Not beyond what the selection `sel` keeps (heap selection: 256 entries): there the list
/// stays `kp`, and more queries go to the widening path.
pub(crate) fn pass_list(plan: &Numerics, kp: usize, sel: Select) -> usize {
    let fits = |l: usize| sel.max_list().is_none_or(|max| sel.width(l) <= max);
    if plan.arithmetic == Arithmetic::Tf32 && (64..=256).contains(&kp) && fits(2 * kp) {
        2 * kp
    } else {
        kp
    }
}

// ---- The route of a candidate pass ----

/// What a candidate pass is asked to do.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// A k-NN pass (search/knn.rs `passes`): `nq` queries against `nb` base items, lists of
    /// `kp` wanted under the selection `sel`, tiles within `budget` bytes.
    Knn {
        kp: usize,
        sel: Select,
        nq: usize,
        nb: usize,
        budget: usize,
    },
    /// A share of a graph's tile pairs (search/graph.rs `lists`): `n` items in tiles of `tile`,
    /// `k` neighbours, first lists of `kp` (the list pilot's) under `sel`; `whole`: the share
    /// is every pair of the build.
    Graph {
        n: usize,
        k: usize,
        kp: usize,
        tile: usize,
        sel: Select,
        whole: bool,
    },
}

/// How a candidate pass runs: every choice of the pass, made in [`choose`] and nowhere else
/// (the route grid pins them case by case).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Route {
    /// The arithmetic of the plan's tiles (the plan's own, named here for the record).
    pub arithmetic: Arithmetic,
    /// The lists the pass keeps.
    pub list: ListRoute,
    /// k-NN: queries per block and base items per tile; a graph: the tile edge, twice.
    pub tiles: (usize, usize),
    /// How its pairs of row blocks run (a graph: its warm pairs; cold ones are written).
    pub method: Method,
    /// The product of its written tiles.
    pub written: Product,
    /// The scaled f16 copy of the rows it makes (ops/scaled.rs).
    pub copy: RowCopy,
    /// How its lists are warmed before the method runs.
    pub warm: Warm,
    /// The order of a graph's items.
    pub order: Order,
    /// A graph: whether its lists, once every pair is in, are proved and re-ranked on the
    /// device (kernels/finish/rerank.cu).
    pub proves: bool,
}

/// The lists a pass keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListRoute {
    /// The list kept for the wanted one ([`pass_list`]; the self pair's slot added for a
    /// graph's whole rows).
    pub want: usize,
    /// The selection that keeps it (resolved).
    pub mode: Select,
    /// The selection's list for `want` (a power of two for block and heap lists; a graph's
    /// small lists padded to the column kernel's).
    pub kp: usize,
    /// Slots per row in memory (whole rows: `kp` at most the base).
    pub width: usize,
}

/// How the pairs of a pass run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// Written tiles, selected into the running lists (whole rows: one tile spans the base).
    Written,
    /// A graph under a selection other than block: its tile rows as k-NN passes over the
    /// whole set.
    Rows,
    /// A graph's warm pairs: written tiles read once by the tile filter for their rows and
    /// columns (ops/survivors.rs), `cap` buffer slots per row.
    Filtered { cap: usize },
    /// A k-NN pass over the whole base at once with fused_filter (ops/fused.rs), `cap` slots.
    FusedFilter { kernel: FilterKernel, cap: usize },
    /// The fused tile pair of `kind` (ops/pair.rs): a k-NN pass's base in chunks, a graph's
    /// warm pairs; `cap` slots.
    Pair { kind: PairKind, cap: usize },
}

/// How a pass's lists are warmed before its method runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Warm {
    /// Not at all: a graph's first row of pairs is written and selected cold.
    Cold,
    /// A k-NN pass's fused method: `first` base items spread over it through written tiles,
    /// each list's threshold the key at `rank` of its sorted list there, the lists kept as
    /// thresholds alone (`select::seed_lists`); where `rank` is short of the list, the sample's
    /// own lists are `short` wide.
    Sample {
        first: usize,
        rank: usize,
        short: Option<usize>,
    },
    /// A graph's filtered pairs: every list first seeded from `size` items spread over the set
    /// (search/graph.rs `seed`), so that every pair is filtered.
    Seed { size: usize },
}

/// The order of a graph's items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// As given.
    Natural,
    /// Locality order (ops/locality.rs): the fused pairs run only their kernel tiles whose
    /// blocks' spheres are near enough to pass anything.
    Locality,
}

/// The scaled f16 copy a pass makes of its rows (ops/scaled.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowCopy {
    None,
    /// Each prepared row scaled to f16 (TF32 plans: fused pairs, wide written tiles).
    Scaled,
    /// Each scaled row split into two f16 halves (fp16x3 plans' fused pairs).
    Split,
}

impl RowCopy {
    /// Whether the copy's rows are split.
    pub fn split(self) -> bool {
        self == RowCopy::Split
    }
}

/// The route of a candidate pass of `plan` for `shape` under `opts`: the k-NN's
/// ([`knn_route`]) or a graph share's ([`graph_route`]). An explicit selection that cannot keep
/// the list is refused in one line.
pub(crate) fn choose(plan: &Numerics, shape: Shape, opts: &CudaOptions) -> Result<Route> {
    match shape {
        Shape::Knn {
            kp,
            sel,
            nq,
            nb,
            budget,
        } => knn_route(plan, (kp, sel), (nq, nb), budget, opts.fusion),
        Shape::Graph {
            n,
            k,
            kp,
            tile,
            sel,
            whole,
        } => graph_route(plan, (n, k, kp, tile), sel, whole, opts.fusion),
    }
}

impl Route {
    /// The route where the scaled copy it asked for did not fit on the device: fused pairs on
    /// the rows the kernel takes without it ([`without_copy`]); where none, a k-NN pass's
    /// written tiles (its blocks as they were sized, its lists cold) or a graph's tile filter;
    /// written tiles on the tiles' own rows.
    pub fn without_copy(self, plan: &Numerics) -> Route {
        let knn = matches!(self.warm, Warm::Sample { .. });
        let (method, warm) = match self.method {
            Method::Pair { kind, cap } => match without_copy(plan, kind) {
                Some(kind) => (Method::Pair { kind, cap }, self.warm),
                None if knn => (Method::Written, Warm::Cold),
                None => (Method::Filtered { cap }, self.warm),
            },
            m => (m, self.warm),
        };
        Route {
            method,
            warm,
            written: product(plan, false),
            copy: RowCopy::None,
            ..self
        }
    }

    /// The route of a graph whose locality order could not be made (the copy would not fit):
    /// the same pairs in natural order.
    pub fn in_natural_order(self) -> Route {
        Route {
            order: Order::Natural,
            ..self
        }
    }

    /// The buffer slots per row of the pass's filter or fused method (0: none).
    pub fn cap(&self) -> usize {
        cap_of(self.method)
    }

    /// The base items a k-NN pass's fused pairs filter next once its lists have seen `seen`
    /// items (the sample counted), of rows `row_bytes` apart. Each list's threshold is at most
    /// its kp-th key among what it has seen and at most the seeded one, the key at `rank` of
    /// the sample, so a chunk of c items offers a list at most about c · min(kp / seen, rank /
    /// first) survivors: c is chosen to expect at most a quarter of the buffer, and at most
    /// [`PAIR_CHUNK_BYTES`] of rows, in whole tiles of the kernel.
    pub fn chunk(&self, seen: usize, row_bytes: usize) -> usize {
        let Warm::Sample { first, rank, .. } = self.warm else {
            unreachable!("fused pairs start from a sample")
        };
        let (kp, cap) = (self.list.kp, self.cap());
        let by_list = seen * cap / (4 * kp.max(1));
        let by_seed = first * cap / (4 * rank.max(1));
        let c = by_list
            .max(by_seed)
            .min(PAIR_CHUNK_BYTES / row_bytes.max(1));
        c.max(abi::PF_BN) / abi::PF_BN * abi::PF_BN
    }
}

// ---- k-NN passes ----

/// Base items per fused tile (kernels/select/fused_filter.cu); the threshold pass's sample is a
/// whole number of them.
const GRANULE: usize = abi::FZ_BN;

/// Most base items the threshold pass of a fused-pair pass samples: one of the k-NN's ordinary
/// base tiles.
const PAIR_FIRST: usize = 16384;

/// Most queries of a pass that `Fusion::Auto` fuses with fused_filter: small batches against a
/// large resident base, where the unfused pass is dozens of tiles too thin to fill the GPU.
/// H100, 1M × 128, k = 10 (docs/design/fused-selection.md): 100 queries 2.86 ms fused against
/// 3.83 ms (fp32), 1.81 against 3.15 ms (TF32); 300 queries 6.08 / 6.25 and 3.52 / 4.26 ms;
/// 1,000 queries 13.9 / 13.7 and 7.4 / 7.7 ms; 10,000 queries lose (0.164 / 0.146 s fp32).
/// Larger batches on tensor cores take the fused pairs.
pub(crate) const AUTO_FUSED_QUERIES: usize = 512;

/// Fewest sample items under a long list's seeded threshold ([`seed_rank`]).
const SEED_RANK_MIN: usize = 16;

/// Most bytes of base rows in one chunk of a fused-pair pass: well inside the L2 cache (50 MB
/// on an H100 or H200). The pair kernel takes its tiles a row block at a time, so each block of
/// 128 queries reads the whole chunk; from L2, not device memory, where the chunk stays there.
const PAIR_CHUNK_BYTES: usize = 24 << 20;

/// The route of a k-NN pass of `nq` queries against `nb` base items for lists of `kp` under
/// `sel` (search/knn.rs `passes`).
///
/// Lists up to k = 1000's may take a fused method: ordinary tiles over a sample of the base,
/// spread evenly over it, set each query's threshold (its key at the route's rank among the
/// sample: the kp-th, or a lower one for long lists, [`seed_rank`]), and a fused kernel
/// filters the whole base against it without writing tiles (docs/design/fused-selection.md):
/// fused_filter for small batches on prepared f32 rows, the fused tile pair otherwise. Blocks
/// hold 8192 queries against base tiles of 16384 items (512 MiB; shapes from 2048×131072 to
/// 16384×8192 measured within noise of each other, bench/NOTES.md), twice the queries for
/// fused pairs, which write tiles over the sample only (10k queries then go in one block, and
/// all their chunks follow the base's upload); whole-row selections take the base in one tile.
fn knn_route(
    plan: &Numerics,
    (kp, sel): (usize, Select),
    (nq, nb): (usize, usize),
    budget: usize,
    fusion: Fusion,
) -> Result<Route> {
    let want = pass_list(plan, kp, sel);
    let mode = sel.resolve(want)?;
    let kp = mode.width(want);
    let kc = kp.min(nb);
    let fused = match mode {
        Select::Block => fused_method(plan, fusion, kp, (nq, nb)),
        _ => None,
    };
    let tiles = if mode.whole_rows() {
        let per_query = nb * 4 + kc * 8;
        ((budget / per_query).clamp(1, nq), nb)
    } else {
        let (qmax, bmax) = (8192usize, 16384usize);
        let b_tile = nb.min(bmax);
        let qmax = match fused {
            Some((Method::Pair { .. }, _)) => 2 * qmax,
            _ => qmax,
        };
        // Slots, a counter and (pairs) a floor per query.
        let buffers = fused.map_or(0, |(m, _)| cap_of(m) * 8 + 8);
        let per_query = b_tile * 4 + kp * 8 + buffers;
        ((budget / per_query).clamp(1, nq.min(qmax)), b_tile)
    };
    let (method, warm) = fused.unwrap_or((Method::Written, Warm::Cold));
    let kind = match method {
        Method::Pair { kind, .. } => Some(kind),
        _ => None,
    };
    Ok(Route {
        arithmetic: plan.arithmetic,
        list: ListRoute {
            want,
            mode,
            kp,
            width: if mode.whole_rows() { kc } else { kp },
        },
        tiles,
        method,
        written: product(plan, false),
        copy: copy_for(kind, false),
        warm,
        order: Order::Natural,
        proves: false,
    })
}

fn cap_of(m: Method) -> usize {
    match m {
        Method::Filtered { cap } | Method::FusedFilter { cap, .. } | Method::Pair { cap, .. } => {
            cap
        }
        Method::Written | Method::Rows => 0,
    }
}

/// The fused method of a k-NN pass of `nq` queries with lists of `kp` over `nb` base items,
/// with its warm-up, or `None` when it must not (or need not) be fused.
fn fused_method(
    plan: &Numerics,
    fusion: Fusion,
    kp: usize,
    (nq, nb): (usize, usize),
) -> Option<(Method, Warm)> {
    if fusion == Fusion::Off || plan.tile != TileKind::Gemm {
        return None;
    }
    // fused_filter reads prepared f32 rows (tiles on stored half rows or int8 rows are not
    // its) and sums the whole inner dimension in one accumulator, where the plan's bound
    // assumes tile.rs's chunked sums beyond K_CHUNK.
    let f32_rows = matches!(
        plan.arithmetic,
        Arithmetic::Fp32 | Arithmetic::Tf32 | Arithmetic::Fp16x3
    );
    let filter = kp <= fused::MAX_KP
        && f32_rows
        && plan.dim <= K_CHUNK
        && (fusion == Fusion::On || nq <= AUTO_FUSED_QUERIES);
    let warm = |first: usize, rank: usize| Warm::Sample {
        first,
        rank,
        short: (rank < kp).then(|| Select::Block.width(rank)),
    };
    if filter {
        let cap = MERGE_SLOTS - kp;
        // The threshold is the kp-th smallest key of a sample of `first` items, so about
        // kp · nb / first items pass it over the whole base: `first` is chosen to expect at
        // most half the buffer.
        let first = (2 * kp * nb).div_ceil(GRANULE * cap).max(1) * GRANULE;
        let kernel = filter_kernel(plan);
        // Fusion pays only when the sample is a small part of the base.
        return (nb >= 4 * first).then(|| (Method::FusedFilter { kernel, cap }, warm(first, kp)));
    }
    let kind = pair_kind(plan)?;
    let cap = survivors::pairs_cap(kp)?;
    // An eighth of a small base (the tests' sets), a base tile of a large one, and at least
    // two lists' worth of items.
    let first = (nb / 8 / GRANULE * GRANULE).clamp((2 * kp).next_multiple_of(GRANULE), PAIR_FIRST);
    let rank = seed_rank(kp, first, nb);
    (nb >= 4 * first).then(|| (Method::Pair { kind, cap }, warm(first, rank)))
}

/// The rank in a sample of `first` items spread over `nb` whose key seeds each list of `kp`:
/// the kp-th, or for lists longer than the graph's filters serve (k = 1000's 2048) a rank that
/// expects half a list more than the list under it. There the kp-th key of the sample lets
/// about kp · nb / first items through at first, and the lists' thresholds, each list's kp-th
/// key among what it has seen, let kp · ln(nb / first) more through as they tighten: ~10,700
/// pairs a query at k = 1000 over 1M items, appended and merged in 21 chunks
/// (docs/design/device-finish.md). The j-th smallest key of the sample has about j · nb / first
/// base items under it on any data (a rank, not a distance), give or take a 1/√j part: j = 1.5 ·
/// kp · first / nb expects 1.5 kp of them, and the lists, seeded there, only tighten once full.
/// A list that ends with fewer than its kp entries keeps its threshold's slots empty and proves
/// on what it holds (fewer than k entries: the query is widened, still exact).
fn seed_rank(kp: usize, first: usize, nb: usize) -> usize {
    if kp <= survivors::FILTER_MAX_KP {
        return kp;
    }
    (3 * kp * first)
        .div_ceil(2 * nb.max(1))
        .clamp(SEED_RANK_MIN, kp)
}

// ---- Graph shares ----

/// Fewest tiles a set spans for its lists to be seeded from a spread sample rather than
/// warmed by the first tile row. Measured on one H200 (docs/design/graph-tile-filter.md): at
/// 62 tiles (1M × 128, k = 10) seeding took 5 % off every data kind; at 4 tiles (65,536 sorted
/// words' embeddings) it cost 34 %. A sorted set's near neighbours sit in a few tiles, so the
/// kp·n/s items a sample's threshold lets through over the whole set come in one or two pairs
/// and overflow the buffers; the few written pairs of a small set prove more.
const SEED_TILES: usize = 8;

/// The tile edge of the symmetric schedule for `n` items and lists of `kp` under a working set
/// of `budget` bytes: square tiles within the budget, one buffer or two when the column
/// candidates go through a transpose. Large tiles mean fewer, larger sgemm calls and launches
/// (16384² is 1 GiB).
///
/// The tile filter's buffers (8 bytes per tile row and slot, 67 MB at 16384 and k = 10) stay
/// outside the budget, as the candidate lists do: counting them halved the tile at the default
/// budget, and the graph ran slower on 8192² tiles with the filter than on 16384² without it
/// (docs/design/graph-tile-filter.md).
///
/// An edge past the fused pair's block is a whole number of blocks, so that a tile's blocks are
/// the locality order's (ops/locality.rs), whatever `n`.
pub(crate) fn tile_edge(n: usize, kp: usize, budget: usize) -> usize {
    let bufs = if kp == select::COLS_KP { 1 } else { 2 };
    let mut t = 16384usize.min(n.max(1));
    while t > 64 && bufs * t * t * 4 > budget {
        t /= 2;
    }
    if t > abi::PF_BM {
        t -= t % abi::PF_BM;
    }
    t
}

/// The graph's tile edge for `n` items and `k` under a working set of `budget` bytes.
pub(crate) fn edge_for(n: usize, k: usize, budget: usize) -> usize {
    let kp = first_list(k.max(1)).max(select::COLS_KP);
    tile_edge(n, kp, budget)
}

/// Whether the device proves and re-ranks a graph's lists of `width` that met every other
/// item: metrics with exact keys there, rows narrower than `exact::STAGED_MIN_DIM` (the host
/// stages wide rows by their warp), sorted widths.
pub(crate) fn provable(plan: &Numerics, k: usize, width: usize) -> bool {
    plan.exact_code.is_some()
        && plan.distance_form.is_some()
        && plan.dim < exact::STAGED_MIN_DIM
        && width.is_power_of_two()
        && k > 0
}

/// The route of a graph share of `n` items in tiles of `t` for `k` neighbours, first lists of
/// `kp` under `sel` (`whole`: the share is the whole build).
///
/// The symmetric schedule needs the block kernel's running lists; radix selection works on
/// whole rows, so it runs tile rows of the set against the whole set ([`Method::Rows`]). Under
/// block selection small lists are padded to the column kernel's size, so the column
/// candidates are read in place (kernels/select/cols.cu) instead of through a transpose; pairs
/// whose lists are warm go through the tile filter, or, unless fusion is off, the fused tile
/// pair where the plan's tiles allow it (which never writes the tile); where pairs are
/// filtered and the set spans [`SEED_TILES`] tiles or more, every list is first seeded on
/// items spread over the set, so that every pair is filtered; a whole build of fused pairs
/// runs in locality order where [`locality`] allows it; TF32 plans of wide rows write their
/// tiles on the set's scaled f16 copy ([`written_on_copy`]).
fn graph_route(
    plan: &Numerics,
    (n, k, kp, t): (usize, usize, usize, usize),
    sel: Select,
    whole: bool,
    fusion: Fusion,
) -> Result<Route> {
    let mode = sel.resolve(kp)?;
    let rows = |list: ListRoute, method| Route {
        arithmetic: plan.arithmetic,
        list,
        tiles: (t, t),
        method,
        written: product(plan, false),
        copy: RowCopy::None,
        warm: Warm::Cold,
        order: Order::Natural,
        proves: false,
    };
    if mode != Select::Block {
        // The self pair takes a slot: whole-row lists get one more; running lists keep kp,
        // whose margin over k (at least 8) already covers it.
        let want = if mode.whole_rows() {
            (kp + 1).min(n)
        } else {
            kp
        };
        let slots = pass_list(plan, want, mode);
        let list = ListRoute {
            want,
            mode,
            kp: slots,
            width: slots,
        };
        return Ok(rows(list, Method::Rows));
    }
    let width = Select::Block.width(kp).max(select::COLS_KP);
    let list = ListRoute {
        want: kp,
        mode,
        kp: width,
        width,
    };
    let nt = n.div_ceil(t);
    let cap = survivors::filter_cap(width);
    let kind = pair_kind(plan).filter(|_| fusion != Fusion::Off && n > 0);
    let wide = written_on_copy(plan);
    let seeding = cap.is_some() && nt >= SEED_TILES;
    let method = match (cap, kind) {
        (Some(cap), Some(kind)) => Method::Pair { kind, cap },
        (Some(cap), None) => Method::Filtered { cap },
        (None, _) => Method::Written,
    };
    let warm = match seeding {
        // As small as lets a list's first pair offer the sample at most half its buffer
        // (about kp·t/s survivors after s items): a quarter of a tile for the lists of 32 a
        // k = 10 graph keeps, half a tile from lists of 64 on.
        true => {
            let c = survivors::filter_cap(width).unwrap_or(4 * width);
            Warm::Seed {
                size: (t / 4).max(2 * width * t / c).min(t / 2).min(n),
            }
        }
        false => Warm::Cold,
    };
    let order = if seeding && whole && !wide && kind.is_some() && locality(plan, n, t) {
        Order::Locality
    } else {
        Order::Natural
    };
    Ok(Route {
        copy: if n > 0 {
            copy_for(kind, wide)
        } else {
            RowCopy::None
        },
        written: product(plan, wide && n > 0),
        warm,
        order,
        proves: provable(plan, k, width),
        ..rows(list, method)
    })
}

/// Whether a graph in locality order goes on planning its pairs' kernel tiles once the diagonal
/// pairs and the first tile row ran `ran` of their `planned` tiles: while they left out a tenth
/// or more (normal data: the spheres of a block overlap nearly every other, and planning only
/// costs).
pub(crate) fn keeps_planning(ran: u64, planned: u64) -> bool {
    ran * 10 < planned * 9
}

// ---- Pilots ----

/// Dimension from which the fp32 bound (which grows with it) gets a list pilot, and the
/// arithmetic pilot sizes its kept lists to its proofs.
pub(crate) const PILOT_DIM: usize = 1024;

/// Longest list the list pilot looks along.
pub(crate) const PILOT_MAX: usize = 16384;

/// First lists a k-NN search may widen to under TF32 ([`tf32_list`]).
const WIDER_LISTS: [usize; 6] = [64, 128, 256, 512, 1024, 2048];

/// The list a pilot first looks along for a first list of `kp`.
pub(crate) fn pilot_probe(kp: usize) -> usize {
    (4 * kp).max(256)
}

/// Whether a k-NN pass of list `kp` under `sel` keeps sorted lists whose whole width (what the
/// device proof reads) holds half the list again or more (k = 1000: 2048 entries for 1125
/// wanted): the room the TF32 list pilot would look for, so the pilot (~5 ms at 1M × 128,
/// k = 1000, a list pass over the whole base for 32 queries) is skipped there.
fn proof_has_room(plan: &Numerics, kp: usize, sel: Select) -> bool {
    let kp = pass_list(plan, kp, sel);
    matches!(
        sel.resolve(kp),
        Ok(m @ (Select::Block | Select::Heap)) if 2 * m.width(kp) >= 3 * kp
    )
}

/// Whether the first list of a search for `k` neighbours (`self_pairs`: a graph's, the queries
/// being the base) under `plan` and `sel` is sized by a list pilot (search/pilot.rs
/// `pilot_list`).
///
/// The bound grows with the dimension (and fourfold under TF32) while the gap between the k-th
/// and the following keys does not: at 100k × 15876 the 18-entry list of k = 10 never proved,
/// and every query went through two full widening passes. Wide data (d ≥ [`PILOT_DIM`], where
/// the GEMM dwarfs a pilot) gets one, and so do TF32 lists of k ≥ 64 of graphs and of k-NN
/// searches whose sorted lists leave no room ([`proof_has_room`]).
pub(crate) fn list_pilot(plan: &Numerics, k: usize, self_pairs: bool, sel: Select) -> bool {
    plan.dim >= PILOT_DIM
        || (plan.arithmetic == Arithmetic::Tf32
            && k >= 64
            && (self_pairs || !proof_has_room(plan, first_list(k), sel)))
}

/// The first list a list pilot gives a first list of `kp` whose longest proof it measured as
/// `need` against `nb` base items under `sel`: that length plus a quarter, never below `kp`
/// nor past what the selection keeps.
pub(crate) fn piloted_list(kp: usize, need: usize, sel: Select, nb: usize) -> usize {
    let cap = sel
        .max_list()
        .unwrap_or(usize::MAX)
        .min(nb.next_power_of_two());
    if need > kp {
        (need + need / 4).min(cap).max(kp)
    } else {
        kp
    }
}

/// What the arithmetic pilot of a search is asked: `k` neighbours of `nq` queries against `n`
/// items (`self_pairs`: a graph, the queries being the set), the base already on the device
/// or not (`up`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AutoShape {
    pub k: usize,
    pub self_pairs: bool,
    pub nq: usize,
    pub n: usize,
    pub up: bool,
}

/// What the arithmetic pilot of a search looks at, before it measures anything: the first
/// list, the lists it reads (`seen` entries), the nearest each proof must settle (`kk`), where
/// it measures (`on_host`: on the host over a sample of a base still to go up), and the fp16x3
/// form it weighs beside TF32 (a graph whose warm pairs run fused on split rows).
#[derive(Clone, Debug)]
pub(crate) struct AutoPilot {
    pub first: usize,
    pub seen: usize,
    pub kk: usize,
    pub on_host: bool,
    pub split: Option<Numerics>,
}

/// The arithmetic pilot of a search of `shape` under `plan` (resolved to fp32 by `auto`) and
/// `opts`, or `None` where there is nothing to measure (no queries, or a base no longer than
/// the first list).
pub(crate) fn auto_pilot(
    plan: &Numerics,
    shape: AutoShape,
    opts: &CudaOptions,
) -> Option<AutoPilot> {
    let first = first_list(shape.k);
    let seen = pilot_probe(first).min(shape.n);
    if shape.nq == 0 || seen <= first {
        return None;
    }
    // fp16x3 for a graph whose warm pairs are fused on split rows.
    let split = (shape.self_pairs && opts.fusion != Fusion::Off)
        .then(|| auto_form(plan, opts.precision, Arithmetic::Fp16x3))
        .flatten()
        .filter(|p| pair_kind(p) == Some(PairKind::F16Split));
    Some(AutoPilot {
        first,
        seen,
        kk: shape.k + usize::from(shape.self_pairs),
        on_host: !shape.self_pairs && plan.dim < PILOT_DIM && !shape.up,
        split,
    })
}

/// What the arithmetic pilot measured: proof lengths under TF32 (and fp16x3's, where weighed)
/// on lists of `listed` entries.
pub(crate) struct AutoMeasured<'a> {
    pub needs: &'a [PilotNeed],
    pub split_needs: &'a [PilotNeed],
    pub listed: usize,
}

/// The arithmetic `auto` takes for a search of `shape` under `plan` (fp32) whose TF32 form is
/// `tf32`, from what its pilot measured, and the wider first list TF32 should start from, if
/// any (a k-NN search of d < [`PILOT_DIM`]; sized for this search's k).
///
/// TF32 where [`tf32_list`] finds its added evaluations cheaper than the tile time it saves,
/// over the widths a search may keep its lists at (its usual one, and for a k-NN search the
/// wider sorted lists within what the pilot's lists show); where it does not and the search
/// is a graph whose fused tile pairs can run split rows, fp16x3 by the same rule with its own
/// bound on the same lists and its own saving ([`SPLIT_SAVING_SHARE`] times TF32's price, the
/// usual width only); fp32 otherwise.
pub(crate) fn auto_arithmetic(
    tf32: &Numerics,
    shape: AutoShape,
    opts: &CudaOptions,
    pilot: &AutoPilot,
    measured: &AutoMeasured<'_>,
) -> AutoTaken {
    let (first, listed, sel) = (pilot.first, measured.listed, opts.select);
    // Tile pairs per query: the base, or half the set for a graph's symmetric tiles.
    let pairs = if shape.self_pairs {
        shape.n / 2
    } else {
        shape.n
    };
    // The list the search keeps (the device re-ranks inside it): the selection's width of
    // TF32's pass list, small graph lists padded to the column kernel's; wide data gets a list
    // pilot that sizes its lists to the proofs.
    let kept = if tf32.dim >= PILOT_DIM {
        listed
    } else {
        let kp = pass_list(tf32, first, sel);
        let width = sel.resolve(kp).map_or(kp, |m| m.width(kp));
        if shape.self_pairs {
            width.max(select::COLS_KP)
        } else {
            width
        }
    };
    // Wider first lists a k-NN search may keep instead under TF32: sorted (the device proves
    // them), within what the pilot's lists show, one list per width.
    let width = |l: usize| {
        let kp = pass_list(tf32, l, sel);
        match sel.resolve(kp) {
            Ok(m @ (Select::Block | Select::Heap)) => Some(m.width(kp)),
            _ => None,
        }
    };
    let mut options = vec![(first, kept)];
    if !shape.self_pairs && tf32.dim < PILOT_DIM {
        for l in WIDER_LISTS.into_iter().filter(|&l| l > first) {
            match width(l) {
                Some(w) if w > options[options.len() - 1].1 && w <= listed => options.push((l, w)),
                _ => {}
            }
        }
    }
    let shape_cost = (pairs, tf32.dim);
    let kept_widths: Vec<usize> = options.iter().map(|o| o.1).collect();
    // A wider list costs more where the search's passes are fused tile pairs (every chunk's
    // survivors appended and merged) than where they select from written tiles.
    let fused_pairs = !shape.self_pairs
        && matches!(
            fused_method(tf32, opts.fusion, kept, (shape.nq, shape.n)),
            Some((Method::Pair { .. }, _))
        );
    let entry_ns = if fused_pairs {
        FUSED_LIST_ENTRY_NS
    } else {
        LIST_ENTRY_NS
    };
    let pick = tf32_list(
        measured.needs,
        (first, listed),
        &kept_widths,
        shape_cost,
        entry_ns,
    );
    let list = pick.filter(|&i| i > 0).map(|i| options[i].0);
    // The graph's lists keep their usual width under fp16x3.
    let split_takes = pick.is_none()
        && !measured.split_needs.is_empty()
        && tensor_list(
            measured.split_needs,
            (first, listed),
            &kept_widths[..1],
            shape_cost,
            (entry_ns, SPLIT_SAVING_SHARE),
        )
        .is_some();
    let arithmetic = match (pick, split_takes) {
        (Some(_), _) => Arithmetic::Tf32,
        (None, true) => Arithmetic::Fp16x3,
        (None, false) => Arithmetic::Fp32,
    };
    AutoTaken {
        arithmetic,
        list,
        options,
        entry_ns,
    }
}

/// What `auto` took ([`auto_arithmetic`]): the arithmetic, the wider first list TF32 starts
/// from (if any), and what the rule weighed: the first lists and kept widths it compared, the
/// cost of a list entry it charged.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AutoTaken {
    pub arithmetic: Arithmetic,
    pub list: Option<usize>,
    pub options: Vec<(usize, usize)>,
    pub entry_ns: f64,
}

/// What the `--precision auto` pilot measured for one of its queries: how long a list proves it
/// ([`Numerics::proof_length`]) under fp32's bound and under TF32's, both on the same TF32 list
/// (fp32's is an estimate: its keys would differ from TF32's by far less than TF32's bound).
/// `None`: longer than the pilot's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PilotNeed {
    pub fp32: Option<usize>,
    pub tf32: Option<usize>,
}

/// What an exact evaluation costs a search, in ns: per dimension where the list the search
/// keeps holds it (the device re-ranks it: the exact-key kernel took 88 ns a pair at d = 15876
/// on the H100), and a fixed part more beyond that list, where the query is widened (on the
/// H100 the clustered 1M × 128 k-NN's extra evaluations under TF32 cost ~100 ns each, the
/// clustered graph's ~53 ns; docs/design/tensor-core-inputs.md).
const EVAL_NS_PER_DIM: f64 = 0.006;
const WIDENED_EVAL_NS: f64 = 100.0;

/// What a widening pass is charged per query, per pair and dimension, in ns: its candidates are
/// looked for again over the whole base, at about fp32 tile speed (2 flops at 36 TFLOP/s).
///
/// It undercharges on purpose. A widened query's whole cost is larger: at k = 1000 its list of
/// 4500 is selected, downloaded, sorted and re-ranked, ~120 µs a query against this charge's
/// 7 µs (on the H100 the 149 of 10k queries TF32 left unproved in the clustered
/// 1M × 128 k-NN took 17.7 ms of host finish). But 32 pilot queries resolve widening rates only
/// in steps of 3 %: there at least one pilot query widened against 1.5 % of the search's, and
/// the full charge took fp32 (0.172 s with the pilot) where TF32 ran in 0.135 s and fp32 alone
/// in 0.149 s. Where many queries widen, the evaluations beyond the list
/// ([`WIDENED_EVAL_NS`]) decide.
const REPASS_NS: f64 = 2.0 / 36e3;

/// What TF32 tiles save per pair and dimension, in ns, measured end to end on the H100:
/// 1M × 128 k-NN of 10k queries 0.111 s → 0.077 s (2.7e-5), and the 100k × 15876 graph
/// 4.48 s → 2.20 s over 5·10⁹ pairs (4.5e-5; wide tiles run TF32 at ~300 TFLOP/s).
fn tf32_saving_ns(dim: usize) -> f64 {
    if dim >= 1024 {
        4.3e-5
    } else {
        2.66e-5
    }
}

/// What a search pays per query for each entry its lists keep beyond the narrowest, in ns:
/// a wider selection, a longer list to download and prove. Measured end to end on the H100:
/// TF32 k-NN of 1M × 128 for 10k queries took 0.055 s with lists 32 wide (k = 10)
/// and 0.098 s with lists 2048 wide (k = 1000), 2.1 ns per entry and query.
pub(crate) const LIST_ENTRY_NS: f64 = 2.0;

/// [`LIST_ENTRY_NS`] for searches whose passes filter the base with fused tile pairs
/// ([`Method::Pair`]): a wider list lets more survivors through every chunk,
/// each appended and merged. Measured end to end on the H200: TF32 k-NN of 1M × 128 for 10k
/// queries, k = 10, with lists 128 wide (the pilot's choice) against 32 wide (which proved
/// every query): 0.038 / 0.0325 s in one call (far data 0.036 / 0.031 s), 0.035 / 0.032 s in
/// another; 3 to 6 ns per entry and query.
pub(crate) const FUSED_LIST_ENTRY_NS: f64 = 4.5;

/// Whether `--precision auto` runs TF32 tiles, and with which list, from the pilot's proof
/// lengths `needs` (lists of `listed` entries) for k-NN lists whose first size is `first`
/// ([`first_list`]), where each query meets `pairs` tile pairs (the base; half the set for
/// a graph's symmetric tiles) of `dim` dimensions. `kept` holds the widths a search under TF32
/// may keep its lists at, its usual width first; returns the index of the cheapest, or `None`
/// where fp32 is cheaper than all (or nothing was measured: every pilot list complete, a base
/// no longer than the pilot's lists).
///
/// The rule is a cost comparison per query: TF32 saves `pairs · dim ·` [`tf32_saving_ns`] of
/// tile time and costs the exact evaluations its wider bound adds, the pilot queries' mean
/// excess of TF32's proof length over fp32's (each of fp32's counted at least `first`: a proof
/// inside the list a search keeps anyway costs nothing more): up to the kept width at
/// [`EVAL_NS_PER_DIM`] each (the device re-ranks them), beyond it [`WIDENED_EVAL_NS`] more, and
/// a query TF32 leaves unproved in its list where fp32 proves it pays a widening pass,
/// `pairs · dim ·` [`REPASS_NS`]. A length beyond the pilot's list counts as twice the list (as
/// `pilot::pilot_list` assumes), and at the usual width whatever the width (no list the pilot
/// measured proves it). A width beyond the usual costs `entry_ns` per extra entry and query
/// ([`LIST_ENTRY_NS`], or [`FUSED_LIST_ENTRY_NS`] where the passes are fused tile pairs).
///
/// Wider lists matter where TF32's bound is wide next to the gaps between near neighbours
/// (clustered data, k = 10: proofs of ~110 entries against fp32's 11): the usual 32-wide list
/// sends most queries to the host's widening, a list of 128 or 256 proves them on the device
/// for far less than TF32's tiles save.
pub(crate) fn tf32_list(
    needs: &[PilotNeed],
    lists: (usize, usize),
    kept: &[usize],
    shape: (usize, usize),
    entry_ns: f64,
) -> Option<usize> {
    tensor_list(needs, lists, kept, shape, (entry_ns, 1.0))
}

/// What the graph's fp16x3 tile pairs save against fp32 tiles per row, as a multiple of what
/// [`tf32_saving_ns`] prices (that price is the k-NN's, measured on the H100; a graph's fused
/// pairs save more). Measured end to end on the H200 (1M × 128 clustered, k = 10):
/// device candidates 4.32 s on fp32 tiles, 1.63–1.66 s on split pairs, 2.7 µs a row against
/// the 1.7 µs that `tf32_saving_ns` prices; 1.5 keeps a margin under the measured 1.57.
pub(crate) const SPLIT_SAVING_SHARE: f64 = 1.5;

/// [`tf32_list`] for another arithmetic whose tiles save `share` of TF32's time, its proof
/// lengths given as `PilotNeed::tf32` (the fp16x3 rule of a graph whose TF32 rule kept fp32).
pub(crate) fn tensor_list(
    needs: &[PilotNeed],
    (first, listed): (usize, usize),
    kept: &[usize],
    (pairs, dim): (usize, usize),
    (entry_ns, share): (f64, f64),
) -> Option<usize> {
    if needs.is_empty() || kept.is_empty() {
        return None;
    }
    let count = |n: Option<usize>| n.unwrap_or(2 * listed) as f64;
    let d = dim as f64;
    let kept_usual = kept[0];
    let cost = |kept: usize| {
        needs
            .iter()
            .map(|n| {
                // A proof beyond the pilot's lists is widened whatever the width: priced at the
                // usual one.
                let kept = if n.tf32.is_some() { kept } else { kept_usual } as f64;
                let (t, f) = (count(n.tf32), count(n.fp32).max(first as f64));
                let inside = (t.min(kept) - f).max(0.0);
                let beyond = (t - f).max(0.0) - inside;
                // A query that fp32 proves in its list and TF32 does not is widened: a pass more.
                let repass = if t > kept && f <= kept {
                    pairs as f64 * d * REPASS_NS
                } else {
                    0.0
                };
                inside * EVAL_NS_PER_DIM * d
                    + beyond * (WIDENED_EVAL_NS + EVAL_NS_PER_DIM * d)
                    + repass
            })
            .sum::<f64>()
            / needs.len() as f64
    };
    let (at, best) = kept
        .iter()
        .map(|&w| cost(w) + w.saturating_sub(kept_usual) as f64 * entry_ns)
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    (best < share * pairs as f64 * d * tf32_saving_ns(dim)).then_some(at)
}
