//! Exact keys in f64: the values every engine reports and ranks its final candidates by.
//!
//! Inputs are the stored values (f32, or f64 for f64 storage; every other storage type converts
//! to f32 exactly), products and sums are done in f64, so the result is within about n·2⁻⁵³·Σ|terms| of the real value (a few ulps when the
//! terms do not cancel): far below f32 resolution. Every engine reports these same values,
//! which makes results identical across engines and devices.

use super::{levenshtein, Metric, MINKOWSKI_POWER_KEY_MAX};
use crate::data::{Dataset, ElemType, VectorSet};

/// Exact key between two vectors for a built-in vector metric (see the module doc of
/// [`crate::metric`] for what a key is). Panics for string and custom metrics.
/// Generic over f32 and f64 rows: an f32 row gives the same key as its f64 widening.
pub fn vector_key<T: Copy + Into<f64>>(metric: &Metric, a: &[T], b: &[T]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let pairs = a.iter().zip(b).map(|(&x, &y)| (x.into(), y.into()));
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => pairs.map(|(x, y)| (x - y) * (x - y)).sum(),
        Metric::InnerProduct => -pairs.map(|(x, y)| x * y).sum::<f64>(),
        Metric::Cityblock => pairs.map(|(x, y)| (x - y).abs()).sum(),
        Metric::Chebyshev => pairs.map(|(x, y)| (x - y).abs()).fold(0.0, f64::max),
        Metric::Minkowski(p) if *p > MINKOWSKI_POWER_KEY_MAX => scaled_minkowski(a, b, *p),
        Metric::Minkowski(p) => pairs.map(|(x, y)| (x - y).abs().powf(*p)).sum(),
        Metric::Cosine => cosine_distance(a, b, 0.0, 0.0),
        Metric::Correlation => cosine_distance(a, b, mean(a), mean(b)),
        Metric::Levenshtein | Metric::Custom(_) => {
            panic!("vector_key called with metric {metric}")
        }
    }
}

/// The minkowski distance of a large order p: with m the largest |a_i − b_i|,
/// `m · (Σ (|a_i − b_i| / m)^p)^(1/p)`. Every term is at most 1 and the sum is between 1 and the
/// dimension, so nothing overflows or vanishes whatever p is (the power sum itself would).
fn scaled_minkowski<T: Copy + Into<f64>>(a: &[T], b: &[T], p: f64) -> f64 {
    let diffs = || a.iter().zip(b).map(|(&x, &y)| (x.into() - y.into()).abs());
    let m = diffs().fold(0.0, f64::max);
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    let s: f64 = diffs().map(|t| (t / m).powf(p)).sum();
    m * s.powf(1.0 / p)
}

/// Exact key between two strings: the edit distance.
pub fn string_key(a: &[char], b: &[char]) -> f64 {
    levenshtein::distance(a, b) as f64
}

fn mean<T: Copy + Into<f64>>(a: &[T]) -> f64 {
    a.iter().map(|&x| x.into()).sum::<f64>() / a.len() as f64
}

/// 1 − cos between `a − ca` and `b − cb`; 1 when either side is zero.
fn cosine_distance<T: Copy + Into<f64>>(a: &[T], b: &[T], ca: f64, cb: f64) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x.into() - ca, y.into() - cb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 1.0;
    }
    (1.0 - ab / (aa.sqrt() * bb.sqrt())).clamp(0.0, 2.0)
}

/// Exact key between row `i` of `base` and row `j` of `queries` on the stored values: in f64
/// from f64 rows when either set is stored as f64 (or the metric is a user metric with an f64
/// distance), from f32 rows otherwise (the same key, without the copies).
pub fn set_key(metric: &Metric, base: &VectorSet, i: usize, queries: &VectorSet, j: usize) -> f64 {
    let wide = base.elem_type() == ElemType::F64 || queries.elem_type() == ElemType::F64;
    match metric {
        Metric::Custom(c) => match (&c.vectors_f64, &c.vectors) {
            (Some(f), _) => f.distance(&base.row_f64(i), &queries.row_f64(j)),
            // `check_metric` refused f64 rows an f32 distance cannot take exactly.
            (None, Some(f)) => f.distance(&base.row_f32(i), &queries.row_f32(j)),
            (None, None) => panic!("metric {metric} has no vector distance"),
        },
        m if wide => vector_key(m, &base.row_f64(i), &queries.row_f64(j)),
        m => vector_key(m, &base.row_f32(i), &queries.row_f32(j)),
    }
}

/// Exact key between base item `i` and query item `j` (see [`crate::metric`] for keys).
pub fn item_key(metric: &Metric, base: &Dataset, i: usize, queries: &Dataset, j: usize) -> f64 {
    match (base, queries) {
        (Dataset::Vectors(b), Dataset::Vectors(q)) => set_key(metric, b, i, q, j),
        (Dataset::Strings(b), Dataset::Strings(q)) => match metric {
            Metric::Custom(c) => c
                .strings
                .as_ref()
                .expect("checked")
                .distance(b.get(i), q.get(j)),
            _ => string_key(b.get(i), q.get(j)),
        },
        _ => panic!("item_key between vectors and strings"),
    }
}
