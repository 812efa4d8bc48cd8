//! The distributed algorithms run in one process with simulated ranks (every rank's phase in
//! turn, buffers routed by hand), compared with the f64 reference for identity: same indices,
//! same distances, on data full of ties and duplicates. Runs without MPI installed.

use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::reference;
use voisin::{Dataset, KnnResult, Metric, StringSet, VectorSet};
use voisin_mpi::{graph, knn, rekey};

fn engine() -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(1),
        ..CpuOptions::default()
    })
    .unwrap()
}

/// Small integer coordinates: many equal distances and some identical vectors.
fn tied(n: usize, dim: usize, seed: u64) -> Dataset {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-2..3) as f32).collect();
    if n > 3 {
        let (a, b) = v.split_at_mut(dim);
        b[..dim].copy_from_slice(a);
    }
    VectorSet::from_f32(n, dim, v).unwrap().into()
}

fn simulate_graph(data: &Dataset, k: usize, metric: &Metric, size: usize) -> KnnResult {
    let n = data.len();
    let kk = graph::row_len(n, k);
    if kk == 0 {
        return KnnResult {
            n_queries: n,
            ..Default::default()
        };
    }
    let plan = graph::Plan::new(n, size);
    let e = engine();
    let sent: Vec<Vec<Vec<u32>>> = (0..size)
        .map(|r| graph::local(&e, data, k, metric, &plan, r, size).unwrap())
        .collect();
    let mut rows = Vec::new();
    for dest in 0..size {
        let recv: Vec<u32> = sent
            .iter()
            .flat_map(|from| from[dest].iter().copied())
            .collect();
        rows.extend(graph::merge(data, k, metric, &recv));
    }
    rekey::assemble(&rows, n, kk)
}

fn simulate_knn(base: &Dataset, q: &Dataset, k: usize, metric: &Metric, size: usize) -> KnnResult {
    let e = engine();
    let all: Vec<u32> = (0..size)
        .flat_map(|r| knn::local(&e, base, q, k, metric, r, size).unwrap())
        .collect();
    knn::merge(base, q, k, metric, size, &all)
}

fn same(expected: &KnnResult, got: &KnnResult, what: &str) {
    reference::compare_knn(expected, got, 0.0).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(expected.indices, got.indices, "{what}");
    assert_eq!(expected.distances, got.distances, "{what}");
}

#[test]
fn plan_deals_every_upper_tile_once_and_evenly() {
    for n in [1, 2, 5, 37] {
        for size in 1..6 {
            let p = graph::Plan::new(n, size);
            let nb = p.blocks.len();
            let mut seen = vec![vec![0; nb]; nb];
            for &(i, j) in &p.tiles {
                assert!(i <= j);
                seen[i][j] += 1;
            }
            for (i, row) in seen.iter().enumerate() {
                for (j, &c) in row.iter().enumerate() {
                    assert_eq!(c, usize::from(i <= j), "n {n} size {size} tile ({i},{j})");
                }
            }
            let per: Vec<usize> = (0..size)
                .map(|r| p.tiles.iter().skip(r).step_by(size).count())
                .collect();
            assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1);
        }
    }
}

#[test]
fn graph_matches_reference_for_any_rank_count() {
    for (n, dim) in [(1, 3), (2, 1), (7, 3), (23, 5), (40, 2)] {
        let data = tied(n, dim, n as u64);
        for metric in [Metric::Euclidean, Metric::Cityblock, Metric::InnerProduct] {
            for k in [1, 10, n.saturating_sub(1).max(1), n + 5] {
                let expected = reference::graph(&data, k, &metric).unwrap();
                for size in 1..=5 {
                    let got = simulate_graph(&data, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("n {n} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

#[test]
fn graph_matches_reference_on_zero_vectors_and_wide_rows() {
    for dim in [1, 127] {
        let n = 13;
        let mut v = vec![0.0f32; n * dim];
        for (i, x) in v.iter_mut().enumerate().skip(4 * dim) {
            *x = ((i * 7) % 5) as f32 - 2.0;
        }
        let data: Dataset = VectorSet::from_f32(n, dim, v).unwrap().into();
        for metric in [Metric::Euclidean, Metric::Cosine, Metric::Chebyshev] {
            for k in [1, 5, n - 1] {
                let expected = reference::graph(&data, k, &metric).unwrap();
                for size in [2, 3, 4] {
                    let got = simulate_graph(&data, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("dim {dim} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

#[test]
fn graph_of_strings_matches_reference() {
    let words = [
        "kitten", "sitting", "kitten", "mitten", "", "sit", "bitten", "kit", "a",
    ];
    let data: Dataset = StringSet::from_strings(words).unwrap().into();
    for k in [1, 3, 8] {
        let expected = reference::graph(&data, k, &Metric::Levenshtein).unwrap();
        for size in 1..=4 {
            let got = simulate_graph(&data, k, &Metric::Levenshtein, size);
            same(&expected, &got, &format!("strings k {k} ranks {size}"));
        }
    }
}

#[test]
fn knn_matches_reference_for_any_rank_count() {
    for (nb, nq, dim) in [(1, 3, 2), (2, 4, 1), (19, 6, 3), (33, 9, 4)] {
        let base = tied(nb, dim, 100 + nb as u64);
        let q = tied(nq, dim, 200 + nq as u64);
        for metric in [Metric::Euclidean, Metric::Cityblock] {
            for k in [1, 10, nb.saturating_sub(1).max(1), nb + 3] {
                let expected = reference::knn(&base, &q, k, &metric).unwrap();
                for size in 1..=5 {
                    let got = simulate_knn(&base, &q, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("base {nb} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}
