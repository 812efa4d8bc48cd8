//! Axioms of every built-in metric, checked on the exact f64 values that engines report, and
//! the f32 kernels checked against those values within their documented error bounds.
//!
//! Distances go through the public path engines use: `exact::vector_key` / `exact::string_key`
//! and then `Metric::key_to_distance`.
//!
//! Rules with exceptions, stated once here:
//! - `inner_product` reports a dot product: it may be negative and d(x, x) = ‖x‖², so only
//!   symmetry applies.
//! - `cosine` and `correlation`: d(x, x) = 0 only for non-degenerate vectors. A zero vector (for
//!   `correlation`, a constant vector) is at distance exactly 1 from every vector, itself
//!   included (scikit-learn's rule), so identity fails for it by definition.
//! - The triangle inequality is claimed (and checked) only where `Metric::is_true_metric` says
//!   so; for the others a counterexample shows the flag is not merely cautious.

use proptest::prelude::*;
use voisin::metric::exact::{string_key, vector_key};
use voisin::metric::simd::{Isa, Kernel};
use voisin::metric::Metric;

fn distance(m: &Metric, a: &[f32], b: &[f32]) -> f64 {
    m.key_to_distance(vector_key(m, a, b))
}

fn vector_metrics() -> Vec<Metric> {
    let mut ms: Vec<Metric> = Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect();
    // More orders than the one builtins() lists, fractional ones included.
    ms.extend([1.0, 1.5, 2.0, 4.0, 7.5].map(Metric::Minkowski));
    ms
}

/// Slack for comparisons of f64 values computed in different orders: relative to the size of
/// the values involved.
fn tol(scale: f64) -> f64 {
    1e-9 * scale.abs().max(1e-300)
}

/// Coordinates that make ties, duplicates and zero or constant vectors common, mixed with
/// ordinary and widely scaled values.
fn coord() -> impl Strategy<Value = f32> {
    prop_oneof![
        (-2i8..=2).prop_map(f32::from),
        -100.0f32..100.0,
        (-1.0f32..1.0, -30i32..30).prop_map(|(m, e)| m * 2f32.powi(e)),
    ]
}

/// Three vectors of one dimension; sometimes one is zero and sometimes one is constant.
fn triple() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, Vec<f32>)> {
    (1usize..=9)
        .prop_flat_map(|d| {
            let v = || prop::collection::vec(coord(), d);
            (v(), v(), v(), 0u8..4, -3.0f32..3.0)
        })
        .prop_map(|(x, y, mut z, kind, c)| {
            match kind {
                0 => z.iter_mut().for_each(|v| *v = 0.0),
                1 => z.iter_mut().for_each(|v| *v = c),
                _ => {}
            }
            (x, y, z)
        })
}

/// Zero for cosine, constant for correlation: the vectors at distance 1 from everything.
fn degenerate(m: &Metric, x: &[f32]) -> bool {
    match m {
        Metric::Cosine => x.iter().all(|&v| v == 0.0),
        Metric::Correlation => x.iter().all(|&v| v == x[0]),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn vector_metric_axioms((x, y, z) in triple()) {
        for m in vector_metrics() {
            let (dxy, dyx) = (distance(&m, &x, &y), distance(&m, &y, &x));
            prop_assert!((dxy - dyx).abs() <= tol(dxy), "{m} symmetry: {dxy} vs {dyx}");
            if m == Metric::InnerProduct {
                continue;
            }
            for (a, b) in [(&x, &y), (&y, &z), (&x, &z)] {
                let d = distance(&m, a, b);
                prop_assert!(d >= 0.0, "{m} negative: d({a:?}, {b:?}) = {d}");
            }
            for v in [&x, &y, &z] {
                let d = distance(&m, v, v);
                if degenerate(&m, v) {
                    prop_assert_eq!(d, 1.0, "{} degenerate {:?}", m, v);
                    prop_assert_eq!(distance(&m, v, &x), 1.0, "{} degenerate {:?}", m, v);
                } else {
                    prop_assert!(d <= 1e-12, "{m} identity: d({v:?}, itself) = {d}");
                }
            }
            if m.is_true_metric() {
                for (a, b, c) in [(&x, &y, &z), (&y, &z, &x), (&z, &x, &y)] {
                    let (ac, ab, bc) = (distance(&m, a, c), distance(&m, a, b), distance(&m, b, c));
                    prop_assert!(
                        ac <= ab + bc + tol(ab + bc),
                        "{m} triangle: d(a,c) = {ac} > {ab} + {bc}"
                    );
                }
            }
        }
    }

    #[test]
    fn levenshtein_axioms(
        x in prop::collection::vec(prop::sample::select(&['a', 'b', 'é', '中', '😀'][..]), 0..80),
        y in prop::collection::vec(prop::sample::select(&['a', 'b', 'é', '中', '😀'][..]), 0..80),
        z in prop::collection::vec(prop::sample::select(&['a', 'b', 'c'][..]), 0..80),
    ) {
        let m = Metric::Levenshtein;
        assert!(m.is_true_metric());
        let d = |a: &[char], b: &[char]| m.key_to_distance(string_key(a, b));
        for v in [&x, &y, &z] {
            prop_assert_eq!(d(v, v), 0.0);
        }
        for (a, b, c) in [(&x, &y, &z), (&y, &z, &x), (&z, &x, &y)] {
            let (ab, ba) = (d(a, b), d(b, a));
            prop_assert_eq!(ab, ba);
            prop_assert!(ab >= (a.len().abs_diff(b.len())) as f64);
            prop_assert!(ab <= a.len().max(b.len()) as f64);
            prop_assert!(ab > 0.0 || a == b, "distinct strings at distance 0");
            prop_assert!(d(a, c) <= ab + d(b, c));
        }
    }

    #[test]
    fn kernels_within_bounds_of_exact(
        (x, y, _) in triple(),
        p in prop_oneof![Just(1.0f64), Just(2.0), Just(3.0), Just(4.0), 1.0f64..6.0],
    ) {
        let checks = [
            (Kernel::L1, Metric::Cityblock, 1.0),
            (Kernel::Linf, Metric::Chebyshev, 1.0),
            (Kernel::SqL2, Metric::SqEuclidean, 1.0),
            (Kernel::Dot, Metric::InnerProduct, -1.0),
            (Kernel::MinkowskiPow(p), Metric::Minkowski(p), 1.0),
        ];
        let scale: f64 = x.iter().zip(&y).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
        for isa in Isa::available() {
            for (k, m, sign) in checks.clone() {
                let exact = sign * vector_key(&m, &x, &y);
                let v = isa.pair(k, &x, &y);
                let bound = k.error_bound(v, x.len(), scale);
                // Only a representable result must come with a usable bound: p-th powers of
                // large coordinates overflow f32, and an infinite value is then flagged unknown.
                if exact.abs() < 1e30 && scale < 1e30 {
                    prop_assert!(bound.is_finite(), "{k:?} bound not finite for {v}");
                }
                prop_assert!(
                    (v as f64 - exact).abs() <= bound,
                    "{} {k:?}: {v} vs exact {exact}, bound {bound}", isa.name()
                );
            }
        }
    }
}

#[test]
fn kernels_within_bounds_on_adversarial_dims() {
    // Deterministic data with cancellation and a wide exponent spread, at the dimensions where
    // lane and block tails change shape.
    for dim in [1usize, 3, 7, 8, 9, 127, 1025, 4096] {
        let x: Vec<f32> = (0..dim)
            .map(|i| {
                let e = (i * 37 % 61) as i32 - 30;
                (if i % 3 == 0 { -1.0 } else { 1.0 }) * (1.0 + (i % 7) as f32 / 7.0) * 2f32.powi(e)
            })
            .collect();
        // y cancels x almost exactly on most coordinates.
        let y: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i % 4 == 0 {
                    -v
                } else {
                    v * (1.0 + f32::EPSILON)
                }
            })
            .collect();
        let scale: f64 = x
            .iter()
            .zip(&y)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        for isa in Isa::available() {
            for (k, m, sign) in [
                (Kernel::L1, Metric::Cityblock, 1.0),
                (Kernel::Linf, Metric::Chebyshev, 1.0),
                (Kernel::SqL2, Metric::SqEuclidean, 1.0),
                (Kernel::Dot, Metric::InnerProduct, -1.0),
                (Kernel::MinkowskiPow(3.0), Metric::Minkowski(3.0), 1.0),
                (Kernel::MinkowskiPow(2.5), Metric::Minkowski(2.5), 1.0),
            ] {
                let exact = sign * vector_key(&m, &x, &y);
                let v = isa.pair(k, &x, &y);
                let bound = k.error_bound(v, dim, scale);
                assert!(
                    (v as f64 - exact).abs() <= bound,
                    "{} {k:?} dim {dim}: {v} vs {exact}, bound {bound}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn non_metrics_have_triangle_counterexamples() {
    let (a, b, c) = ([0.0f32, 1.0], [1.0f32, 1.0], [2.0f32, 1.0]);
    let m = Metric::SqEuclidean;
    assert!(!m.is_true_metric());
    assert!(distance(&m, &a, &c) > distance(&m, &a, &b) + distance(&m, &b, &c));
    // Cosine: three directions 0°, 45°, 90°: 1 > 2 (1 − cos 45°) ≈ 0.586.
    let (a, b, c) = ([1.0f32, 0.0], [1.0f32, 1.0], [0.0f32, 1.0]);
    let m = Metric::Cosine;
    assert!(!m.is_true_metric());
    assert!(distance(&m, &a, &c) > distance(&m, &a, &b) + distance(&m, &b, &c));
    // Correlation is cosine of the centred vectors.
    let (a, b, c) = (
        [1.0f32, 0.0, -1.0],
        [1.0f32, 1.0, -2.0],
        [0.0f32, 1.0, -1.0],
    );
    let m = Metric::Correlation;
    assert!(!m.is_true_metric());
    assert!(distance(&m, &a, &c) > distance(&m, &a, &b) + distance(&m, &b, &c));
}

#[test]
fn degenerate_vectors_are_at_distance_one() {
    let zero = [0.0f32; 4];
    let constant = [2.5f32; 4];
    let v = [1.0f32, -2.0, 0.5, 3.0];
    for (m, deg) in [(Metric::Cosine, &zero), (Metric::Correlation, &constant)] {
        assert_eq!(distance(&m, deg, &v), 1.0, "{m}");
        assert_eq!(distance(&m, &v, deg), 1.0, "{m}");
        assert_eq!(distance(&m, deg, deg), 1.0, "{m}");
    }
    // A zero vector is constant too.
    assert_eq!(distance(&Metric::Correlation, &zero, &v), 1.0);
}
