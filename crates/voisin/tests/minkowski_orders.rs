//! Minkowski of large orders (issue 14, class 4): `minkowski:1e6` and `minkowski:1e300` gave
//! infinite or zero distances and wrong neighbours, because Σ|a−b|^p left f64's range. Above
//! `MINKOWSKI_POWER_KEY_MAX` the key is the distance, computed with scaled differences: finite,
//! the CPU engine equal to the reference bit for bit, chebyshev's values in the limit.

use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::metric::MINKOWSKI_POWER_KEY_MAX;
use voisin::reference::{compare_knn, compare_range};
use voisin::{reference, Dataset, Engine, Metric, VectorSet};

fn engine() -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(2),
        ..Default::default()
    })
    .unwrap()
}

/// `n` rows of dimension `d`, uniform in [−scale, scale].
fn uniform(seed: u64, n: usize, d: usize, scale: f32) -> Dataset {
    let mut rng = StdRng::seed_from_u64(seed);
    let v = (0..n * d)
        .map(|_| rng.gen_range(-1.0f32..1.0) * scale)
        .collect();
    VectorSet::from_f32(n, d, v).unwrap().into()
}

const ORDERS: [f64; 6] = [8.5, 20.0, 150.0, 1e3, 1e6, 1e300];

#[test]
fn large_orders_match_the_reference_with_finite_distances() {
    let e = engine();
    // Ordinary values, values whose p-th powers overflow, values whose p-th powers vanish.
    for (scale, what) in [(1.0, "unit"), (1e30, "huge"), (1e-30, "tiny")] {
        let base = uniform(1, 400, 9, scale);
        let queries = uniform(2, 25, 9, scale);
        for p in ORDERS {
            let m = Metric::Minkowski(p);
            let want = reference::knn(&base, &queries, 5, &m).unwrap();
            let got = e.knn(&base, &queries, 5, &m).unwrap();
            compare_knn(&want, &got, 0.0).unwrap_or_else(|s| panic!("knn {what} p={p}: {s}"));
            assert!(
                got.distances.iter().all(|d| d.is_finite() && *d > 0.0),
                "{what} p={p}: {:?}",
                &got.distances[..5]
            );
            let want = reference::graph(&base, 3, &m).unwrap();
            let got = e.graph(&base, 3, &m).unwrap();
            compare_knn(&want, &got, 0.0).unwrap_or_else(|s| panic!("graph {what} p={p}: {s}"));
            let radius = f64::from(got.distances[got.distances.len() / 2]);
            let want = reference::range(&base, &queries, radius, &m).unwrap();
            let got = e.range(&base, &queries, radius, &m).unwrap();
            compare_range(&want, &got, 0.0).unwrap_or_else(|s| panic!("range {what} p={p}: {s}"));
            assert!(!got.indices.is_empty(), "{what} p={p}: empty range");
        }
    }
}

#[test]
fn the_largest_orders_answer_like_chebyshev() {
    let e = engine();
    let base = uniform(3, 300, 6, 4.0);
    let queries = uniform(4, 20, 6, 4.0);
    let cheb = e.knn(&base, &queries, 4, &Metric::Chebyshev).unwrap();
    let far = e
        .knn(&base, &queries, 4, &Metric::Minkowski(1e300))
        .unwrap();
    assert_eq!(far.indices, cheb.indices);
    assert_eq!(far.distances, cheb.distances);
    // p = 1e6: between the chebyshev distance and d^(1/p) times it.
    let big = e.knn(&base, &queries, 4, &Metric::Minkowski(1e6)).unwrap();
    let all = reference::knn(&base, &queries, 300, &Metric::Chebyshev).unwrap();
    for q in 0..queries.len() {
        let (ids, ds) = big.row(q);
        let (cids, cds) = all.row(q);
        for (&i, &d) in ids.iter().zip(ds) {
            let c = cds[cids.iter().position(|&j| j == i).unwrap()];
            assert!(d >= c && f64::from(d) <= f64::from(c) * 6f64.powf(1e-6) * (1.0 + 1e-6));
        }
    }
}

#[test]
fn the_key_changes_form_continuously_at_the_threshold() {
    let base = uniform(5, 50, 7, 3.0);
    let below = Metric::Minkowski(MINKOWSKI_POWER_KEY_MAX);
    let above = Metric::Minkowski(MINKOWSKI_POWER_KEY_MAX * (1.0 + 1e-12));
    assert!(below.is_minkowski_power_sum() && !above.is_minkowski_power_sum());
    let a = reference::graph(&base, 5, &below).unwrap();
    let b = reference::graph(&base, 5, &above).unwrap();
    assert_eq!(a.indices, b.indices);
    for (x, y) in a.distances.iter().zip(&b.distances) {
        assert!((x - y).abs() <= 1e-5 * x.abs(), "{x} vs {y}");
    }
    // The radius of a range query is a distance in both forms.
    assert_eq!(above.radius_to_key(2.5), 2.5);
    assert_eq!(above.key_to_distance(2.5), 2.5);
}

#[test]
fn orders_the_parser_refuses_are_refused_when_built_in_code() {
    let e = engine();
    let x = uniform(3, 20, 4, 1.0);
    for p in [0.5, 0.0, -2.0, f64::NAN, f64::INFINITY] {
        let m = Metric::Minkowski(p);
        for r in [
            e.knn(&x, &x, 3, &m).map(|_| ()),
            e.graph(&x, 3, &m).map(|_| ()),
            e.range(&x, &x, 1.0, &m).map(|_| ()),
        ] {
            let msg = r.unwrap_err().to_string();
            assert!(
                msg.contains("must be a finite number >= 1"),
                "p = {p}: {msg}"
            );
        }
    }
}
