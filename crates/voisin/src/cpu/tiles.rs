//! Approximate key tiles: the f32 pass that produces candidates.
//!
//! A tile is the block of keys between a run of query rows and a run of base rows, written
//! row-major into a caller's buffer. The GEMM metrics go through one matrix product plus norms
//! ([Dashti13] §3.2.1, docs/references.md) on rows prepared per metric (centred for euclidean, normalised for cosine,
//! centred and normalised per row for correlation); the others through the direct kernels of
//! [`crate::metric::simd`]. Every tile comes with a [`Bound`] so that selection can keep every
//! item that may be among the exact k nearest. This module must not select; it only measures.
//!
//! # f64 storage
//!
//! f64 rows are rounded to f32 for the tiles, so a tile's keys approximate the keys of the
//! rounded rows x̃ while the exact key is that of the stored rows x. Each prepared block records
//! the largest rounding error of its rows, measured exactly (`e = x − x̃` is exact in f64), in the
//! norms the metrics need ([`Rounding`]), and the tile bound is widened by how far the key can
//! move when its inputs move that far. With K the exact key of x and K̃ that of x̃, and
//! `|K̃ − v| ≤ B₀(v)` the f32 bound, a perturbation bound `|K − K̃| ≤ α·|K̃| + β` gives
//! `|K − v| ≤ B₀(v) + α·(|v| + B₀(v)) + β` ([`Bound::widen`]). Per plan, with ρ = ‖e_q‖ + ‖e_b‖:
//!
//! - sqeuclidean/euclidean (key ‖x − y‖²): `|‖a‖² − ‖ã‖²| ≤ ρ₂·(2‖ã‖ + ρ₂)` and
//!   `‖ã‖ = ‖x̃ − ỹ‖ ≤ s`, the sum of the blocks' largest centred norms: α = 0, β = ρ₂(2s + ρ₂).
//! - inner_product (key −x·y): `|x·y − x̃·ỹ| ≤ ‖x̃‖ρ₂(y) + ‖ỹ‖ρ₂(x) + ρ₂(x)ρ₂(y)`.
//! - cosine and correlation (key 1 − x̂·ŷ on rows centred by their mean for correlation; the
//!   centring is an orthogonal projection, so it does not lengthen e): a unit vector moves by at
//!   most `2‖e‖/‖x̃‖`, and the key by at most the sum of both moves: β = u_q + u_b with u the
//!   blocks' largest `2‖e‖/‖x̃‖` (infinite when a row rounds to zero but is not zero).
//! - cityblock: β = ρ₁; chebyshev: β = ρ∞.
//! - minkowski p (key ‖a‖ₚᵖ): `|‖a‖ₚ − ‖ã‖ₚ| ≤ Δ = ρ₁` and, by convexity, for any t > 0,
//!   `|‖a‖ₚᵖ − ‖ã‖ₚᵖ| ≤ ((1 + t)^(p−1) − 1)·‖ã‖ₚᵖ + (1 + 1/t)^(p−1)·Δᵖ`; t = 2⁻¹⁶. Orders above
//!   [`MINKOWSKI_POWER_KEY_MAX`](crate::metric::MINKOWSKI_POWER_KEY_MAX) (key ‖a‖ₚ itself): β = ρ₁.
//!
//! # Large minkowski orders
//!
//! Above [`MINKOWSKI_POWER_KEY_MAX`](crate::metric::MINKOWSKI_POWER_KEY_MAX) the key is the distance ‖a‖ₚ, and the tile holds chebyshev
//! keys ‖a‖∞ instead (a p-th power of f32 differences overflows or vanishes): since
//! `‖a‖∞ ≤ ‖a‖ₚ ≤ d^(1/p)·‖a‖∞`, the chebyshev bound widened by the factor c = d^(1/p) covers
//! the exact key (relative part `c − 1 + c·rel`, absolute part `c·abs`), and c tends to 1 as p
//! grows, so the candidates are as few as chebyshev's.
//!
//! Norms of the f32 rows are themselves f32 results; they are enlarged by γ before use. A block
//! without rounding has all errors zero and its bound is unchanged.
//!
//! # Magnitudes (docs/design/exact-scaling.md)
//!
//! Rows are brought into f32's safe range by exact powers of two before any square or product
//! is formed: cosine and correlation rows each by their own when their squared norm leaves
//! [2^-100, 2^100]; inner-product blocks each by their own when their largest norm leaves
//! [2^-40, 2^40]; the other metrics by one power for the whole problem, from the largest
//! magnitude of base and queries ([`tile_exponent`]). Ordinary data takes none of these paths.
//! Scaled values that fall below f32's range are rounding errors like those of f64 rows,
//! measured and covered the same way. A tile's keys are then those of the scaled rows, and its
//! [`Bound`] carries the factor to the exact keys' units ([`KeyScale`]), so candidates from
//! tiles of any scale compare with each other and with exact keys.

use std::sync::{Arc, OnceLock};

use rayon::prelude::*;

use crate::data::{ElemType, VectorSet};
use crate::metric::rounding::{self, Rounding};
use crate::metric::scale::{exponent, key_degree, ldexp, row_exponent, Extent, KeyScale};
use crate::metric::{simd, Metric};

/// Error bound of a tile: the exact key of an entry with approximate key `v` lies in
/// `unit · [v − (rel·|v| + abs), v + (rel·|v| + abs)]` (`unit` 1 but for scaled rows).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub rel: f64,
    pub abs: f64,
    /// The factor from the tile's keys to the exact keys' units (a power of two, or close to
    /// one with `rel` and `abs` widened for its rounding: [`Bound::in_units`]).
    pub unit: f64,
}

impl Bound {
    /// A bound of keys in the exact keys' own units.
    pub const fn new(rel: f64, abs: f64) -> Bound {
        Bound {
            rel,
            abs,
            unit: 1.0,
        }
    }

    /// This bound for keys that are `factor` times the tile's (`exact`: a power of two; else a
    /// rounded value, within 2⁻⁵⁰ of the true factor, whose error is folded into the bound).
    pub fn in_units(self, (factor, exact): (f64, bool)) -> Bound {
        if factor == 1.0 && exact {
            return self;
        }
        let widened = match exact {
            true => self,
            false => {
                // |true − factor| ≤ η/4·factor with room for the products' own rounding.
                const ETA: f64 = 1.0 / (1u64 << 48) as f64;
                Bound {
                    rel: self.rel * (1.0 + ETA) + ETA,
                    abs: self.abs * (1.0 + ETA),
                    unit: self.unit,
                }
            }
        };
        Bound {
            unit: widened.unit * factor,
            ..widened
        }
    }

    /// The bound of keys whose inputs were also perturbed so that the exact key K of the
    /// unperturbed inputs and the exact key K̃ of the perturbed ones satisfy
    /// `|K − K̃| ≤ alpha·|K̃| + beta` (see the module doc). Zero `alpha` and `beta` leave the bound
    /// unchanged.
    pub fn widen(self, alpha: f64, beta: f64) -> Bound {
        if alpha == 0.0 && beta == 0.0 {
            return self;
        }
        // The slack covers the f64 rounding of the few operations forming beta.
        Bound {
            rel: self.rel + alpha * (1.0 + self.rel),
            abs: self.abs + alpha * self.abs + beta * (1.0 + 1e-12),
            unit: self.unit,
        }
    }

    /// True when the keys carry no error at all (small-integer keys such as edit distances).
    pub fn is_exact(&self) -> bool {
        self.rel == 0.0 && self.abs == 0.0
    }

    #[inline]
    pub fn lower(&self, v: f32) -> f64 {
        // NaN (overflow cancelled) or ±inf (overflow): the value says nothing; keep the item
        // and let the exact re-rank decide.
        if !v.is_finite() {
            return f64::NEG_INFINITY;
        }
        let v = v as f64;
        (v - (self.rel * v.abs() + self.abs)) * self.unit
    }

    #[inline]
    pub fn upper(&self, v: f32) -> f64 {
        if !v.is_finite() {
            return f64::INFINITY;
        }
        let v = v as f64;
        (v + (self.rel * v.abs() + self.abs)) * self.unit
    }

    /// Largest approximate key whose lower bound can be ≤ `threshold`, rounded up to f32.
    /// Scans compare `v <= limit` in f32; NaN keys fail `v > limit` and are kept.
    #[inline]
    pub fn limit(&self, threshold: f64) -> f32 {
        // With rel ≥ 1 every non-negative key may be below any threshold (a large minkowski
        // order over many dimensions widens that far).
        if threshold == f64::INFINITY || self.rel >= 1.0 {
            return f32::INFINITY;
        }
        // In the tile's units; a factor other than 1 rounds the division, so step outward.
        let threshold = match self.unit {
            1.0 => threshold,
            u => {
                let t = threshold / u;
                t + t.abs() * (1.0 / (1u64 << 50) as f64)
            }
        };
        // v - rel|v| - abs <= t  is implied for all v <= l with l solving the worst case.
        let l = if threshold + self.abs >= 0.0 {
            (threshold + self.abs) / (1.0 - self.rel)
        } else {
            (threshold + self.abs) / (1.0 + self.rel)
        };
        round_up_f32(l)
    }
}

/// How far the keys of a tile are needed: the key of entry (r, c) (query row r, base row c)
/// may be reported as +inf when it exceeds [`Cutoff::at`]`(r, c)`. A key equal to the limit is
/// always reported: a pair tied with a list's k-th may still enter it by the index tie-break.
/// Sources that gain nothing from a limit (the GEMM tiles) ignore it; the edit distance stops
/// its dynamic programme there.
#[derive(Clone, Copy, Debug)]
pub enum Cutoff<'a> {
    /// One limit for every entry; `f64::INFINITY` for none.
    All(f64),
    /// A limit per row, and optionally per column: entry (r, c) is needed up to
    /// max(rows[r], cols[c]), as it may enter the list of either side (a graph tile feeds
    /// both); with `cols` empty, up to rows[r].
    Lists { rows: &'a [f64], cols: &'a [f64] },
}

impl Cutoff<'_> {
    /// No limit: every key is computed.
    pub const NONE: Cutoff<'static> = Cutoff::All(f64::INFINITY);

    /// The limit of entry (r, c).
    #[inline]
    pub fn at(&self, r: usize, c: usize) -> f64 {
        match *self {
            Cutoff::All(x) => x,
            Cutoff::Lists { rows, cols: [] } => rows[r],
            Cutoff::Lists { rows, cols } => rows[r].max(cols[c]),
        }
    }
}

fn round_up_f32(x: f64) -> f32 {
    let f = x as f32;
    if (f as f64) < x {
        f.next_up()
    } else {
        f
    }
}

/// How rows are transformed before the matrix product, and how keys are formed from it.
#[derive(Clone, Debug)]
enum Plan {
    /// key = ‖a‖² + ‖b‖² − 2a·b on rows shifted by `center` (the base mean).
    SqL2 { center: Vec<f32> },
    /// key = 1 − â·b̂ on normalised rows (after subtracting each row's mean when `centred`).
    Cosine { centred: bool },
    /// key = −a·b.
    Dot,
    /// Direct kernels; the key is computed pair by pair.
    Direct,
}

/// A source of key tiles between the rows of a base set and a query set (the same set for a
/// graph). The engine's drivers (knn, range, graph) are generic over it.
pub trait TileSource: Sync {
    /// Rows of one side prepared for [`TileSource::keys`].
    type Rows: Default + Send;
    fn prepare_base(&self, start: usize, end: usize, out: &mut Self::Rows);
    fn prepare_query(&self, start: usize, end: usize, out: &mut Self::Rows);
    /// Base rows `start..end` prepared: the ones a prepared base kept, when it kept this tile,
    /// else prepared into `scratch` (the same rows either way).
    fn base_rows<'s>(
        &'s self,
        start: usize,
        end: usize,
        scratch: &'s mut Self::Rows,
    ) -> &'s Self::Rows {
        self.prepare_base(start, end, scratch);
        scratch
    }
    /// Approximate keys of the tile, row-major (query rows × base rows), and their bound.
    /// Entries above their `cutoff` may be reported as +inf.
    fn keys(&self, q: &Self::Rows, b: &Self::Rows, cutoff: Cutoff, keys: &mut Vec<f32>) -> Bound;
    /// Whether [`TileSource::keys`] saves work under a cutoff: drivers then gather their
    /// lists' thresholds before measuring a tile (a graph tile takes its blocks' locks for it).
    fn uses_cutoff(&self) -> bool {
        false
    }
    /// The exact key of a candidate whose tile bounds are `[lower, upper]`, when the bounds
    /// alone give it (keys that tiles hold exactly); the re-rank then skips the measurement.
    fn key_from_bounds(&self, _lower: f32, _upper: f32) -> Option<f64> {
        None
    }
    /// The exact key between base item `i` and query item `j`.
    fn exact(&self, i: usize, j: usize) -> f64;
    /// The scale exact keys are computed at (one for the problem; 1 but for extreme data).
    fn key_scale(&self) -> KeyScale {
        KeyScale::ONE
    }
}

/// Key tiles for a built-in vector metric.
pub struct TileMaker<'a> {
    metric: &'a Metric,
    base: &'a VectorSet,
    queries: &'a VectorSet,
    dim: usize,
    plan: Plan,
    /// The power of two every row is scaled by before the tiles (values times 2^-exp), for the
    /// plans that take one per problem (SqL2, Direct); 0 for the others, which scale per row or
    /// per block as they go.
    exp: i32,
    /// The scale of the exact keys.
    key: KeyScale,
    /// The base's tiles a prepared base kept, when they were made at this problem's `exp`.
    kept: Option<Arc<KeptTiles>>,
}

/// Rows of one side of a tile, prepared for the plan, with their norms.
#[derive(Default)]
pub struct PreparedRows {
    pub rows: Vec<f32>,
    /// Squared norms (SqL2) or norms (Dot) of the prepared rows; empty otherwise.
    pub norms: Vec<f32>,
    /// Largest row norm (not squared) for SqL2 and Dot; for Cosine the largest centring
    /// error factor (≥ 1). Used only for error bounds.
    pub max_norm: f64,
    pub count: usize,
    /// Largest errors of rounding these rows from f64 to f32, or of scaling them into f32's
    /// range; zero otherwise.
    pub rounding: Rounding,
    /// The rows are the values times 2^-exp (cosine rows: scale-free, 0).
    pub exp: i32,
    /// `rows` holds the rows coordinate by coordinate (value c of row j at `c·count + j`)
    /// instead of row by row: the layout of a prepared base's kept tiles under the
    /// matrix-product plans, which the product reads without packing them first.
    pub column_major: bool,
}

impl PreparedRows {
    /// These rows laid out coordinate by coordinate ([`PreparedRows::column_major`]).
    fn into_column_major(mut self, dim: usize) -> Self {
        let mut cols = vec![0.0f32; self.rows.len()];
        for (j, row) in self.rows.chunks_exact(dim).enumerate() {
            for (c, &x) in row.iter().enumerate() {
                cols[c * self.count + j] = x;
            }
        }
        self.rows = cols;
        self.column_major = true;
        self
    }
}

/// What a base set's tiles keep between searches: the plan, whose euclidean centre is a pass
/// over the whole base, the extent of the base's values when a scale needs it, and optionally
/// every base tile prepared (a prepared base makes them once; see `cpu/prepared.rs`).
#[derive(Clone)]
pub struct BasePlan {
    plan: Plan,
    extent: OnceLock<Extent>,
    kept: Option<Arc<KeptTiles>>,
}

/// Every tile of a base prepared once: tile `t` holds rows `t·edge .. min((t+1)·edge, n)`,
/// the tiles the search drivers walk, its rows scaled by 2^-exp (the base's own
/// [`tile_exponent`]; a problem whose queries move it prepares its tiles as they come).
struct KeptTiles {
    edge: usize,
    exp: i32,
    tiles: Vec<PreparedRows>,
}

impl KeptTiles {
    /// The kept tile of rows `start..end`, if it is one.
    fn tile(&self, start: usize, end: usize) -> Option<&PreparedRows> {
        if !start.is_multiple_of(self.edge) {
            return None;
        }
        let t = self.tiles.get(start / self.edge)?;
        (t.count == end - start).then_some(t)
    }
}

impl BasePlan {
    pub fn new(metric: &Metric, base: &VectorSet) -> Self {
        let extent = OnceLock::new();
        let plan = match metric {
            Metric::Euclidean | Metric::SqEuclidean => {
                let (center, ext) = column_mean(base);
                if let Some(e) = ext {
                    let _ = extent.set(e);
                }
                Plan::SqL2 { center }
            }
            Metric::Cosine => Plan::Cosine { centred: false },
            Metric::Correlation => Plan::Cosine { centred: true },
            Metric::InnerProduct => Plan::Dot,
            _ => Plan::Direct,
        };
        let plan = BasePlan {
            plan,
            extent,
            kept: None,
        };
        // Measured now when a scale will need it, so a prepared base measures it once.
        if matches!(plan.plan, Plan::Direct | Plan::SqL2 { .. })
            || KeyScale::needs_extent(metric, base, base)
        {
            plan.extent(base);
        }
        plan
    }

    /// Whether this plan holds its base's tiles.
    #[cfg(test)]
    pub fn keeps_tiles(&self) -> bool {
        self.kept.is_some()
    }

    /// Bytes [`BasePlan::keeping_tiles`] holds for `base`: its rows as f32 and one norm a row.
    pub fn kept_bytes(base: &VectorSet) -> usize {
        base.len() * (base.dim() + 1) * std::mem::size_of::<f32>()
    }

    /// This plan with every `edge`-row tile of `base` prepared once, in parallel on the
    /// current thread pool, at the scale the base alone takes; searches under it whose
    /// queries leave that scale unchanged (every ordinary problem) read them instead of
    /// preparing them again. Tiles of the matrix-product plans are kept coordinate by
    /// coordinate, which the product reads without packing them (a small batch's product is
    /// otherwise mostly packing).
    pub fn keeping_tiles(self, metric: &Metric, base: &VectorSet, edge: usize) -> Self {
        let maker = TileMaker::with_plan(metric, base, base, self.clone());
        let (n, dim) = (base.len(), base.dim());
        let by_columns = !matches!(self.plan, Plan::Direct);
        let tiles = (0..n.div_ceil(edge))
            .into_par_iter()
            .map(|t| {
                let mut rows = PreparedRows::default();
                maker.prepare_base(t * edge, ((t + 1) * edge).min(n), &mut rows);
                match by_columns {
                    true => rows.into_column_major(dim),
                    false => rows,
                }
            })
            .collect();
        let kept = KeptTiles {
            edge,
            exp: maker.exp,
            tiles,
        };
        BasePlan {
            kept: Some(Arc::new(kept)),
            ..self
        }
    }

    /// The base's extent, measured on first use.
    fn extent(&self, base: &VectorSet) -> Extent {
        *self.extent.get_or_init(|| Extent::of(base))
    }
}

/// The power of two a problem's rows are scaled by for f32 tiles whose keys have degree `h` in
/// the values, over `dim` coordinates of largest magnitude `max`: 0 while the keys stay within
/// [2^-80, 2^96] (every ordinary set), else the exponent of `max`, which brings it into [1, 2).
pub fn tile_exponent(h: f64, dim: usize, max: f64) -> i32 {
    if h == 0.0 || max == 0.0 || !max.is_finite() {
        return 0;
    }
    let l = (dim.max(1) as f64).log2().ceil();
    let em = exponent(max) as f64;
    match h * (em + 2.0) + l <= 96.0 && h * em >= -80.0 {
        true => 0,
        false => exponent(max),
    }
}

/// Squared norms a cosine row is normalised from without scaling (module doc).
const UNIT_WINDOW: (f32, f32) = (1.0 / (1u128 << 100) as f32, (1u128 << 100) as f32);
/// Largest norms an inner-product block keeps without scaling.
const DOT_WINDOW: (f64, f64) = (1.0 / (1u64 << 40) as f64, (1u64 << 40) as f64);

impl<'a> TileMaker<'a> {
    /// Tiles under the plan a search of this base makes (tests; the engine passes its plan).
    #[cfg(test)]
    pub fn new(metric: &'a Metric, base: &'a VectorSet, queries: &'a VectorSet) -> Self {
        Self::with_plan(metric, base, queries, BasePlan::new(metric, base))
    }

    /// Tiles under a plan made for this base and metric ([`BasePlan::new`]). Measures the
    /// queries' extent when a scale needs it, and the scaled centre when the rows are scaled.
    pub fn with_plan(
        metric: &'a Metric,
        base: &'a VectorSet,
        queries: &'a VectorSet,
        plan: BasePlan,
    ) -> Self {
        let same = std::ptr::eq(base, queries);
        let global = matches!(plan.plan, Plan::SqL2 { .. } | Plan::Direct);
        let keyed = KeyScale::needs_extent(metric, base, queries);
        let extent = (global || keyed).then(|| match same {
            true => plan.extent(base),
            false => plan.extent(base).union(Extent::of(queries)),
        });
        let key = match (keyed, extent) {
            (true, Some(e)) => KeyScale::of_extent(metric, base, queries, e),
            _ => KeyScale::ONE,
        };
        let exp = match (global, extent) {
            (true, Some(e)) => tile_exponent(tile_degree(metric), base.dim(), e.max),
            _ => 0,
        };
        let kept = plan.kept.filter(|k| k.exp == exp);
        let mut plan = plan.plan;
        if let (Plan::SqL2 { center }, true) = (&mut plan, exp != 0) {
            *center = scaled_mean(base, exp);
        }
        TileMaker {
            metric,
            base,
            queries,
            dim: base.dim(),
            plan,
            exp,
            key,
            kept,
        }
    }

    /// Rows `start..end` of `set` as f32 values times 2^-exp, into `out.rows`, with the rounding
    /// errors of each row (none when the rows hold the stored values exactly).
    fn load(
        &self,
        set: &VectorSet,
        (start, end): (usize, usize),
        exp: i32,
        out: &mut PreparedRows,
    ) -> Vec<Rounding> {
        let d = self.dim;
        out.rows.clear();
        out.exp = exp;
        let errors = |exact: &[f64], rows: &[f32]| -> Vec<Rounding> {
            let of = |(x, r): (&[f64], &[f32])| match exp {
                0 => Rounding::of_row(x, r),
                _ => Rounding::of_row(x, r).with_f64_underflow(d),
            };
            exact
                .chunks_exact(d)
                .zip(rows.chunks_exact(d))
                .map(of)
                .collect()
        };
        if exp == 0 {
            out.rows.extend_from_slice(&set.rows_f32(start, end));
            return match set.elem_type() {
                ElemType::F64 => errors(&set.rows_f64(start, end), &out.rows),
                _ => Vec::new(),
            };
        }
        let scaled: Vec<f64> = set
            .rows_f64(start, end)
            .iter()
            .map(|&x| ldexp(x, -exp))
            .collect();
        out.rows.extend(scaled.iter().map(|&x| x as f32));
        errors(&scaled, &out.rows)
    }

    /// Converts rows `start..end` of `set` to f32 and prepares them for this plan.
    fn prepare(&self, set: &VectorSet, start: usize, end: usize, out: &mut PreparedRows) {
        let d = self.dim;
        out.count = end - start;
        // Per-row rounding errors of f64 or scaled rows (none for other rows).
        let mut row_errors = self.load(set, (start, end), self.exp, out);
        out.norms.clear();
        out.max_norm = 0.0;
        match &self.plan {
            Plan::SqL2 { center } => {
                for row in out.rows.chunks_exact_mut(d) {
                    row.iter_mut().zip(center).for_each(|(x, c)| *x -= c);
                    let sq = simd::dot(row, row);
                    out.norms.push(sq);
                    out.max_norm = out.max_norm.max((sq as f64).sqrt());
                }
            }
            Plan::Cosine { centred } => {
                self.unit_rows(set, start, *centred, &mut row_errors, out);
            }
            Plan::Dot => {
                dot_norms(out);
                if !(DOT_WINDOW.0..=DOT_WINDOW.1).contains(&out.max_norm) {
                    // The block by its own power of two (module doc); a zero block stays.
                    let exp = row_exponent(&set.rows_f64(start, end));
                    if exp != 0 {
                        row_errors = self.load(set, (start, end), exp, out);
                        dot_norms(out);
                    }
                }
            }
            Plan::Direct => {}
        }
        out.rounding = row_errors
            .iter()
            .fold(Rounding::default(), |a, &b| a.max(b));
    }

    /// Cosine rows: each centred (correlation) and normalised, a row whose squared norm leaves
    /// [`UNIT_WINDOW`] first scaled from its stored values by its own power of two; the largest
    /// centring factor in `out.max_norm`, unit moves of rounded rows in `errors`.
    fn unit_rows(
        &self,
        set: &VectorSet,
        start: usize,
        centred: bool,
        errors: &mut Vec<Rounding>,
        out: &mut PreparedRows,
    ) {
        let d = self.dim;
        let gamma = gamma(d);
        out.max_norm = 1.0;
        for (r, row) in out.rows.chunks_exact_mut(d).enumerate() {
            let (mut mean, mut sq) = centre(row, centred);
            if !(UNIT_WINDOW.0..=UNIT_WINDOW.1).contains(&sq) {
                let stored = set.rows_f64(start + r, start + r + 1);
                let zero = match centred {
                    false => stored.iter().all(|&x| x == 0.0),
                    true => stored.iter().all(|&x| x == stored[0]),
                };
                if !zero {
                    let e = row_exponent(&stored);
                    let scaled: Vec<f64> = stored.iter().map(|&x| ldexp(x, -e)).collect();
                    row.iter_mut()
                        .zip(&scaled)
                        .for_each(|(y, &x)| *y = x as f32);
                    if errors.is_empty() {
                        errors.resize(out.count, Rounding::default());
                    }
                    errors[r] = Rounding::of_row(&scaled, row).with_f64_underflow(d);
                    (mean, sq) = centre(row, centred);
                }
            }
            let norm = (sq as f64).sqrt();
            if let Some(e) = errors.get_mut(r) {
                // A lower bound of ‖x̃‖ (centred: the computed centring may be off by
                // u·|mean| per value).
                let low =
                    norm * (1.0 - gamma) - 2.0 * (d as f64).sqrt() * simd::U32 * mean.abs() as f64;
                e.unit = Rounding::unit_move(e.l2, low);
            }
            // A zero row stays zero: its dot with anything is 0, its key exactly 1, which is
            // the defined distance.
            if norm > 0.0 {
                let inv = (1.0 / norm) as f32;
                row.iter_mut().for_each(|x| *x *= inv);
                // Subtracting a large mean loses bits relative to the centred row: the
                // rounding error grows by |mean|·√d / ‖centred row‖.
                let factor = 1.0 + mean.abs() as f64 * (d as f64).sqrt() / norm;
                out.max_norm = out.max_norm.max(factor);
            }
        }
    }

    /// Writes the `q.count × b.count` approximate keys into `keys` (row-major) and returns the
    /// tile's error bound.
    fn tile_keys(&self, q: &PreparedRows, b: &PreparedRows, keys: &mut Vec<f32>) -> Bound {
        let (m, n, d) = (q.count, b.count, self.dim);
        // Every entry is written below (fill, prefill or a product that ignores the old
        // contents), so a resize without clearing is enough.
        keys.resize(m * n, 0.0);
        if m == 0 || n == 0 {
            return Bound::new(0.0, 0.0);
        }
        let bound = self.f32_tile_keys(q, b, keys);
        let (eq, eb) = (q.rounding, b.rounding);
        let units = self.key.factor_from(self.metric, (q.exp, b.exp));
        if eq == Rounding::default() && eb == Rounding::default() {
            return bound.in_units(units);
        }
        // (q.max_norm is the centring factor for cosine, which reads only `unit`.)
        let norms = (q.max_norm, b.max_norm);
        let (alpha, beta) = rounding::input_widening(self.metric, &eq, &eb, norms, 1.0 + gamma(d));
        bound.widen(alpha, beta).in_units(units)
    }

    /// The keys of the f32 rows and their bound against the exact keys of those f32 rows.
    fn f32_tile_keys(&self, q: &PreparedRows, b: &PreparedRows, keys: &mut [f32]) -> Bound {
        let (m, n, d) = (q.count, b.count, self.dim);
        if matches!(self.plan, Plan::Direct) {
            return self.direct_keys(q, b, keys);
        }
        let gamma = gamma(d);
        // The key's constant part is written first and the product accumulated into it, so
        // the tile is written once and read once (by the scan).
        match &self.plan {
            Plan::SqL2 { .. } => {
                for (row, &nq) in keys.chunks_exact_mut(n).zip(&q.norms) {
                    for (v, &nb) in row.iter_mut().zip(&b.norms) {
                        *v = nq + nb;
                    }
                }
                product(&q.rows, b, (m, n, d), keys, -2.0, true);
                let s = q.max_norm + b.max_norm;
                Bound::new(0.0, gamma * s * s + tiny())
            }
            Plan::Cosine { .. } => {
                keys.fill(1.0);
                product(&q.rows, b, (m, n, d), keys, -1.0, true);
                // Each normalised row is off by about 2u·r (r = max_norm, the centring factor)
                // and the dot adds γ; γ ≥ 2u·d covers the first two generously.
                let r = q.max_norm + b.max_norm;
                Bound::new(0.0, gamma * (2.0 + 2.0 * r) + tiny())
            }
            Plan::Dot => {
                product(&q.rows, b, (m, n, d), keys, -1.0, false);
                Bound::new(0.0, gamma * q.max_norm * b.max_norm + tiny())
            }
            Plan::Direct => unreachable!(),
        }
    }

    fn direct_keys(&self, q: &PreparedRows, b: &PreparedRows, keys: &mut [f32]) -> Bound {
        // Only the matrix-product plans keep tiles by coordinates.
        debug_assert!(!b.column_major);
        let d = self.dim;
        let kernel = match self.metric {
            Metric::Cityblock => simd::Kernel::L1,
            Metric::Chebyshev => simd::Kernel::Linf,
            Metric::Minkowski(p) if self.metric.is_minkowski_power_sum() => {
                simd::Kernel::MinkowskiPow(*p)
            }
            // Large orders: chebyshev keys, widened below (module doc).
            Metric::Minkowski(_) => simd::Kernel::Linf,
            m => unreachable!("direct kernel for {m}"),
        };
        simd::Isa::current().block(kernel, &q.rows, &b.rows, d, keys);
        // The kernels' bounds are affine in |v| for finite v: split into rel and abs parts.
        let abs = kernel.error_bound(0.0, d, 0.0);
        let rel = kernel.error_bound(1.0, d, 0.0) - abs;
        match self.metric {
            Metric::Minkowski(p) if !self.metric.is_minkowski_power_sum() => {
                let c_minus_1 = ((d as f64).ln() / p).exp_m1() * (1.0 + 1e-9);
                let c = 1.0 + c_minus_1;
                Bound::new(c_minus_1 + c * rel, c * abs)
            }
            _ => Bound::new(rel, abs),
        }
    }
}

impl TileSource for TileMaker<'_> {
    type Rows = PreparedRows;

    fn prepare_base(&self, start: usize, end: usize, out: &mut PreparedRows) {
        self.prepare(self.base, start, end, out)
    }

    fn prepare_query(&self, start: usize, end: usize, out: &mut PreparedRows) {
        self.prepare(self.queries, start, end, out)
    }

    fn base_rows<'s>(
        &'s self,
        start: usize,
        end: usize,
        scratch: &'s mut PreparedRows,
    ) -> &'s PreparedRows {
        match self.kept.as_deref().and_then(|k| k.tile(start, end)) {
            Some(kept) => kept,
            None => {
                self.prepare_base(start, end, scratch);
                scratch
            }
        }
    }

    fn keys(&self, q: &PreparedRows, b: &PreparedRows, _: Cutoff, keys: &mut Vec<f32>) -> Bound {
        self.tile_keys(q, b, keys)
    }

    fn exact(&self, i: usize, j: usize) -> f64 {
        self.key.set_key(self.metric, self.base, i, self.queries, j)
    }

    fn key_scale(&self) -> KeyScale {
        self.key
    }
}

/// Centres a row by its mean (computed in f64) when `centred`; the mean and the squared norm.
fn centre(row: &mut [f32], centred: bool) -> (f32, f32) {
    let mut mean = 0.0f32;
    if centred {
        mean = (row.iter().map(|&x| x as f64).sum::<f64>() / row.len() as f64) as f32;
        row.iter_mut().for_each(|x| *x -= mean);
    }
    (mean, simd::dot(row, row))
}

/// The norms of inner-product rows and the largest.
fn dot_norms(out: &mut PreparedRows) {
    let d = out.rows.len() / out.count.max(1);
    out.max_norm = 0.0;
    for row in out.rows.chunks_exact(d.max(1)) {
        let n = (simd::dot(row, row) as f64).sqrt();
        out.max_norm = out.max_norm.max(n);
    }
}

/// The degree of the keys a metric's f32 tiles hold ([`key_degree`], with large minkowski
/// orders on chebyshev tiles).
fn tile_degree(metric: &Metric) -> f64 {
    key_degree(metric)
}

/// γ for a length-d dot product with FMA or blocked summation, doubled for the norm terms and
/// the final additions; see docs/design/cpu-tile-bound.md.
fn gamma(d: usize) -> f64 {
    2.0 * (d as f64 + 8.0) * simd::U32
}

/// Smallest positive normal f32: keeps bounds non-zero when all norms are zero.
fn tiny() -> f64 {
    f32::MIN_POSITIVE as f64
}

/// `out[i][j] = scale · a_i · b_j`, plus the old `out[i][j]` when `accumulate`, for row-major
/// `a` (m×d) and the n rows of `b` in either layout; single-threaded, callers parallelise over
/// tiles. Rows of `b` laid out by coordinates make the product `out` transposed = `b · aᵀ`, whose
/// left operand is then already in the layout the kernel reads.
fn product(
    a: &[f32],
    b: &PreparedRows,
    (m, n, d): (usize, usize, usize),
    out: &mut [f32],
    scale: f32,
    accumulate: bool,
) {
    assert!(a.len() >= m * d && b.rows.len() >= n * d && out.len() >= m * n);
    let (ni, di) = (n as isize, d as isize);
    // out's (rows, columns, column stride, row stride); each operand's (start, column stride,
    // row stride).
    let (dst, lhs, rhs) = if b.column_major {
        ((n, m, ni, 1), (b.rows.as_ptr(), ni, 1), (a.as_ptr(), di, 1))
    } else {
        ((m, n, 1, ni), (a.as_ptr(), 1, di), (b.rows.as_ptr(), di, 1))
    };
    // SAFETY: the asserted lengths cover the m×d, n×d and m×n extents at these strides.
    unsafe {
        gemm::gemm(
            dst.0,
            dst.1,
            d,
            out.as_mut_ptr(),
            dst.2,
            dst.3,
            accumulate,
            lhs.0,
            lhs.1,
            lhs.2,
            rhs.0,
            rhs.1,
            rhs.2,
            if accumulate { 1.0f32 } else { 0.0 },
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Column means of a set, accumulated in f64, and for storage other than f64 the set's extent
/// read in the same pass (f64 values need their own: their f32 roundings may overflow).
fn column_mean(set: &VectorSet) -> (Vec<f32>, Option<Extent>) {
    let d = set.dim();
    let mut acc = vec![0.0f64; d];
    let mut extent = Extent::EMPTY;
    let chunk = 4096;
    let mut start = 0;
    while start < set.len() {
        let end = (start + chunk).min(set.len());
        let rows = set.rows_f32(start, end);
        for row in rows.chunks_exact(d) {
            acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x as f64);
        }
        extent = extent.union(Extent::of_f32(&rows));
        start = end;
    }
    let n = set.len().max(1) as f64;
    let mean = acc.into_iter().map(|a| (a / n) as f32).collect();
    (mean, (set.elem_type() != ElemType::F64).then_some(extent))
}

/// Column means of a set's values times 2^-exp (which cannot overflow), as f32.
fn scaled_mean(set: &VectorSet, exp: i32) -> Vec<f32> {
    let d = set.dim();
    let mut acc = vec![0.0f64; d];
    for i in 0..set.len() {
        let row = set.row_f64(i);
        acc.iter_mut()
            .zip(row.iter())
            .for_each(|(a, &x)| *a += ldexp(x, -exp));
    }
    let n = set.len().max(1) as f64;
    acc.into_iter().map(|a| (a / n) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// An f64 value as far from every f32 as rounding allows: just under half an f32 ulp
    /// above an f32 number, so rounding to f32 errs by almost the full half ulp.
    fn worst(rng: &mut StdRng, centre: f64, spread: f64) -> f64 {
        let y = (centre + spread * rng.gen_range(-1.0..1.0)) as f32;
        let ulp = (y.abs().next_up() - y.abs()) as f64;
        let sign = if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
        y as f64 + sign * 0.4999 * ulp
    }

    fn worst_set(rng: &mut StdRng, n: usize, d: usize, centre: f64, spread: f64) -> VectorSet {
        let v = (0..n * d).map(|_| worst(rng, centre, spread)).collect();
        VectorSet::from_f64(n, d, v).unwrap()
    }

    /// Every entry of every tile lies within its widened bound of the exact key on the f64
    /// values, for every built-in vector metric, on data built so that rounding to f32 errs
    /// by almost half an ulp in every value.
    #[test]
    fn widened_bound_covers_worst_case_rounding() {
        let mut rng = StdRng::seed_from_u64(64);
        let mut metrics: Vec<Metric> = Metric::builtins()
            .into_iter()
            .filter(|m| *m != Metric::Levenshtein)
            .collect();
        metrics.push(Metric::Minkowski(1.5));
        // (centre, spread): around the origin, far from it with a tiny spread (cancellation),
        // and large magnitudes.
        let shapes = [(0.0, 1.0), (1.0e4, 1.0e-2), (-3.0e6, 10.0), (0.0, 1.0e5)];
        for &d in &[1usize, 3, 17, 127] {
            for &(c, s) in &shapes {
                let base = worst_set(&mut rng, 24, d, c, s);
                let queries = worst_set(&mut rng, 9, d, c, s);
                for m in &metrics {
                    let tm = TileMaker::new(m, &base, &queries);
                    let (mut pb, mut pq, mut keys) =
                        (PreparedRows::default(), PreparedRows::default(), Vec::new());
                    tm.prepare_base(0, base.len(), &mut pb);
                    tm.prepare_query(0, queries.len(), &mut pq);
                    assert!(pb.rounding.l2 > 0.0, "data not rounded");
                    let bound = tm.keys(&pq, &pb, Cutoff::NONE, &mut keys);
                    for j in 0..queries.len() {
                        for i in 0..base.len() {
                            let v = keys[j * base.len() + i];
                            let exact = tm.exact(i, j);
                            assert!(
                                bound.lower(v) <= exact && exact <= bound.upper(v),
                                "{m} d={d} centre={c} spread={s} pair ({j},{i}): key {v}, \
                                 exact {exact}, bound {bound:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Rows the f32 tiles see exactly (f64 storage of f32 numbers) get the f32 bound unchanged.
    #[test]
    fn exact_f64_rows_keep_the_f32_bound() {
        let mut rng = StdRng::seed_from_u64(65);
        let v: Vec<f32> = (0..40 * 5).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let narrow = VectorSet::from_f32(40, 5, v.clone()).unwrap();
        let wide = VectorSet::from_f64(40, 5, v.iter().map(|&x| x as f64).collect()).unwrap();
        for m in [Metric::Euclidean, Metric::Cosine, Metric::Minkowski(3.0)] {
            let bounds: Vec<(f64, f64, Vec<f32>)> = [&narrow, &wide]
                .iter()
                .map(|set| {
                    let tm = TileMaker::new(&m, set, set);
                    let (mut p, mut keys) = (PreparedRows::default(), Vec::new());
                    tm.prepare_base(0, 40, &mut p);
                    let b = tm.keys(&p, &p, Cutoff::NONE, &mut keys);
                    (b.rel, b.abs, keys)
                })
                .collect();
            assert_eq!(bounds[0], bounds[1], "{m}");
        }
    }
}
