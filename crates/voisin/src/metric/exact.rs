//! Exact keys in f64: the values every engine reports and ranks its final candidates by.
//!
//! Inputs are the stored values (f32, or f64 for f64 storage; every other storage type converts
//! to f32 exactly), products and sums are done in f64, so the result is within about n·2⁻⁵³·Σ|terms| of the real value (a few ulps when the
//! terms do not cancel): far below f32 resolution. Every engine reports these same values,
//! which makes results identical across engines and devices.

use super::scale::{ldexp, row_exponent};
use super::{levenshtein, Metric, MINKOWSKI_POWER_KEY_MAX};
use crate::data::{Dataset, ElemType, VectorSet};

/// Exact key between two vectors for a built-in vector metric (see the module doc of
/// [`crate::metric`] for what a key is). Panics for string and custom metrics.
/// Generic over f32 and f64 rows: an f32 row gives the same key as its f64 widening.
pub fn vector_key<T: Copy + Into<f64>>(metric: &Metric, a: &[T], b: &[T]) -> f64 {
    key_with(metric, a, b, |x: T| x.into())
}

/// [`vector_key`] of the values times 2^-exp ([`super::scale::KeyScale`]): for `exp` 0 the same
/// function, bit for bit.
pub fn scaled_vector_key<T: Copy + Into<f64>>(metric: &Metric, a: &[T], b: &[T], exp: i32) -> f64 {
    match exp {
        0 => vector_key(metric, a, b),
        e => key_with(metric, a, b, move |x: T| ldexp(x.into(), -e)),
    }
}

/// The key of the values `f` maps each stored value to (the identity or an exact power-of-two
/// scaling): one body for both, so the unscaled key is what it always was.
fn key_with<T: Copy + Into<f64>, F: Fn(T) -> f64 + Copy>(
    metric: &Metric,
    a: &[T],
    b: &[T],
    f: F,
) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let pairs = a.iter().zip(b).map(|(&x, &y)| (f(x), f(y)));
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => pairs.map(|(x, y)| (x - y) * (x - y)).sum(),
        Metric::InnerProduct => -pairs.map(|(x, y)| x * y).sum::<f64>(),
        Metric::Cityblock => pairs.map(|(x, y)| (x - y).abs()).sum(),
        Metric::Chebyshev => pairs.map(|(x, y)| (x - y).abs()).fold(0.0, f64::max),
        Metric::Minkowski(p) if *p > MINKOWSKI_POWER_KEY_MAX => scaled_minkowski(a, b, *p, f),
        Metric::Minkowski(p) => pairs.map(|(x, y)| (x - y).abs().powf(*p)).sum(),
        // Scale-free: each row takes its own power of two when it needs one (`cosine_key`).
        Metric::Cosine => cosine_key(a, b, false),
        Metric::Correlation => cosine_key(a, b, true),
        Metric::Levenshtein | Metric::Custom(_) => {
            panic!("vector_key called with metric {metric}")
        }
    }
}

/// The minkowski distance of a large order p: with m the largest |a_i − b_i|,
/// `m · (Σ (|a_i − b_i| / m)^p)^(1/p)`. Every term is at most 1 and the sum is between 1 and the
/// dimension, so nothing overflows or vanishes whatever p is (the power sum itself would).
fn scaled_minkowski<T: Copy, F: Fn(T) -> f64 + Copy>(a: &[T], b: &[T], p: f64, f: F) -> f64 {
    let diffs = || a.iter().zip(b).map(|(&x, &y)| (f(x) - f(y)).abs());
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

fn mean<T: Copy, F: Fn(T) -> f64>(a: &[T], f: F) -> f64 {
    a.iter().map(|&x| f(x)).sum::<f64>() / a.len() as f64
}

/// Sums of squares and products the cosine key may be formed from without rescaling: far from
/// f64's overflow, and far enough from its underflow that a lost term is below every rounding.
fn safe_sum(x: f64) -> bool {
    (2f64.powi(-960)..=2f64.powi(960)).contains(&x)
}

/// 1 − cos between two rows (centred by their means for correlation); 1 when either is zero
/// (constant for correlation). Computed on the stored values; a row whose sums leave f64's
/// safe range ([`safe_sum`]: about 1e±289) is first brought to [1, 2) by its own power of two,
/// which changes no cosine. Ordinary rows take the first path, so their keys are unchanged, and
/// a row times 2^e gives the same key bit for bit wherever both rows are in range.
fn cosine_key<T: Copy + Into<f64>>(a: &[T], b: &[T], centred: bool) -> f64 {
    let id = |x: T| x.into();
    if let Some(k) = cosine_sums(a, b, centred, (id, id), true) {
        return k;
    }
    let (ea, eb) = (row_exponent(a), row_exponent(b));
    let fa = move |x: T| ldexp(x.into(), -ea);
    let fb = move |x: T| ldexp(x.into(), -eb);
    cosine_sums(a, b, centred, (fa, fb), false).expect("unchecked sums")
}

/// The cosine key from the rows mapped by `fa`, `fb`; `None` when `check` and a sum left the
/// safe range (or a row's sums vanished though it is not zero).
fn cosine_sums<T: Copy, A: Fn(T) -> f64 + Copy, B: Fn(T) -> f64 + Copy>(
    a: &[T],
    b: &[T],
    centred: bool,
    (fa, fb): (A, B),
    check: bool,
) -> Option<f64> {
    let (ca, cb) = match centred {
        true => (mean(a, fa), mean(b, fb)),
        false => (0.0, 0.0),
    };
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (fa(x) - ca, fb(y) - cb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    // Per side: Some(true) for a zero row (constant, centred), Some(false) for a usable sum,
    // None when the sum cannot be trusted (rescale).
    let d = a.len();
    let side = |s: f64, row: &[T], f: &dyn Fn(T) -> f64, c: f64| -> Option<bool> {
        if s == 0.0 {
            return (!check || !nonzero(row, f, centred)).then_some(true);
        }
        if centred && s <= noise(d, c) && constant(row, f) {
            return Some(true);
        }
        (!check || safe_sum(s)).then_some(false)
    };
    let za = side(aa, a, &fa, ca)?;
    let zb = side(bb, b, &fb, cb)?;
    if za || zb {
        return Some(1.0);
    }
    if check && !ab.is_finite() {
        return None;
    }
    Some((1.0 - ab / (aa.sqrt() * bb.sqrt())).clamp(0.0, 2.0))
}

/// The largest sum of squares a constant row's centring can leave from its mean's rounding.
fn noise(d: usize, mean: f64) -> f64 {
    let e = 4.0 * f64::EPSILON * mean.abs();
    d as f64 * e * e
}

/// Whether every value of the row is the same (a constant row is at distance 1 under
/// correlation, whatever its mean rounds to).
fn constant<T: Copy, F: Fn(T) -> f64>(row: &[T], f: F) -> bool {
    row.first()
        .is_some_and(|&x0| row.iter().all(|&x| f(x) == f(x0)))
}

/// Whether a row whose sum of squares came out zero holds a non-zero (centred) value: its
/// squares underflowed.
fn nonzero<T: Copy>(row: &[T], f: &dyn Fn(T) -> f64, centred: bool) -> bool {
    match centred {
        false => row.iter().any(|&x| f(x) != 0.0),
        true => !constant(row, f),
    }
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
