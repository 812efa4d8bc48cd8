//! The GPU List of Clusters and SSS pivot table against the f64 reference, on fresh random and adversarial inputs:
//! answers must be identical (same indices, same distances to the bit, since the device computes
//! the reference's keys with the same operations).
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{reference, Dataset, KnnResult, Metric, RangeResult, VectorSet};
use voisin_cuda::index::{GpuLc, GpuSss};
use voisin_cuda::CudaEngine;
use voisin_index::{ListOfClusters, Sss, VectorSpace};

fn engine() -> CudaEngine {
    CudaEngine::new(0).expect("a CUDA GPU")
}

fn seed() -> u64 {
    let s = rand::random::<u64>();
    eprintln!("seed {s}");
    s
}

fn set(n: usize, d: usize, v: Vec<f32>) -> VectorSet {
    VectorSet::from_f32(n, d, v).unwrap()
}

fn normal(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    set(
        n,
        d,
        (0..n * d).map(|_| rng.sample(StandardNormal)).collect(),
    )
}

/// Small integers: many exact duplicates and equal distances; a zero row and a repeated row.
fn adversarial(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let mut v: Vec<f32> = (0..n * d).map(|_| rng.gen_range(-2..=2) as f32).collect();
    for r in (3..n).step_by(7) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
    }
    v[..d].iter_mut().for_each(|x| *x = 0.0);
    set(n, d, v)
}

/// Some base rows (answers at distance 0) followed by fresh rows.
fn queries(rng: &mut StdRng, base: &VectorSet, fresh: VectorSet) -> VectorSet {
    let d = base.dim();
    let mut v: Vec<f32> = Vec::new();
    for _ in 0..5.min(base.len()) {
        v.extend_from_slice(&base.row_f32(rng.gen_range(0..base.len())));
    }
    v.extend_from_slice(&fresh.rows_f32(0, fresh.len()));
    set(v.len() / d, d, v)
}

fn build(base: &VectorSet, metric: &Metric, m: usize) -> ListOfClusters<VectorSpace> {
    ListOfClusters::build(VectorSpace::new(base, metric.clone()).unwrap(), m)
}

/// Which index a check builds: a List of Clusters with clusters of m items, or an SSS table
/// with at most this many pivots (α = 0.5, and 0.1 to get many).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Lc(usize),
    Sss(f64, usize),
}

enum Gpu<'e> {
    Lc(GpuLc<'e>),
    Sss(GpuSss<'e>),
}

impl Gpu<'_> {
    fn range(&self, q: &VectorSet, r: f64) -> RangeResult {
        match self {
            Gpu::Lc(g) => g.range(q, r).unwrap(),
            Gpu::Sss(g) => g.range(q, r).unwrap(),
        }
    }

    fn knn(&self, q: &VectorSet, k: usize) -> KnnResult {
        match self {
            Gpu::Lc(g) => g.knn(q, k).unwrap(),
            Gpu::Sss(g) => g.knn(q, k).unwrap(),
        }
    }
}

fn gpu_index<'e>(e: &'e CudaEngine, base: &VectorSet, metric: &Metric, kind: Kind) -> Gpu<'e> {
    let space = VectorSpace::new(base, metric.clone()).unwrap();
    match kind {
        Kind::Lc(m) => Gpu::Lc(GpuLc::new(e, &ListOfClusters::build(space, m)).unwrap()),
        Kind::Sss(alpha, p) => Gpu::Sss(GpuSss::new(e, &Sss::build(space, alpha, p)).unwrap()),
    }
}

/// Clusters of one item, a few, the seed's 64, one cluster holding everything; SSS with one
/// pivot, a few, and as many as α = 0.1 gives (up to 64).
fn kinds(n: usize) -> Vec<Kind> {
    vec![
        Kind::Lc(1),
        Kind::Lc(7),
        Kind::Lc(64),
        Kind::Lc(n + 5),
        Kind::Sss(0.5, 1),
        Kind::Sss(0.5, 4),
        Kind::Sss(0.1, 64),
    ]
}

fn same_range(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.indices, want.indices, "{what}: indices");
    assert_eq!(got.distances, want.distances, "{what}: distances");
}

fn same_knn(got: &KnnResult, want: &KnnResult, what: &str) {
    assert_eq!(
        (got.n_queries, got.k),
        (want.n_queries, want.k),
        "{what}: shape"
    );
    assert_eq!(got.indices, want.indices, "{what}: indices");
    assert_eq!(got.distances, want.distances, "{what}: distances");
}

/// Radii from the reference's own distances: 0, the median 1st, 10th and n/3-th neighbour
/// distances (so rows range from a few answers to a third of the set).
fn radii(base: &VectorSet, q: &VectorSet, metric: &Metric) -> Vec<f64> {
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    let n = base.len();
    let ks = [1, 10.min(n), (n / 3).max(1)];
    let mut out = vec![0.0];
    let nn = reference::knn(&b, &qs, ks[2], metric).unwrap();
    for k in ks {
        let mut ds: Vec<f32> = (0..nn.n_queries).map(|r| nn.row(r).1[k - 1]).collect();
        ds.sort_by(f32::total_cmp);
        out.push(ds[ds.len() / 2] as f64);
    }
    out
}

const METRICS: [Metric; 3] = [Metric::Euclidean, Metric::Cityblock, Metric::Chebyshev];

fn check_range(e: &CudaEngine, base: &VectorSet, q: &VectorSet, kinds: &[Kind], what: &str) {
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    for metric in METRICS {
        let rs = radii(base, q, &metric);
        let want: Vec<RangeResult> = rs
            .iter()
            .map(|&r| reference::range(&b, &qs, r, &metric).unwrap())
            .collect();
        for &kind in kinds {
            let g = gpu_index(e, base, &metric, kind);
            for (&r, want) in rs.iter().zip(&want) {
                let what = format!("{what} range {metric} {kind:?} r={r}");
                same_range(&g.range(q, r), want, &what);
            }
        }
    }
}

fn check_knn(e: &CudaEngine, base: &VectorSet, q: &VectorSet, kinds: &[Kind], what: &str) {
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    let n = base.len();
    for metric in METRICS {
        let ks = [1, 10, n - 1, n + 5];
        let want: Vec<KnnResult> = ks
            .iter()
            .map(|&k| reference::knn(&b, &qs, k, &metric).unwrap())
            .collect();
        for &kind in kinds {
            let g = gpu_index(e, base, &metric, kind);
            for (&k, want) in ks.iter().zip(&want) {
                let what = format!("{what} knn {metric} {kind:?} k={k}");
                same_knn(&g.knn(q, k), want, &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_random_vectors() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    eprintln!("device: {}", e.device_name());
    for &(n, d) in &[
        (997usize, 3usize),
        (2003, 20),
        (601, 127),
        (301, 1025),
        (500, 1),
    ] {
        let base = normal(&mut rng, n, d);
        let fresh = normal(&mut rng, 31, d);
        let q = queries(&mut rng, &base, fresh);
        check_range(&e, &base, &q, &kinds(n), &format!("normal n={n} d={d}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_ties_and_duplicates() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    for &(n, d) in &[(1501usize, 3usize), (777, 16)] {
        let base = adversarial(&mut rng, n, d);
        let fresh = adversarial(&mut rng, 29, d);
        let q = queries(&mut rng, &base, fresh);
        check_range(
            &e,
            &base,
            &q,
            &kinds(n),
            &format!("adversarial n={n} d={d}"),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_random_vectors() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    for &(n, d) in &[(997usize, 3usize), (1203, 20), (301, 127), (200, 1)] {
        let base = normal(&mut rng, n, d);
        let fresh = normal(&mut rng, 23, d);
        let q = queries(&mut rng, &base, fresh);
        let k = [
            Kind::Lc(1),
            Kind::Lc(16),
            Kind::Lc(64),
            Kind::Sss(0.5, 1),
            Kind::Sss(0.1, 64),
        ];
        check_knn(&e, &base, &q, &k, &format!("normal n={n} d={d}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_ties_and_duplicates() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    for &(n, d) in &[(1201usize, 3usize), (513, 8)] {
        let base = adversarial(&mut rng, n, d);
        let fresh = adversarial(&mut rng, 19, d);
        let q = queries(&mut rng, &base, fresh);
        let k = [
            Kind::Lc(3),
            Kind::Lc(64),
            Kind::Sss(0.5, 2),
            Kind::Sss(0.1, 64),
        ];
        check_knn(&e, &base, &q, &k, &format!("adversarial n={n} d={d}"));
    }
}

/// Rows larger than the first slots (run again into larger ones, sorted outside shared
/// memory), many batches (slot sizes learnt from the first), an index of one item, none.
#[test]
#[ignore = "needs a CUDA GPU"]
fn large_rows_many_batches_and_tiny_indexes() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    let base = normal(&mut rng, 9000, 2);
    let q = normal(&mut rng, 6001, 2);
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    let m = Metric::Euclidean;
    let want_r: Vec<RangeResult> = [0.05, 0.8, 2.5]
        .iter()
        .map(|&r| reference::range(&b, &qs, r, &m).unwrap())
        .collect();
    let want_k: Vec<KnnResult> = [1, 3000]
        .iter()
        .map(|&k| reference::knn(&b, &qs, k, &m).unwrap())
        .collect();
    for kind in [Kind::Lc(64), Kind::Sss(0.5, 8)] {
        let g = gpu_index(&e, &base, &m, kind);
        for (r, want) in [0.05, 0.8, 2.5].into_iter().zip(&want_r) {
            same_range(&g.range(&q, r), want, &format!("large rows {kind:?} r={r}"));
        }
        for (k, want) in [1, 3000].into_iter().zip(&want_k) {
            same_knn(&g.knn(&q, k), want, &format!("large rows {kind:?} k={k}"));
        }
    }
    for n in [0usize, 1] {
        let base = normal(&mut rng, n, 4);
        let q = normal(&mut rng, 3, 4);
        let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
        for kind in [Kind::Lc(8), Kind::Sss(0.5, 4)] {
            let g = gpu_index(&e, &base, &m, kind);
            let want = reference::range(&b, &qs, 10.0, &m).unwrap();
            same_range(&g.range(&q, 10.0), &want, &format!("n={n} {kind:?} range"));
            let want = reference::knn(&b, &qs, 2, &m).unwrap();
            same_knn(&g.knn(&q, 2), &want, &format!("n={n} {kind:?} knn"));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn refuses_what_it_cannot_answer_exactly() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    let base = normal(&mut rng, 100, 4);
    let lc = build(&base, &Metric::Minkowski(3.0), 8);
    let err = GpuLc::new(&e, &lc).err().expect("minkowski refused");
    assert!(err.to_string().contains("euclidean"), "{err}");
    let space = VectorSpace::new(&base, Metric::Minkowski(3.0)).unwrap();
    let err = GpuSss::new(&e, &Sss::build(space, 0.5, 4))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("euclidean"), "{err}");
    let lc = build(&base, &Metric::Euclidean, 8);
    let g = GpuLc::new(&e, &lc).unwrap();
    let err = g.range(&normal(&mut rng, 2, 5), 1.0).unwrap_err();
    assert!(err.to_string().contains("dimension"), "{err}");
    assert!(g.range(&normal(&mut rng, 2, 4), -1.0).is_err());
}

/// The entry the CLI uses (the index face): an index as loaded from a file, answered on the GPU.
#[test]
#[ignore = "needs a CUDA GPU"]
fn dataset_index_entry() {
    use voisin_cuda::index::GpuIndexes;
    use voisin_index::{DatasetIndex, IndexEngine, Kind as IndexKind, Params};
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine();
    let gpus = GpuIndexes::one(&e);
    let base: Dataset = normal(&mut rng, 800, 5).into();
    let q: Dataset = normal(&mut rng, 17, 5).into();
    let m = Metric::Cityblock;
    for kind in [IndexKind::Lc, IndexKind::Sss] {
        let index = DatasetIndex::build(&base, m.clone(), kind, &Params::default()).unwrap();
        let want = reference::range(&base, &q, 2.0, &m).unwrap();
        let got = gpus.range(&index, &q, 2.0).unwrap().result;
        same_range(&got, &want, &format!("{kind} entry range"));
        let want = reference::knn(&base, &q, 7, &m).unwrap();
        let got = gpus.knn(&index, &q, 7).unwrap().result;
        same_knn(&got, &want, &format!("{kind} entry knn"));
    }
    let cover = DatasetIndex::build(&base, m.clone(), IndexKind::Cover, &Params::default());
    let err = gpus.range(&cover.unwrap(), &q, 1.0).err().unwrap();
    assert!(err.to_string().contains("--device cpu"), "{err}");
}
