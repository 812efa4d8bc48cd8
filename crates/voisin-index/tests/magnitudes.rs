//! The metric indexes over the whole finite range of f32 (issue 40): every index (the k-d tree
//! where it applies) × {range, k-NN, graph} on small integers times 2^e, e from f32's
//! subnormals to near its largest values, equals the f64 reference exactly, and its k-NN and
//! graph rows equal the big-integer reference (by distance, ties by index).

mod common;

#[path = "../../voisin/tests/support/wide.rs"]
mod wide;

use common::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::{Dataset, Metric, VectorSet};
use voisin_index::{DatasetIndex, Kind, Params};
use wide::{check_knn, Wide};

#[test]
fn indexes_over_f32_magnitudes() {
    let mut rng = StdRng::seed_from_u64(40);
    let (n, dim) = (60, 3);
    let ints: Vec<f64> = (0..n * dim)
        .map(|_| rng.gen_range(-6i32..=6) as f64)
        .collect();
    for e in [-149, -140, -70, 0, 60, 118] {
        let v: Vec<f64> = ints.iter().map(|&x| wide::ldexp(x, e)).collect();
        let base: Dataset = VectorSet::from_f32(n, dim, v.iter().map(|&x| x as f32).collect())
            .unwrap()
            .into();
        let queries = base.clone();
        for metric in [
            Metric::Euclidean,
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Minkowski(3.0),
            Metric::Minkowski(8.0),
        ] {
            let w = Wide::new(&metric, dim, &v, &v);
            let r = wide::ldexp(2.0, e);
            let kd = voisin_index::check_kind(&base, &metric, Kind::Kd)
                .is_ok()
                .then(|| (Kind::Kd, Params::default()));
            for (kind, params) in configs(n).into_iter().take(6).chain(kd) {
                let what = format!("2^{e} {kind} {params:?} {metric}");
                let index = DatasetIndex::build(&base, metric.clone(), kind, &params).unwrap();
                equals_reference(&index, &base, &queries, &metric, &[r], &what);
                check_knn(&w, &index.knn(&queries, 5).unwrap(), 5, false, &what);
                check_knn(&w, &index.graph(&base, 5).unwrap(), 5, true, &what);
            }
        }
    }
}
