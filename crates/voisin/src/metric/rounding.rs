//! How far an exact key moves when its f64 inputs are rounded to f32: the widening every f32
//! filter over f64 storage adds to its own error bound (the CPU engine's tiles, the CUDA
//! engine's plan).
//!
//! With x the stored rows, x̃ = fl32(x) the rows the f32 pass computes on, K the exact key of
//! x and K̃ that of x̃, [`input_widening`] gives (α, β) with `|K − K̃| ≤ α·|K̃| + β`; an f32
//! bound `|K̃ − v| ≤ B₀(v)` then widens to `|K − v| ≤ B₀(v) + α·(|v| + B₀(v)) + β`. The
//! derivation per metric is in the module doc of `cpu/tiles.rs` ("f64 storage") and in
//! docs/design/f64-storage-gpu.md. Every `x − x̃` is exact in f64, so the errors are measured,
//! not estimated.

use super::Metric;

/// Largest rounding errors `e = x − x̃` of a group of rows rounded from f64 to f32 (all zero
/// when nothing was rounded).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rounding {
    /// Largest ‖e‖₂.
    pub l2: f64,
    /// Largest ‖e‖₁.
    pub l1: f64,
    /// Largest ‖e‖∞.
    pub linf: f64,
    /// Largest bound on how far the unit vector of a row moves (cosine and correlation):
    /// `2‖e‖₂ / ‖x̃‖` with the row centred for correlation.
    pub unit: f64,
}

impl Rounding {
    /// Errors of one f32 row against the f64 row it was rounded from. Every `x − x̃` is exact in
    /// f64; the sums are enlarged to cover their own rounding. `unit` is left at zero (it needs
    /// the row's norm as the caller prepares it: see [`Rounding::unit_move`]).
    pub fn of_row(exact: &[f64], rounded: &[f32]) -> Rounding {
        let (mut sq, mut l1, mut linf) = (0.0f64, 0.0f64, 0.0f64);
        for (&x, &r) in exact.iter().zip(rounded) {
            let e = (x - r as f64).abs();
            sq += e * e;
            l1 += e;
            linf = linf.max(e);
        }
        let slack = 1.0 + (exact.len() as f64 + 4.0) * f64::EPSILON;
        Rounding {
            l2: sq.sqrt() * slack,
            l1: l1 * slack,
            linf,
            unit: 0.0,
        }
    }

    /// The errors of a row whose f64 values were themselves a power-of-two scaling of the stored
    /// ones, rounded once ([`super::scale::ldexp`]): each may have lost up to half of f64's
    /// smallest subnormal where it underflowed, so every norm grows by that much per value.
    pub fn with_f64_underflow(self, d: usize) -> Rounding {
        let t = f64::from_bits(1);
        Rounding {
            l2: self.l2 + (d as f64).sqrt() * t * 2.0,
            l1: self.l1 + d as f64 * t * 2.0,
            linf: self.linf + t,
            unit: self.unit,
        }
    }

    /// The larger of each error.
    pub fn max(self, o: Rounding) -> Rounding {
        Rounding {
            l2: self.l2.max(o.l2),
            l1: self.l1.max(o.l1),
            linf: self.linf.max(o.linf),
            unit: self.unit.max(o.unit),
        }
    }

    /// `2‖e‖₂ / norm`, where `norm` is a lower bound of the row's (centred) norm: zero without
    /// error, infinite when the rounded row is zero but the row is not.
    pub fn unit_move(l2: f64, norm: f64) -> f64 {
        if l2 == 0.0 {
            0.0
        } else if norm > 0.0 {
            2.0 * l2 / norm
        } else {
            f64::INFINITY
        }
    }

    /// True when nothing was rounded.
    pub fn is_zero(&self) -> bool {
        *self == Rounding::default()
    }
}

/// (α, β) of `metric`'s key between a query row with rounding errors at most `eq` and a base
/// row with errors at most `eb` (see the module doc). `nq` and `nb` bound the norms of the
/// rounded rows as the f32 pass prepares them (translated by a common shift for the squared
/// euclidean key, as they are for the inner product); they are multiplied by `enlarge` (≥ 1,
/// the caller's allowance for the rounding of the norms themselves). Only the squared euclidean
/// and inner product keys read them, and α never depends on them. Zero errors give (0, 0).
///
/// Panics for levenshtein and user metrics, which have no f32 pass over f64 rows.
pub fn input_widening(
    metric: &Metric,
    eq: &Rounding,
    eb: &Rounding,
    (nq, nb): (f64, f64),
    enlarge: f64,
) -> (f64, f64) {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => {
            let rho = eq.l2 + eb.l2;
            let s = (nq + nb) * enlarge;
            (0.0, rho * (2.0 * s + rho))
        }
        Metric::InnerProduct => {
            let (nq, nb) = (nq * enlarge, nb * enlarge);
            (0.0, nq * eb.l2 + nb * eq.l2 + eq.l2 * eb.l2)
        }
        Metric::Cosine | Metric::Correlation => (0.0, eq.unit + eb.unit),
        Metric::Chebyshev => (0.0, eq.linf + eb.linf),
        Metric::Minkowski(p) if metric.is_minkowski_power_sum() => {
            minkowski_widening(*p, eq.l1 + eb.l1)
        }
        // The distance itself (cityblock, minkowski above the power-sum orders) moves by at
        // most ‖e‖ₚ ≤ ‖e‖₁.
        Metric::Cityblock | Metric::Minkowski(_) => (0.0, eq.l1 + eb.l1),
        Metric::Levenshtein | Metric::Custom(_) => {
            panic!("input_widening called with metric {metric}")
        }
    }
}

/// (α, β) of the minkowski key ‖a‖ₚᵖ when ‖a‖ₚ moves by at most `delta` (module doc of
/// `cpu/tiles.rs`): by convexity, for any t > 0,
/// `|‖a‖ₚᵖ − ‖ã‖ₚᵖ| ≤ ((1 + t)^(p−1) − 1)·‖ã‖ₚᵖ + (1 + 1/t)^(p−1)·Δᵖ`, here with t = 2⁻¹⁶.
fn minkowski_widening(p: f64, delta: f64) -> (f64, f64) {
    if delta == 0.0 {
        return (0.0, 0.0);
    }
    let t = 1.0f64 / 65536.0;
    let alpha = (1.0 + t).powf(p - 1.0) - 1.0;
    // Slack for powf's own rounding (a few ulps); an overflow makes the bound infinite, which
    // keeps every pair for the exact re-rank.
    let beta = (1.0 + 1.0 / t).powf(p - 1.0) * delta.powf(p);
    (alpha * (1.0 + 1e-12), beta * (1.0 + 1e-12))
}
