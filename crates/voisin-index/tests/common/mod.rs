//! Test data shared by the index tests: adversarial vector sets (integer grids full of ties and
//! duplicates, continuous ones, odd dimensions), random words over a tiny alphabet, and the
//! parameter grid every structure is built with.

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use voisin::reference::{compare_knn, compare_range};
use voisin::{Dataset, Metric, StringSet, VectorSet};
use voisin_index::{DatasetIndex, Kind, Params};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` vectors of dimension `dim`; with `grid`, coordinates are whole numbers in 0..grid (ties
/// and duplicates everywhere), else uniform in [-1, 1).
pub fn vectors(seed: u64, n: usize, dim: usize, grid: Option<u32>) -> Dataset {
    let mut r = rng(seed);
    let values = (0..n * dim)
        .map(|_| match grid {
            Some(g) => r.gen_range(0..g) as f32,
            None => r.gen_range(-1.0f32..1.0),
        })
        .collect();
    VectorSet::from_f32(n, dim, values).unwrap().into()
}

/// Queries: fresh random points plus copies of a few base items (distance-0 answers).
pub fn vector_queries(seed: u64, base: &Dataset, m: usize, grid: Option<u32>) -> Dataset {
    let b = base.as_vectors().unwrap();
    let fresh = vectors(seed, m, b.dim(), grid);
    let mut values = fresh.as_vectors().unwrap().rows_f32(0, m).into_owned();
    for i in (0..b.len()).step_by((b.len() / 3).max(1)) {
        values.extend_from_slice(&b.row_f32(i));
    }
    let n = values.len() / b.dim();
    VectorSet::from_f32(n, b.dim(), values).unwrap().into()
}

/// Random words of length 0..=max_len over `alphabet`.
pub fn words(seed: u64, n: usize, alphabet: &str, max_len: usize) -> Dataset {
    let mut r = rng(seed);
    let letters: Vec<char> = alphabet.chars().collect();
    let words: Vec<String> = (0..n)
        .map(|_| {
            let len = r.gen_range(0..=max_len);
            (0..len)
                .map(|_| letters[r.gen_range(0..letters.len())])
                .collect()
        })
        .collect();
    StringSet::from_strings(&words).unwrap().into()
}

/// Every kind with a spread of parameters, including the degenerate ones (clusters of one item,
/// one pivot, a tight cover-tree base).
pub fn configs(n: usize) -> Vec<(Kind, Params)> {
    let p = Params::default();
    let mut out = Vec::new();
    for cluster_size in [1, 3, 16, n + 5] {
        out.push((
            Kind::Lc,
            Params {
                cluster_size,
                ..p.clone()
            },
        ));
    }
    for (alpha, max_pivots) in [(0.5, 64), (0.2, 8), (0.9, 1), (0.4, 1000)] {
        out.push((
            Kind::Sss,
            Params {
                alpha,
                max_pivots,
                ..p.clone()
            },
        ));
    }
    for base in [2.0, 1.3] {
        out.push((Kind::Cover, Params { base, ..p.clone() }));
    }
    out
}

/// k values worth testing for a set of n items.
pub fn ks(n: usize) -> Vec<usize> {
    let mut ks = vec![1, 2, 5, n.saturating_sub(1).max(1), n, n + 3];
    ks.dedup();
    ks
}

/// The index's range search at each radius, k-NN and graph at each k of [`ks`] equal the f64
/// brute-force reference exactly (keys and ids, rel_tol 0); `what` names the case in failures.
pub fn equals_reference(
    index: &DatasetIndex,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
    radii: &[f64],
    what: &str,
) {
    for &r in radii {
        let want = voisin::reference::range(base, queries, r, metric).unwrap();
        let got = index.range(queries, r).unwrap();
        compare_range(&want, &got, 0.0).unwrap_or_else(|e| panic!("{what} r={r}: {e}"));
    }
    for k in ks(base.len()) {
        let want = voisin::reference::knn(base, queries, k, metric).unwrap();
        let got = index.knn(queries, k).unwrap();
        compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("{what} k={k}: {e}"));
        let want = voisin::reference::graph(base, k, metric).unwrap();
        let got = index.graph(base, k).unwrap();
        compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("{what} graph k={k}: {e}"));
    }
}
