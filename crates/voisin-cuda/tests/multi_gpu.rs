//! The multi-GPU engine against one GPU and the f64 reference. Every test needs a CUDA GPU:
//! `cargo test -p voisin-cuda --test multi_gpu -- --include-ignored`. With one GPU the same
//! device is listed twice (two engines share it), so the shard merges run on any machine;
//! with two or more, two different GPUs.

mod common;

use common::*;
use rand::prelude::*;
use voisin::{reference, Engine, Metric};
use voisin_cuda::{CudaEngine, CudaOptions, MultiGpu, PartialGraph, Select};

/// Two devices: 0 and 1 when the machine has them, else 0 twice.
fn two() -> Vec<usize> {
    if voisin_cuda::device_count() >= 2 {
        vec![0, 1]
    } else {
        vec![0, 0]
    }
}

/// A small tile budget so that graphs have several triangle tiles to deal out.
fn opts(select: Select) -> CudaOptions {
    CudaOptions {
        select,
        tile_bytes: 1 << 20,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_one_and_two_gpus_equal_the_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let one = MultiGpu::with_options(&[0], opts(Select::Auto)).unwrap();
    let pair = MultiGpu::with_options(&two(), opts(Select::Auto)).unwrap();
    let three = MultiGpu::with_options(&[0, 0, 0], opts(Select::Auto)).unwrap();
    eprintln!("engines: {} / {}", one.describe(), pair.describe());
    for &(n, d, adv) in &[(1001usize, 3usize, false), (777, 127, true), (5, 1, false)] {
        let base = if adv {
            adversarial(&mut rng, n, d)
        } else {
            normal(&mut rng, n, d)
        };
        let queries = normal(&mut rng, 29, d);
        for m in metrics() {
            for k in [1, 10, 100, n - 1, n + 4] {
                let what = format!("knn n={n} d={d} k={k} {m} adv={adv}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                let a = one.knn(&base, &queries, k, &m).unwrap();
                let b = pair.knn(&base, &queries, k, &m).unwrap();
                same_knn(&a, &want, &what);
                identical(&b, &a, &what);
                identical(&three.knn(&base, &queries, k, &m).unwrap(), &a, &what);
            }
        }
    }
}

/// k = 3000 over 2 shards of 2500: the radix path, and every shard list complete.
#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_large_k_over_shards() {
    let mut rng = StdRng::seed_from_u64(seed());
    let base = adversarial(&mut rng, 5000, 16);
    let queries = normal(&mut rng, 11, 16);
    let pair = MultiGpu::with_options(&two(), opts(Select::Auto)).unwrap();
    for k in [1000, 3000] {
        let m = Metric::Euclidean;
        let want = reference::knn(&base, &queries, k, &m).unwrap();
        same_knn(
            &pair.knn(&base, &queries, k, &m).unwrap(),
            &want,
            &format!("k={k}"),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_one_and_two_gpus_equal_the_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    for sel in [Select::Auto, Select::Radix] {
        let one = MultiGpu::with_options(&[0], opts(sel)).unwrap();
        let pair = MultiGpu::with_options(&two(), opts(sel)).unwrap();
        let three = MultiGpu::with_options(&[0, 0, 0], opts(sel)).unwrap();
        let single = CudaEngine::with_options(0, opts(sel)).unwrap();
        for &(n, d, adv) in &[(1501usize, 8usize, false), (1234, 3, true), (3, 2, false)] {
            let data = if adv {
                adversarial(&mut rng, n, d)
            } else {
                normal(&mut rng, n, d)
            };
            for m in metrics() {
                for k in [1, 10, 100, n - 1, n + 3] {
                    let what = format!("graph {sel:?} n={n} d={d} k={k} {m} adv={adv}");
                    let want = reference::graph(&data, k, &m).unwrap();
                    let a = single.graph(&data, k, &m).unwrap();
                    same_knn(&a, &want, &what);
                    identical(&one.graph(&data, k, &m).unwrap(), &a, &what);
                    identical(&pair.graph(&data, k, &m).unwrap(), &a, &what);
                    identical(&three.graph(&data, k, &m).unwrap(), &a, &what);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_over_two_gpus_equals_the_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let pair = MultiGpu::with_options(&two(), opts(Select::Auto)).unwrap();
    for &(n, d, adv) in &[(2000usize, 4usize, false), (1500, 3, true)] {
        let base = if adv {
            adversarial(&mut rng, n, d)
        } else {
            normal(&mut rng, n, d)
        };
        let queries = normal(&mut rng, 17, d);
        for m in metrics() {
            let all = reference::knn(&base, &queries, n, &m).unwrap();
            let (_, dist) = all.row(0);
            for frac in [0.0, 0.01, 0.2] {
                let r = dist[((n - 1) as f64 * frac) as usize] as f64;
                let what = format!("range n={n} d={d} r={r} {m}");
                let want = reference::range(&base, &queries, r, &m).unwrap();
                same_range(&pair.range(&base, &queries, r, &m).unwrap(), &want, &what);
            }
        }
    }
}

/// The public partial-graph step as MPI ranks would use it: three shares of the triangle
/// (dealt by row-major index), computed separately, merged, finished on one GPU.
#[test]
#[ignore = "needs a CUDA GPU"]
fn partial_graphs_merge_to_the_graph() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = CudaEngine::with_options(0, opts(Select::Auto)).unwrap();
    let data = adversarial(&mut rng, 2100, 5);
    for k in [1, 10, 40] {
        let m = Metric::Euclidean;
        let edge = e.graph_tile_edge(2100, k).unwrap();
        let nt = 2100usize.div_ceil(edge);
        assert!(
            nt >= 3,
            "edge {edge}: the budget should force several tiles"
        );
        let ranks = 3;
        let shares: Vec<PartialGraph> = (0..ranks)
            .map(|r| {
                let owns = move |i: usize, j: usize| (i * nt + j) % ranks == r;
                e.graph_tiles(&data, k, &m, edge, &owns).unwrap()
            })
            .collect();
        let merged = PartialGraph::merge(shares).unwrap();
        let got = e.graph_finish(&data, &m, merged).unwrap();
        same_knn(
            &got,
            &reference::graph(&data, k, &m).unwrap(),
            &format!("k={k}"),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn empty_and_tiny_inputs() {
    let mut rng = StdRng::seed_from_u64(seed());
    let pair = MultiGpu::new(&two()).unwrap();
    let base = normal(&mut rng, 1, 3);
    let queries = normal(&mut rng, 4, 3);
    let m = Metric::Euclidean;
    same_knn(
        &pair.knn(&base, &queries, 5, &m).unwrap(),
        &reference::knn(&base, &queries, 5, &m).unwrap(),
        "one base item",
    );
    same_knn(
        &pair.graph(&base, 3, &m).unwrap(),
        &reference::graph(&base, 3, &m).unwrap(),
        "one item graph",
    );
    assert!(MultiGpu::new(&[]).is_err());
    assert!(MultiGpu::new(&[0, 4096]).is_err());
}
