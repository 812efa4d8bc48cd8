//! The List of Clusters searched in parts on the GPU (docs/design/lc-multi-gpu-superclusters.md):
//! spread over several engines (1-Stage; GPU 0 listed twice and three times, as the multi-GPU
//! tests do) and streamed in superclusters (List of Superclusters), against the resident
//! single-GPU List of Clusters and the f64 reference: identical ids and distances, bit for bit.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda --test index_multi_gpu --
//! --include-ignored --test-threads 1`.

mod common;

use common::{adversarial, identical_knn, identical_range, seed};
use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{reference, Dataset, Engine, KnnResult, Metric, RangeResult, VectorSet};
use voisin_cuda::index::{lc_device_bytes, GpuIndexes, GpuLc, GpuLcSpread, GpuLsc, StreamStats};
use voisin_cuda::{CudaEngine, CudaOptions};
use voisin_index::{DatasetIndex, Index, IndexEngine, Kind, ListOfClusters, Params, VectorSpace};

/// Gaussian blobs around 40 random centres (what the List of Clusters prunes well).
fn clustered(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let centres: Vec<f32> = (0..40 * d)
        .map(|_| 10.0 * rng.sample::<f32, _>(StandardNormal))
        .collect();
    let v: Vec<f32> = (0..n)
        .flat_map(|_| {
            let c = rng.gen_range(0..40);
            (0..d)
                .map(|i| centres[c * d + i] + rng.sample::<f32, _>(StandardNormal))
                .collect::<Vec<_>>()
        })
        .collect();
    VectorSet::from_f32(n, d, v).unwrap()
}

fn vectors(d: Dataset) -> VectorSet {
    d.as_vectors().expect("vectors").clone()
}

/// A few base rows (answers at distance 0) and fresh rows.
fn queries(rng: &mut StdRng, base: &VectorSet, fresh: usize) -> VectorSet {
    let d = base.dim();
    let mut v: Vec<f32> = Vec::new();
    for _ in 0..5 {
        v.extend_from_slice(&base.row_f32(rng.gen_range(0..base.len())));
    }
    for _ in 0..fresh {
        let a = base.row_f32(rng.gen_range(0..base.len()));
        v.extend(
            a.iter()
                .map(|x| x + 0.5 * rng.sample::<f32, _>(StandardNormal)),
        );
    }
    VectorSet::from_f32(v.len() / d, d, v).unwrap()
}

/// Where the brute-force answers come from: the f64 reference, or the CUDA engine's exact
/// brute force (checked against the reference by matches_reference.rs), which a million rows
/// afford.
#[derive(Clone, Copy)]
enum Brute<'a> {
    Reference,
    Gpu(&'a CudaEngine),
}

impl Brute<'_> {
    fn knn(self, b: &Dataset, qs: &Dataset, k: usize, metric: &Metric) -> KnnResult {
        match self {
            Brute::Reference => reference::knn(b, qs, k, metric),
            Brute::Gpu(e) => e.knn(b, qs, k, metric),
        }
        .unwrap()
    }

    fn range(self, b: &Dataset, qs: &Dataset, r: f64, metric: &Metric) -> RangeResult {
        match self {
            Brute::Reference => reference::range(b, qs, r, metric),
            Brute::Gpu(e) => e.range(b, qs, r, metric),
        }
        .unwrap()
    }
}

/// 0, and the median distances of the 1st and 10th brute-force neighbours.
fn radii(base: &VectorSet, q: &VectorSet, metric: &Metric, brute: Brute) -> Vec<f64> {
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    let nn = brute.knn(&b, &qs, 10, metric);
    let mut out = vec![0.0];
    for k in [1, 10] {
        let mut ds: Vec<f32> = (0..nn.n_queries).map(|r| nn.row(r).1[k - 1]).collect();
        ds.sort_by(f32::total_cmp);
        out.push(ds[ds.len() / 2] as f64);
    }
    out
}

/// The clustered and the adversarial set, each with its queries.
fn sets(rng: &mut StdRng, n: usize, d: usize) -> Vec<(&'static str, VectorSet, VectorSet)> {
    let c = clustered(rng, n, d);
    let a = vectors(adversarial(rng, n, d));
    let (qc, qa) = (queries(rng, &c, 40), queries(rng, &a, 40));
    vec![("clustered", c, qc), ("adversarial", a, qa)]
}

/// The answers every searcher must give: the reference's, checked once against the resident
/// single-GPU List of Clusters.
struct Want {
    radii: Vec<f64>,
    range: Vec<RangeResult>,
    ks: Vec<usize>,
    knn: Vec<KnnResult>,
}

/// For k = 1, 10 and n - 1 (`all_k`) or 1, 10 and 100, the brute force by `brute`.
fn want(
    e: &CudaEngine,
    lc: &ListOfClusters<VectorSpace>,
    (base, q): (&VectorSet, &VectorSet),
    metric: &Metric,
    (all_k, brute): (bool, Brute),
    what: &str,
) -> Want {
    let (b, qs): (Dataset, Dataset) = (base.clone().into(), q.clone().into());
    let radii = radii(base, q, metric, brute);
    let ks = vec![1, 10, if all_k { base.len() - 1 } else { 100 }];
    let range: Vec<RangeResult> = radii
        .iter()
        .map(|&r| brute.range(&b, &qs, r, metric))
        .collect();
    let knn: Vec<KnnResult> = ks.iter().map(|&k| brute.knn(&b, &qs, k, metric)).collect();
    let one = GpuLc::new(e, lc).unwrap();
    for (&r, w) in radii.iter().zip(&range) {
        identical_range(
            &one.range(q, r).unwrap(),
            w,
            &format!("{what} one GPU r={r}"),
        );
    }
    for (&k, w) in ks.iter().zip(&knn) {
        identical_knn(&one.knn(q, k).unwrap(), w, &format!("{what} one GPU k={k}"));
    }
    Want {
        radii,
        range,
        ks,
        knn,
    }
}

/// Range and k-NN of `search` (a searcher in parts) equal `want`; returns what streaming did.
fn check<R, K>(want: &Want, q: &VectorSet, range: R, knn: K, what: &str) -> StreamStats
where
    R: Fn(&VectorSet, f64) -> voisin::Result<(RangeResult, StreamStats)>,
    K: Fn(&VectorSet, usize) -> voisin::Result<(KnnResult, StreamStats)>,
{
    let mut st = StreamStats::default();
    for (&r, w) in want.radii.iter().zip(&want.range) {
        let (got, s) = range(q, r).unwrap();
        identical_range(&got, w, &format!("{what} range r={r}"));
        st.add(&s);
    }
    for (&k, w) in want.ks.iter().zip(&want.knn) {
        let (got, s) = knn(q, k).unwrap();
        identical_knn(&got, w, &format!("{what} knn k={k}"));
        st.add(&s);
    }
    st
}

fn build(base: &VectorSet, metric: &Metric, m: usize) -> ListOfClusters<VectorSpace> {
    ListOfClusters::build(VectorSpace::new(base, metric.clone()).unwrap(), m)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_stage_on_gpu_zero_listed_twice_and_three_times_equals_one_gpu_and_brute_force() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engines: Vec<CudaEngine> = (0..3)
        .map(|_| CudaEngine::new(0).expect("a CUDA GPU"))
        .collect();
    for (name, base, q) in sets(&mut rng, 3000, 8) {
        for metric in [Metric::Euclidean, Metric::Cityblock, Metric::Chebyshev] {
            let lc = build(&base, &metric, 16);
            let what = format!("{name} {metric}");
            let w = want(
                &engines[0],
                &lc,
                (&base, &q),
                &metric,
                (true, Brute::Reference),
                &what,
            );
            for g in [2, 3] {
                let spread = GpuLcSpread::new(&engines[..g], &lc).unwrap();
                assert_eq!(spread.parts(), g, "{what}");
                let st = check(
                    &w,
                    &q,
                    |q, r| spread.range(q, r),
                    |q, k| spread.knn(q, k),
                    &format!("{what} on {g} GPUs"),
                );
                assert_eq!(st.copied, 0, "{what}: resident parts stream nothing");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn superclusters_of_a_sixteenth_and_of_one_cluster_equal_the_resident_list() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = CudaEngine::new(0).expect("a CUDA GPU");
    for (name, base, q) in sets(&mut rng, 4000, 12) {
        for metric in [Metric::Euclidean, Metric::Cityblock] {
            let lc = build(&base, &metric, 32);
            let what = format!("{name} {metric}");
            let w = want(
                &e,
                &lc,
                (&base, &q),
                &metric,
                (true, Brute::Reference),
                &what,
            );
            // A memory cap of a quarter of the index: superclusters of a quarter of that.
            let bytes = lc_device_bytes(&lc);
            for (share, label) in [(bytes / 16, "a sixteenth"), (1, "one cluster")] {
                let lsc = GpuLsc::new(&e, &lc, share).unwrap();
                if share == 1 {
                    assert_eq!(lsc.superclusters(), lc.clusters().len(), "{what}");
                } else {
                    assert!(lsc.superclusters() >= 16, "{what}: {}", lsc.superclusters());
                }
                let st = check(
                    &w,
                    &q,
                    |q, r| lsc.range(q, r),
                    |q, k| lsc.knn(q, k),
                    &format!("{what} superclusters of {label}"),
                );
                assert!(st.copied > 0, "{what}: {st:?}");
                eprintln!("{what} {label}: {st:?}, overlap {:.2}", st.overlap_share());
            }
        }
    }
}

/// The engine option: a device-memory cap of a quarter of the index makes the GPUs' index engine
/// (what `voisin index query --gpu-memory` runs) stream the list; answers unchanged.
/// A million rows (the List built on the GPU), so that a quarter of the index (~19 MB) is a
/// real working space.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_memory_cap_of_a_quarter_of_the_index_streams_it_with_the_same_answers() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (n, d) = (1_000_000, 16);
    let base = clustered(&mut rng, n, d);
    let q = queries(&mut rng, &base, 200);
    let metric = Metric::Euclidean;
    let free = CudaEngine::new(0).expect("a CUDA GPU");
    let params = Params {
        cluster_size: 64,
        ..Default::default()
    };
    let built = GpuIndexes::one(&free)
        .build(
            &base.clone().into(),
            metric.clone(),
            Kind::Lc,
            &params,
            &|_| {},
        )
        .unwrap();
    let DatasetIndex::Vectors(Index::Lc(lc)) = built else {
        panic!("the GPU build of a List of Clusters of vectors gave another index");
    };
    let bytes = lc_device_bytes(&lc);
    let w = want(
        &free,
        &lc,
        (&base, &q),
        &metric,
        (false, Brute::Gpu(&free)),
        "capped",
    );
    drop(free);
    let index = DatasetIndex::Vectors(Index::Lc(lc));
    let qs: Dataset = q.clone().into();
    let engines = [CudaEngine::with_options(
        0,
        CudaOptions {
            device_memory: Some(bytes / 4),
            ..Default::default()
        },
    )
    .unwrap()];
    let gpus = GpuIndexes::on(&engines);
    let st = check(
        &w,
        &q,
        |_, r| gpus.range(&index, &qs, r).map(|s| (s.result, s.streamed)),
        |_, k| gpus.knn(&index, &qs, k).map(|s| (s.result, s.streamed)),
        &format!("capped at {} bytes", bytes / 4),
    );
    assert!(st.superclusters > 1 && st.copied > 0, "{st:?}");
    eprintln!(
        "cap {} of {bytes}: {st:?}, overlap {:.2}",
        bytes / 4,
        st.overlap_share()
    );
}
