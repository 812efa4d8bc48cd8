//! Helpers shared by the GPU test files: a logged random seed, random normal data, and the
//! comparisons against the reference (ids exactly, distances within f32 rounding of the exact
//! value), and the sharded engines' larger and tie-heavy sets. Each test file uses some of them.
#![allow(dead_code)]

pub mod graph_rows;
pub mod subspaces;

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::data::ElemType;
use voisin::{Dataset, KnnResult, Metric, RangeResult, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Precision, Select};

/// A fresh seed, printed so that a failure can be replayed.
pub fn seed() -> u64 {
    let s = rand::random::<u64>();
    eprintln!("seed {s}");
    s
}

/// The engine on GPU 0 with a forced selection.
pub fn engine(select: Select) -> CudaEngine {
    CudaEngine::with_options(
        0,
        CudaOptions {
            select,
            ..Default::default()
        },
    )
    .expect("a CUDA GPU")
}

/// `n` rows of `d` standard normal values.
pub fn normal(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let v: Vec<f32> = (0..n * d).map(|_| rng.sample(StandardNormal)).collect();
    VectorSet::from_f32(n, d, v).unwrap().into()
}

/// Same ids in the same order; distances within 1e-6 relative (the f32 rounding of exact keys).
pub fn same_knn(got: &KnnResult, want: &KnnResult, what: &str) {
    assert_eq!(got.n_queries, want.n_queries, "{what}: n_queries");
    assert_eq!(got.k, want.k, "{what}: k");
    for q in 0..want.n_queries {
        let (gi, gd) = got.row(q);
        let (wi, wd) = want.row(q);
        assert_eq!(
            gi, wi,
            "{what}: ids of query {q} (distances {gd:?} vs {wd:?})"
        );
        for (a, b) in gd.iter().zip(wd) {
            assert!(
                a == b || (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{what}: distance of query {q}: {a} vs {b}"
            );
        }
    }
}

/// Same rows and ids; distances within 1e-6 relative.
pub fn same_range(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.indices, want.indices, "{what}: indices");
    for (a, b) in got.distances.iter().zip(&want.distances) {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
            "{what}: {a} vs {b}"
        );
    }
}

/// Random normal rows made in parallel (64k rows per seeded chunk), for large sets.
pub fn big_normal(n: usize, d: usize, seed: u64) -> Dataset {
    use rayon::prelude::*;
    let mut v = vec![0f32; n * d];
    v.par_chunks_mut(65536 * d)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng =
                StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(c as u64));
            chunk
                .iter_mut()
                .for_each(|x| *x = rng.sample(StandardNormal));
        });
    VectorSet::from_f32(n, d, v).unwrap().into()
}

/// Small integers: many exact duplicates and ties across shard borders, a zero vector.
pub fn adversarial(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let mut v: Vec<f32> = (0..n * d).map(|_| rng.gen_range(-1..=1) as f32).collect();
    for r in (5..n).step_by(5) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 5) * d..(r - 4) * d]);
    }
    v[..d].iter_mut().for_each(|x| *x = 0.0);
    VectorSet::from_f32(n, d, v).unwrap().into()
}

pub fn metrics() -> Vec<Metric> {
    vec![
        Metric::Euclidean,
        Metric::Cosine,
        Metric::Correlation,
        Metric::InnerProduct,
        Metric::Cityblock,
        Metric::Chebyshev,
        Metric::Minkowski(3.0),
    ]
}

/// Two engines that compute exact keys the same way agree bit for bit.
pub fn identical(a: &KnnResult, b: &KnnResult, what: &str) {
    assert_eq!(a.indices, b.indices, "{what}: ids");
    assert_eq!(a.distances, b.distances, "{what}: distances");
}

/// Exact k-NN answers: the shapes, then ids and distances bit for bit.
pub fn identical_knn(got: &KnnResult, want: &KnnResult, what: &str) {
    assert_eq!(
        (got.n_queries, got.k),
        (want.n_queries, want.k),
        "{what}: shape"
    );
    identical(got, want, what);
}

/// The range answers of two exact computations agree bit for bit.
pub fn identical_range(a: &RangeResult, b: &RangeResult, what: &str) {
    assert_eq!(a.offsets, b.offsets, "{what}: offsets");
    assert_eq!(a.indices, b.indices, "{what}: ids");
    assert_eq!(a.distances, b.distances, "{what}: distances");
}

/// `data/words.txt` (from the repository root, where the device runs staged tests, else from
/// the sources), every `step`-th line.
pub fn word_list(step: usize) -> Vec<String> {
    let path = [
        "data/words.txt",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/words.txt"),
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("data/words.txt is shipped");
    let text = std::fs::read_to_string(path).expect("data/words.txt is readable");
    text.lines().step_by(step).map(String::from).collect()
}

/// Every `step`-th word of `data/words.txt` and the hard cases of levenshtein: duplicates, the
/// empty string, two strings over 64 chars (one machine word of bit vectors: measured on the
/// host) and `random` short words over {a, b, é} (many ties).
pub fn hard_words(step: usize, random: usize, rng: &mut StdRng) -> Vec<String> {
    let mut list = word_list(step);
    list.extend(["", "", "cat", "cat"].map(String::from));
    list.push("a".repeat(70));
    list.push(format!("{}b", "a".repeat(69)));
    list.extend((0..random).map(|_| {
        let len = rng.gen_range(0..=8);
        (0..len)
            .map(|_| ['a', 'b', 'é'][rng.gen_range(0..3)])
            .collect::<String>()
    }));
    list
}

/// The arithmetics `elem` data can take: auto, fp32, tf32, fp16x3, and its own tensor cores'.
pub fn precisions(elem: ElemType) -> Vec<Precision> {
    let mut p = vec![
        Precision::Auto,
        Precision::Fp32,
        Precision::Tf32,
        Precision::Fp16x3,
    ];
    match elem {
        ElemType::F16 => p.push(Precision::Fp16),
        ElemType::Bf16 => p.push(Precision::Bf16),
        ElemType::U8 => p.push(Precision::Int8),
        _ => {}
    }
    p
}

/// Whether `p` may run `metric` on `elem` data (explicit half precisions take their own type
/// and the metrics without unit rows, int8 takes u8 under the squared-distance metrics).
pub fn takes(p: Precision, elem: ElemType, metric: &Metric) -> bool {
    let l2 = matches!(metric, Metric::Euclidean | Metric::SqEuclidean);
    let half_metric = l2 || *metric == Metric::InnerProduct;
    match p {
        Precision::Fp16 => elem == ElemType::F16 && half_metric,
        Precision::Bf16 => elem == ElemType::Bf16 && half_metric,
        Precision::Int8 => elem == ElemType::U8 && l2,
        _ => true,
    }
}
