//! Approximate key tiles: the f32 pass that produces candidates.
//!
//! A tile is the block of keys between a run of query rows and a run of base rows, written
//! row-major into a caller's buffer. The GEMM metrics go through one matrix product plus norms
//! (seed 000 §3.2.1) on rows prepared per metric (centred for euclidean, normalised for cosine,
//! centred and normalised per row for correlation); the others through the direct kernels of
//! [`crate::metric::simd`]. Every tile comes with a [`Bound`] so that selection can keep every
//! item that may be among the exact k nearest. This module must not select; it only measures.

use crate::data::VectorSet;
use crate::metric::{exact, simd, Metric};

/// Error bound of a tile: the exact key of an entry with approximate key `v` lies in
/// `[v − (rel·|v| + abs), v + (rel·|v| + abs)]`.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub rel: f64,
    pub abs: f64,
}

impl Bound {
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
        v - (self.rel * v.abs() + self.abs)
    }

    #[inline]
    pub fn upper(&self, v: f32) -> f64 {
        if !v.is_finite() {
            return f64::INFINITY;
        }
        let v = v as f64;
        v + (self.rel * v.abs() + self.abs)
    }

    /// Largest approximate key whose lower bound can be ≤ `threshold`, rounded up to f32.
    /// Scans compare `v <= limit` in f32; NaN keys fail `v > limit` and are kept.
    #[inline]
    pub fn limit(&self, threshold: f64) -> f32 {
        if threshold == f64::INFINITY {
            return f32::INFINITY;
        }
        // v - rel|v| - abs <= t  is implied for all v <= l with l solving the worst case.
        let l = if threshold + self.abs >= 0.0 {
            (threshold + self.abs) / (1.0 - self.rel)
        } else {
            (threshold + self.abs) / (1.0 + self.rel)
        };
        round_up_f32(l)
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
    /// Approximate keys of the tile, row-major (query rows × base rows), and their bound.
    /// Entries above `cutoff` may be reported as +inf.
    fn keys(&self, q: &Self::Rows, b: &Self::Rows, cutoff: f64, keys: &mut Vec<f32>) -> Bound;
    /// The exact key between base item `i` and query item `j`.
    fn exact(&self, i: usize, j: usize) -> f64;
}

/// Key tiles for a built-in vector metric.
pub struct TileMaker<'a> {
    metric: &'a Metric,
    base: &'a VectorSet,
    queries: &'a VectorSet,
    dim: usize,
    plan: Plan,
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
}

impl<'a> TileMaker<'a> {
    pub fn new(metric: &'a Metric, base: &'a VectorSet, queries: &'a VectorSet) -> Self {
        let dim = base.dim();
        let plan = match metric {
            Metric::Euclidean | Metric::SqEuclidean => Plan::SqL2 {
                center: column_mean(base),
            },
            Metric::Cosine => Plan::Cosine { centred: false },
            Metric::Correlation => Plan::Cosine { centred: true },
            Metric::InnerProduct => Plan::Dot,
            _ => Plan::Direct,
        };
        TileMaker {
            metric,
            base,
            queries,
            dim,
            plan,
        }
    }

    /// Converts rows `start..end` of `set` to f32 and prepares them for this plan.
    fn prepare(&self, set: &VectorSet, start: usize, end: usize, out: &mut PreparedRows) {
        let d = self.dim;
        out.count = end - start;
        out.rows.clear();
        out.rows.extend_from_slice(&set.rows_f32(start, end));
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
                out.max_norm = 1.0;
                for row in out.rows.chunks_exact_mut(d) {
                    let mut mean = 0.0f32;
                    if *centred {
                        mean = (row.iter().map(|&x| x as f64).sum::<f64>() / d as f64) as f32;
                        row.iter_mut().for_each(|x| *x -= mean);
                    }
                    let norm = (simd::dot(row, row) as f64).sqrt();
                    // A zero row stays zero: its dot with anything is 0, its key exactly 1,
                    // which is the defined distance.
                    if norm > 0.0 {
                        let inv = (1.0 / norm) as f32;
                        row.iter_mut().for_each(|x| *x *= inv);
                        // Subtracting a large mean loses bits relative to the centred row:
                        // the rounding error grows by |mean|·√d / ‖centred row‖.
                        let r = 1.0 + mean.abs() as f64 * (d as f64).sqrt() / norm;
                        out.max_norm = out.max_norm.max(r);
                    }
                }
            }
            Plan::Dot => {
                for row in out.rows.chunks_exact(d) {
                    let n = (simd::dot(row, row) as f64).sqrt();
                    out.max_norm = out.max_norm.max(n);
                }
            }
            Plan::Direct => {}
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
            return Bound { rel: 0.0, abs: 0.0 };
        }
        if matches!(self.plan, Plan::Direct) {
            return self.direct_keys(q, b, keys);
        }
        // γ for a length-d dot product with FMA or blocked summation, doubled for the
        // norm terms and the final additions; see the derivation in bench/NOTES.md.
        let gamma = 2.0 * (d as f64 + 8.0) * simd::U32;
        // The key's constant part is written first and the product accumulated into it, so
        // the tile is written once and read once (by the scan).
        match &self.plan {
            Plan::SqL2 { .. } => {
                for (row, &nq) in keys.chunks_exact_mut(n).zip(&q.norms) {
                    for (v, &nb) in row.iter_mut().zip(&b.norms) {
                        *v = nq + nb;
                    }
                }
                product(&q.rows, &b.rows, (m, n, d), keys, -2.0, true);
                let s = q.max_norm + b.max_norm;
                Bound {
                    rel: 0.0,
                    abs: gamma * s * s + tiny(),
                }
            }
            Plan::Cosine { .. } => {
                keys.fill(1.0);
                product(&q.rows, &b.rows, (m, n, d), keys, -1.0, true);
                // Each normalised row is off by about 2u·r (r = max_norm, the centring factor)
                // and the dot adds γ; γ ≥ 2u·d covers the first two generously.
                let r = q.max_norm + b.max_norm;
                Bound {
                    rel: 0.0,
                    abs: gamma * (2.0 + 2.0 * r) + tiny(),
                }
            }
            Plan::Dot => {
                product(&q.rows, &b.rows, (m, n, d), keys, -1.0, false);
                Bound {
                    rel: 0.0,
                    abs: gamma * q.max_norm * b.max_norm + tiny(),
                }
            }
            Plan::Direct => unreachable!(),
        }
    }

    fn direct_keys(&self, q: &PreparedRows, b: &PreparedRows, keys: &mut [f32]) -> Bound {
        let d = self.dim;
        let kernel = match self.metric {
            Metric::Cityblock => simd::Kernel::L1,
            Metric::Chebyshev => simd::Kernel::Linf,
            Metric::Minkowski(p) => simd::Kernel::MinkowskiPow(*p),
            m => unreachable!("direct kernel for {m}"),
        };
        simd::Isa::current().block(kernel, &q.rows, &b.rows, d, keys);
        // The kernels' bounds are affine in |v| for finite v: split into rel and abs parts.
        let abs = kernel.error_bound(0.0, d, 0.0);
        let rel = kernel.error_bound(1.0, d, 0.0) - abs;
        Bound { rel, abs }
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

    fn keys(&self, q: &PreparedRows, b: &PreparedRows, _cutoff: f64, keys: &mut Vec<f32>) -> Bound {
        self.tile_keys(q, b, keys)
    }

    fn exact(&self, i: usize, j: usize) -> f64 {
        exact::vector_key(self.metric, &self.base.row_f32(i), &self.queries.row_f32(j))
    }
}

/// Smallest positive normal f32: keeps bounds non-zero when all norms are zero.
fn tiny() -> f64 {
    f32::MIN_POSITIVE as f64
}

/// `out[i][j] = scale · a_i · b_j`, plus the old `out[i][j]` when `accumulate`, for row-major
/// `a` (m×d) and `b` (n×d); single-threaded, callers parallelise over tiles.
fn product(
    a: &[f32],
    b: &[f32],
    (m, n, d): (usize, usize, usize),
    out: &mut [f32],
    scale: f32,
    accumulate: bool,
) {
    assert!(a.len() >= m * d && b.len() >= n * d && out.len() >= m * n);
    // SAFETY: the asserted lengths cover the m×d, n×d and m×n extents at these strides.
    unsafe {
        gemm::gemm(
            m,
            n,
            d,
            out.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            1,
            d as isize,
            b.as_ptr(),
            d as isize,
            1,
            if accumulate { 1.0f32 } else { 0.0 },
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Column means of a set, accumulated in f64.
fn column_mean(set: &VectorSet) -> Vec<f32> {
    let d = set.dim();
    let mut acc = vec![0.0f64; d];
    let chunk = 4096;
    let mut start = 0;
    while start < set.len() {
        let end = (start + chunk).min(set.len());
        for row in set.rows_f32(start, end).chunks_exact(d) {
            acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x as f64);
        }
        start = end;
    }
    let n = set.len().max(1) as f64;
    acc.into_iter().map(|a| (a / n) as f32).collect()
}
