//! Every `--select` variant against the f64 reference: k-NN search and graphs on random and
//! adversarial data (ties, duplicates, zero vectors), k from 1 to past n, bases that span several
//! device tiles and are not a multiple of any tile. A variant that cannot keep a list that long
//! must refuse with a clear invalid-input error (never a wrong answer).
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{engine, normal, same_knn, seed};

use rand::prelude::*;
use voisin::{reference, Dataset, Engine, Error, KnnResult, Metric, Result, VectorSet};
use voisin_cuda::{CudaEngine, Select};

/// Small integers (many exact ties and duplicate rows), zero vectors and a constant vector.
fn adversarial(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let mut v: Vec<f32> = (0..n * d).map(|_| rng.gen_range(-1..=1) as f32).collect();
    for r in (0..n).filter(|r| r % 5 == 2) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
    }
    for r in (0..n).filter(|r| r % 97 == 0) {
        v[r * d..(r + 1) * d].iter_mut().for_each(|x| *x = 0.0);
    }
    if n > 1 {
        v[d..2 * d].iter_mut().for_each(|x| *x = 0.5);
    }
    VectorSet::from_f32(n, d, v).unwrap().into()
}

/// The variants under test: each explicit kernel, and Auto.
const VARIANTS: [Select; 5] = [
    Select::Block,
    Select::Radix,
    Select::Heap,
    Select::Quick,
    Select::Auto,
];

fn accepts(sel: Select, k: usize) -> bool {
    sel.max_k().is_none_or(|m| k <= m)
}

/// Checks a result, or that the variant refused a k it cannot hold with an invalid-input error.
fn check(sel: Select, k_eff: usize, got: Result<KnnResult>, want: &KnnResult, what: &str) {
    match got {
        Ok(got) => {
            assert!(accepts(sel, k_eff), "{what}: {sel} accepted k={k_eff}");
            same_knn(&got, want, what);
        }
        Err(e) => {
            assert!(!accepts(sel, k_eff), "{what}: {sel} failed: {e}");
            assert!(matches!(e, Error::InvalidInput(_)), "{what}: {e}");
            assert!(e.to_string().contains(sel.name()), "{what}: {e}");
        }
    }
}

fn engines() -> Vec<(Select, CudaEngine)> {
    VARIANTS.iter().map(|&s| (s, engine(s))).collect()
}

fn knn_cases(
    engines: &[(Select, CudaEngine)],
    (base, queries): (&Dataset, &Dataset),
    ks: &[usize],
    metric: &Metric,
    label: &str,
) {
    let n = base.len();
    for &k in ks {
        let want = reference::knn(base, queries, k, metric).unwrap();
        for (sel, e) in engines {
            let what = format!("{label} knn {sel} n={n} k={k} {metric}");
            check(
                *sel,
                k.min(n),
                e.knn(base, queries, k, metric),
                &want,
                &what,
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_knn_random_every_k() {
    let mut rng = StdRng::seed_from_u64(seed());
    let n = 5003;
    let (base, queries) = (normal(&mut rng, n, 37), normal(&mut rng, 23, 37));
    let ks = [1, 10, 100, 1000, 4096, n - 1, n + 7];
    let e = engines();
    let bq = (&base, &queries);
    knn_cases(&e, bq, &ks, &Metric::Euclidean, "random");
    knn_cases(&e, bq, &[1, 10, 100], &Metric::InnerProduct, "random");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_knn_ties_duplicates_zero_vectors() {
    let mut rng = StdRng::seed_from_u64(seed());
    let n = 3001;
    let base = adversarial(&mut rng, n, 5);
    let queries = adversarial(&mut rng, 29, 5);
    let ks = [1, 10, 100, 1000, n - 1, n + 1];
    let e = engines();
    for m in [Metric::SqEuclidean, Metric::Cityblock, Metric::Cosine] {
        knn_cases(&e, (&base, &queries), &ks, &m, "adversarial");
    }
}

/// A base over several 16384-item tiles, not a multiple of any tile: running lists are merged
/// across tiles, and the last tile is partial.
#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_knn_across_tiles() {
    let mut rng = StdRng::seed_from_u64(seed());
    let base = normal(&mut rng, 40_009, 16);
    let queries = normal(&mut rng, 31, 16);
    let e = engines();
    let ks = [1, 10, 100, 1000];
    knn_cases(&e, (&base, &queries), &ks, &Metric::Euclidean, "tiles");
    let base = adversarial(&mut rng, 33_333, 3);
    let queries = adversarial(&mut rng, 17, 3);
    knn_cases(&e, (&base, &queries), &ks, &Metric::Euclidean, "tiles adv");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_graph() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engines = engines();
    for (data, label) in [
        (normal(&mut rng, 2011, 24), "random"),
        (adversarial(&mut rng, 1999, 4), "adversarial"),
    ] {
        let n = data.len();
        for k in [1, 10, 100, 1000, n - 1, n + 3] {
            let want = reference::graph(&data, k, &Metric::Euclidean).unwrap();
            for (sel, e) in &engines {
                let what = format!("{label} graph {sel} n={n} k={k}");
                let got = e.graph(&data, k, &Metric::Euclidean);
                check(*sel, k.min(n - 1), got, &want, &what);
            }
        }
    }
}
