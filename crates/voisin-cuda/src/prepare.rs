//! Per-metric preparation on the host: which tile the GPU computes, how its values become keys,
//! how the f32 rows are transformed first, and the error bound that makes the f32 pass safe.
//!
//! Owns the numerics of the approximate pass; never touches the device. Every approximate key `v`
//! of query `q` satisfies `lower(q, v) <= exact <= upper(q, v)` where the exact key is
//! [`voisin::metric::exact::vector_key`] on the untransformed rows.

use rayon::prelude::*;
use voisin::data::{Dataset, VectorSet};
use voisin::metric::simd::U32;
use voisin::{Error, Metric, Result};

/// How a tile value becomes a key; the numbers are the `KEY_*` modes of kernels/keys.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileKey {
    /// ‖r‖² + ‖c‖² − 2 r·c on rows centred on the base mean.
    L2 = 0,
    /// −r·c.
    NegDot = 1,
    /// 1 − r·c on unit rows.
    OneMinus = 2,
    /// The tile holds the key (vector_tile.cu).
    Direct = 3,
}

/// Which tile kernel computes the values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum TileKind {
    /// cuBLAS sgemm of the two row blocks.
    Gemm,
    /// vector_tile.cu with its kind (0 cityblock, 1 chebyshev, 2 minkowski) and p.
    Simt(i32, f32),
}

/// The plan for one metric over one dimension.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub metric: Metric,
    pub key: TileKey,
    pub tile: TileKind,
    pub dim: usize,
    /// Subtracted from every row before the GEMM (euclidean: the base mean, in f64).
    shift: Option<Vec<f64>>,
    /// Relative part of the bound (SIMT metrics).
    rel: f64,
    /// Absolute slack for underflow and rounding of the final subtraction.
    tiny: f64,
    /// γ of the GEMM bound (see [`Plan::abs_bound`]).
    gamma: f64,
}

/// Transformed f32 rows ready to upload, with the norms the keys and bounds need.
pub(crate) struct Rows {
    pub n: usize,
    pub values: Vec<f32>,
    /// Squared norms of the transformed rows in f32 (the L2 key's terms).
    pub sqnorm: Vec<f32>,
    /// Norms of the transformed rows (f64), for the bounds.
    pub norm: Vec<f64>,
}

impl Rows {
    pub fn max_norm(&self) -> f64 {
        self.norm.iter().cloned().fold(0.0, f64::max)
    }

    /// The rows listed, in that order (a widening pass over some queries).
    pub fn gather(&self, ids: &[usize], dim: usize) -> Rows {
        let mut values = Vec::with_capacity(ids.len() * dim);
        for &i in ids {
            values.extend_from_slice(&self.values[i * dim..(i + 1) * dim]);
        }
        Rows {
            n: ids.len(),
            values,
            sqnorm: ids.iter().map(|&i| self.sqnorm[i]).collect(),
            norm: ids.iter().map(|&i| self.norm[i]).collect(),
        }
    }
}

/// The vectors of a data set, or a clear error for what this engine does not handle.
pub(crate) fn vectors<'a>(data: &'a Dataset, metric: &Metric) -> Result<&'a VectorSet> {
    match (data, metric) {
        (_, Metric::Levenshtein) | (Dataset::Strings(_), _) => Err(Error::invalid(
            "strings and levenshtein are not supported on cuda yet (use --device cpu)",
        )),
        (_, Metric::Custom(c)) => Err(Error::invalid(format!(
            "custom metric {} runs on the CPU engine only",
            c.name
        ))),
        (Dataset::Vectors(v), _) => {
            if let Some((r, c)) = find_non_finite(v) {
                return Err(Error::invalid(format!(
                    "vector {r} holds a NaN or infinite value at column {c}"
                )));
            }
            Ok(v)
        }
    }
}

impl Plan {
    /// Plans `metric` for `base` (whose mean centres euclidean data).
    pub fn new(metric: &Metric, base: &VectorSet) -> Plan {
        let d = base.dim();
        // γ_{d+8}-style bound with a factor 2 of safety: d products and sums, the two norm terms,
        // the final subtraction and the centring/normalising roundings.
        let gamma = 2.0 * (d as f64 + 8.0) * U32;
        let tiny = (d as f64 + 4.0) * f64::from(f32::MIN_POSITIVE);
        let (key, tile, rel, shift) = match metric {
            Metric::Euclidean | Metric::SqEuclidean => {
                (TileKey::L2, TileKind::Gemm, 0.0, Some(column_mean(base)))
            }
            Metric::InnerProduct => (TileKey::NegDot, TileKind::Gemm, 0.0, None),
            Metric::Cosine | Metric::Correlation => (TileKey::OneMinus, TileKind::Gemm, 0.0, None),
            Metric::Cityblock => (
                TileKey::Direct,
                TileKind::Simt(0, 1.0),
                sum_rel(d, 1.0),
                None,
            ),
            Metric::Chebyshev => (TileKey::Direct, TileKind::Simt(1, 1.0), 2.0 * U32, None),
            Metric::Minkowski(p) => {
                // |fl(a−b)|^p carries p roundings of the difference plus powf's own error (a few
                // ulps); 2p + 16 units covers both with room.
                let term = 2.0 * p + 16.0;
                (
                    TileKey::Direct,
                    TileKind::Simt(2, *p as f32),
                    sum_rel(d, term),
                    None,
                )
            }
            Metric::Levenshtein | Metric::Custom(_) => unreachable!("checked by vectors()"),
        };
        Plan {
            metric: metric.clone(),
            key,
            tile,
            dim: d,
            shift,
            rel,
            tiny,
            gamma,
        }
    }

    /// Transforms rows into what the tile kernels read.
    pub fn rows(&self, set: &VectorSet) -> Rows {
        let d = self.dim;
        let raw = set.rows_f32(0, set.len());
        let mut values = vec![0f32; set.len() * d];
        let mut norm = vec![0f64; set.len()];
        let zero = vec![0f64; d];
        let shift = self.shift.as_deref().unwrap_or(&zero);
        let (centre_rows, unit) = (
            self.metric == Metric::Correlation,
            self.key == TileKey::OneMinus,
        );
        values
            .par_chunks_mut(d)
            .zip(raw.par_chunks(d))
            .zip(norm.par_iter_mut())
            .with_min_len(256)
            .for_each(|((out, row), nrm)| {
                // Same f64 operations, in the same order, as metric::exact, so that a row the
                // exact key treats as zero (cosine, correlation) is exactly zero here too.
                let m = if centre_rows {
                    row.iter().map(|&v| v as f64).sum::<f64>() / d as f64
                } else {
                    0.0
                };
                let x = |i: usize| row[i] as f64 - shift[i] - m;
                let scale = if unit {
                    let n = (0..d).map(|i| x(i) * x(i)).sum::<f64>().sqrt();
                    // A zero row stays zero: its key 1 − 0 = 1 is exactly the metric's rule.
                    if n > 0.0 {
                        1.0 / n
                    } else {
                        0.0
                    }
                } else {
                    1.0
                };
                let mut s = 0f64;
                for (i, o) in out.iter_mut().enumerate() {
                    let v = if unit { x(i) * scale } else { x(i) };
                    *o = v as f32;
                    s += (*o as f64) * (*o as f64);
                }
                *nrm = s.sqrt();
            });
        let sqnorm = norm.iter().map(|n| (n * n) as f32).collect();
        Rows {
            n: set.len(),
            values,
            sqnorm,
            norm,
        }
    }

    /// Absolute error bound of query `q`'s keys (norm `qn`) against a base of largest norm `bn`.
    pub fn abs_bound(&self, qn: f64, bn: f64) -> f64 {
        let b = match self.key {
            TileKey::L2 => self.gamma * (qn + bn) * (qn + bn),
            TileKey::NegDot => self.gamma * qn * bn,
            TileKey::OneMinus => 4.0 * self.gamma,
            TileKey::Direct => 0.0,
        };
        // The bound itself is computed in f64 from rounded norms; 1 % covers that.
        b * 1.01 + self.tiny
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

fn column_mean(set: &VectorSet) -> Vec<f64> {
    let d = set.dim();
    let rows = set.rows_f32(0, set.len());
    let n = set.len().max(1) as f64;
    let sum = rows
        .par_chunks(d * 4096)
        .map(|block| {
            let mut s = vec![0f64; d];
            for row in block.chunks(d) {
                s.iter_mut().zip(row).for_each(|(a, &v)| *a += v as f64);
            }
            s
        })
        .reduce(
            || vec![0f64; d],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    sum.into_iter().map(|s| s / n).collect()
}

/// Relative bound of an f32 sum of `d` non-negative terms that each carry `term` units of
/// roundoff (the same reasoning as `voisin::metric::simd::nonneg_sum_error`).
fn sum_rel(d: usize, term: f64) -> f64 {
    let nu = (d as f64 + term + 2.0) * U32;
    2.0 * nu / (1.0 - nu)
}

/// First non-finite value (row, column), scanning in parallel: the core crate's scan is
/// sequential and costs more than the whole GPU search on a 1M×128 base.
fn find_non_finite(v: &VectorSet) -> Option<(usize, usize)> {
    let Some(x) = v.as_f32() else {
        return v.find_non_finite();
    };
    let d = v.dim();
    let row = x
        .par_chunks(d * 1024)
        .enumerate()
        .find_first(|(_, c)| c.iter().any(|f| !f.is_finite()))
        .map(|(b, _)| b * 1024)?;
    let pos = x[row * d..].iter().position(|f| !f.is_finite())?;
    Some((row + pos / d, pos % d))
}
