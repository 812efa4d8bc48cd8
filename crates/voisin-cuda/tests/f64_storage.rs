//! f64 storage on the CUDA engine. Values that are f32 numbers (f64 storage of f32 data) run on
//! the GPU and must equal the f64 reference; values f32 cannot hold are refused in one line (the
//! GPU tiles and device finish work on f32 rows), and the CPU engine answers them.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{engine, same_knn, same_range, seed};

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::cpu::CpuEngine;
use voisin::data::ElemType;
use voisin::{reference, Dataset, Engine, Metric, VectorSet};
use voisin_cuda::Select;

/// Every built-in vector metric.
fn metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect()
}

/// f64 storage of f32 numbers, far from the origin, with duplicate rows.
fn f64_of_f32(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let mut v: Vec<f64> = (0..n * d)
        .map(|_| {
            let x: f64 = StandardNormal.sample(rng);
            (100.0 + x) as f32 as f64
        })
        .collect();
    if n > 3 {
        let row = v[..d].to_vec();
        v[2 * d..3 * d].copy_from_slice(&row);
    }
    let set = VectorSet::from_f64(n, d, v).unwrap();
    assert_eq!(set.elem_type(), ElemType::F64);
    set.into()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_storage_of_f32_numbers_matches_the_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    for &(n, d) in &[(500usize, 1usize), (700, 3), (400, 127), (200, 1025)] {
        let base = f64_of_f32(&mut rng, n, d);
        let queries = f64_of_f32(&mut rng, 23, d);
        for m in metrics() {
            for k in [1, 10, n - 1] {
                let what = format!("f64 n={n} d={d} k={k} {m}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
            }
            let want = reference::graph(&base, 10, &m).unwrap();
            same_knn(
                &e.graph(&base, 10, &m).unwrap(),
                &want,
                &format!("graph {m} d={d}"),
            );
            let probe = reference::knn(&base, &queries, 10, &m).unwrap();
            let radius = probe.distances[probe.distances.len() / 2] as f64;
            let want = reference::range(&base, &queries, radius, &m).unwrap();
            same_range(
                &e.range(&base, &queries, radius, &m).unwrap(),
                &want,
                &format!("range {m} d={d}"),
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_values_f32_cannot_hold_are_refused_and_the_cpu_answers_them() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    let (n, d) = (300, 5);
    let vals: Vec<f64> = (0..n * d)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let data: Dataset = VectorSet::from_f64(n, d, vals).unwrap().into();
    for m in metrics() {
        let err = e.graph(&data, 5, &m).unwrap_err();
        assert!(err.is_user_error(), "{m}: {err}");
        assert!(err.to_string().contains("no exact f32 form"), "{m}: {err}");
        assert!(e.knn(&data, &data, 5, &m).is_err());
        assert!(e.range(&data, &data, 0.5, &m).is_err());
        let cpu = CpuEngine::default().graph(&data, 5, &m).unwrap();
        same_knn(
            &cpu,
            &reference::graph(&data, 5, &m).unwrap(),
            &format!("cpu {m}"),
        );
    }
}
