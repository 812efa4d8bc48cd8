//! Per-metric preparation on the host: which tile the GPU computes, how its values become keys,
//! how the f32 rows are transformed first, and the error bound that makes the f32 pass safe.
//!
//! Owns the numerics of the approximate pass; never touches the device. Every approximate key `v`
//! of query `q` satisfies `lower(q, v) <= exact <= upper(q, v)` where the exact key is
//! [`voisin::metric::exact::set_key`] on the stored rows.
//!
//! f64 storage is tiled on its rows rounded to f32; [`Numerics::with_inputs`] widens the bound by
//! how far that rounding can move a key ([`voisin::metric::rounding`], the CPU engine's math;
//! docs/design/f64-storage-gpu.md) and sends exact keys to the host, where they are computed on
//! the f64 values.

use rayon::prelude::*;
use voisin::data::{Dataset, ElemType, VectorData, VectorSet};
use voisin::metric::rounding::{input_widening, Rounding};
use voisin::metric::scale::{Extent, KeyScale};
use voisin::metric::simd::U32;
use voisin::{Error, Metric, Result};

use crate::runtime::abi;
pub(crate) use crate::runtime::elem::Storage;

/// How a tile value becomes a key; the numbers are the `KEY_*` modes of src/runtime/abi.rs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum TileKey {
    /// ‖r‖² + ‖c‖² − 2 r·c on rows centred on the base mean.
    L2 = abi::KEY_L2,
    /// −r·c.
    NegDot = abi::KEY_NEG_DOT,
    /// 1 − r·c on unit rows.
    OneMinus = abi::KEY_ONE_MINUS,
    /// The tile holds the key (distance/vector_tile.cu).
    Direct = abi::KEY_DIRECT,
    /// As `L2`, the tile's words holding int32 dot products of int8 rows (u8 minus 128).
    L2Int = abi::KEY_L2_INT,
}

/// The exact kernel's code for `metric`, or `None` when its keys are computed on the host.
pub(crate) fn device_code(metric: &Metric) -> Option<i32> {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => Some(abi::EX_SQEUCLIDEAN),
        Metric::InnerProduct => Some(abi::EX_INNER_PRODUCT),
        Metric::Cosine => Some(abi::EX_COSINE),
        Metric::Correlation => Some(abi::EX_CORRELATION),
        Metric::Cityblock => Some(abi::EX_CITYBLOCK),
        Metric::Chebyshev => Some(abi::EX_CHEBYSHEV),
        _ => None,
    }
}

/// How the rerank kernel turns an exact key into the reported distance
/// ([`Metric::key_to_distance`], then f32): `abi::RR_KEY` the key, `RR_NEGATED` its negation,
/// `RR_SQRT` the square root of `max(key, 0)` (rr_distance in kernels/finish/rerank.cu). `None` where the kernel does not apply.
pub(crate) fn distance_form(metric: &Metric) -> Option<i32> {
    match metric {
        Metric::SqEuclidean
        | Metric::Cosine
        | Metric::Correlation
        | Metric::Cityblock
        | Metric::Chebyshev => Some(abi::RR_KEY),
        Metric::InnerProduct => Some(abi::RR_NEGATED),
        Metric::Euclidean => Some(abi::RR_SQRT),
        _ => None,
    }
}

/// Which tile kernel computes the values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum TileKind {
    /// cuBLAS sgemm of the two row blocks.
    Gemm,
    /// distance/vector_tile.cu with its kind (`abi::VT_*`) and p.
    Simt(i32, f32),
}

/// The arithmetic of a plan's GEMM tiles, which its bound covers ([`Numerics::in_arithmetic`],
/// [`Numerics::on_own_cores`]). Which one a search runs is the route's choice
/// (search/route.rs); a plan never holds an open one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arithmetic {
    /// fp32 products (cuBLAS sgemm on the SIMT cores; every SIMT tile).
    Fp32,
    /// TF32 tensor-core products of the prepared f32 rows (or of their scaled f16 copy).
    Tf32,
    /// Three f16 tensor-core products of split prepared rows (the fused tile pairs; the other
    /// tiles of such a plan run fp32, inside its bound).
    Fp16x3,
    /// The stored f16 rows on f16 tensor cores.
    Fp16,
    /// The stored bf16 rows on bf16 tensor cores.
    Bf16,
    /// The u8 rows minus 128 on int8 tensor cores, exact int32 sums.
    Int8,
}

impl std::fmt::Display for Arithmetic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Arithmetic {
    /// The name `--stats` reports (the precision option's).
    pub fn name(self) -> &'static str {
        match self {
            Arithmetic::Fp32 => "fp32",
            Arithmetic::Tf32 => "tf32",
            Arithmetic::Fp16x3 => "fp16x3",
            Arithmetic::Fp16 => "fp16",
            Arithmetic::Bf16 => "bf16",
            Arithmetic::Int8 => "int8",
        }
    }

    /// Every arithmetic, in the order of their codes ([`Arithmetic::code`]).
    const ALL: [Arithmetic; 6] = [
        Arithmetic::Fp32,
        Arithmetic::Tf32,
        Arithmetic::Fp16x3,
        Arithmetic::Fp16,
        Arithmetic::Bf16,
        Arithmetic::Int8,
    ];

    /// The arithmetic as a number, for processes that agree on one (voisin-mpi's GPU ranks).
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&a| a == self).expect("listed") as u32
    }

    /// The arithmetic of a [`Arithmetic::code`]; `None` for a number that is none.
    pub fn from_code(code: u32) -> Option<Arithmetic> {
        Self::ALL.get(code as usize).copied()
    }

    /// The arithmetic of tiles on `storage`'s own tensor cores.
    pub fn own(storage: Storage) -> Arithmetic {
        match storage {
            Storage::F32 => Arithmetic::Fp32,
            Storage::F16 => Arithmetic::Fp16,
            Storage::Bf16 => Arithmetic::Bf16,
            Storage::U8 => Arithmetic::Int8,
        }
    }
}

/// The smallest normal value of `storage`'s type: inputs below it may be flushed to zero by the
/// tensor cores.
fn min_normal(storage: Storage) -> f64 {
    match storage {
        Storage::F16 => 2f64.powi(-14),
        Storage::F32 | Storage::Bf16 | Storage::U8 => f64::from(f32::MIN_POSITIVE),
    }
}

/// The rows a plan's GEMM tiles read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileRows {
    /// Prepared f32 rows (translated, centred or unit; fp32, TF32 and the SIMT tiles).
    F32,
    /// The stored f16/bf16 rows, as they are.
    Stored,
    /// Prepared int8 rows: u8 values minus 128, padded ([`TileRows::stride`]).
    I8,
}

impl TileRows {
    /// Values from one tile row of `d` values to the next, for rows stored as `storage`:
    /// prepared f32 rows are dense, int8 rows start on 16 bytes (which cuBLAS's int8
    /// tensor-core kernels want of the leading dimension; the padding is zero), and the stored
    /// rows keep their own stride.
    pub fn stride(self, storage: Storage, d: usize) -> usize {
        match self {
            TileRows::F32 => d,
            TileRows::Stored => storage.row_stride(d),
            TileRows::I8 => d.next_multiple_of(16),
        }
    }
}

/// The plan's bound as the rerank kernel evaluates it: `lower(v) = ((v − abs) − rel·|v|) − tiny`
/// and `upper` likewise, which is `Numerics::lower/upper` operation for operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BoundParts {
    pub rel: f64,
    pub tiny: f64,
}

impl BoundParts {
    /// The plan's relative part and slack.
    pub fn of(plan: &Numerics) -> Self {
        BoundParts {
            rel: plan.rel,
            tiny: plan.tiny,
        }
    }
}

/// The plan for one metric over one dimension.
#[derive(Clone, Debug)]
pub(crate) struct Numerics {
    pub key: TileKey,
    pub tile: TileKind,
    pub dim: usize,
    /// Subtracted from every row before the GEMM (euclidean: an estimate of the base mean;
    /// any translation keeps distances, a central one keeps the norms and so the bound small).
    pub shift: Option<Vec<f32>>,
    /// Subtract each row's own mean first (correlation).
    pub centre_rows: bool,
    /// Scale rows to unit norm (cosine, correlation).
    pub unit: bool,
    /// The exact kernels' code for the metric ([`device_code`]; `None`: exact keys on the host).
    pub exact_code: Option<i32>,
    /// How the rerank kernel reports an exact key ([`distance_form`]).
    pub distance_form: Option<i32>,
    /// Relative part of the bound (SIMT metrics).
    rel: f64,
    /// Absolute slack for underflow and rounding of the final subtraction.
    tiny: f64,
    /// γ of the GEMM bound (see [`Numerics::abs_bound`]).
    gamma: f64,
    /// Arithmetic of the GEMM tiles (the route resolves the precision option to it,
    /// search/route.rs `numerics`).
    pub arithmetic: Arithmetic,
    /// The element type of the stored rows on the device (the pair's, [`Storage::of_pair`];
    /// which rows the tiles read is [`Numerics::tile_rows`]).
    pub storage: Storage,
    /// Relative error of one product of converted inputs (0 for fp32 inputs), see
    /// [`Numerics::with_precision`].
    input: f64,
    /// Absolute error per unit of norm from inputs flushed to zero (TF32).
    flush: f64,
    /// The widening for inputs rounded from f64 ([`Numerics::with_inputs`]); `None` when no value
    /// was rounded.
    widen: Option<Widening>,
}

/// How far rounding f64 inputs to f32 moves the keys: the largest rounding errors of each
/// side, and the relative part α of the widening (which depends on the metric only).
#[derive(Clone, Debug)]
struct Widening {
    metric: Metric,
    queries: Rounding,
    base: Rounding,
    alpha: f64,
}

/// Inner dimensions per GEMM call. A longer product is summed chunk by chunk (one cuBLAS call
/// per chunk, the later ones adding into the tile with beta = 1), so that whatever order cuBLAS
/// sums a chunk in, a product passes through at most `accumulation_length(d)` roundings instead
/// of d. At d = 15876 that makes the bound ~7.7× tighter, which is what lets TF32 (and fp32
/// with short lists) work on wide data; each extra chunk costs one read and write of the tile.
pub(crate) const K_CHUNK: usize = 2048;

/// The most roundings a product meets on its way into a d-dimensional GEMM value: a chunk's
/// sum in any order (at most K_CHUNK) plus one addition per further chunk.
pub(crate) fn accumulation_length(d: usize) -> usize {
    if d <= K_CHUNK {
        d
    } else {
        K_CHUNK + d.div_ceil(K_CHUNK)
    }
}

/// γ of the sums of `d`-value split rows (`Numerics::with_precision`, `Fp16x3`) with the plan's
/// factor 2 of safety, as [`Numerics::new`] forms it for d products: d products and one addition
/// of the small products per step of 16 values (kernels/select/pair_filter.cu `pf_products`),
/// in one accumulator for the whole row (no chunks, whatever d).
fn split_gamma(d: usize) -> f64 {
    2.0 * ((d + d.div_ceil(16)) as f64 + 8.0) * U32
}

/// Whether int8 tiles of `d` dimensions have exact int32 dot products: each product of two
/// values in [-128, 127] is at most 2¹⁴, so d of them stay below 2³¹ while d < 2¹⁷.
pub(crate) fn int8_exact(d: usize) -> bool {
    d < 1 << 17
}

/// The vectors of a data set, or a clear error for what this engine does not handle.
///
/// Values are not scanned here: row preparation on the device reads every value anyway, and a
/// row with a NaN or infinite value gets a non-finite norm there; `DeviceSet::check` then names
/// it (a host scan of a 4M×128 base costs more than its upload). Paths that do not prepare the
/// whole set on the device first call [`check_finite`].
pub(crate) fn vectors<'a>(data: &'a Dataset, metric: &Metric) -> Result<&'a VectorSet> {
    let set = vector_metric(data, metric)?;
    tiles_take(set, metric).map(|()| set)
}

/// The vectors of a data set under a metric this engine computes, or why not; their values are
/// not looked at (see [`vectors`]).
pub(crate) fn vector_metric<'a>(data: &'a Dataset, metric: &Metric) -> Result<&'a VectorSet> {
    match (data, metric) {
        (_, Metric::Levenshtein) | (Dataset::Strings(_), _) => Err(Error::invalid(
            "on cuda, strings take levenshtein only and vectors take the vector metrics",
        )),
        (_, Metric::Custom(c)) => Err(Error::invalid(format!(
            "custom metric {} runs on the CPU engine only",
            c.name
        ))),
        // Their key is the distance, which the fp32 power tiles here cannot bound.
        (_, Metric::Minkowski(_)) if !metric.is_minkowski_power_sum() => Err(Error::invalid(
            format!("{metric} (an order above 8) runs on the CPU engine only"),
        )),
        (Dataset::Vectors(v), _) => Ok(v),
    }
}

/// Whether the cuda engine's f32 tiles can bound the keys of `set` under `metric`: the error
/// for a set they cannot, which the CPU engine answers exactly (it scales such keys by a power
/// of two, [`KeyScale`]). f64 values are tiled rounded to f32 (the plan widens its bound for
/// that, a value that rounds to zero included), which needs each rounding finite; and the keys
/// must lie inside f32's range, their exact f64 keys inside f64's ([`KeyScale::fits_f32`]: a
/// pass over the values where their storage type can hold magnitudes whose keys leave them).
pub(crate) fn tiles_take(set: &VectorSet, metric: &Metric) -> Result<()> {
    let cpu = "the CPU engine answers it exactly (--device cpu)";
    if let Some((r, c, x)) = beyond_f32(set) {
        return Err(Error::invalid(format!(
            "vector {r} holds {x:e} at column {c}, beyond the range of f32 (about ±3.4e38) \
             that the cuda engine's tiles compute in; {cpu}"
        )));
    }
    if !KeyScale::fits_f32(metric, set) {
        let e = Extent::of(set);
        return Err(Error::invalid(format!(
            "values from {:e} to {:e} give {metric} keys beyond the range the cuda engine's \
             tiles compute in (f32 approximate keys, f64 exact ones); {cpu}",
            e.min, e.max
        )));
    }
    Ok(())
}

/// Whether the cuda engine's tiles hold every value of `set` and its keys under `metric`: false
/// where [`vectors`] refuses the set for its values, with a line that names them (NaN and
/// infinities pass here and are refused later, with their own message).
pub fn tiles_hold(set: &VectorSet, metric: &Metric) -> bool {
    tiles_take(set, metric).is_ok()
}

/// The first finite f64 value (row, column, value) whose f32 rounding overflows; `None` for
/// other storage. A parallel scan.
fn beyond_f32(set: &VectorSet) -> Option<(usize, usize, f64)> {
    let VectorData::F64(v) = set.data() else {
        return None;
    };
    let v = v.as_slice();
    let pos = v
        .par_iter()
        .position_first(|&x| x.is_finite() && (x as f32).is_infinite())?;
    let d = set.dim();
    Some((pos / d, pos % d, v[pos]))
}

/// Whether `set` is stored as f64: its tiles see rounded rows, and its exact keys are computed
/// on the host from the f64 values (see `ops::exact::keys`).
pub(crate) fn stored_f64(set: &VectorSet) -> bool {
    set.elem_type() == ElemType::F64
}

/// What the plan needs to know about one side's f64 storage: whether it is stored as f64 (its
/// exact keys then come from the host) and its largest rounding errors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct InputRounding {
    wide: bool,
    errors: Rounding,
}

impl InputRounding {
    /// `set`'s storage and the largest errors of rounding its rows to f32 under `metric` (the
    /// unit-vector move for cosine and correlation): one parallel pass over an f64 set, nothing
    /// for other storage.
    pub fn of(metric: &Metric, set: &VectorSet) -> InputRounding {
        InputRounding {
            wide: stored_f64(set),
            errors: input_rounding(metric, set),
        }
    }
}

/// The largest errors of rounding the rows of `set` to f32, with the unit-vector move for
/// cosine and correlation (`metric`); zero when `set` is not stored as f64. One parallel pass.
fn input_rounding(metric: &Metric, set: &VectorSet) -> Rounding {
    if !stored_f64(set) || set.is_empty() {
        return Rounding::default();
    }
    let d = set.dim();
    let unit = matches!(metric, Metric::Cosine | Metric::Correlation);
    let centred = *metric == Metric::Correlation;
    (0..set.len())
        .into_par_iter()
        .with_min_len((16384 / d).max(1))
        .map(|i| {
            let (x, r) = (set.row_f64(i), set.row_f32(i));
            let mut e = Rounding::of_row(&x, &r);
            if unit {
                e.unit = Rounding::unit_move(e.l2, centred_norm_low(&r, centred));
            }
            e
        })
        .reduce(Rounding::default, Rounding::max)
}

/// A lower bound of the norm of the f32 row `r` (centred on its mean when `centred`), from an
/// f64 computation: the f64 mean is off by at most 2(d + 2)u·Σ|rᵢ|/d (u = 2⁻⁵³), which moves
/// the centred row by √d times that, and the centring and the norm themselves carry at most
/// (d + 4) units of relative error.
fn centred_norm_low(r: &[f32], centred: bool) -> f64 {
    let d = r.len() as f64;
    let eps = f64::EPSILON;
    let (mean, drift) = if centred {
        let abs: f64 = r.iter().map(|&v| (v as f64).abs()).sum();
        let mean = r.iter().map(|&v| v as f64).sum::<f64>() / d;
        (mean, (d + 2.0) * eps * abs / d.sqrt())
    } else {
        (0.0, 0.0)
    };
    let norm = r
        .iter()
        .map(|&v| (v as f64 - mean) * (v as f64 - mean))
        .sum::<f64>()
        .sqrt();
    norm * (1.0 - (d + 4.0) * eps) - drift
}

/// The error for the first of `rows` (global indices, increasing) that holds a NaN or an
/// infinite value; rows whose values are all finite are passed over.
pub(crate) fn first_non_finite(set: &VectorSet, rows: &[usize]) -> Result<()> {
    for &r in rows {
        if let Some(c) = set.row_f32(r).iter().position(|x| !x.is_finite()) {
            return Err(non_finite(r, c));
        }
    }
    Ok(())
}

/// A host scan of every value, in parallel (for the paths that stream the set in pieces).
pub(crate) fn check_finite(set: &VectorSet) -> Result<()> {
    match set.find_non_finite() {
        Some((r, c)) => Err(non_finite(r, c)),
        None => Ok(()),
    }
}

fn non_finite(r: usize, c: usize) -> Error {
    Error::invalid(format!(
        "vector {r} holds a NaN or infinite value at column {c}"
    ))
}

impl Numerics {
    /// Plans `metric` for `base` (whose mean centres euclidean data).
    pub fn new(metric: &Metric, base: &VectorSet) -> Numerics {
        let d = base.dim();
        // γ_{L+8}-style bound with a factor 2 of safety: L roundings on the way of each product
        // into the sum (see `accumulation_length`), the two norm terms, the final subtraction
        // and the centring/normalising roundings.
        let gamma = 2.0 * (accumulation_length(d) as f64 + 8.0) * U32;
        let tiny = (d as f64 + 4.0) * f64::from(f32::MIN_POSITIVE);
        let (key, tile, rel, shift) = match metric {
            Metric::Euclidean | Metric::SqEuclidean => {
                (TileKey::L2, TileKind::Gemm, 0.0, Some(sample_mean(base)))
            }
            Metric::InnerProduct => (TileKey::NegDot, TileKind::Gemm, 0.0, None),
            Metric::Cosine | Metric::Correlation => (TileKey::OneMinus, TileKind::Gemm, 0.0, None),
            Metric::Cityblock => (
                TileKey::Direct,
                TileKind::Simt(abi::VT_CITYBLOCK, 1.0),
                sum_rel(d, 1.0),
                None,
            ),
            Metric::Chebyshev => (
                TileKey::Direct,
                TileKind::Simt(abi::VT_CHEBYSHEV, 1.0),
                2.0 * U32,
                None,
            ),
            Metric::Minkowski(p) => {
                // |fl(a−b)|^p carries p roundings of the difference plus powf's own error (a few
                // ulps); 2p + 16 units covers both with room.
                let term = 2.0 * p + 16.0;
                (
                    TileKey::Direct,
                    TileKind::Simt(abi::VT_MINKOWSKI, *p as f32),
                    sum_rel(d, term),
                    None,
                )
            }
            Metric::Levenshtein | Metric::Custom(_) => unreachable!("checked by vectors()"),
        };
        Numerics {
            key,
            tile,
            dim: d,
            shift,
            centre_rows: *metric == Metric::Correlation,
            unit: key == TileKey::OneMinus,
            exact_code: device_code(metric),
            distance_form: distance_form(metric),
            rel,
            tiny,
            gamma,
            arithmetic: Arithmetic::Fp32,
            storage: Storage::F32,
            input: 0.0,
            flush: 0.0,
            widen: None,
        }
    }

    /// The plan for searching `base` with `queries` (the same set for a graph): when either is
    /// stored as f64, tiles see their rows rounded to f32, so the bound is widened by how far
    /// that rounding moves a key (`rel` by α, [`Numerics::abs_bound`] by the rest), and exact keys
    /// go to the host, which computes them on the f64 values (no device exact-key code, so no
    /// device finish either). Other storage leaves the plan as it is.
    pub fn with_inputs(self, metric: &Metric, base: &VectorSet, queries: &VectorSet) -> Numerics {
        let b = InputRounding::of(metric, base);
        let q = if std::ptr::eq(base, queries) {
            b
        } else {
            InputRounding::of(metric, queries)
        };
        self.with_roundings(metric, &b, &q)
    }

    /// [`Numerics::with_inputs`] from the sides' measures (a prepared base measures its own once).
    /// Call it once, on a plan without inputs.
    pub fn with_roundings(
        mut self,
        metric: &Metric,
        base: &InputRounding,
        queries: &InputRounding,
    ) -> Numerics {
        debug_assert!(self.widen.is_none() && self.exact_code == device_code(metric));
        if !base.wide && !queries.wide {
            return self;
        }
        self.exact_code = None;
        self.distance_form = None;
        let (b, q) = (base.errors, queries.errors);
        if b.is_zero() && q.is_zero() {
            return self;
        }
        // α depends on the metric only (see `input_widening`).
        let (alpha, _) = input_widening(metric, &q, &b, (0.0, 0.0), 1.0);
        self.rel += alpha * (1.0 + self.rel);
        self.widen = Some(Widening {
            metric: metric.clone(),
            queries: q,
            base: b,
            alpha,
        });
        self
    }

    /// The plan with the GEMM tiles in `precision`: `Tf32` turns fp32 GEMM tiles on f32 rows
    /// into TF32 tiles; anything else leaves the plan as it is (SIMT tiles stay fp32, a TF32
    /// plan stays TF32, tiles on half storage keep their arithmetic). So it may be called on a
    /// plan already resolved to fp32 (what `--precision auto` does once its pilot chose TF32,
    /// [`Numerics::auto_tf32`]) and the terms below are added exactly once.
    ///
    /// TF32 bound, assuming the worst conversion (truncation to 10 explicit mantissa bits, not
    /// rounding; cuBLAS does not document which): each input is x(1+δ) with |δ| < 2^-10, so a
    /// product is off by less than (2^-9 + 2^-20)|xy| (the product of two 11-bit significands
    /// is exact in fp32), and the whole dot product by that times Σ|x_i y_i| ≤ ‖x‖‖y‖
    /// (Cauchy–Schwarz). Tensor cores may accumulate with truncation instead of
    /// round-to-nearest, which doubles the unit roundoff of the sums: γ is doubled.
    ///
    /// The same bound covers the graph's fused tile pairs, which run TF32 plans on f16 tensor
    /// cores: each prepared row scaled by a power of two that puts its largest value in
    /// [2¹⁴, 2¹⁵), rounded to f16 (kernels/distance/scaled_half.cu, ops/pair.rs). A value in
    /// f16's normal range is within 2⁻¹¹ of itself (inside the 2⁻¹⁰ above), products are exact
    /// in fp32 and the sums are the same tensor cores'. A value scaled below f16's normal range
    /// (rounded or flushed) loses at most 2⁻¹⁴ in scaled units: 2⁻²⁸ of its row's largest value,
    /// or 2⁻⁷⁶ where the scale is capped at 2⁶². Per side that is Σ|δxᵢ||yᵢ| ≤
    /// (2⁻²⁸‖x‖ + 2⁻⁷⁶)√d‖y‖: a relative term added to the input term, and an absolute one per
    /// unit of norm that exceeds (and so covers) TF32's own flushed inputs.
    ///
    /// `Fp16x3` (the fused tile pairs' split rows, kernels/distance/scaled_half.cu): each scaled
    /// value X (largest of its row in [2¹⁴, 2¹⁵)) as the f16s hi = f16(X) and lo = f16(X − hi),
    /// the difference exact in f32, and the products hi·hi′ + hi·lo′ + lo·hi′ on f16 tensor
    /// cores (each exact in fp32). In f16's normal range |X − hi| ≤ 2⁻¹¹|X| and
    /// |X − hi − lo| ≤ 2⁻²²|X|; a half below it, rounded or flushed, loses at most 2⁻¹⁴ in
    /// scaled units, so ε = X − hi − lo has |ε| ≤ 2⁻²²|X| + 2⁻¹⁴ and |lo| ≤ 2⁻¹¹|X| + 2⁻¹⁴.
    /// What the sum leaves out is Σ lo·lo′ + (hi + lo)ε′ + ε(hi′ + lo′) + εε′: at most
    /// 3·2⁻²²ΣXY plus 2⁻¹⁴ per value of one side against the other's Σ|X|, which as above is
    /// 2⁻²⁸√d‖x‖‖y‖ per side (2⁻⁷⁶√d‖x‖ per unit of norm where the scale is capped); 5 % covers
    /// the second-order terms. The sums: each step of 16 values adds its 16 hi·hi′ products to
    /// the accumulator on the tensor cores and then, in one f32 addition, a fresh sum of its 32
    /// small products (kernels/select/pair_filter.cu `pf_products`), so a product meets at most
    /// d + ⌈d/16⌉ roundings, doubled for truncation ([`split_gamma`]); the fresh sums' own error,
    /// 32 products of at most 2⁻¹⁰ of their hi·hi′ each, adds 2·γ₃₂·2⁻¹⁰ to the input term.
    /// Every other tile of such a plan (written tiles, the k-NN's fused filter) runs fp32,
    /// whose error is inside this bound.
    pub fn in_arithmetic(mut self, arithmetic: Arithmetic) -> Numerics {
        debug_assert!(matches!(
            arithmetic,
            Arithmetic::Fp32 | Arithmetic::Tf32 | Arithmetic::Fp16x3
        ));
        if arithmetic == Arithmetic::Fp32 || !self.fp32_gemm() {
            return self;
        }
        let rd = (self.dim as f64).sqrt();
        let below = 2.0 * 2f64.powi(-28) * rd;
        if arithmetic == Arithmetic::Tf32 {
            let u = 2f64.powi(-10);
            self.input = 1.05 * (2.0 * u + u * u + below);
            self.gamma *= 2.0;
            // TF32: inputs below f32's normal range may be flushed to zero by the tensor cores,
            // at most MIN_POSITIVE per component, Σ|y_i| ≤ √d‖y‖ per side; scaled f16 as above.
            self.flush = 2f64.powi(-76).max(f64::from(f32::MIN_POSITIVE)) * rd;
        } else {
            let small_sums = 2.0 * 2.0 * (32.0 + 8.0) * U32 * 2f64.powi(-10);
            self.input = 1.05 * (3.0 * 2f64.powi(-22) + below + small_sums);
            self.gamma = 2.0 * split_gamma(self.dim);
            self.flush = 1.05 * 2f64.powi(-76) * rd;
        }
        self.arithmetic = arithmetic;
        self
    }

    /// The plan on the device storage of a base stored as `base` with queries stored as
    /// `queries` (the same for a graph): their common element type where the device keeps it,
    /// f32 otherwise ([`Storage::of_pair`]). Call it once, on a fresh plan, before its
    /// arithmetic is set.
    pub fn on_storage(mut self, base: ElemType, queries: ElemType) -> Numerics {
        self.storage = Storage::of_pair(base, queries);
        self
    }

    /// The storage whose own tensor cores can tile this plan
    /// (docs/design/tensor-core-inputs.md): f16/bf16 storage under a GEMM metric without unit
    /// rows (euclidean, sqeuclidean, inner product), the stored values as they are; u8 storage
    /// under L2 keys (euclidean, sqeuclidean) of at most 131071 values, the values minus 128 as
    /// int8 with exact int32 dot products. `None` for the other plans.
    pub fn own_cores(&self) -> Option<Storage> {
        match self.storage {
            Storage::F16 | Storage::Bf16 if self.tile == TileKind::Gemm && !self.unit => {
                Some(self.storage)
            }
            Storage::U8 if self.key == TileKey::L2 && int8_exact(self.dim) => Some(Storage::U8),
            _ => None,
        }
    }

    /// The plan with GEMM tiles on the storage's own tensor cores.
    ///
    /// f16/bf16: the stored values as they are, with no translation (a translated f16 row is
    /// not an f16 row); products exact in fp32 (zero input term), the accumulation bounded as
    /// TF32's (γ doubled: the tensor cores may align and truncate), and inputs below the
    /// type's normal range possibly flushed, `min_normal·√d` per unit of norm. bf16 products
    /// below f32's normal range may be flushed too: at most 2⁻¹²⁶ each, inside `tiny`.
    ///
    /// u8: the values minus 128 as int8 (exact), int32 dot products (exact while
    /// d·128² < 2³¹, [`int8_exact`]); the key ‖r‖² + ‖c‖² − 2·r·c then meets only f32
    /// roundings: each squared norm (exact in f64) and the dot product rounded to f32, one
    /// addition and one subtraction, each within a unit of (‖r‖ + ‖c‖)², so at most five
    /// units. γ of 18 units covers them with room, whatever the dimension.
    pub fn on_own_cores(mut self) -> Numerics {
        let storage = self.storage;
        debug_assert!(self.tile == TileKind::Gemm && !self.unit && self.widen.is_none());
        debug_assert_eq!(self.own_cores(), Some(storage));
        self.arithmetic = Arithmetic::own(storage);
        self.input = 0.0;
        if storage == Storage::U8 {
            self.key = TileKey::L2Int;
            self.shift = Some(vec![128.0; self.dim]);
            self.gamma = 2.0 * 9.0 * U32;
            self.flush = 0.0;
        } else {
            self.shift = None;
            self.gamma *= 2.0;
            self.flush = min_normal(storage) * (self.dim as f64).sqrt();
        }
        self
    }

    /// The rows the GEMM tiles read under this plan.
    pub fn tile_rows(&self) -> TileRows {
        match self.arithmetic {
            Arithmetic::Fp16 | Arithmetic::Bf16 => TileRows::Stored,
            Arithmetic::Int8 => TileRows::I8,
            Arithmetic::Fp32 | Arithmetic::Tf32 | Arithmetic::Fp16x3 => TileRows::F32,
        }
    }

    /// Whether the tiles are fp32 GEMM tiles on f32 rows: what TF32 or fp16x3 may replace on
    /// the same prepared rows (so a search may switch after its base went up).
    pub fn fp32_gemm(&self) -> bool {
        self.tile == TileKind::Gemm
            && self.arithmetic == Arithmetic::Fp32
            && self.tile_rows() == TileRows::F32
    }

    /// How many entries of a list a proof of its `kk` nearest needs, for a query of bound `abs`
    /// whose list holds the approximate keys `keys` (ascending, at least `kk`): up to and with
    /// the first entry whose lower bound clears the upper bound of the `kk`-th (no item after
    /// it, nor any left out of a list that ends there, can be among the `kk` nearest). `None`
    /// when no entry of `keys` clears it. What the list pilots measure per query.
    pub fn proof_length(&self, keys: &[f32], kk: usize, abs: f64) -> Option<usize> {
        debug_assert!(kk >= 1 && keys.len() >= kk);
        let top = self.upper(keys[kk - 1], abs);
        keys.iter()
            .position(|&v| self.lower(v, abs) > top)
            .map(|r| r + 1)
    }

    /// Row `x` prepared on the host as kernels/distance/prepare.cu prepares f32 tile rows
    /// (translated by the shift, centred on its own mean, scaled to unit norm, each as the plan
    /// says; computed in f64 and rounded once), written to `out`; returns the prepared row's
    /// squared norm (summed in f64 over its f32 values, in any order). For host estimates (the pilot) and tests: the
    /// tiles read the device's rows.
    pub fn prepare_row(&self, x: &[f32], out: &mut [f32]) -> f64 {
        let d = x.len();
        let out = &mut out[..d];
        let mean = if self.centre_rows {
            x.iter().map(|&v| v as f64).sum::<f64>() / d as f64
        } else {
            0.0
        };
        let zeros;
        let shift: &[f32] = match &self.shift {
            Some(s) => s,
            None => {
                zeros = vec![0f32; d];
                &zeros
            }
        };
        let moved = || {
            x.iter()
                .zip(shift)
                .map(|(&v, &s)| v as f64 - s as f64 - mean)
        };
        let scale = if self.unit {
            let n = moved().map(|y| y * y).sum::<f64>().sqrt();
            if n > 0.0 {
                1.0 / n
            } else {
                0.0
            }
        } else {
            1.0
        };
        for (o, y) in out.iter_mut().zip(moved()) {
            *o = (y * scale) as f32;
        }
        // In four running sums, so that the loop vectorises.
        let mut sq = [0f64; 4];
        let chunks = out.chunks_exact(4);
        let tail: f64 = chunks.remainder().iter().map(|&v| (v as f64).powi(2)).sum();
        for c in chunks {
            for l in 0..4 {
                sq[l] += (c[l] as f64) * (c[l] as f64);
            }
        }
        sq.iter().sum::<f64>() + tail
    }

    /// The key a GEMM tile's epilogue makes of a dot product `dot` of two prepared rows whose
    /// squared norms are `q_sq` and `b_sq` (kernels/common/keys.cuh), in f32 on the host.
    /// `None` for keys that are not made from a dot product.
    pub fn gemm_key(&self, dot: f32, q_sq: f32, b_sq: f32) -> Option<f32> {
        match self.key {
            TileKey::L2 | TileKey::L2Int => Some(q_sq + b_sq - 2.0 * dot),
            TileKey::NegDot => Some(-dot),
            TileKey::OneMinus => Some(1.0 - dot),
            TileKey::Direct => None,
        }
    }

    /// The name checkpoints keep this plan's lists under (engine/passes.rs): every field, in
    /// the form they have held since GPU builds first kept partial lists (`Plan { key: L2, ...
    /// }`), so that a build takes back the lists an earlier build saved under the same
    /// numerics.
    pub fn checkpoint_name(&self) -> String {
        struct Named<'a>(&'a Numerics);
        impl std::fmt::Debug for Named<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let p = self.0;
                f.debug_struct("Plan")
                    .field("key", &p.key)
                    .field("tile", &p.tile)
                    .field("dim", &p.dim)
                    .field("shift", &p.shift)
                    .field("centre_rows", &p.centre_rows)
                    .field("unit", &p.unit)
                    .field("exact_code", &p.exact_code)
                    .field("distance_form", &p.distance_form)
                    .field("rel", &p.rel)
                    .field("tiny", &p.tiny)
                    .field("gamma", &p.gamma)
                    .field("precision", &p.arithmetic)
                    .field("storage", &p.storage)
                    .field("input", &p.input)
                    .field("flush", &p.flush)
                    .field("widen", &p.widen)
                    .finish()
            }
        }
        format!("{:?}", Named(self))
    }

    /// Whether the bound was widened for inputs rounded from f64 ([`Numerics::with_inputs`]): the
    /// keys it bounds are then those of the f64 values, not of the rows on the device.
    pub fn widened(&self) -> bool {
        self.widen.is_some()
    }

    /// The arithmetic of the tiles, as `--stats` reports it.
    pub fn arithmetic(&self) -> String {
        self.arithmetic.name().to_string()
    }

    /// Absolute error bound of query `q`'s keys (norm `qn`) against a base of largest norm `bn`.
    pub fn abs_bound(&self, qn: f64, bn: f64) -> f64 {
        // Error of the dot product from converted inputs (zero in fp32); the L2 key holds it
        // twice. Unit rows have norms within a few ulps of 1.
        let input = self.input * qn * bn + self.flush * (qn + bn);
        let b = match self.key {
            TileKey::L2 | TileKey::L2Int => self.gamma * (qn + bn) * (qn + bn) + 2.0 * input,
            TileKey::NegDot => self.gamma * qn * bn + input,
            TileKey::OneMinus => 4.0 * self.gamma + 1.01 * (self.input + 2.0 * self.flush),
            TileKey::Direct => 0.0,
        };
        // The bound itself is computed in f64 from rounded norms; 1 % covers that.
        let abs = b * 1.01 + self.tiny;
        let Some(w) = &self.widen else {
            return abs;
        };
        // Inputs rounded from f64: B₀(v) = rel₀|v| + abs + tiny widens to
        // B₀ + α(|v| + B₀) + β, whose |v| part is already in `rel`. The norms are those of the
        // prepared f32 rows, enlarged by γ for their own rounding.
        let (_, beta) = input_widening(&w.metric, &w.queries, &w.base, (qn, bn), 1.0 + self.gamma);
        abs + w.alpha * (abs + self.tiny) + beta * (1.0 + 1e-12)
    }

    /// Lowest exact key an approximate key `v` can stand for (query bound `abs`).
    pub fn lower(&self, v: f32, abs: f64) -> f64 {
        let v = v as f64;
        v - abs - self.rel * v.abs() - self.tiny
    }

    /// Highest exact key an approximate key `v` can stand for.
    pub fn upper(&self, v: f32, abs: f64) -> f64 {
        let v = v as f64;
        v + abs + self.rel * v.abs() + self.tiny
    }

    /// The f32 threshold on approximate keys that keeps every pair whose exact key may be at
    /// most `key` (the largest v with lower(v) ≤ key, rounded up).
    pub fn approx_threshold(&self, key: f64, abs: f64) -> f32 {
        let s = key + abs + self.tiny;
        let t = if s >= 0.0 {
            s / (1.0 - self.rel)
        } else {
            s / (1.0 + self.rel)
        };
        // 1e-6 relative is above f32's rounding of t; the approximate pass only needs to keep
        // a superset.
        (t + t.abs() * 1e-6 + 1e-30) as f32
    }

    /// Whether a pair's bound can be taken at its own base row's norm rather than the base's
    /// largest, and an item left out of a list bounded by how far its norm is from the
    /// query's ([`Numerics::left_out_lower`]): squared euclidean keys, whose bound grows with
    /// the square of the norms. On data with a heavy tail of norms (t-distributed or lognormal
    /// values: the largest norm 10²–10³ times the median) the bound at the largest norm covers
    /// the gap between neighbours of nearly every query, and lists would widen to the whole base.
    pub fn norm_aware(&self) -> bool {
        matches!(self.key, TileKey::L2 | TileKey::L2Int)
    }

    /// The lowest exact key an item left out of a list can have, when the list's largest
    /// approximate key is `v` (every left-out item's key is at least `v`), the query's prepared
    /// norm `qn` and the base's prepared norms at most `bmax`. An item of prepared norm r has
    /// an exact key of at least both `lower(v, abs_bound(qn, r))`, which falls as r grows, and
    /// [`Numerics::separation`]`(qn, r)`, which grows with r from r = qn on (for r ≤ qn the
    /// first alone is at least its value at qn). So over every r the key is at least the
    /// smaller of the first at the top and the second at the bottom of any bracket of their
    /// crossing; bisection narrows it. Only for [`Numerics::norm_aware`] plans.
    pub fn left_out_lower(&self, v: f32, qn: f64, bmax: f64) -> f64 {
        let a = |r: f64| self.lower(v, self.abs_bound(qn, r));
        let s = |r: f64| self.separation(qn, r);
        let (mut lo, mut hi) = (qn.min(bmax), bmax);
        if a(hi) >= s(hi) {
            return a(hi);
        }
        if a(lo) <= s(lo) {
            return a(lo);
        }
        for _ in 0..48 {
            let m = 0.5 * (lo + hi);
            if a(m) >= s(m) {
                lo = m;
            } else {
                hi = m;
            }
        }
        a(hi).min(s(lo))
    }

    /// A lower bound of the exact squared euclidean distance between two rows whose prepared
    /// rows have norms `qn` and `r`: (|qn − r| − slack)², the triangle inequality on the rows
    /// the norms are of, less how far preparing moved them. Each prepared value is one f32
    /// rounding of the translated value (at most 2⁻²⁴ of it, or 2⁻¹⁵⁰ below f32's normal
    /// range) of a value that was itself f32 or was first rounded from f64 (at most the
    /// widening's `l2` per row); the norms are sums in f64. The slack doubles the first two.
    fn separation(&self, qn: f64, r: f64) -> f64 {
        let moved = self
            .widen
            .as_ref()
            .map_or(0.0, |w| w.queries.l2 + w.base.l2);
        let under = 2f64.powi(-148) * (self.dim as f64).sqrt();
        let gap = (qn - r).abs() - 2f64.powi(-23) * (qn + r) - moved - under;
        if gap > 0.0 {
            gap * gap * (1.0 - 1e-9)
        } else {
            0.0
        }
    }
}

/// Column mean of up to 16384 evenly spaced rows, rounded to f32. Only a translation: its
/// exact value does not matter for correctness, only for how small the norms (and so the bound)
/// get; a sample keeps it off the critical path of a 1M-row base. 65536 rows took 1.4 ms of a
/// 29 ms k-NN (H200); a quarter of them leaves the mean's sampling error at a
/// hundredth of a standard deviation per coordinate.
fn sample_mean(set: &VectorSet) -> Vec<f32> {
    let (n, d) = (set.len(), set.dim());
    let step = n.div_ceil(16384).max(1);
    let picks: Vec<usize> = (0..n).step_by(step).collect();
    // Partial sums over fixed groups of rows, added in group order: the same mean whatever
    // the thread count (a serial pass took ~10 ms of a 1M×128 search).
    let partial: Vec<Vec<f64>> = picks
        .par_chunks(1024)
        .map(|group| {
            let mut sum = vec![0f64; d];
            for &i in group {
                sum.iter_mut()
                    .zip(set.row_f32(i).iter())
                    .for_each(|(a, &v)| *a += v as f64);
            }
            sum
        })
        .collect();
    let mut sum = vec![0f64; d];
    for p in &partial {
        sum.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    let m = picks.len().max(1) as f64;
    sum.into_iter().map(|s| (s / m) as f32).collect()
}

/// Relative bound of an f32 sum of `d` non-negative terms that each carry `term` units of
/// roundoff (the same reasoning as `voisin::metric::simd::nonneg_sum_error`).
fn sum_rel(d: usize, term: f64) -> f64 {
    let nu = (d as f64 + term + 2.0) * U32;
    2.0 * nu / (1.0 - nu)
}

/// The plan of `metric` in `arithmetic` (on the storage's own cores for fp16, bf16 and int8)
/// for a set of `d`-value rows stored as `elem` (one row of 0.5s): what decides which kernels
/// and rows a search takes.
#[cfg(test)]
pub(crate) fn plan_of(
    metric: &Metric,
    d: usize,
    arithmetic: Arithmetic,
    elem: ElemType,
) -> Numerics {
    let b = VectorSet::from_f32(1, d, vec![0.5; d]).unwrap();
    let plan = Numerics::new(metric, &b).on_storage(elem, elem);
    match arithmetic {
        Arithmetic::Fp16 | Arithmetic::Bf16 | Arithmetic::Int8 => {
            assert_eq!(plan.own_cores().map(Arithmetic::own), Some(arithmetic));
            plan.on_own_cores()
        }
        _ => plan.in_arithmetic(arithmetic),
    }
}

/// How the host's tiles ([`HostTiles`]) convert the prepared rows before their dot products.
#[cfg(test)]
#[derive(Clone, Copy)]
pub(crate) enum Conv {
    /// Each value by itself (the identity for fp32, TF32's truncation).
    Each(fn(f32) -> f32),
    /// Each row scaled by a power of two and rounded to f16 as kernels/distance/scaled_half.cu
    /// does, the dot product scaled back by both rows' factors.
    ScaledHalf,
    /// As `ScaledHalf`, each value split into its f16 and the f16 of what that leaves (the
    /// row as d his, then d los), the dot product hi·hi′ + hi·lo′ + lo·hi′ summed as the fused
    /// pair sums it (fp16x3): per 16 values, the hi·hi′ into the sum, then their small products'
    /// own sum added to it.
    SplitHalf,
}

#[cfg(test)]
impl Conv {
    /// Row `x` converted, and the factor its dot products are scaled back by.
    pub fn row(self, x: &[f32]) -> (Vec<f32>, f32) {
        match self {
            Conv::Each(f) => (x.iter().map(|&v| f(v)).collect(), 1.0),
            Conv::ScaledHalf | Conv::SplitHalf => {
                let m = x.iter().fold(0f32, |m, &v| m.max(v.abs()));
                // frexp's exponent of m (m = f·2^x, f in [0.5, 1)), from f64's bits (m is
                // normal there).
                let e = if m > 0.0 {
                    let x2 = ((f64::from(m).to_bits() >> 52) & 0x7ff) as i32 - 1022;
                    (15 - x2).clamp(-62, 62)
                } else {
                    0
                };
                let s = 2f32.powi(e);
                let h: Vec<f32> = x
                    .iter()
                    .map(|&v| half::f16::from_f32(v * s).to_f32())
                    .collect();
                let mut row = h.clone();
                if matches!(self, Conv::SplitHalf) {
                    let lo = x
                        .iter()
                        .zip(&h)
                        .map(|(&v, &hi)| half::f16::from_f32(v * s - hi));
                    row.extend(lo.map(|l| l.to_f32()));
                }
                (row, 2f32.powi(-e))
            }
        }
    }

    /// The f32 dot product of two converted rows, each part of K_CHUNK values summed in
    /// reverse (the bound must not depend on the order within a part), the parts in order;
    /// split rows as the fused pair sums them, hi·hi′, hi·lo′, lo·hi′ a value.
    pub fn dot(self, x: &[f32], y: &[f32]) -> f32 {
        let plain = |x: &[f32], y: &[f32]| {
            x.chunks(K_CHUNK)
                .zip(y.chunks(K_CHUNK))
                .map(|(xc, yc)| xc.iter().zip(yc).rev().map(|(&a, &b)| a * b).sum::<f32>())
                .fold(0.0f32, |acc, part| acc + part)
        };
        match self {
            Conv::SplitHalf => {
                let d = x.len() / 2;
                let ((xh, xl), (yh, yl)) = (x.split_at(d), y.split_at(d));
                (0..d).step_by(16).rev().fold(0.0f32, |acc, g| {
                    let step = g..(g + 16).min(d);
                    let big = step.clone().fold(acc, |s, i| s + xh[i] * yh[i]);
                    let small = step.fold(0.0f32, |s, i| s + xh[i] * yl[i] + xl[i] * yh[i]);
                    big + small
                })
            }
            _ => plain(x, y),
        }
    }
}

/// The GPU's approximate pass done on the host, for tests without a GPU: rows prepared as
/// kernels/distance/prepare.cu prepares them, GEMM keys from f32 dot products of the prepared
/// rows (inputs converted by `conv`, e.g. to TF32 or scaled f16) summed as ops/tile.rs sums them (chunk by
/// chunk, each chunk here in reverse order: the bound must not depend on the order within a
/// chunk), SIMT keys as distance/vector_tile.cu computes them (f32 differences, an f32 sum or
/// max, minkowski terms by powf).
#[cfg(test)]
pub(crate) struct HostTiles {
    /// `keys[j][i]`: query `j` against base item `i`.
    pub keys: Vec<Vec<f32>>,
    /// Norms of the prepared query rows.
    pub qnorm: Vec<f64>,
    /// Norms of the prepared base rows.
    pub bnorm: Vec<f64>,
    /// The base's largest prepared norm.
    pub bmax: f64,
}

#[cfg(test)]
impl HostTiles {
    pub fn new(
        plan: &Numerics,
        metric: &Metric,
        b: &VectorSet,
        q: &VectorSet,
        conv: Conv,
    ) -> HostTiles {
        let d = plan.dim;
        let prep = |x: &[f32]| -> Vec<f32> {
            let mut out = vec![0f32; d];
            plan.prepare_row(x, &mut out);
            out
        };
        let norm = |x: &[f32]| x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>();
        let bp: Vec<Vec<f32>> = (0..b.len()).map(|i| prep(&b.row_f32(i))).collect();
        let qp: Vec<Vec<f32>> = (0..q.len()).map(|j| prep(&q.row_f32(j))).collect();
        let bnorm: Vec<f64> = bp.iter().map(|r| norm(r).sqrt()).collect();
        let bmax = bnorm.iter().cloned().fold(0.0, f64::max);
        let key = |qr: &[f32], br: &[f32]| -> f32 {
            let dot = || -> f32 {
                let ((qc, qs), (bc, bs)) = (conv.row(qr), conv.row(br));
                conv.dot(&qc, &bc) * qs * bs
            };
            let diffs = || qr.iter().zip(br).map(|(&x, &y)| (x - y).abs());
            let sq = (norm(qr) as f32, norm(br) as f32);
            match (plan.key, metric) {
                // int32 sums of the int8 rows, exact, rounded to f32 once.
                (TileKey::L2Int, _) => {
                    let dot: i64 = qr.iter().zip(br).map(|(&x, &y)| x as i64 * y as i64).sum();
                    plan.gemm_key(dot as f32, sq.0, sq.1).unwrap()
                }
                (TileKey::L2 | TileKey::NegDot | TileKey::OneMinus, _) => {
                    plan.gemm_key(dot(), sq.0, sq.1).unwrap()
                }
                (TileKey::Direct, Metric::Cityblock) => diffs().sum(),
                (TileKey::Direct, Metric::Chebyshev) => diffs().fold(0.0f32, f32::max),
                (TileKey::Direct, Metric::Minkowski(p)) => diffs().map(|t| t.powf(*p as f32)).sum(),
                (TileKey::Direct, m) => unreachable!("no direct tile for {m}"),
            }
        };
        HostTiles {
            keys: qp
                .iter()
                .map(|qr| bp.iter().map(|br| key(qr, br)).collect())
                .collect(),
            qnorm: qp.iter().map(|r| norm(r).sqrt()).collect(),
            bnorm,
            bmax,
        }
    }
}

#[cfg(test)]
#[path = "../../tests/common/subspaces.rs"]
pub(crate) mod subspaces;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::prelude::*;
    use voisin::metric::exact::set_key;

    pub(crate) fn set(rng: &mut StdRng, n: usize, d: usize, offset: f32) -> VectorSet {
        let v = (0..n * d)
            .map(|_| rng.gen_range(-1.0f32..1.0) * 3.0 + offset)
            .collect();
        VectorSet::from_f32(n, d, v).unwrap()
    }

    /// Every arithmetic travels between processes as its code and reads back as itself; a
    /// number that is none reads back as none.
    #[test]
    fn arithmetic_codes_read_back() {
        for a in Arithmetic::ALL {
            assert_eq!(Arithmetic::from_code(a.code()), Some(a), "{a:?}");
        }
        assert_eq!(Arithmetic::from_code(Arithmetic::ALL.len() as u32), None);
    }

    /// TF32 conversion at its worst: the 13 low mantissa bits cut off (truncation).
    pub(crate) fn tf32_truncate(x: f32) -> f32 {
        f32::from_bits(x.to_bits() & !0x1fff)
    }

    /// The arithmetic of the GEMM path done on the host ([`HostTiles`]: prepared rows, f32
    /// norms, inputs converted by `conv`, an f32 dot product in any order): every approximate
    /// key of the GEMM metrics must lie within the plan's bound of the exact key, for base `b`
    /// and queries `q`.
    fn check_gemm_bound(precision: Arithmetic, conv: Conv, b: &VectorSet, q: &VectorSet) {
        let d = b.dim();
        for m in [
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Correlation,
        ] {
            let plan = Numerics::new(&m, b)
                .with_inputs(&m, b, q)
                .in_arithmetic(precision);
            let tiles = HostTiles::new(&plan, &m, b, q, conv);
            for j in 0..q.len() {
                let abs = plan.abs_bound(tiles.qnorm[j], tiles.bmax);
                for i in 0..b.len() {
                    let v = tiles.keys[j][i];
                    let exact = set_key(&m, b, i, q, j);
                    assert!(
                        plan.lower(v, abs) <= exact && exact <= plan.upper(v, abs),
                        "{m} {precision:?} d={d}: approx {v} exact {exact} bound {abs}"
                    );
                }
            }
        }
    }

    /// fp32 and TF32 keys on random data, near the origin and far from it (where centring and
    /// cancellation matter).
    #[test]
    fn gemm_bound_covers_f32_and_tf32_keys() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [1usize, 3, 127, 1025, 2 * K_CHUNK + 3] {
            for offset in [0.0f32, 100.0, 1e5] {
                let (b, q) = (set(&mut rng, 60, d, offset), set(&mut rng, 7, d, offset));
                check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &q);
                check_gemm_bound(Arithmetic::Tf32, Conv::Each(tf32_truncate), &b, &q);
                check_gemm_bound(Arithmetic::Tf32, Conv::ScaledHalf, &b, &q);
            }
        }
    }

    /// TF32's bound covers the fused pair's scaled f16 (ops/pair.rs) where f16's range bites:
    /// rows whose values span more than f16's normal range (the small ones scaled into its
    /// subnormals), rows of tiny values (the scale capped at 2⁶²), rows of one large value,
    /// zero rows and rows of very different norms, near the origin and far from it.
    #[test]
    fn tf32_bound_covers_scaled_half_rows() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [1usize, 3, 127, 1025] {
            let row = |rng: &mut StdRng, kind: usize| -> Vec<f32> {
                (0..d)
                    .map(|i| {
                        let u = rng.gen_range(-1.0f32..1.0);
                        match kind {
                            // One large value, the rest 2⁻²⁰ to 2⁻³⁰ of it.
                            0 => {
                                if i == 0 {
                                    u * 1e3
                                } else {
                                    u * 1e3 * 2f32.powi(-rng.gen_range(20..30))
                                }
                            }
                            1 => u * 1e-25,
                            2 => 0.0,
                            3 => u * 10f32.powi(rng.gen_range(-8..8)),
                            _ => u + 50.0,
                        }
                    })
                    .collect()
            };
            let make = |rng: &mut StdRng, n: usize| {
                let v = (0..n).flat_map(|i| row(rng, i % 5)).collect();
                VectorSet::from_f32(n, d, v).unwrap()
            };
            let (b, q) = (make(&mut rng, 40), make(&mut rng, 10));
            check_gemm_bound(Arithmetic::Tf32, Conv::ScaledHalf, &b, &q);
            check_gemm_bound(Arithmetic::Tf32, Conv::ScaledHalf, &b, &b);
            check_gemm_bound(Arithmetic::Fp16x3, Conv::SplitHalf, &b, &q);
            check_gemm_bound(Arithmetic::Fp16x3, Conv::SplitHalf, &b, &b);
        }
    }

    /// fp16x3's bound covers split rows on clustered data far from the origin (the data it is
    /// for: norms far above the gaps between near neighbours). Its input term is ~2⁻²⁰ of the
    /// norms' product against TF32's 2⁻⁹, so what is left is mostly the sums' γ: under 3 times
    /// fp32's (the tensor cores' truncation doubles it), and at d = 3 to 1025 under a quarter
    /// of TF32's bound.
    #[test]
    fn split_bound_covers_clustered_rows_and_is_near_fp32() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [3usize, 128, 1025] {
            let set = clustered(&mut rng, 120, d, 6);
            check_gemm_bound(Arithmetic::Fp16x3, Conv::SplitHalf, &set, &set);
            let e = Metric::Euclidean;
            let fp32 = Numerics::new(&e, &set).in_arithmetic(Arithmetic::Fp32);
            let bound = |p: Arithmetic| fp32.clone().in_arithmetic(p).abs_bound(30.0, 30.0);
            let (f, s, t) = (
                bound(Arithmetic::Fp32),
                bound(Arithmetic::Fp16x3),
                bound(Arithmetic::Tf32),
            );
            assert!(s > f && s < 3.0 * f && s < t / 4.0, "d={d}: {f} {s} {t}");
        }
    }

    /// The TF32 bound is needed at nearly its full size: every component 1 + 2^-10 − 2^-23
    /// loses almost 2^-10 of itself to truncation, all with the same sign, so the inner
    /// product is off by almost 2^-9 ‖x‖‖y‖. A bound built on rounding (2^-11) would fail here.
    #[test]
    fn tf32_bound_is_tight_on_worst_case_mantissas() {
        let x = f32::from_bits(0x3f80_1fff);
        for d in [3usize, 127, 1025] {
            let rows = VectorSet::from_f32(2, d, vec![x; 2 * d]).unwrap();
            let plan = Numerics::new(&Metric::InnerProduct, &rows).in_arithmetic(Arithmetic::Tf32);
            let nx = (d as f64).sqrt() * x as f64;
            let exact = -(d as f64) * (x as f64) * (x as f64);
            let dot: f32 = (0..d).map(|_| tf32_truncate(x) * tf32_truncate(x)).sum();
            let err = (-dot as f64 - exact).abs();
            let abs = plan.abs_bound(nx, nx);
            assert!(err <= abs, "d={d}: error {err} bound {abs}");
            assert!(err > 0.45 * abs, "d={d}: error {err} bound {abs}");
            check_gemm_bound(Arithmetic::Tf32, Conv::Each(tf32_truncate), &rows, &rows);
        }
    }

    /// Cancellation-heavy data: near-duplicate rows far from the origin (centring must bring the
    /// norms down) and rows whose prepared values sit on worst-case mantissas.
    #[test]
    fn tf32_bound_covers_near_duplicates_far_out() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [3usize, 127] {
            let centre: Vec<f32> = (0..d).map(|_| rng.gen_range(-1e4f32..1e4)).collect();
            let make = |rng: &mut StdRng, n: usize| {
                let v = (0..n * d)
                    .map(|i| centre[i % d] + rng.gen_range(-1.0f32..1.0) * 1e-2)
                    .collect();
                VectorSet::from_f32(n, d, v).unwrap()
            };
            let (b, q) = (make(&mut rng, 40), make(&mut rng, 5));
            check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &q);
            check_gemm_bound(Arithmetic::Tf32, Conv::Each(tf32_truncate), &b, &q);
            check_gemm_bound(Arithmetic::Tf32, Conv::ScaledHalf, &b, &q);
        }
    }

    /// SIMT metrics ignore the arithmetic.
    #[test]
    fn simt_plans_stay_fp32() {
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let p = Numerics::new(&Metric::Cityblock, &b).in_arithmetic(Arithmetic::Tf32);
        assert_eq!(p.arithmetic, Arithmetic::Fp32);
    }

    /// `n` × `d` values `offset + 3·U(−1, 1)` stored as f16 or bf16 (`elem`).
    fn half_set(rng: &mut StdRng, elem: ElemType, n: usize, d: usize, offset: f32) -> VectorSet {
        let v: Vec<f32> = (0..n * d)
            .map(|_| rng.gen_range(-1.0f32..1.0) * 3.0 + offset)
            .collect();
        let data = match elem {
            ElemType::F16 => VectorData::F16(
                v.iter()
                    .map(|&x| half::f16::from_f32(x))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            ElemType::Bf16 => VectorData::Bf16(
                v.iter()
                    .map(|&x| half::bf16::from_f32(x))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            _ => unreachable!(),
        };
        VectorSet::new(n, d, data).unwrap()
    }

    /// An f32 sum rounded toward zero (a truncating accumulator, the tensor cores' worst case).
    fn trunc_add(a: f32, b: f32) -> f32 {
        let exact = a as f64 + b as f64;
        let r = exact as f32;
        if (r as f64).abs() > exact.abs() {
            f32::from_bits(r.to_bits() - 1)
        } else {
            r
        }
    }

    /// f16 and bf16 storage: the tiles of the stored values (unshifted), products exact in
    /// f32, every addition truncated and each chunk summed in reverse, as tile.rs chunks it;
    /// the norms as prepare.cu computes them. Every key lies within the plan's bound of the
    /// exact key, near the origin and far from it (no translation on half storage).
    #[test]
    fn half_storage_bound_covers_truncated_accumulation() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for elem in [ElemType::F16, ElemType::Bf16] {
            for d in [1usize, 3, 127, 1025, 2 * K_CHUNK + 3] {
                for offset in [0.0f32, 100.0, 1000.0] {
                    let (b, q) = (
                        half_set(&mut rng, elem, 40, d, offset),
                        half_set(&mut rng, elem, 5, d, offset),
                    );
                    for m in [Metric::Euclidean, Metric::SqEuclidean, Metric::InnerProduct] {
                        let plan = Numerics::new(&m, &b).on_storage(elem, elem).on_own_cores();
                        assert!(plan.storage != Storage::F32 && plan.shift.is_none());
                        let sq = |r: &[f32]| r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>();
                        let bmax = (0..b.len())
                            .map(|i| sq(&b.row_f32(i)).sqrt())
                            .fold(0.0, f64::max);
                        for j in 0..q.len() {
                            let qr = q.row_f32(j);
                            let abs = plan.abs_bound(sq(&qr).sqrt(), bmax);
                            for i in 0..b.len() {
                                let br = b.row_f32(i);
                                let dot = qr
                                    .chunks(K_CHUNK)
                                    .zip(br.chunks(K_CHUNK))
                                    .map(|(qc, bc)| {
                                        qc.iter()
                                            .zip(bc)
                                            .rev()
                                            .fold(0.0f32, |acc, (&x, &y)| trunc_add(acc, x * y))
                                    })
                                    .fold(0.0f32, trunc_add);
                                let v = match plan.key {
                                    TileKey::L2 => sq(&qr) as f32 + sq(&br) as f32 - 2.0 * dot,
                                    _ => -dot,
                                };
                                let exact = set_key(&m, &b, i, &q, j);
                                assert!(
                                    plan.lower(v, abs) <= exact && exact <= plan.upper(v, abs),
                                    "{m} {elem:?} d={d} offset {offset}: approx {v} exact \
                                     {exact} bound {abs}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// u8 rows on int8 tiles: values minus 128, int32 dot products, the key's f32 roundings.
    /// Every key lies within the plan's bound of the exact key, on random bytes, on the
    /// extremes (all 0 against all 255: the largest norms), and on duplicates (key 0).
    #[test]
    fn int8_bound_covers_u8_keys() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let u8_set = |rng: &mut StdRng, n: usize, d: usize| {
            let v: Vec<u8> = (0..n * d)
                .map(|i| match i % 7 {
                    0 => 0,
                    1 => 255,
                    _ => rng.gen(),
                })
                .collect();
            VectorSet::new(n, d, VectorData::U8(v.into())).unwrap()
        };
        for d in [1usize, 3, 127, 1025, 2 * K_CHUNK + 3] {
            let b = u8_set(&mut rng, 40, d);
            let mut qv: Vec<u8> = b.rows_f32(0, 3).iter().map(|&x| x as u8).collect();
            qv.extend(std::iter::repeat_n(0u8, d));
            qv.extend(std::iter::repeat_n(255u8, d));
            let q = VectorSet::new(5, d, VectorData::U8(qv.into())).unwrap();
            let b = {
                let mut bv: Vec<u8> = b.rows_f32(0, 40).iter().map(|&x| x as u8).collect();
                bv.extend(std::iter::repeat_n(255u8, d));
                VectorSet::new(41, d, VectorData::U8(bv.into())).unwrap()
            };
            for m in [Metric::Euclidean, Metric::SqEuclidean] {
                let plan = Numerics::new(&m, &b)
                    .on_storage(ElemType::U8, ElemType::U8)
                    .on_own_cores();
                assert_eq!(plan.key, TileKey::L2Int);
                let tiles = HostTiles::new(&plan, &m, &b, &q, Conv::Each(|x| x));
                for j in 0..q.len() {
                    let abs = plan.abs_bound(tiles.qnorm[j], tiles.bmax);
                    for i in 0..b.len() {
                        let v = tiles.keys[j][i];
                        let exact = set_key(&m, &b, i, &q, j);
                        assert!(
                            plan.lower(v, abs) <= exact && exact <= plan.upper(v, abs),
                            "{m} d={d}: approx {v} exact {exact} bound {abs}"
                        );
                    }
                }
            }
        }
    }

    /// `n` rows of `d` values on `count` random 8-d affine subspaces (as gpu_bench's
    /// clustered data, tests/common/subspaces.rs).
    pub(crate) fn clustered(rng: &mut StdRng, n: usize, d: usize, count: usize) -> VectorSet {
        let spaces = subspaces::subspaces(rng, count, d);
        VectorSet::from_f32(n, d, subspaces::rows_on(rng, &spaces, n, d)).unwrap()
    }

    /// A proof reaches the first entry whose lower bound clears the k-th's upper bound.
    #[test]
    fn proof_length_reaches_the_first_clear_entry() {
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let plan = Numerics::new(&Metric::InnerProduct, &b);
        let keys = [1.0f32, 2.0, 2.5, 3.0, 4.0, 9.0];
        // The 2nd key's upper bound is just above 2 (+ abs); the lower bound of an entry v is
        // v − abs.
        assert_eq!(plan.proof_length(&keys, 2, 0.0), Some(3));
        assert_eq!(plan.proof_length(&keys, 2, 0.3), Some(4));
        assert_eq!(plan.proof_length(&keys, 2, 0.8), Some(5));
        assert_eq!(plan.proof_length(&keys, 2, 3.0), Some(6));
        assert_eq!(plan.proof_length(&keys, 2, 3.6), None);
        assert_eq!(plan.proof_length(&keys, 6, 0.0), None);
        // Ties at the k-th: the proof passes them all.
        assert_eq!(
            plan.proof_length(&[1.0, 1.0, 1.0, 1.0, 2.0], 1, 0.0),
            Some(5)
        );
    }

    /// Thresholds keep every approximate key whose interval may reach the radius key.
    #[test]
    fn approx_threshold_keeps_a_superset() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let b = set(&mut rng, 10, 16, 0.0);
        for m in [Metric::Euclidean, Metric::Cityblock, Metric::InnerProduct] {
            let plan = Numerics::new(&m, &b);
            for _ in 0..10_000 {
                let key = rng.gen_range(-50.0..50.0);
                let abs = rng.gen_range(0.0..1.0)
                    * if plan.key == TileKey::Direct {
                        0.0
                    } else {
                        1.0
                    };
                let t = plan.approx_threshold(key, abs);
                let v: f32 = rng.gen_range(-60.0..60.0);
                if plan.lower(v, abs) <= key {
                    assert!(
                        v <= t,
                        "{m}: v {v} lower {} key {key} thr {t}",
                        plan.lower(v, abs)
                    );
                }
            }
        }
    }

    /// f64 rows of `n` × `d` values `centre + spread·N(0, 1)`, stored as f64 (most values are
    /// not f32 numbers).
    pub(crate) fn f64_set(
        rng: &mut StdRng,
        n: usize,
        d: usize,
        centre: f64,
        spread: f64,
    ) -> VectorSet {
        let v = (0..n * d)
            .map(|_| centre + spread * rng.sample::<f64, _>(rand_distr::StandardNormal))
            .collect();
        VectorSet::from_f64(n, d, v).unwrap()
    }

    /// Integers far from the origin that collide once rounded to f32 (its spacing at 1e8 is 8):
    /// ties and near-ties the f32 rows cannot tell apart.
    fn colliding_set(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
        let v = (0..n * d)
            .map(|_| 1e8 + rng.gen_range(0..24) as f64)
            .collect();
        VectorSet::from_f64(n, d, v).unwrap()
    }

    /// The GEMM metrics' widened bound covers the exact keys of the f64 rows, from keys computed
    /// as the GPU does on the rows rounded to f32 (fp32 and TF32), near the origin, far from it,
    /// and on values that collide in f32.
    #[test]
    fn widened_gemm_bound_covers_f64_rows() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [1usize, 3, 127] {
            for (centre, spread) in [(0.0, 1.0), (1e5, 3.0), (1e8, 1.0), (0.0, 1e-30)] {
                let b = f64_set(&mut rng, 50, d, centre, spread);
                let q = f64_set(&mut rng, 7, d, centre, spread);
                check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &q);
                check_gemm_bound(Arithmetic::Tf32, Conv::Each(tf32_truncate), &b, &q);
                check_gemm_bound(Arithmetic::Tf32, Conv::ScaledHalf, &b, &q);
                // A graph: the queries are the base.
                check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &b);
            }
            let (b, q) = (
                colliding_set(&mut rng, 50, d),
                colliding_set(&mut rng, 7, d),
            );
            check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &q);
            check_gemm_bound(Arithmetic::Tf32, Conv::Each(tf32_truncate), &b, &q);
            // f32 queries against an f64 base and the other way round.
            let q32 = set(&mut rng, 7, d, 1e8);
            check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &b, &q32);
            check_gemm_bound(Arithmetic::Fp32, Conv::Each(|x| x), &q32, &b);
        }
    }

    /// The SIMT metrics' widened bound covers the exact keys of the f64 rows.
    #[test]
    fn widened_simt_bound_covers_f64_rows() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let metrics = [
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Minkowski(1.5),
            Metric::Minkowski(3.0),
            Metric::Minkowski(8.0),
        ];
        for d in [1usize, 3, 127] {
            for (centre, spread) in [(0.0, 1.0), (1e5, 3.0), (1e8, 1.0)] {
                let sets = [
                    (
                        f64_set(&mut rng, 40, d, centre, spread),
                        f64_set(&mut rng, 5, d, centre, spread),
                    ),
                    (
                        colliding_set(&mut rng, 40, d),
                        colliding_set(&mut rng, 5, d),
                    ),
                ];
                for (b, q) in &sets {
                    for m in &metrics {
                        let plan = Numerics::new(m, b).with_inputs(m, b, q);
                        let tiles = HostTiles::new(&plan, m, b, q, Conv::Each(|x| x));
                        for j in 0..q.len() {
                            let abs = plan.abs_bound(tiles.qnorm[j], tiles.bmax);
                            for i in 0..b.len() {
                                let v = tiles.keys[j][i];
                                let exact = set_key(m, b, i, q, j);
                                assert!(
                                    plan.lower(v, abs) <= exact && exact <= plan.upper(v, abs),
                                    "{m} d={d}: approx {v} exact {exact} bound {abs}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The widening is needed: two f64 values 1e8 + 1 and 1e8 + 3 round to the same f32, whose
    /// key (0) the f32 bound alone proves to be the exact key, which it is not; the widened
    /// plan's interval holds the exact key.
    #[test]
    fn the_f32_bound_alone_misses_rounded_inputs() {
        let b = VectorSet::from_f64(1, 1, vec![1e8 + 1.0]).unwrap();
        let q = VectorSet::from_f64(1, 1, vec![1e8 + 3.0]).unwrap();
        for m in [Metric::SqEuclidean, Metric::Cityblock, Metric::Chebyshev] {
            let v = 0.0f32;
            let exact = set_key(&m, &b, 0, &q, 0);
            let plain = Numerics::new(&m, &b);
            let abs = plain.abs_bound(0.0, 0.0);
            assert!(exact > plain.upper(v, abs), "{m}: {exact}");
            let wide = Numerics::new(&m, &b).with_inputs(&m, &b, &q);
            let abs = wide.abs_bound(0.0, 0.0);
            assert!(
                wide.lower(v, abs) <= exact && exact <= wide.upper(v, abs),
                "{m}"
            );
        }
    }

    /// f32 data leaves the plan as it was; f64 storage sends exact keys to the host even when no
    /// value was rounded, and widens the bound only when one was.
    #[test]
    fn f64_storage_plans() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let narrow = set(&mut rng, 30, 4, 1.0);
        let exact_f64 = VectorSet::from_f64(30, 4, narrow.rows_f64(0, 30).into_owned()).unwrap();
        let wide = f64_set(&mut rng, 30, 4, 0.0, 1.0);
        for m in [Metric::Euclidean, Metric::Cosine, Metric::Minkowski(3.0)] {
            let base = Numerics::new(&m, &narrow);
            let same = Numerics::new(&m, &narrow).with_inputs(&m, &narrow, &narrow);
            assert_eq!(BoundParts::of(&base), BoundParts::of(&same), "{m}");
            assert_eq!(base.exact_code, same.exact_code);
            assert_eq!(base.abs_bound(2.0, 3.0), same.abs_bound(2.0, 3.0));
            let unrounded = Numerics::new(&m, &narrow).with_inputs(&m, &narrow, &exact_f64);
            assert_eq!(unrounded.exact_code, None, "{m}");
            assert_eq!(unrounded.distance_form, None, "{m}");
            assert_eq!(base.abs_bound(2.0, 3.0), unrounded.abs_bound(2.0, 3.0));
            let widened = Numerics::new(&m, &narrow).with_inputs(&m, &narrow, &wide);
            assert_eq!(widened.exact_code, None, "{m}");
            assert!(
                widened.abs_bound(2.0, 3.0) > base.abs_bound(2.0, 3.0),
                "{m}"
            );
            // A prepared base measures itself once and widens a copy of its plan per batch.
            let (b, q) = (InputRounding::of(&m, &narrow), InputRounding::of(&m, &wide));
            let per_batch = Numerics::new(&m, &narrow).with_roundings(&m, &b, &q);
            assert_eq!(BoundParts::of(&per_batch), BoundParts::of(&widened), "{m}");
            assert_eq!(per_batch.abs_bound(2.0, 3.0), widened.abs_bound(2.0, 3.0));
            assert_eq!(per_batch.exact_code, None, "{m}");
            // f32 queries against an f64 base still take their exact keys from the host.
            let f64_base = Numerics::new(&m, &wide).with_roundings(&m, &q, &b);
            assert_eq!(f64_base.exact_code, None, "{m}");
        }
    }

    /// The lower bound of a centred norm stays below the norm computed exactly (in rationals:
    /// here, in f64 on integers, which is exact), on rows with a large mean and small spread.
    #[test]
    fn centred_norm_low_is_a_lower_bound() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for d in [1usize, 2, 3, 127, 1000] {
            for _ in 0..50 {
                // Integers up to 2^12 around 2^20: squares and sums stay exact in f64, and the
                // mean is exact when d is a power of two; otherwise compare d² × the norm².
                let r: Vec<f32> = (0..d)
                    .map(|_| (1u32 << 20) as f32 + rng.gen_range(0..4096) as f32)
                    .collect();
                let sum: i128 = r.iter().map(|&v| v as i128).sum();
                let dd = d as i128;
                // d² ‖r − mean‖² = Σ (d·rᵢ − sum)²
                let scaled: i128 = r.iter().map(|&v| (dd * v as i128 - sum).pow(2)).sum();
                let truth = (scaled as f64).sqrt() / d as f64;
                let low = centred_norm_low(&r, true);
                assert!(
                    low <= truth * (1.0 + 1e-15),
                    "d={d}: low {low} norm {truth}"
                );
                let plain = centred_norm_low(&r, false);
                let n2: f64 = r.iter().map(|&v| (v as f64).powi(2)).sum();
                assert!(plain <= n2.sqrt(), "d={d}");
            }
        }
    }

    /// f64 values whose f32 rounding overflows are refused in one line that names them; every
    /// other f64 value is taken, those that round to zero included.
    #[test]
    fn values_beyond_f32_are_refused_by_name() {
        let ok: Dataset = VectorSet::from_f64(2, 2, vec![0.1, 1e300 * 0.0, 3e15, -1e-50])
            .unwrap()
            .into();
        assert!(vectors(&ok, &Metric::Euclidean).is_ok());
        assert!(tiles_hold(ok.as_vectors().unwrap(), &Metric::Euclidean));
        let big: Dataset = VectorSet::from_f64(2, 2, vec![0.1, 2.0, 3.0, -1e39])
            .unwrap()
            .into();
        assert!(!tiles_hold(big.as_vectors().unwrap(), &Metric::Cosine));
        let err = vectors(&big, &Metric::Cosine).unwrap_err().to_string();
        assert!(
            err.contains("vector 1") && err.contains("column 1") && err.contains("-1e39"),
            "{err}"
        );
        assert!(err.contains("--device cpu"), "{err}");
        // NaN and infinities pass here and are refused with their own message later.
        let nan: Dataset = VectorSet::from_f64(1, 2, vec![f64::NAN, f64::INFINITY])
            .unwrap()
            .into();
        assert!(tiles_hold(nan.as_vectors().unwrap(), &Metric::Euclidean));
    }

    /// Values whose keys leave f32's range (where the CPU engine scales its keys) are refused
    /// under the metrics whose keys grow with them, whatever the storage; scale-free metrics
    /// take them, and values just inside are taken.
    #[test]
    fn keys_beyond_f32_are_refused() {
        let at = |x: f32| -> Dataset {
            VectorSet::from_f32(2, 3, vec![x, 1.0, -x, 0.5, 2.0, 3.0])
                .unwrap()
                .into()
        };
        for m in [
            Metric::Euclidean,
            Metric::SqEuclidean,
            Metric::InnerProduct,
            Metric::Cityblock,
            Metric::Minkowski(3.0),
        ] {
            assert!(vectors(&at(1e6), &m).is_ok(), "{m}");
            assert!(vectors(&at(2f32.powi(-140)), &m).is_ok(), "{m}");
            let err = vectors(&at(2f32.powi(125)), &m).unwrap_err().to_string();
            assert!(
                err.contains("keys beyond the range") && err.contains("--device cpu"),
                "{m}: {err}"
            );
        }
        for m in [Metric::Cosine, Metric::Correlation] {
            assert!(vectors(&at(2f32.powi(125)), &m).is_ok(), "{m}");
        }
        // f64 values whose exact squares underflow f64.
        let tiny: Dataset = VectorSet::from_f64(1, 2, vec![1e-180, 0.0]).unwrap().into();
        let err = vectors(&tiny, &Metric::SqEuclidean)
            .unwrap_err()
            .to_string();
        assert!(err.contains("from 1e-180 to 1e-180"), "{err}");
        assert!(vectors(&tiny, &Metric::Chebyshev).is_ok());
    }
}
