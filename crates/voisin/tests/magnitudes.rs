//! The CPU engine over the whole finite range of f32 and f64 (issue 40, classes 2 and 3),
//! against the extended-precision reference of `support/wide.rs`: k-NN, graphs and range
//! search on data far inside the types' ranges where squares and products leave them
//! (cosine at 1e18 and above in f32, squared norms past f32's range, subnormal products,
//! f64 values about 1e300 and 1e-310), for every vector metric the reference knows.

#[path = "support/wide.rs"]
mod wide;

use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::{Dataset, Engine, Metric, RangeResult, VectorSet};
use wide::{check_knn, check_row, metrics, TrueKey, Wide};

fn engine() -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(2),
        ..Default::default()
    })
    .unwrap()
}

/// How a set is stored.
#[derive(Clone, Copy, Debug)]
enum Storage {
    F32,
    F64,
}

fn set(storage: Storage, dim: usize, v: &[f64]) -> Dataset {
    let n = v.len() / dim;
    match storage {
        Storage::F32 => VectorSet::from_f32(n, dim, v.iter().map(|&x| x as f32).collect()).unwrap(),
        Storage::F64 => VectorSet::from_f64(n, dim, v.to_vec()).unwrap(),
    }
    .into()
}

/// Normal values times 2^e, with a duplicate row and a zero row, as the storage holds them.
fn data(rng: &mut StdRng, storage: Storage, n: usize, dim: usize, e: i32) -> Vec<f64> {
    let scale = |x: f64| wide::ldexp(x, e as i64);
    let mut v: Vec<f64> = (0..n * dim)
        .map(|_| scale(StandardNormal.sample(rng)))
        .map(|x| match storage {
            Storage::F32 => x as f32 as f64,
            Storage::F64 => x,
        })
        .collect();
    if n >= 6 {
        let row = v[dim..2 * dim].to_vec();
        v[4 * dim..5 * dim].copy_from_slice(&row);
        v[2 * dim..3 * dim].fill(0.0);
    }
    v
}

/// A radius in a clear gap of query 0's distances, about a quarter of the way in.
fn gap_radius(wide: &Wide) -> f64 {
    let mut d: Vec<f64> = (0..wide.n_base())
        .map(|i| wide.distance(&wide.key(i, 0)))
        .filter(|d| d.is_finite())
        .collect();
    d.sort_by(f64::total_cmp);
    if matches!(wide.metric, Metric::InnerProduct) {
        d.reverse();
    }
    if d.len() < 2 {
        // Every distance beyond f64's range: no radius reaches one.
        return f64::MAX;
    }
    let at = d.len() / 4;
    d[at] / 2.0 + d[at + 1] / 2.0
}

fn check_range(wide: &Wide, got: &RangeResult, radius: f64, what: &str) {
    let m = &wide.metric;
    for j in 0..wide.n_queries() {
        let (ids, dists) = got.row(j);
        let all = wide.sorted(j, None);
        let inside: Vec<(TrueKey, u32)> = all
            .iter()
            .filter(|(k, _)| wide.within(k, radius))
            .cloned()
            .collect();
        // A pair within f64 rounding of the radius may fall either way: skip such queries.
        let borderline = all.iter().any(|(k, i)| {
            let d = wide.distance(k);
            let slack = wide.abs_slack_distance(*i as usize, j);
            (d - radius).abs() <= 1e-9 * radius.abs().max(d.abs()) + 2.0 * slack
        });
        if borderline {
            continue;
        }
        assert_eq!(
            ids.len(),
            inside.len(),
            "{what} {m} range {radius} query {j}: {} results, want {}",
            ids.len(),
            inside.len()
        );
        check_row(wide, j, ids, dists, &inside, what);
    }
}

/// k-NN, graph and range of one data shape under every metric.
fn check_shape(storage: Storage, e: i32, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (n, dim) = (40, 16);
    let base = data(&mut rng, storage, n, dim, e);
    let queries = data(&mut rng, storage, 9, dim, e);
    let (b, q) = (set(storage, dim, &base), set(storage, dim, &queries));
    let eng = engine();
    for m in metrics() {
        let what = format!("{storage:?} 2^{e}");
        let wide_q = Wide::new(&m, dim, &base, &queries);
        let wide_g = Wide::new(&m, dim, &base, &base);
        for k in [1, 5] {
            let got = eng.knn(&b, &q, k, &m).unwrap();
            check_knn(&wide_q, &got, k, false, &format!("knn {what}"));
            let got = eng.graph(&b, k, &m).unwrap();
            check_knn(&wide_g, &got, k, true, &format!("graph {what}"));
        }
        let r = gap_radius(&wide_q);
        let got = eng.range(&b, &q, r, &m).unwrap();
        check_range(&wide_q, &got, r, &format!("range {what}"));
    }
}

/// Class 2: f32 vectors about 1e18 and above (cosine and correlation lose neighbours), and
/// squared norms past f32's range (2^70 in 16 dimensions).
#[test]
fn f32_large_magnitudes() {
    for (e, seed) in [(64, 1), (70, 2), (100, 3), (124, 4)] {
        check_shape(Storage::F32, e, seed);
    }
}

/// Class 2: f32 subnormal values, whose products underflow.
#[test]
fn f32_subnormal_magnitudes() {
    for (e, seed) in [(-70, 5), (-128, 6), (-140, 7)] {
        check_shape(Storage::F32, e, seed);
    }
}

/// Class 3: f64 values near either end of f64's range.
#[test]
fn f64_extreme_magnitudes() {
    for (e, seed) in [(1000, 8), (-1000, 9), (-1060, 10), (200, 11)] {
        check_shape(Storage::F64, e, seed);
    }
}

/// Ordinary magnitudes pass the same checks (the checks themselves are sound).
#[test]
fn ordinary_magnitudes() {
    check_shape(Storage::F32, 0, 12);
    check_shape(Storage::F64, 0, 13);
}

/// A true distance beyond f32's range is written as f32's largest finite value, in order.
#[test]
fn distances_beyond_f32_saturate_in_order() {
    let v = vec![0.0, 1e38, -2e38, 3e38];
    let b = set(Storage::F32, 1, &v);
    for m in [Metric::Euclidean, Metric::SqEuclidean, Metric::Cityblock] {
        let got = engine().knn(&b, &b, 4, &m).unwrap();
        let (ids, d) = got.row(0);
        assert_eq!(ids, &[0, 1, 2, 3], "{m}");
        assert!(d.iter().all(|x| x.is_finite()), "{m}: {d:?}");
        if m == Metric::SqEuclidean {
            assert_eq!(&d[1..], &[f32::MAX; 3], "{m}");
        }
    }
    let got = engine().knn(&b, &b, 4, &Metric::InnerProduct).unwrap();
    let (ids, d) = got.row(3);
    assert_eq!(ids, &[3, 1, 0, 2]);
    assert_eq!(d, &[f32::MAX, f32::MAX, 0.0, -f32::MAX]);
}

/// Data spanning more than f64 can hold in one squared key (2^1000 together with 2^-1000):
/// the documented limit. The large keys stay finite and exact; the smallest differences fall
/// below f64's range in the problem's scaled units and are reported as at most their true
/// value (down to 0), never as infinity or NaN, and the order never inverts two pairs whose
/// keys f64 can tell apart.
#[test]
fn spans_beyond_f64_keep_the_large_keys() {
    let (big, tiny) = (wide::ldexp(1.0, 1000), wide::ldexp(1.0, -1000));
    let v = vec![0.0, tiny, 2.0 * tiny, big, 3.0 * big];
    let b = set(Storage::F64, 1, &v);
    let m = Metric::Euclidean;
    let got = engine().graph(&b, 4, &m).unwrap();
    assert!(got.distances.iter().all(|d| d.is_finite() && *d >= 0.0));
    // The far pair and its f32 distance beyond f32's range.
    let (ids, d) = got.row(4);
    assert_eq!((ids[0], d[0]), (3, f32::MAX));
    // The tiny points: their own neighbours first, in index order once their keys vanish.
    for q in 0..3 {
        let (ids, _) = got.row(q);
        let mut near: Vec<u32> = ids[..2].to_vec();
        near.sort();
        let want: Vec<u32> = (0..3).filter(|&i| i != q as u32).collect();
        assert_eq!(near, want, "row {q}: {ids:?}");
    }
    let scale =
        voisin::metric::scale::KeyScale::of(&m, b.as_vectors().unwrap(), b.as_vectors().unwrap());
    let far = scale.distance(&m, scale.item_key(&m, &b, 4, &b, 3));
    assert_eq!(far, 2.0 * big);
    let small = scale.distance(&m, scale.item_key(&m, &b, 1, &b, 0));
    assert!((0.0..=tiny).contains(&small), "{small}");
}

mod props {
    //! Property tests over magnitudes (issue 40): data multiplied by 2^e, e across the whole
    //! exponent range of its storage type (subnormals included), against the unscaled data,
    //! the f64 reference and the big-integer reference.

    use super::*;
    use half::{bf16, f16};
    use proptest::prelude::*;
    use voisin::data::{Buffer, VectorData};
    use voisin::reference::{self, compare_knn};

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        F32,
        F64,
        F16,
        Bf16,
    }

    impl Kind {
        /// Exponents e for which small integers (|x| ≤ 8) times 2^e are exact in this type.
        fn exps(self) -> std::ops::RangeInclusive<i32> {
            match self {
                Kind::F32 => -149..=120,
                Kind::F64 => -1074..=1015,
                Kind::F16 => -24..=11,
                Kind::Bf16 => -133..=120,
            }
        }

        fn set(self, dim: usize, v: &[f64]) -> Dataset {
            let n = v.len() / dim;
            let data = match self {
                Kind::F32 => VectorData::F32(Buffer::Owned(v.iter().map(|&x| x as f32).collect())),
                Kind::F64 => VectorData::F64(Buffer::Owned(v.to_vec())),
                Kind::F16 => {
                    VectorData::F16(Buffer::Owned(v.iter().map(|&x| f16::from_f64(x)).collect()))
                }
                Kind::Bf16 => VectorData::Bf16(Buffer::Owned(
                    v.iter().map(|&x| bf16::from_f64(x)).collect(),
                )),
            };
            VectorSet::new(n, dim, data).unwrap().into()
        }
    }

    /// Small integers with duplicate and zero rows: ties and zero vectors throughout.
    fn ints(n: usize, dim: usize) -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(-8i32..=8, n * dim).prop_map(move |mut v| {
            if n >= 3 {
                v.copy_within(0..dim, dim);
                v[2 * dim..3 * dim].fill(0);
            }
            v.into_iter().map(f64::from).collect()
        })
    }

    fn case() -> impl Strategy<Value = (Kind, usize, usize, Vec<f64>, i32, usize)> {
        let kind = prop_oneof![
            Just(Kind::F32),
            Just(Kind::F64),
            Just(Kind::F16),
            Just(Kind::Bf16)
        ];
        (
            kind,
            1usize..14,
            prop_oneof![Just(1usize), Just(3), Just(127)],
        )
            .prop_flat_map(|(kind, n, dim)| {
                (
                    Just(kind),
                    Just(n),
                    Just(dim),
                    ints(n, dim),
                    kind.exps(),
                    1usize..n + 3,
                )
            })
    }

    fn scaled(v: &[f64], e: i32) -> Vec<f64> {
        v.iter().map(|&x| wide::ldexp(x, e as i64)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

        /// Every metric on data times 2^e: the CPU engine equals the f64 reference exactly,
        /// which equals the big-integer reference (by distance, ties by index); cosine and
        /// correlation give the unscaled data's answer exactly, the others its ids.
        #[test]
        fn every_scale_is_answered_exactly((kind, n, dim, v, e, k) in case()) {
            let eng = engine();
            let (plain, big) = (kind.set(dim, &v), kind.set(dim, &scaled(&v, e)));
            for m in metrics() {
                let what = format!("{kind:?} n {n} d {dim} 2^{e} k {k}");
                let got = eng.knn(&big, &big, k, &m).unwrap();
                let want = reference::knn(&big, &big, k, &m).unwrap();
                compare_knn(&want, &got, 0.0).map_err(|s| TestCaseError::fail(format!("knn {what} {m}: {s}")))?;
                let values = scaled(&v, e);
                check_knn(&Wide::new(&m, dim, &values, &values), &got, k, false, &format!("knn {what}"));
                let got_g = eng.graph(&big, k, &m).unwrap();
                let want_g = reference::graph(&big, k, &m).unwrap();
                compare_knn(&want_g, &got_g, 0.0).map_err(|s| TestCaseError::fail(format!("graph {what} {m}: {s}")))?;
                let unscaled = eng.knn(&plain, &plain, k, &m).unwrap();
                if !matches!(m, Metric::Minkowski(_)) {
                    prop_assert_eq!(&unscaled.indices, &got.indices, "{} {}", what, m);
                }
                if matches!(m, Metric::Cosine | Metric::Correlation) {
                    prop_assert_eq!(&unscaled.distances, &got.distances, "{} {}", what, m);
                    let g0 = eng.graph(&plain, k, &m).unwrap();
                    prop_assert_eq!(&g0.indices, &got_g.indices, "{} {}", what, m);
                }
            }
        }
    }

    /// The dimensions the property test leaves out, once each, and k = n − 1 and k > n.
    #[test]
    fn wide_rows_at_both_ends_of_f64() {
        let mut rng = StdRng::seed_from_u64(40);
        for (dim, e) in [(1025usize, 1000), (1025, -1060)] {
            let v = data(&mut rng, Storage::F64, 12, dim, e);
            let b = set(Storage::F64, dim, &v);
            for m in metrics() {
                let w = Wide::new(&m, dim, &v, &v);
                for k in [11, 20] {
                    let got = engine().graph(&b, k, &m).unwrap();
                    check_knn(&w, &got, k, true, &format!("graph d {dim} 2^{e}"));
                }
            }
        }
    }
}

/// Where the unscaled f64 keys were in range but beyond f32's (f32 values about 2^60, f64 about
/// 2^400), the keys are now scaled into f32's range; for the metrics whose keys scale exactly
/// every reported distance is still the unscaled key's, bit for bit.
#[test]
fn exact_scaling_changes_no_distance() {
    use voisin::metric::exact::vector_key;
    use voisin::metric::scale::{f32_value, scales_exactly};
    let mut rng = StdRng::seed_from_u64(14);
    for (storage, e) in [(Storage::F32, 60), (Storage::F32, -60), (Storage::F64, 400)] {
        let v = data(&mut rng, storage, 30, 7, e);
        let b = set(storage, 7, &v);
        for m in metrics().into_iter().filter(scales_exactly) {
            let got = engine().graph(&b, 6, &m).unwrap();
            for q in 0..30 {
                let (ids, d) = got.row(q);
                for (&i, &d) in ids.iter().zip(d) {
                    let row = |r: usize| &v[r * 7..(r + 1) * 7];
                    let old = m.key_to_distance(vector_key(&m, row(i as usize), row(q)));
                    assert_eq!(d, f32_value(old), "{storage:?} 2^{e} {m} ({q}, {i})");
                }
            }
        }
    }
}
