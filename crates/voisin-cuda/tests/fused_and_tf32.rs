//! TF32 tiles and the fused distance + filter pass against the f64 reference: both must leave
//! results exactly equal (ids, and distances within rounding) on random and adversarial data.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{same_knn, seed};

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{reference, Dataset, Engine, Metric, RangeResult, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Fusion, Precision};

/// Every arithmetic/fusion combination the engine offers for GEMM metrics.
const VARIANTS: [(Precision, Fusion); 4] = [
    (Precision::Fp32, Fusion::Off),
    (Precision::Fp32, Fusion::On),
    (Precision::Tf32, Fusion::Off),
    (Precision::Tf32, Fusion::On),
];

const GEMM: [Metric; 5] = [
    Metric::Euclidean,
    Metric::SqEuclidean,
    Metric::Cosine,
    Metric::Correlation,
    Metric::InnerProduct,
];

fn engines() -> Vec<(String, CudaEngine)> {
    VARIANTS
        .iter()
        .map(|&(precision, fusion)| {
            let opts = CudaOptions {
                precision,
                fusion,
                ..Default::default()
            };
            let e = CudaEngine::with_options(0, opts).expect("a CUDA GPU");
            (format!("{precision:?}/fused {fusion:?}"), e)
        })
        .collect()
}

fn from_rows(n: usize, d: usize, v: Vec<f32>) -> Dataset {
    VectorSet::from_f32(n, d, v).unwrap().into()
}

fn normal(rng: &mut StdRng, n: usize, d: usize, offset: f32) -> Dataset {
    let v = (0..n * d)
        .map(|_| rng.sample::<f32, _>(StandardNormal) + offset)
        .collect();
    from_rows(n, d, v)
}

/// Small integers: many exact duplicates and ties, a zero vector, a constant vector.
fn adversarial(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let mut v: Vec<f32> = (0..n * d).map(|_| rng.gen_range(-2..=2) as f32).collect();
    for r in (3..n).step_by(7) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
    }
    v[..d].iter_mut().for_each(|x| *x = 0.0);
    v[d..2 * d].iter_mut().for_each(|x| *x = 1.5);
    from_rows(n, d, v)
}

/// Rows `ids` of a vector data set.
fn pick(data: &Dataset, ids: &[usize]) -> Dataset {
    let Dataset::Vectors(v) = data else {
        unreachable!("vectors only")
    };
    let rows: Vec<f32> = ids.iter().flat_map(|&i| v.row_f32(i).to_vec()).collect();
    from_rows(ids.len(), v.dim(), rows)
}

fn same_range(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.indices, want.indices, "{what}: indices");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_all_gemm_metrics_dims_and_k() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engines = engines();
    // n not a multiple of the 128-wide fused tiles nor of any other tile.
    // d = 4099 sums its products in three chunks (prepare.rs `K_CHUNK`), the last one of 3.
    for &(n, d) in &[
        (1000usize, 1usize),
        (1337, 3),
        (700, 127),
        (300, 1025),
        (300, 4099),
    ] {
        let base = normal(&mut rng, n, d, 0.0);
        let queries = normal(&mut rng, 37, d, 0.0);
        for m in GEMM {
            for k in [1, 10, 100, n - 1, n + 5] {
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                for (name, e) in &engines {
                    let what = format!("{name} n={n} d={d} k={k} {m}");
                    same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_ties_duplicates_zero_vectors_far_from_origin() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engines = engines();
    for &(n, d) in &[(2000usize, 3usize), (1500, 127)] {
        let cases = [
            ("adversarial", adversarial(&mut rng, n, d)),
            ("offset 1e4", normal(&mut rng, n, d, 1e4)),
        ];
        for (kind, base) in &cases {
            // Queries drawn from the base: exact duplicates, zero distances.
            let queries = pick(base, &(0..n).step_by(53).collect::<Vec<_>>());
            for m in GEMM {
                for k in [1, 10, 100] {
                    let want = reference::knn(base, &queries, k, &m).unwrap();
                    for (name, e) in &engines {
                        let what = format!("{name} {kind} n={n} d={d} k={k} {m}");
                        same_knn(&e.knn(base, &queries, k, &m).unwrap(), &want, &what);
                    }
                }
            }
        }
    }
}

/// The first base items lie far from every query, so their threshold lets nearly the whole
/// base through and the fused buffers overflow: those queries must be redone correctly.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_overflow_falls_back() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (n, d) = (12_000usize, 8usize);
    let v: Vec<f32> = (0..n * d)
        .map(|i| {
            let far = if i / d < 3000 { 50.0 } else { 0.0 };
            rng.sample::<f32, _>(StandardNormal) + far
        })
        .collect();
    let base = from_rows(n, d, v);
    let queries = normal(&mut rng, 300, d, 0.0);
    for (name, e) in &engines() {
        for k in [1, 10, 100] {
            let m = Metric::Euclidean;
            let want = reference::knn(&base, &queries, k, &m).unwrap();
            let what = format!("{name} overflow k={k}");
            same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_and_range_with_tf32() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engines = engines();
    for &(n, d) in &[(1500usize, 3usize), (900, 127), (400, 4099)] {
        for data in [normal(&mut rng, n, d, 0.0), adversarial(&mut rng, n, d)] {
            for m in GEMM {
                for k in [1, 10, n - 1] {
                    let want = reference::graph(&data, k, &m).unwrap();
                    for (name, e) in &engines {
                        let what = format!("{name} graph n={n} d={d} k={k} {m}");
                        same_knn(&e.graph(&data, k, &m).unwrap(), &want, &what);
                    }
                }
                // A radius around the 20th neighbour's distance of the first item.
                let r = reference::knn(&data, &pick(&data, &[0]), 20, &m).unwrap();
                let radius = f64::from(r.distances[19]).max(0.0);
                if m == Metric::InnerProduct {
                    continue; // a minimum dot product, not a distance; covered by the CPU tests
                }
                let want = reference::range(&data, &data, radius, &m).unwrap();
                for (name, e) in &engines {
                    let what = format!("{name} range n={n} d={d} {m}");
                    same_range(&e.range(&data, &data, radius, &m).unwrap(), &want, &what);
                }
            }
        }
    }
}
