//! The cover tree built on the GPU (`voisin_cuda::index::GpuIndexes`) against the CPU build:
//! the same tree byte for byte in the index file, every invariant of the CPU build
//! (check_invariants, check_distances, check_separation), range and k-NN answers equal to brute
//! force (ids and distances), and a file round trip answered on the CPU.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda --test cover_gpu -- --ignored`.

mod common;

use std::time::Instant;

use rand::prelude::*;
use voisin::reference::{self, compare_knn, compare_range};
use voisin::{Dataset, Metric, StringSet, VectorSet};
use voisin_cuda::index::GpuIndexes;
use voisin_cuda::CudaEngine;
use voisin_index::{file, DatasetIndex, Index, IndexEngine, Kind, Params};

use common::{hard_words, word_list};

fn engine() -> CudaEngine {
    CudaEngine::new(0).expect("a CUDA GPU")
}

/// The cover tree of base `base` built on `e`'s GPU through the index face.
fn build_cover(
    e: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    base: f64,
) -> voisin::Result<DatasetIndex> {
    let params = Params {
        base,
        ..Params::default()
    };
    GpuIndexes::one(e).build(data, metric, Kind::Cover, &params, &|_| {})
}

fn metrics() -> [Metric; 4] {
    [
        Metric::Euclidean,
        Metric::Cityblock,
        Metric::Chebyshev,
        Metric::Minkowski(3.0),
    ]
}

/// `n` rows of `d` around 16 random centres (spread `spread`), or with `grid`, whole numbers in
/// 0..4 (ties and duplicates everywhere).
fn clustered(seed: u64, n: usize, d: usize, grid: bool) -> Dataset {
    let mut r = StdRng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..16 * d).map(|_| r.gen_range(-10.0..10.0)).collect();
    let mut v = Vec::with_capacity(n * d);
    for _ in 0..n {
        let c = r.gen_range(0..16);
        for i in 0..d {
            v.push(if grid {
                r.gen_range(0..4) as f32
            } else {
                centres[c * d + i] + r.gen_range(-0.5f32..0.5)
            });
        }
    }
    VectorSet::from_f32(n, d, v).unwrap().into()
}

/// A few items of the set (answers at distance 0) and fresh ones.
fn vector_queries(data: &Dataset, seed: u64) -> Dataset {
    let v = data.as_vectors().unwrap();
    let d = v.dim();
    let mut rows: Vec<f32> = Vec::new();
    for i in (0..v.len()).step_by((v.len() / 4).max(1)) {
        rows.extend_from_slice(&v.row_f32(i));
    }
    let fresh = clustered(seed, 20, d, false);
    rows.extend_from_slice(&fresh.as_vectors().unwrap().rows_f32(0, 20));
    VectorSet::from_f32(rows.len() / d, d, rows).unwrap().into()
}

fn tree_checks(index: &DatasetIndex, label: &str) {
    let r = match index {
        DatasetIndex::Vectors(Index::Cover(t)) => {
            t.check_invariants().and_then(|()| t.check_distances())
        }
        DatasetIndex::Strings(Index::Cover(t)) => {
            t.check_invariants().and_then(|()| t.check_distances())
        }
        _ => Err("not a cover tree".into()),
    };
    r.unwrap_or_else(|e| panic!("{label}: {e}"));
}

/// Builds on both sides and checks everything the module doc lists; returns the GPU build time.
fn check(
    e: &CudaEngine,
    data: &Dataset,
    queries: &Dataset,
    metric: &Metric,
    base: f64,
    radii: &[f64],
    label: &str,
) {
    let label = format!("{label} {metric} base {base}");
    let gpu = build_cover(e, data, metric.clone(), base).unwrap_or_else(|e| panic!("{label}: {e}"));
    let params = Params {
        base,
        ..Params::default()
    };
    let cpu = DatasetIndex::build(data, metric.clone(), Kind::Cover, &params).unwrap();
    let bytes = file::to_bytes(&gpu).unwrap();
    assert!(
        bytes == file::to_bytes(&cpu).unwrap(),
        "{label}: the GPU tree is not the CPU's"
    );
    if data.len() <= 5000 {
        tree_checks(&gpu, &label);
    }
    let read = file::from_bytes(&bytes).unwrap();
    for k in [1, 3, 10] {
        let want = reference::knn(data, queries, k, metric).unwrap();
        for (side, index) in [("gpu", &gpu), ("file", &read)] {
            let got = index.knn(queries, k).unwrap();
            compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("{label} {side} k={k}: {e}"));
        }
    }
    for &r in radii {
        let want = reference::range(data, queries, r, metric).unwrap();
        for (side, index) in [("gpu", &gpu), ("file", &read)] {
            let got = index.range(queries, r).unwrap();
            compare_range(&want, &got, 0.0).unwrap_or_else(|e| panic!("{label} {side} r={r}: {e}"));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn vectors_under_every_true_metric() {
    let e = engine();
    for (seed, n, d, grid) in [
        (1, 1, 3, false),
        (2, 2, 3, true),
        (3, 97, 1, false),
        (4, 301, 3, true),
        (5, 1003, 3, false),
        (6, 777, 20, false),
        (7, 2500, 20, true),
        // Slots over cover_build.rs's BLOCK_MAX (rounds over the grid), and under minkowski
        // distances on the radius itself (slots redone on the host).
        (8, 20_000, 3, true),
    ] {
        let data = clustered(seed, n, d, grid);
        let queries = vector_queries(&data, seed + 100);
        for metric in metrics() {
            for base in [2.0, 1.3] {
                check(
                    &e,
                    &data,
                    &queries,
                    &metric,
                    base,
                    &[0.0, 0.5, 2.0],
                    &format!("{n}x{d} grid={grid}"),
                );
            }
        }
    }
}

fn words_of(list: &[String]) -> Dataset {
    StringSet::from_strings(list).unwrap().into()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn words_under_levenshtein() {
    let e = engine();
    let list = hard_words(31, 500, &mut StdRng::seed_from_u64(9));
    let data = words_of(&list);
    let queries = words_of(
        &word_list(1)
            .iter()
            .skip(5)
            .step_by(3001)
            .map(|w| format!("{w}e"))
            .chain(["", "cat", "aab"].map(String::from))
            .collect::<Vec<_>>(),
    );
    for base in [2.0, 1.5] {
        check(
            &e,
            &data,
            &queries,
            &Metric::Levenshtein,
            base,
            &[0.0, 1.0, 2.0],
            "words",
        );
    }
}

/// The sets of the speed goal (100k clustered vectors, the whole of `data/words.txt`), checked
/// against the CPU build's file (no quadratic checks): the build times are printed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn larger_sets_equal_the_cpu_build() {
    let e = engine();
    let data = clustered(11, 100_000, 20, false);
    let t = Instant::now();
    let gpu = build_cover(&e, &data, Metric::Euclidean, 2.0).unwrap();
    let tg = t.elapsed();
    let t = Instant::now();
    let cpu =
        DatasetIndex::build(&data, Metric::Euclidean, Kind::Cover, &Params::default()).unwrap();
    let tc = t.elapsed();
    eprintln!("100k x 20 clustered: GPU build {tg:.2?}, CPU build {tc:.2?}");
    assert!(file::to_bytes(&gpu).unwrap() == file::to_bytes(&cpu).unwrap());
    let queries = vector_queries(&data, 12);
    let want = reference::knn(&data, &queries, 5, &Metric::Euclidean).unwrap();
    compare_knn(&want, &gpu.knn(&queries, 5).unwrap(), 0.0).unwrap();

    let words = words_of(&word_list(1));
    let t = Instant::now();
    let gpu = build_cover(&e, &words, Metric::Levenshtein, 2.0).unwrap();
    let tg = t.elapsed();
    let t = Instant::now();
    let cpu =
        DatasetIndex::build(&words, Metric::Levenshtein, Kind::Cover, &Params::default()).unwrap();
    let tc = t.elapsed();
    eprintln!("data/words.txt: GPU build {tg:.2?}, CPU build {tc:.2?}");
    assert!(file::to_bytes(&gpu).unwrap() == file::to_bytes(&cpu).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn refuses_user_and_non_metrics() {
    let e = engine();
    let data = clustered(1, 10, 2, false);
    for m in [Metric::Cosine, Metric::SqEuclidean] {
        assert!(build_cover(&e, &data, m, 2.0).is_err());
    }
    assert!(build_cover(&e, &data, Metric::Euclidean, 1.0).is_err());
    assert!(build_cover(&e, &words_of(&["a".into()]), Metric::Euclidean, 2.0).is_err());
}
