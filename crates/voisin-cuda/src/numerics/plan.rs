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
use voisin::metric::simd::U32;
use voisin::{Error, Metric, Result};

use crate::options::Precision;
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

/// The precision of tiles on `storage`'s own tensor cores.
fn own_precision(storage: Storage) -> Precision {
    match storage {
        Storage::F32 => Precision::Fp32,
        Storage::F16 => Precision::Fp16,
        Storage::Bf16 => Precision::Bf16,
        Storage::U8 => Precision::Int8,
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
    /// Arithmetic of the GEMM tiles (never `Auto`: [`Numerics::with_arithmetic`] resolves it).
    pub precision: Precision,
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
        // f64 values are tiled rounded to f32 (the plan widens its bound for that), which
        // needs their rounding to be finite.
        (Dataset::Vectors(v), _) => match beyond_f32(v) {
            None => Ok(v),
            Some((r, c, x)) => Err(Error::invalid(format!(
                "vector {r} holds {x:e} at column {c}, beyond the range of f32 (about \
                 ±3.4e38) that the cuda engine's tiles compute in; the CPU engine answers it \
                 exactly (--device cpu)"
            ))),
        },
    }
}

/// Whether the cuda engine's tiles hold every value of `set`: true unless it is stored as f64
/// and some finite value rounds to an infinite f32 (NaN and infinities are refused later, with
/// their own message).
pub fn tiles_hold(set: &VectorSet) -> bool {
    beyond_f32(set).is_none()
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
            precision: Precision::Fp32,
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
    pub fn with_precision(mut self, precision: Precision) -> Numerics {
        debug_assert!(matches!(
            precision,
            Precision::Fp32 | Precision::Tf32 | Precision::Fp16x3
        ));
        if precision == Precision::Fp32 || !self.fp32_gemm() {
            return self;
        }
        let rd = (self.dim as f64).sqrt();
        let below = 2.0 * 2f64.powi(-28) * rd;
        if precision == Precision::Tf32 {
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
        self.precision = precision;
        self
    }

    /// The plan with the arithmetic `precision` resolves to for a base stored as `base` and
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
    ///   is up and switches to TF32 ([`Numerics::auto_tf32`]) when TF32's bound proves the pilot
    ///   queries cheaply ([`tf32_list`]). TF32 was about 2× faster than fp32 at
    ///   1M×128 on normal, far-from-origin and duplicate-heavy data, but 5.8× slower on a
    ///   clustered graph, where its interval kept 48× more candidates
    ///   (docs/design/tensor-core-inputs.md): the pilot tells such data apart;
    /// - `Fp32`, `Tf32`: as asked, on f32 rows prepared on the device from the stored ones.
    ///
    /// Call it once, on a fresh plan.
    pub fn with_arithmetic(
        mut self,
        precision: Precision,
        base: ElemType,
        queries: ElemType,
    ) -> Result<Numerics> {
        self.storage = Storage::of_pair(base, queries);
        let own = match self.storage {
            Storage::F16 | Storage::Bf16 if self.tile == TileKind::Gemm && !self.unit => {
                Some(self.storage)
            }
            Storage::U8 if self.key == TileKey::L2 && int8_exact(self.dim) => Some(Storage::U8),
            _ => None,
        };
        match (precision, own) {
            (Precision::Auto, Some(own)) => Ok(self.on_own_cores(own)),
            (Precision::Auto, None) => Ok(self.with_precision(Precision::Fp32)),
            (Precision::Fp32 | Precision::Tf32 | Precision::Fp16x3, _) => {
                Ok(self.with_precision(precision))
            }
            (Precision::Fp16 | Precision::Bf16 | Precision::Int8, Some(own))
                if own_precision(own) == precision =>
            {
                Ok(self.on_own_cores(own))
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
                } else if precision == Precision::Int8 && !int8_exact(self.dim) {
                    format!("{} dimensions (int32 sums hold up to 131071)", self.dim)
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
    fn on_own_cores(mut self, storage: Storage) -> Numerics {
        debug_assert!(self.tile == TileKind::Gemm && !self.unit && self.widen.is_none());
        debug_assert_eq!(self.storage, storage);
        self.precision = own_precision(storage);
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
        match self.precision {
            Precision::Fp16 | Precision::Bf16 => TileRows::Stored,
            Precision::Int8 => TileRows::I8,
            _ => TileRows::F32,
        }
    }

    /// Under `--precision auto` (`asked`), this plan's TF32 form when a pilot may choose it:
    /// the plan resolved to fp32 GEMM tiles on f32 rows ([`Numerics::with_arithmetic`]'s `Auto`
    /// without half storage). `None` for an explicit precision, tiles on half storage and SIMT
    /// metrics. The prepared rows are the same for both, so a search may switch after its base
    /// went up.
    pub fn auto_tf32(&self, asked: Precision) -> Option<Numerics> {
        self.auto_form(asked, Precision::Tf32)
    }

    /// [`Numerics::auto_tf32`] for another arithmetic on the same rows (`Fp16x3`).
    pub fn auto_form(&self, asked: Precision, precision: Precision) -> Option<Numerics> {
        (asked == Precision::Auto && self.fp32_gemm())
            .then(|| self.clone().with_precision(precision))
    }

    /// Whether the tiles are fp32 GEMM tiles on f32 rows (what TF32 may replace).
    fn fp32_gemm(&self) -> bool {
        self.tile == TileKind::Gemm
            && self.precision == Precision::Fp32
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
                    .field("precision", &p.precision)
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
        self.precision.name().to_string()
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
/// on the H100, run d2), and a fixed part more beyond that list, where the query is widened
/// (run d3 on the H100: the clustered 1M × 128 k-NN's extra evaluations under TF32 cost ~100 ns
/// each, the clustered graph's ~53 ns).
const EVAL_NS_PER_DIM: f64 = 0.006;
const WIDENED_EVAL_NS: f64 = 100.0;

/// What a widening pass is charged per query, per pair and dimension, in ns: its candidates are
/// looked for again over the whole base, at about fp32 tile speed (2 flops at 36 TFLOP/s).
///
/// It undercharges on purpose. A widened query's whole cost is larger: at k = 1000 its list of
/// 4500 is selected, downloaded, sorted and re-ranked, ~120 µs a query against this charge's
/// 7 µs (run e3 on the H100: the 149 of 10k queries TF32 left unproved in the clustered
/// 1M × 128 k-NN took 17.7 ms of host finish). But 32 pilot queries resolve widening rates only
/// in steps of 3 %: there at least one pilot query widened against 1.5 % of the search's, and
/// the full charge took fp32 (0.172 s with the pilot) where TF32 ran in 0.135 s and fp32 alone
/// in 0.149 s. Where many queries widen, the evaluations beyond the list
/// ([`WIDENED_EVAL_NS`]) decide.
const REPASS_NS: f64 = 2.0 / 36e3;

/// What TF32 tiles save per pair and dimension, in ns, measured end to end on the H100 (run
/// d3): 1M × 128 k-NN of 10k queries 0.111 s → 0.077 s (2.7e-5), and the 100k × 15876 graph
/// 4.48 s → 2.20 s over 5·10⁹ pairs (4.5e-5; wide tiles run TF32 at ~300 TFLOP/s).
fn tf32_saving_ns(dim: usize) -> f64 {
    if dim >= 1024 {
        4.3e-5
    } else {
        2.66e-5
    }
}

/// What a search pays per query for each entry its lists keep beyond the narrowest, in ns:
/// a wider selection, a longer list to download and prove. Measured end to end on the H100
/// (run f3): TF32 k-NN of 1M × 128 for 10k queries took 0.055 s with lists 32 wide (k = 10)
/// and 0.098 s with lists 2048 wide (k = 1000), 2.1 ns per entry and query.
pub(crate) const LIST_ENTRY_NS: f64 = 2.0;

/// [`LIST_ENTRY_NS`] for searches whose passes filter the base with fused tile pairs
/// (ops/fused.rs `FusedKernel::Pair`): a wider list lets more survivors through every chunk,
/// each appended and merged. Measured end to end on the H200: TF32 k-NN of 1M × 128 for 10k
/// queries, k = 10, with lists 128 wide (the pilot's choice) against 32 wide (which proved
/// every query): 0.038 / 0.0325 s in one call (far data 0.036 / 0.031 s), 0.035 / 0.032 s in
/// another; 3 to 6 ns per entry and query.
pub(crate) const FUSED_LIST_ENTRY_NS: f64 = 4.5;

/// Whether `--precision auto` runs TF32 tiles, and with which list, from the pilot's proof
/// lengths `needs` (lists of `listed` entries) for k-NN lists whose first size is `first`
/// (`knn::first_list`), where each query meets `pairs` tile pairs (the base; half the set for
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
/// pairs save more). Measured end to end on the H200 (session 24, 1M × 128 clustered, k = 10):
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

/// Column mean of up to 16384 evenly spaced rows, rounded to f32. Only a translation: its
/// exact value does not matter for correctness, only for how small the norms (and so the bound)
/// get; a sample keeps it off the critical path of a 1M-row base. 65536 rows took 1.4 ms of a
/// 29 ms k-NN (H200, session 17); a quarter of them leaves the mean's sampling error at a
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

/// The plan of `metric` under `precision` for a set of `d`-value rows stored as `elem` (one
/// row of 0.5s): what decides which kernels and rows a search takes.
#[cfg(test)]
pub(crate) fn plan_of(metric: &Metric, d: usize, precision: Precision, elem: ElemType) -> Numerics {
    let b = VectorSet::from_f32(1, d, vec![0.5; d]).unwrap();
    Numerics::new(metric, &b)
        .with_arithmetic(precision, elem, elem)
        .unwrap()
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
        let bmax = bp.iter().map(|r| norm(r).sqrt()).fold(0.0, f64::max);
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
            bmax,
        }
    }
}

#[cfg(test)]
#[path = "../../tests/common/subspaces.rs"]
pub(crate) mod subspaces;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::prelude::*;
    use voisin::metric::exact::set_key;

    fn set(rng: &mut StdRng, n: usize, d: usize, offset: f32) -> VectorSet {
        let v = (0..n * d)
            .map(|_| rng.gen_range(-1.0f32..1.0) * 3.0 + offset)
            .collect();
        VectorSet::from_f32(n, d, v).unwrap()
    }

    /// TF32 conversion at its worst: the 13 low mantissa bits cut off (truncation).
    fn tf32_truncate(x: f32) -> f32 {
        f32::from_bits(x.to_bits() & !0x1fff)
    }

    /// The arithmetic of the GEMM path done on the host ([`HostTiles`]: prepared rows, f32
    /// norms, inputs converted by `conv`, an f32 dot product in any order): every approximate
    /// key of the GEMM metrics must lie within the plan's bound of the exact key, for base `b`
    /// and queries `q`.
    fn check_gemm_bound(precision: Precision, conv: Conv, b: &VectorSet, q: &VectorSet) {
        let d = b.dim();
        for m in [
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Correlation,
        ] {
            let plan = Numerics::new(&m, b)
                .with_inputs(&m, b, q)
                .with_precision(precision);
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
                check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &q);
                check_gemm_bound(Precision::Tf32, Conv::Each(tf32_truncate), &b, &q);
                check_gemm_bound(Precision::Tf32, Conv::ScaledHalf, &b, &q);
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
            check_gemm_bound(Precision::Tf32, Conv::ScaledHalf, &b, &q);
            check_gemm_bound(Precision::Tf32, Conv::ScaledHalf, &b, &b);
            check_gemm_bound(Precision::Fp16x3, Conv::SplitHalf, &b, &q);
            check_gemm_bound(Precision::Fp16x3, Conv::SplitHalf, &b, &b);
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
            check_gemm_bound(Precision::Fp16x3, Conv::SplitHalf, &set, &set);
            let e = Metric::Euclidean;
            let fp32 = Numerics::new(&e, &set).with_precision(Precision::Fp32);
            let bound = |p: Precision| fp32.clone().with_precision(p).abs_bound(30.0, 30.0);
            let (f, s, t) = (
                bound(Precision::Fp32),
                bound(Precision::Fp16x3),
                bound(Precision::Tf32),
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
            let plan = Numerics::new(&Metric::InnerProduct, &rows).with_precision(Precision::Tf32);
            let nx = (d as f64).sqrt() * x as f64;
            let exact = -(d as f64) * (x as f64) * (x as f64);
            let dot: f32 = (0..d).map(|_| tf32_truncate(x) * tf32_truncate(x)).sum();
            let err = (-dot as f64 - exact).abs();
            let abs = plan.abs_bound(nx, nx);
            assert!(err <= abs, "d={d}: error {err} bound {abs}");
            assert!(err > 0.45 * abs, "d={d}: error {err} bound {abs}");
            check_gemm_bound(Precision::Tf32, Conv::Each(tf32_truncate), &rows, &rows);
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
            check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &q);
            check_gemm_bound(Precision::Tf32, Conv::Each(tf32_truncate), &b, &q);
            check_gemm_bound(Precision::Tf32, Conv::ScaledHalf, &b, &q);
        }
    }

    #[test]
    fn precision_names() {
        assert_eq!("TF32".parse::<Precision>().unwrap(), Precision::Tf32);
        assert_eq!("fp32".parse::<Precision>().unwrap(), Precision::Fp32);
        assert!("int4".parse::<Precision>().is_err());
        assert_eq!("BF16".parse::<Precision>().unwrap(), Precision::Bf16);
        assert_eq!("auto".parse::<Precision>().unwrap(), Precision::Auto);
        // SIMT metrics ignore the option.
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let p = Numerics::new(&Metric::Cityblock, &b).with_precision(Precision::Tf32);
        assert_eq!(p.precision, Precision::Fp32);
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
                        let plan = Numerics::new(&m, &b)
                            .with_arithmetic(Precision::Auto, elem, elem)
                            .unwrap();
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
                    .with_arithmetic(Precision::Auto, ElemType::U8, ElemType::U8)
                    .unwrap();
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

    /// What `auto` and the explicit precisions resolve to per storage and metric, and the
    /// one-line refusals.
    #[test]
    fn arithmetic_per_storage() {
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let resolve = |m: &Metric, p: Precision, be: ElemType, qe: ElemType| {
            Numerics::new(m, &b).with_arithmetic(p, be, qe)
        };
        use ElemType::*;
        let (e, ip, cos, cb) = (
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Cityblock,
        );
        let auto = |m: &Metric, be, qe| resolve(m, Precision::Auto, be, qe).unwrap();
        assert_eq!(auto(&e, F16, F16).precision, Precision::Fp16);
        assert_eq!(auto(&e, F16, F16).storage, Storage::F16);
        assert_eq!(auto(&ip, Bf16, Bf16).storage, Storage::Bf16);
        assert_eq!(auto(&e, F16, F32).precision, Precision::Fp32);
        assert_eq!(auto(&e, F16, F32).storage, Storage::F32);
        assert_eq!(auto(&cos, F16, F16).precision, Precision::Fp32);
        assert_eq!(auto(&e, F32, F32).precision, Precision::Fp32);
        assert_eq!(auto(&e, U8, U8).precision, Precision::Int8);
        assert_eq!(auto(&e, U8, U8).key, TileKey::L2Int);
        assert_eq!(auto(&e, U8, U8).tile_rows(), TileRows::I8);
        assert_eq!(auto(&ip, U8, U8).precision, Precision::Fp32);
        assert_eq!(auto(&ip, U8, U8).storage, Storage::U8);
        assert_eq!(auto(&cb, U8, U8).tile_rows(), TileRows::F32);
        assert_eq!(auto(&e, U8, F32).storage, Storage::F32);
        assert_eq!(auto(&e, F64, F32).precision, Precision::Fp32);
        assert_eq!(auto(&cb, F16, F16).precision, Precision::Fp32);
        assert_eq!(auto(&cb, F32, F32).storage, Storage::F32);
        let fp16 = resolve(&e, Precision::Fp16, F16, F16).unwrap();
        assert_eq!(fp16.storage, Storage::F16);
        assert_eq!(fp16.tile_rows(), TileRows::Stored);
        // Other arithmetic on half rows: the stored rows stay as they are, the tiles read f32
        // rows prepared from them on the device.
        let tf32 = resolve(&e, Precision::Tf32, F16, F16).unwrap();
        assert_eq!(
            (tf32.storage, tf32.precision, tf32.tile_rows()),
            (Storage::F16, Precision::Tf32, TileRows::F32)
        );
        let int8 = resolve(&Metric::SqEuclidean, Precision::Int8, U8, U8).unwrap();
        assert_eq!(int8.precision, Precision::Int8);
        for (m, p, be, qe, why) in [
            (&e, Precision::Fp16, F32, F32, "f32 data"),
            (&e, Precision::Fp16, Bf16, Bf16, "bf16 data"),
            (&e, Precision::Bf16, F16, F16, "f16 data"),
            (&e, Precision::Fp16, F16, F32, "a f16 base with f32 queries"),
            (&cos, Precision::Fp16, F16, F16, "this metric"),
            (&cb, Precision::Bf16, Bf16, Bf16, "this metric"),
            (&e, Precision::Int8, F32, F32, "f32 data"),
            (&e, Precision::Int8, U8, F32, "a u8 base with f32 queries"),
            (&ip, Precision::Int8, U8, U8, "this metric"),
            (&cos, Precision::Int8, U8, U8, "this metric"),
        ] {
            let err = resolve(m, p, be, qe).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("--precision auto") && !err.contains('\n'),
                "{err}"
            );
        }
    }

    /// `auto`'s switch to TF32 after the fact gives the plan an explicit `tf32` makes, term for
    /// term (γ doubled once, the input and flush terms), with or without f64 inputs and for a
    /// prepared base's per-batch widening; a second switch changes nothing. Only fp32 GEMM
    /// tiles on f32 rows under `auto` may switch.
    #[test]
    fn auto_tf32_is_a_fresh_tf32_plan() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let narrow = set(&mut rng, 40, 9, 5.0);
        let wide = f64_set(&mut rng, 40, 9, 5.0, 1.0);
        let queries = f64_set(&mut rng, 6, 9, 5.0, 1.0);
        let gemm = [
            Metric::Euclidean,
            Metric::SqEuclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Correlation,
        ];
        for m in &gemm {
            for (b, q) in [(&narrow, &narrow), (&wide, &queries), (&narrow, &queries)] {
                let resolve = |p: Precision| {
                    Numerics::new(m, b)
                        .with_arithmetic(p, b.elem_type(), q.elem_type())
                        .unwrap()
                        .with_inputs(m, b, q)
                };
                let auto = resolve(Precision::Auto);
                assert_eq!(auto.precision, Precision::Fp32, "{m}");
                let switched = auto.auto_tf32(Precision::Auto).expect("fp32 GEMM tiles");
                let fresh = resolve(Precision::Tf32);
                assert_eq!(format!("{switched:?}"), format!("{fresh:?}"), "{m}");
                assert_eq!(switched.abs_bound(2.0, 3.0), fresh.abs_bound(2.0, 3.0));
                assert!(
                    switched.abs_bound(2.0, 3.0) > auto.abs_bound(2.0, 3.0),
                    "{m}"
                );
                assert_eq!(switched.arithmetic(), "tf32");
                let twice = switched.clone().with_precision(Precision::Tf32);
                assert_eq!(format!("{twice:?}"), format!("{fresh:?}"), "{m}");
                assert!(switched.auto_tf32(Precision::Auto).is_none());
                assert!(fresh.auto_tf32(Precision::Auto).is_none());
                for asked in [Precision::Fp32, Precision::Tf32] {
                    assert!(resolve(asked).auto_tf32(asked).is_none(), "{m} {asked}");
                }
            }
            // A prepared base keeps the plan before queries and widens a copy per batch.
            let (rb, rq) = (InputRounding::of(m, &wide), InputRounding::of(m, &queries));
            let base = |p: Precision| {
                Numerics::new(m, &wide)
                    .with_arithmetic(p, ElemType::F64, ElemType::F64)
                    .unwrap()
            };
            let switched = base(Precision::Auto)
                .auto_tf32(Precision::Auto)
                .unwrap()
                .with_roundings(m, &rb, &rq);
            let per_batch = base(Precision::Auto)
                .with_roundings(m, &rb, &rq)
                .auto_tf32(Precision::Auto)
                .unwrap();
            let fresh = base(Precision::Tf32).with_roundings(m, &rb, &rq);
            assert_eq!(format!("{switched:?}"), format!("{fresh:?}"), "{m}");
            assert_eq!(format!("{per_batch:?}"), format!("{fresh:?}"), "{m}");
        }
        // SIMT metrics and tiles on the storage's own cores have no TF32 form.
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let auto = |m: &Metric, e: ElemType| {
            Numerics::new(m, &b)
                .with_arithmetic(Precision::Auto, e, e)
                .unwrap()
                .auto_tf32(Precision::Auto)
        };
        assert!(auto(&Metric::Cityblock, ElemType::F32).is_none());
        assert!(auto(&Metric::Minkowski(3.0), ElemType::F32).is_none());
        assert!(auto(&Metric::Euclidean, ElemType::F16).is_none());
        // u8 under euclidean runs on int8 tiles; under inner product on f32 rows.
        assert!(auto(&Metric::Euclidean, ElemType::U8).is_none());
        assert!(auto(&Metric::InnerProduct, ElemType::U8).is_some());
        // Cosine on f16 storage runs on f32 copies: TF32 may take it.
        assert!(auto(&Metric::Cosine, ElemType::F16).is_some());
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

    /// The rule on pilot measurements: TF32 where the evaluations it adds cost less than the
    /// tile time it saves; the cases of bench/RESULTS.md's session 8.
    /// The rule with one kept width.
    fn tf32_proves_cheaply(
        needs: &[PilotNeed],
        (first, kept, listed): (usize, usize, usize),
        shape: (usize, usize),
    ) -> bool {
        tf32_list(needs, (first, listed), &[kept], shape, LIST_ENTRY_NS).is_some()
    }

    #[test]
    fn tf32_rule_on_pilot_measurements() {
        let need = |fp32, tf32| PilotNeed { fp32, tf32 };
        let graph_1m = (500_000, 128);
        let knn_1m = (1_000_000, 128);
        // k = 10: first list 18, kept 32 wide; pilot lists of 512.
        let rule = |needs: &[PilotNeed], shape| tf32_proves_cheaply(needs, (18, 32, 512), shape);
        // Normal data: both prove inside the list, TF32 a few entries later.
        let cheap = vec![need(Some(12), Some(22)); 32];
        assert!(rule(&cheap, graph_1m) && rule(&cheap, knn_1m));
        // A few queries longer under TF32 do not tip it.
        let mut some_longer = cheap.clone();
        some_longer[..2].fill(need(Some(12), Some(90)));
        assert!(rule(&some_longer, graph_1m));
        // Clustered data: TF32 needs 70–400 entries, or more than the pilot listed.
        assert!(!rule(&vec![need(Some(12), Some(110)); 32], graph_1m));
        assert!(!rule(&vec![need(Some(12), Some(74)); 32], knn_1m));
        assert!(!rule(&vec![need(Some(14), None); 32], knn_1m));
        // Extra evaluations inside the list: worth it against a large base, not a tiny one.
        assert!(rule(&vec![need(Some(12), Some(30)); 32], knn_1m));
        assert!(!rule(&vec![need(Some(12), Some(30)); 32], (100, 128)));
        // Duplicates: fp32 needs long lists too, TF32 little more: TF32.
        assert!(rule(&vec![need(Some(110), Some(120)); 32], graph_1m));
        assert!(rule(&vec![need(None, None); 32], graph_1m));
        // A small base saves too little for any widening.
        assert!(!rule(&vec![need(Some(12), Some(40)); 32], (8000, 128)));
        // k = 1000: lists 2048 wide re-ranked on the device; TF32's longer proofs fit.
        let wide_list =
            |needs: &[PilotNeed]| tf32_proves_cheaply(needs, (1125, 2048, 4500), knn_1m);
        assert!(wide_list(&vec![need(Some(1010), Some(1600)); 32]));
        assert!(!wide_list(&vec![need(Some(1010), Some(4000)); 32]));
        // A quarter of the queries beyond those lists: their widening passes cost more than
        // TF32 saves.
        let mut some_widened = vec![need(Some(1010), Some(1300)); 32];
        some_widened[..8].fill(need(Some(1010), Some(2500)));
        assert!(!wide_list(&some_widened));
        // The wide graph (100k × 15876): ~95 more per row, inside the list its pilot sized.
        let wide = tf32_proves_cheaply(
            &vec![need(Some(15), Some(110)); 32],
            (18, 140, 512),
            (50_000, 15876),
        );
        assert!(wide);
        // Nothing measured (every pilot list complete): fp32.
        assert!(!rule(&[], graph_1m));
    }

    #[test]
    fn tf32_widens_its_list_where_that_proves_on_the_device() {
        let need = |fp32, tf32| PilotNeed { fp32, tf32 };
        let knn_1m = (1_000_000, 128);
        // k = 10: first list 18, kept 32 wide; TF32 may keep 128, 256 or 512; pilot lists 512.
        let widths = [32, 128, 256, 512];
        let pick =
            |needs: &[PilotNeed], shape| tf32_list(needs, (18, 512), &widths, shape, LIST_ENTRY_NS);
        // Normal data proves in the usual list.
        assert_eq!(pick(&vec![need(Some(12), Some(22)); 32], knn_1m), Some(0));
        // Clustered data: ~110 entries under TF32 prove on the device in a list of 128, and
        // the wider list costs less than widening every query.
        assert_eq!(pick(&vec![need(Some(12), Some(110)); 32], knn_1m), Some(1));
        assert_eq!(pick(&vec![need(Some(12), Some(200)); 32], knn_1m), Some(2));
        // Without the wider widths the same proofs keep fp32 (the widening passes).
        assert!(tf32_list(
            &vec![need(Some(12), Some(110)); 32],
            (18, 512),
            &[32],
            knn_1m,
            LIST_ENTRY_NS
        )
        .is_none());
        // Proofs beyond the pilot's lists and a base too small to save: fp32.
        assert_eq!(pick(&vec![need(Some(12), None); 32], knn_1m), None);
        assert_eq!(
            pick(&vec![need(Some(12), Some(110)); 32], (8000, 128)),
            None
        );
        // A proof no list holds is not worth a wider list for every query; one a wider list
        // holds may be (a widened query costs ~120 µs).
        let mut few = vec![need(Some(12), Some(20)); 32];
        few[0] = need(Some(12), None);
        assert_eq!(pick(&few, knn_1m), Some(0));
        few[0] = need(Some(12), Some(300));
        assert_eq!(pick(&few, knn_1m), Some(2));
        // One query in 32 a little past the usual list: worth a wider list for every query
        // where entries are cheap (written tiles), not where each costs survivors in every
        // chunk of fused tile pairs.
        few[0] = need(Some(12), Some(40));
        assert_eq!(pick(&few, knn_1m), Some(1));
        let fused = tf32_list(&few, (18, 512), &widths, knn_1m, FUSED_LIST_ENTRY_NS);
        assert_eq!(fused, Some(0));
    }

    /// `n` rows of `d` values on `count` random 8-d affine subspaces (as gpu_bench's
    /// clustered data, tests/common/subspaces.rs).
    fn clustered(rng: &mut StdRng, n: usize, d: usize, count: usize) -> VectorSet {
        let spaces = subspaces::subspaces(rng, count, d);
        VectorSet::from_f32(n, d, subspaces::rows_on(rng, &spaces, n, d)).unwrap()
    }

    /// The pilot of a graph done on the host: TF32 keys ([`HostTiles`], truncating inputs) of 32
    /// evenly spaced items against the whole set, lists of `listed`, each list's proof length
    /// under the fp32 and the TF32 plan (self pair included: k + 1), and the rule; with the
    /// fp16x3 plan's proof lengths on the same keys (as `tf32`) and its rule, as
    /// search/pilot.rs weighs them for a graph.
    fn host_pilot(m: &Metric, set: &VectorSet, k: usize) -> (bool, Vec<PilotNeed>) {
        let (tf32, needs, _) = host_pilots(m, set, k);
        (tf32, needs)
    }

    fn host_pilots(m: &Metric, set: &VectorSet, k: usize) -> (bool, Vec<PilotNeed>, bool) {
        let fp32 = Numerics::new(m, set)
            .with_arithmetic(Precision::Auto, ElemType::F32, ElemType::F32)
            .unwrap();
        let tf32 = fp32.auto_tf32(Precision::Auto).unwrap();
        let split = fp32.auto_form(Precision::Auto, Precision::Fp16x3).unwrap();
        let (n, d) = (set.len(), set.dim());
        let ids: Vec<usize> = (0..32).map(|i| i * n / 32).collect();
        let rows = ids.iter().flat_map(|&i| set.row_f32(i).to_vec()).collect();
        let q = VectorSet::from_f32(ids.len(), d, rows).unwrap();
        let tiles = HostTiles::new(&tf32, m, set, &q, Conv::Each(tf32_truncate));
        let (kk, listed) = (k + 1, 512);
        let (needs, split_needs): (Vec<PilotNeed>, Vec<PilotNeed>) = (0..q.len())
            .map(|j| {
                let mut keys = tiles.keys[j].clone();
                keys.sort_unstable_by(f32::total_cmp);
                keys.truncate(listed);
                let need = |p: &Numerics| {
                    p.proof_length(&keys, kk, p.abs_bound(tiles.qnorm[j], tiles.bmax))
                };
                let fp32 = need(&fp32);
                (
                    PilotNeed {
                        fp32,
                        tf32: need(&tf32),
                    },
                    PilotNeed {
                        fp32,
                        tf32: need(&split),
                    },
                )
            })
            .unzip();
        let first = k + (k / 8).max(8);
        // Decided for the graph this sample stands for (1M items, as dense on each subspace as
        // gpu_bench's clustered kind): half of it per row, lists kept 32 wide.
        let kept = first.next_power_of_two().max(32);
        let shape = (500_000, d);
        let rule = (LIST_ENTRY_NS, SPLIT_SAVING_SHARE);
        let split = tensor_list(&split_needs, (first, listed), &[kept], shape, rule).is_some();
        (
            tf32_proves_cheaply(&needs, (first, kept, listed), shape),
            needs,
            split,
        )
    }

    /// Where TF32 loses on the clustered graph (euclidean, the benchmark's), the fp16x3 rule
    /// takes split rows: their proofs (on the pilot's TF32 keys) run ~17 entries against
    /// fp32's ~14 where TF32's run to hundreds. (Cosine on the same data keeps fp32: its keys
    /// sit so close that the split's γ, ~6× fp32's, doubles the proofs past the graph's kept
    /// list of 32, and widening costs more than the split saves.)
    #[test]
    fn host_pilot_takes_split_rows_for_clustered_graphs() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let set = clustered(&mut rng, 2000, 128, 2);
        let (tf32, needs, split) = host_pilots(&Metric::Euclidean, &set, 10);
        let show: Vec<_> = needs.iter().map(|n| (n.fp32, n.tf32)).collect();
        assert!(!tf32 && split, "(fp32, tf32) proof lengths {show:?}");
    }

    /// On the host's emulation of the tiles, the pilot takes TF32 for normal data (near the
    /// origin and far from it) and fp32 for clustered data (2,000 points on two 8-d subspaces,
    /// as dense on each as gpu_bench's 1M on 1,000), d = 128, euclidean and cosine.
    #[test]
    fn host_pilot_tells_normal_from_clustered_data() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let (n, d, k) = (2000, 128, 10);
        let normal = |rng: &mut StdRng, offset: f32| {
            let v = (0..n * d)
                .map(|_| offset + rng.sample::<f32, _>(rand_distr::StandardNormal))
                .collect();
            VectorSet::from_f32(n, d, v).unwrap()
        };
        let both = [Metric::Euclidean, Metric::Cosine];
        // (Cosine far from the origin is left out: its keys are closer together than even
        // fp32's bound, and no list of the pilot proves under either arithmetic.)
        let cases = [
            ("normal", normal(&mut rng, 0.0), &both[..], true),
            ("normal + 100", normal(&mut rng, 100.0), &both[..1], true),
            ("clustered", clustered(&mut rng, n, d, 2), &both[..], false),
        ];
        for (what, set, metrics, tf32) in &cases {
            for m in metrics.iter() {
                let (got, needs) = host_pilot(m, set, k);
                let show: Vec<_> = needs.iter().map(|n| (n.fp32, n.tf32)).collect();
                assert_eq!(
                    got, *tf32,
                    "{what} {m}: (fp32, tf32) proof lengths {show:?}"
                );
            }
        }
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
    fn f64_set(rng: &mut StdRng, n: usize, d: usize, centre: f64, spread: f64) -> VectorSet {
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
                check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &q);
                check_gemm_bound(Precision::Tf32, Conv::Each(tf32_truncate), &b, &q);
                check_gemm_bound(Precision::Tf32, Conv::ScaledHalf, &b, &q);
                // A graph: the queries are the base.
                check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &b);
            }
            let (b, q) = (
                colliding_set(&mut rng, 50, d),
                colliding_set(&mut rng, 7, d),
            );
            check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &q);
            check_gemm_bound(Precision::Tf32, Conv::Each(tf32_truncate), &b, &q);
            // f32 queries against an f64 base and the other way round.
            let q32 = set(&mut rng, 7, d, 1e8);
            check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &b, &q32);
            check_gemm_bound(Precision::Fp32, Conv::Each(|x| x), &q32, &b);
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
    /// other f64 value is taken.
    #[test]
    fn values_beyond_f32_are_refused_by_name() {
        let ok: Dataset = VectorSet::from_f64(2, 2, vec![0.1, 1e300 * 0.0, 3e38, -1e-300])
            .unwrap()
            .into();
        assert!(vectors(&ok, &Metric::Euclidean).is_ok());
        assert!(tiles_hold(ok.as_vectors().unwrap()));
        let big: Dataset = VectorSet::from_f64(2, 2, vec![0.1, 2.0, 3.0, -1e39])
            .unwrap()
            .into();
        assert!(!tiles_hold(big.as_vectors().unwrap()));
        let err = vectors(&big, &Metric::Cosine).unwrap_err().to_string();
        assert!(
            err.contains("vector 1") && err.contains("column 1"),
            "{err}"
        );
        assert!(
            err.contains("-1e39") && err.contains("--device cpu"),
            "{err}"
        );
        // NaN and infinities pass here and are refused with their own message later.
        let nan: Dataset = VectorSet::from_f64(1, 2, vec![f64::NAN, f64::INFINITY])
            .unwrap()
            .into();
        assert!(tiles_hold(nan.as_vectors().unwrap()));
    }
}
