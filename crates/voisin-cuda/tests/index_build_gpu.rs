//! List of Clusters and SSS indexes built on the GPU (`voisin_cuda::index::GpuIndexes`): they pass the
//! CPU build's invariant checks (`from_parts` runs them), equal the CPU build part for part under
//! the metrics with exact device keys, and answer range, k-NN and graph queries equal to the
//! brute-force reference (ids and distances), on the CPU and on the GPU, also after a save and
//! load. Clustered and adversarial data (duplicates, ties), n not a multiple of the cluster size,
//! n below it, dimensions 1, 3, 20, 127, 1025 and 7000.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda --test index_build_gpu --
//! --include-ignored`.

mod common;

use common::{adversarial, hard_words, identical_knn, identical_range, seed, word_list};
use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{reference, Dataset, Metric, StringSet, VectorSet};
use voisin_cuda::index::GpuIndexes;
use voisin_cuda::CudaEngine;
use voisin_index::{DatasetIndex, Index, IndexEngine, IndexOp, Kind, Params};

fn engine() -> CudaEngine {
    CudaEngine::new(0).expect("a CUDA GPU")
}

/// The index built on `e`'s GPU through the index face.
fn gpu_build(
    e: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    kind: Kind,
    params: &Params,
) -> voisin::Result<DatasetIndex> {
    GpuIndexes::one(e).build(data, metric, kind, params, &|_| {})
}

/// Gaussian clusters around a few random centers.
fn clustered(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let centers: Vec<f32> = (0..8 * d).map(|_| rng.gen_range(-5.0..5.0)).collect();
    let mut v = Vec::with_capacity(n * d);
    for _ in 0..n {
        let c = rng.gen_range(0..8);
        for i in 0..d {
            let z: f32 = rng.sample(StandardNormal);
            v.push(centers[c * d + i] + 0.3 * z);
        }
    }
    VectorSet::from_f32(n, d, v).unwrap()
}

fn vectors(data: Dataset) -> VectorSet {
    data.as_vectors().expect("vectors").clone()
}

fn metrics() -> Vec<Metric> {
    vec![
        Metric::Euclidean,
        Metric::Cityblock,
        Metric::Chebyshev,
        Metric::Minkowski(3.0),
    ]
}

/// A GPU-built index: equal to the CPU build where the keys are exact, valid always, and its
/// answers (CPU search, GPU search where it takes the metric, after a save and load) equal the
/// reference's.
fn check(e: &CudaEngine, base: &VectorSet, metric: &Metric, kind: Kind, params: &Params) {
    let what = format!(
        "{kind} {params:?} over {} x {} under {metric}",
        base.len(),
        base.dim()
    );
    let data: Dataset = base.clone().into();
    let gpu = gpu_build(e, &data, metric.clone(), kind, params)
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    let cpu = DatasetIndex::build(&data, metric.clone(), kind, params).unwrap();
    let (DatasetIndex::Vectors(g), DatasetIndex::Vectors(c)) = (&gpu, &cpu) else {
        panic!("{what}: not a vector index");
    };
    match (g, c) {
        (Index::Lc(g), Index::Lc(c)) => {
            assert_eq!(g.check(), Ok(()), "{what}");
            if *metric != Metric::Minkowski(3.0) {
                assert_eq!(g.parts(), c.parts(), "{what}: differs from the CPU build");
                assert_eq!(g.build_evals(), c.build_evals(), "{what}: evaluations");
            }
        }
        (Index::Sss(g), Index::Sss(c)) => {
            assert_eq!(g.check(), Ok(()), "{what}");
            if *metric != Metric::Minkowski(3.0) {
                assert_eq!(g.parts(), c.parts(), "{what}: differs from the CPU build");
            }
        }
        _ => panic!("{what}: wrong kind"),
    }
    let n = base.len();
    let k = 5.min(n);
    let want_knn = reference::knn(&data, &data, k, metric).unwrap();
    let want_graph = reference::graph(&data, 3, metric).unwrap();
    let mut ds: Vec<f32> = (0..n).map(|q| want_knn.row(q).1[k - 1]).collect();
    ds.sort_by(f32::total_cmp);
    let r = ds[ds.len() / 2] as f64;
    let want_range = reference::range(&data, &data, r, metric).unwrap();
    let path = std::env::temp_dir().join(format!("voisin-build-gpu-{}.idx", std::process::id()));
    voisin_index::file::save(&gpu, &path).unwrap();
    let loaded = voisin_index::file::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    for (how, index) in [("built", &gpu), ("loaded", &loaded)] {
        identical_knn(
            &index.knn(&data, k).unwrap(),
            &want_knn,
            &format!("{what} {how} knn"),
        );
        identical_range(
            &index.range(&data, r).unwrap(),
            &want_range,
            &format!("{what} {how} range"),
        );
        identical_knn(
            &index.graph(&data, 3).unwrap(),
            &want_graph,
            &format!("{what} {how} graph"),
        );
    }
    let gpus = GpuIndexes::one(e);
    let search = IndexOp::Search {
        index: &gpu,
        queries: &data,
    };
    if gpus.supports(&search) {
        identical_knn(
            &gpus.knn(&gpu, &data, k).unwrap().result,
            &want_knn,
            &format!("{what} GPU knn"),
        );
        identical_range(
            &gpus.range(&gpu, &data, r).unwrap().result,
            &want_range,
            &format!("{what} GPU range"),
        );
    }
}

fn lc(m: usize) -> Params {
    Params {
        cluster_size: m,
        ..Params::default()
    }
}

fn sss(alpha: f64, p: usize) -> Params {
    Params {
        alpha,
        max_pivots: p,
        ..Params::default()
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lc_built_on_gpu_is_the_cpu_build_and_answers_exactly() {
    let e = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    for metric in metrics() {
        for d in [1, 3, 20] {
            for (n, m) in [
                (1, 4),
                (5, 16),
                (777, 7),
                (3000, 64),
                (2500, 1),
                (300, 1024),
            ] {
                for base in [
                    clustered(&mut rng, n, d),
                    vectors(adversarial(&mut rng, n, d)),
                ] {
                    check(&e, &base, &metric, Kind::Lc, &lc(m));
                }
            }
        }
    }
}

/// Dimensions 127 and 1025, and one beyond the 6,144 floats the first build's shared memory
/// held (the step kernels read the center's row from global memory now).
#[test]
#[ignore = "needs a CUDA GPU"]
fn lc_built_on_gpu_in_high_dimensions() {
    let e = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    for (d, n) in [(127, 900), (1025, 500), (7000, 120)] {
        for metric in [Metric::Euclidean, Metric::Cityblock] {
            for base in [
                clustered(&mut rng, n, d),
                vectors(adversarial(&mut rng, n, d)),
            ] {
                check(&e, &base, &metric, Kind::Lc, &lc(16));
            }
        }
    }
}

/// Sizes where the build takes many steps over several blocks and compactions.
#[test]
#[ignore = "needs a CUDA GPU"]
fn lc_built_on_gpu_at_scale() {
    let e = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    for (n, m) in [(150_001, 64), (60_000, 1000), (20_000, 2)] {
        let base = clustered(&mut rng, n, 3);
        let data: Dataset = base.clone().into();
        for metric in [Metric::Euclidean, Metric::Minkowski(3.0)] {
            let gpu = gpu_build(&e, &data, metric.clone(), Kind::Lc, &lc(m))
                .unwrap_or_else(|err| panic!("{n} {m} {metric}: {err}"));
            if metric == Metric::Euclidean {
                let cpu = DatasetIndex::build(&data, metric.clone(), Kind::Lc, &lc(m)).unwrap();
                let (DatasetIndex::Vectors(Index::Lc(g)), DatasetIndex::Vectors(Index::Lc(c))) =
                    (&gpu, &cpu)
                else {
                    panic!("not an LC");
                };
                assert!(
                    g.parts() == c.parts(),
                    "{n} {m}: differs from the CPU build"
                );
            }
            let q = clustered(&mut rng, 200, 3).into();
            let want = reference::knn(&data, &q, 10, &metric).unwrap();
            identical_knn(
                &gpu.knn(&q, 10).unwrap(),
                &want,
                &format!("{n} {m} {metric}"),
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sss_built_on_gpu_is_the_cpu_build_and_answers_exactly() {
    let e = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    for metric in metrics() {
        for d in [1, 3, 20] {
            for n in [1, 777, 3000] {
                for base in [
                    clustered(&mut rng, n, d),
                    vectors(adversarial(&mut rng, n, d)),
                ] {
                    for params in [sss(0.5, 1), sss(0.1, 64)] {
                        check(&e, &base, &metric, Kind::Sss, &params);
                    }
                }
            }
        }
    }
    // More candidates than one pivot-selection batch (α near 1 finds few pivots, so the scan
    // runs through the whole set).
    let data: Dataset = clustered(&mut rng, 150_000, 3).into();
    for params in [sss(0.9, 64), sss(0.3, 64)] {
        let gpu = gpu_build(&e, &data, Metric::Euclidean, Kind::Sss, &params).unwrap();
        let cpu = DatasetIndex::build(&data, Metric::Euclidean, Kind::Sss, &params).unwrap();
        let (DatasetIndex::Vectors(Index::Sss(g)), DatasetIndex::Vectors(Index::Sss(c))) =
            (&gpu, &cpu)
        else {
            panic!("not an SSS index");
        };
        assert!(
            g.parts() == c.parts(),
            "{params:?}: differs from the CPU build"
        );
    }
}

/// List of Clusters and SSS over words under levenshtein, built on the GPU through the device
/// pair oracle: the CPU build's index file byte for byte (and the LC's evaluation count), and
/// answers equal to the reference on the CPU after a save and load. Duplicates, the empty
/// string, strings over 64 chars (measured on the host), non-ASCII chars, n below the cluster
/// size.
#[test]
#[ignore = "needs a CUDA GPU"]
fn lc_and_sss_over_words_built_on_gpu_are_the_cpu_builds() {
    let e = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    let list = hard_words(31, 300, &mut rng);
    let small: Vec<String> = list[..5].to_vec();
    // With two strings over 64 chars the List of Clusters goes through the pair oracle; with
    // one (or none) through the device steps (index/build.rs lc_on_device).
    let one_long: Vec<String> = list
        .iter()
        .filter(|w| *w != &format!("{}b", "a".repeat(69)))
        .cloned()
        .collect();
    assert_eq!(one_long.len() + 1, list.len());
    let queries: Dataset = StringSet::from_strings(
        list.iter()
            .step_by(97)
            .map(|w| format!("{w}e"))
            .chain(["", "cat", "aab"].map(String::from))
            .collect::<Vec<_>>(),
    )
    .unwrap()
    .into();
    let metric = Metric::Levenshtein;
    for (words, what) in [
        (&list, "words"),
        (&one_long, "words, one over 64 chars"),
        (&small, "five words"),
    ] {
        let data: Dataset = StringSet::from_strings(words).unwrap().into();
        for (kind, params) in [
            (Kind::Lc, lc(1)),
            (Kind::Lc, lc(2)),
            (Kind::Lc, lc(32)),
            (Kind::Lc, lc(64)),
            // Larger than the device steps' clusters: the pair oracle's build.
            (Kind::Lc, lc(1100)),
            (Kind::Sss, sss(0.5, 64)),
            (Kind::Sss, sss(0.2, 8)),
        ] {
            let what = format!("{what}: {kind} {params:?}");
            let gpu = gpu_build(&e, &data, metric.clone(), kind, &params)
                .unwrap_or_else(|err| panic!("{what}: {err}"));
            let cpu = DatasetIndex::build(&data, metric.clone(), kind, &params).unwrap();
            assert!(
                voisin_index::file::to_bytes(&gpu).unwrap()
                    == voisin_index::file::to_bytes(&cpu).unwrap(),
                "{what}: the index file differs from the CPU build's"
            );
            if kind == Kind::Lc {
                assert_eq!(gpu.build_evals(), cpu.build_evals(), "{what}");
            }
            let path = std::env::temp_dir()
                .join(format!("voisin-build-gpu-words-{}.idx", std::process::id()));
            voisin_index::file::save(&gpu, &path).unwrap();
            let loaded = voisin_index::file::load(&path).unwrap();
            let _ = std::fs::remove_file(&path);
            for r in [0.0, 1.0, 2.0] {
                identical_range(
                    &loaded.range(&queries, r).unwrap(),
                    &reference::range(&data, &queries, r, &metric).unwrap(),
                    &format!("{what} range {r}"),
                );
            }
            let k = 10.min(words.len());
            identical_knn(
                &loaded.knn(&queries, k).unwrap(),
                &reference::knn(&data, &queries, k, &metric).unwrap(),
                &format!("{what} knn"),
            );
        }
    }
}

/// The whole word list (94,577 words): GPU and CPU build times printed (no timing asserted),
/// the files equal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn words_txt_built_on_gpu_equals_the_cpu_build() {
    let e = engine();
    let data: Dataset = StringSet::from_strings(word_list(1)).unwrap().into();
    // One small build first, so that the kernels' compilation is not timed.
    let warm: Dataset = StringSet::from_strings(["ab", "b"]).unwrap().into();
    gpu_build(&e, &warm, Metric::Levenshtein, Kind::Lc, &lc(2)).unwrap();
    for (kind, params) in [(Kind::Lc, lc(32)), (Kind::Sss, Params::default())] {
        let t = std::time::Instant::now();
        let gpu = gpu_build(&e, &data, Metric::Levenshtein, kind, &params).unwrap();
        let tg = t.elapsed();
        let t = std::time::Instant::now();
        let cpu = DatasetIndex::build(&data, Metric::Levenshtein, kind, &params).unwrap();
        let tc = t.elapsed();
        eprintln!(
            "words.txt {kind}: GPU build {tg:.3?}, CPU build {tc:.3?} ({} threads), {} evaluations",
            rayon::current_num_threads(),
            gpu.build_evals()
        );
        assert!(
            voisin_index::file::to_bytes(&gpu).unwrap()
                == voisin_index::file::to_bytes(&cpu).unwrap(),
            "words.txt {kind}: the index file differs from the CPU build's"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_build_refuses_what_it_does_not_build() {
    let e = engine();
    let v: Dataset = VectorSet::from_f32(4, 2, vec![0.0; 8]).unwrap().into();
    // The cover tree builds on the GPU (index/cover_build.rs), the k-d tree does not; auto
    // leaves a cover tree over four items to the CPU (the GPU's setup would cost more).
    let err = gpu_build(&e, &v, Metric::Euclidean, Kind::Kd, &Params::default())
        .err()
        .expect("kd is not built on the GPU");
    assert!(err.to_string().contains("not build kd"), "{err}");
    let cover = IndexOp::Build {
        data: &v,
        metric: &Metric::Euclidean,
        kind: Kind::Cover,
        params: &Params::default(),
    };
    let pays = voisin_index::auto::gpu_build_pays(
        &v,
        &Metric::Euclidean,
        Kind::Cover,
        &Params::default(),
        rayon::current_num_threads(),
    );
    assert!(!(GpuIndexes::one(&e).supports(&cover) && pays));
    let err = gpu_build(&e, &v, Metric::Cosine, Kind::Lc, &Params::default())
        .err()
        .expect("cosine is not a true metric");
    assert!(err.to_string().contains("cosine"), "{err}");
    assert!(gpu_build(&e, &v, Metric::Euclidean, Kind::Lc, &lc(2000)).is_err());
}
