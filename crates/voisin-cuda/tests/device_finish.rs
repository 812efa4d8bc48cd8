//! The k-NN finish on the device (kernels/finish/rerank.cu: proof, exact re-rank, (key, index) sort)
//! against the CPU engine, bit for bit, where ties are everywhere: small integer data whose keys
//! repeat hundreds of times around the k-th, duplicate rows, a zero row. Queries the device
//! cannot prove on their first lists are widened there, and those it cannot prove at all go
//! through the host's widening path in the same call, so every path is checked.
//! Needs a CUDA GPU: `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{engine, seed};

use rand::prelude::*;
use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, KnnResult, Metric, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Precision, Select};

/// `n` rows of `d` integers in `0..levels`; every fifth row repeats the one before, row 0 is zero.
fn integers(rng: &mut StdRng, n: usize, d: usize, levels: i32) -> Dataset {
    let mut v: Vec<f32> = (0..n * d)
        .map(|_| rng.gen_range(0..levels) as f32)
        .collect();
    for r in (5..n).step_by(5) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
    }
    v[..d].iter_mut().for_each(|x| *x = 0.0);
    VectorSet::from_f32(n, d, v).unwrap().into()
}

/// An engine on TF32 tiles, with automatic selection (any k).
fn tf32() -> CudaEngine {
    CudaEngine::with_options(
        0,
        CudaOptions {
            precision: Precision::Tf32,
            ..Default::default()
        },
    )
    .expect("a CUDA GPU")
}

/// The metrics with exact keys on the device (all but minkowski, whose `powf` rounds
/// differently in CUDA and libm).
fn device_metrics() -> [Metric; 7] {
    [
        Metric::Euclidean,
        Metric::SqEuclidean,
        Metric::InnerProduct,
        Metric::Cosine,
        Metric::Correlation,
        Metric::Cityblock,
        Metric::Chebyshev,
    ]
}

/// Same ids, and the same distances to the bit.
fn identical(got: &KnnResult, want: &KnnResult, what: &str) {
    assert_eq!((got.n_queries, got.k), (want.n_queries, want.k), "{what}");
    for q in 0..want.n_queries {
        let ((gi, gd), (wi, wd)) = (got.row(q), want.row(q));
        assert_eq!(gi, wi, "{what}: ids of query {q}");
        let bits = |d: &[f32]| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(gd), bits(wd), "{what}: distances of query {q}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_finish_equals_the_cpu_engine_on_ties() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    // (name, engine, largest k its selection takes)
    let engines = [
        ("block", engine(Select::Block), Select::Block.max_k()),
        ("heap", engine(Select::Heap), Select::Heap.max_k()),
        ("tf32", tf32(), None),
    ];
    let (mut on_device, mut widened) = (0, 0);
    // (n, d, levels): at d = 4 with 4 levels a key is one of ~40 integers, so hundreds of items
    // share the k-th key at k = 1000; 40 levels spread them out enough to prove more lists.
    // 1,500 items: lists of k = n − 1 and n hold the whole base (nothing to prove).
    for &(n, d, levels) in &[(20_011usize, 4usize, 4i32), (20_011, 4, 40), (1_500, 3, 3)] {
        let base = integers(&mut rng, n, d, levels);
        let queries = integers(&mut rng, 61, d, levels);
        for m in device_metrics() {
            let ks = [1usize, 10, 100, 200, 256, 1000, n - 1, n];
            for (name, e, max_k) in &engines {
                for &k in ks.iter().filter(|&&k| max_k.is_none_or(|m| k <= m)) {
                    let what = format!("{name} n={n} d={d} levels={levels} k={k} {m}");
                    let (h0, w0) = (e.host_finished(), e.widened_on_device());
                    let got = e.knn(&base, &queries, k, &m).unwrap();
                    on_device += 61 - (e.host_finished() - h0);
                    widened += e.widened_on_device() - w0;
                    identical(&got, &cpu.knn(&base, &queries, k, &m).unwrap(), &what);
                }
            }
        }
    }
    // The data must exercise the device path, not only the host's, and its widening.
    eprintln!("{on_device} queries finished on the device, {widened} of them widened there");
    assert!(on_device > 0, "no query was finished on the device");
    assert!(widened > 0, "no query was widened on the device");
}

/// A 1 MiB working set: blocks of ~13 queries, so the device finish writes its answers at many
/// row offsets; at k = 1000 the answers of 200 queries (1.6 MB) no longer stay on the device and
/// each block's come back on their own.
#[test]
#[ignore = "needs a CUDA GPU"]
fn device_finish_across_many_query_blocks() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let small = CudaEngine::with_options(
        0,
        CudaOptions {
            tile_bytes: 1 << 20,
            ..Default::default()
        },
    )
    .expect("a CUDA GPU");
    let base = integers(&mut rng, 20_011, 4, 40);
    let queries = integers(&mut rng, 200, 4, 40);
    for m in [Metric::Euclidean, Metric::InnerProduct, Metric::Cityblock] {
        for k in [10usize, 1000] {
            let before = small.host_finished();
            let got = small.knn(&base, &queries, k, &m).unwrap();
            assert!(
                small.host_finished() - before < 200,
                "{m} k={k}: nothing finished on the device"
            );
            let what = format!("1 MiB working set k={k} {m}");
            identical(&got, &cpu.knn(&base, &queries, k, &m).unwrap(), &what);
        }
    }
}

/// The graph's rows proved and re-ranked on the device (one GPU, no checkpoint: the lists never
/// leave it) against the CPU engine, bit for bit, on the same tie-heavy integers. Rows whose
/// first lists do not prove are widened on the device (search/graph.rs `widen_on_device`), and
/// those still open at the widest sorted list go through the host's widening in the same call:
/// on rows that are all equal (one level) no list short of the whole set proves. Every path
/// must have taken some rows. A ragged last tile (n not a multiple of any tile edge) and k up
/// to n − 1.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_rows_finished_on_the_device_equal_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    // (name, engine, largest k its selection takes)
    let engines = [
        ("block", engine(Select::Block), Select::Block.max_k()),
        ("tf32", tf32(), None),
    ];
    let (mut first, mut widened, mut on_host) = (0, 0, 0);
    let cases = [
        (3_001usize, 4usize, 4i32),
        (3_001, 5, 40),
        (301, 3, 3),
        (3_001, 2, 1),
    ];
    for &(n, d, levels) in &cases {
        let data = integers(&mut rng, n, d, levels);
        for m in device_metrics() {
            for k in [1usize, 10, 100, 256, 1000, n - 1]
                .into_iter()
                .filter(|&k| k < n)
            {
                let want = cpu.graph(&data, k, &m).unwrap();
                for (name, e, _) in engines.iter().filter(|e| e.2.is_none_or(|m| k <= m)) {
                    let what = format!("graph {name} n={n} d={d} levels={levels} k={k} {m}");
                    let (h0, w0) = (e.host_finished(), e.widened_on_device());
                    let got = e.graph(&data, k, &m).unwrap();
                    let (host, wide) = (e.host_finished() - h0, e.widened_on_device() - w0);
                    on_host += host;
                    widened += wide;
                    first += n - host - wide;
                    identical(&got, &want, &what);
                }
            }
        }
    }
    eprintln!(
        "graph rows: {first} finished on the device from their first lists, {widened} widened \
         there, {on_host} on the host"
    );
    assert!(first > 0, "no graph row was finished on the device");
    assert!(widened > 0, "no graph row was widened on the device");
    assert!(on_host > 0, "no graph row went through the host's widening");
}

/// Inputs stored in an order (a sorted word list's embeddings, data grouped by class): the fused
/// passes warm their lists on a sample spread over the set, not on its first items, which here
/// are all one cluster's. Clusters of near copies, stored cluster after cluster, with exact
/// duplicates; the k-NN in small batches (fused filter) and large ones (fused tile pairs) and
/// the graph on tiles small enough that the set spans many, against the CPU engine bit for bit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sorted_inputs_equal_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let (n, d, clusters) = (40_000usize, 16usize, 50usize);
    let centres: Vec<f32> = (0..clusters * d)
        .map(|_| rng.gen_range(-100.0f32..100.0))
        .collect();
    let mut v = Vec::with_capacity(n * d);
    for r in 0..n {
        let c = r * clusters / n;
        if r % 7 == 3 {
            let prev = v[(r - 1) * d..r * d].to_vec();
            v.extend_from_slice(&prev);
        } else {
            v.extend((0..d).map(|j| centres[c * d + j] + rng.gen_range(-1.0f32..1.0)));
        }
    }
    let data: Dataset = VectorSet::from_f32(n, d, v.clone()).unwrap().into();
    let pick = |m: usize| -> Dataset {
        let rows: Vec<f32> = (0..m)
            .flat_map(|i| v[(i * 7919 % n) * d..(i * 7919 % n + 1) * d].to_vec())
            .collect();
        VectorSet::from_f32(m, d, rows).unwrap().into()
    };
    let e = CudaEngine::with_options(
        0,
        CudaOptions {
            tile_bytes: 1 << 24,
            ..Default::default()
        },
    )
    .expect("a CUDA GPU");
    for m in [Metric::Euclidean, Metric::InnerProduct, Metric::Cosine] {
        for nq in [300usize, 2_000] {
            let queries = pick(nq);
            for k in [1usize, 10, 100] {
                let what = format!("sorted k-NN {nq} queries k={k} {m}");
                let got = e.knn(&data, &queries, k, &m).unwrap();
                identical(&got, &cpu.knn(&data, &queries, k, &m).unwrap(), &what);
            }
        }
        for k in [1usize, 10] {
            let what = format!("sorted graph k={k} {m}");
            let got = e.graph(&data, k, &m).unwrap();
            identical(&got, &cpu.graph(&data, k, &m).unwrap(), &what);
        }
    }
}
