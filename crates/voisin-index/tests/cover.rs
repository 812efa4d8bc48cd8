//! Cover tree construction on larger sets than `exact.rs` uses: every build must satisfy covering
//! and the seed's separation (a node's children at one level apart) with exact reaches, on
//! random vectors (euclidean, cityblock), grids full of duplicates and ties, words of the shipped
//! list (levenshtein) and a user metric; the tree must not depend on the number of threads; and
//! the answers must equal the reference.

mod common;

use common::*;
use voisin::reference::{compare_knn, compare_range};
use voisin::{Dataset, Metric, StringSet};
use voisin_index::space::{Space, StringSpace, UserSpace, VectorSpace};
use voisin_index::{search, CoverTree};

fn vector_space(data: &Dataset, metric: Metric) -> VectorSpace {
    VectorSpace::new(data.as_vectors().unwrap(), metric).unwrap()
}

/// Builds under `base` on a default pool and on a one-thread pool, checks every invariant and
/// that both trees are the same.
fn build_checked<S: Space + Clone>(space: S, base: f64, label: &str) -> CoverTree<S> {
    let tree = CoverTree::build(space.clone(), base);
    tree.check_invariants()
        .unwrap_or_else(|e| panic!("{label}, base {base}: {e}"));
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| CoverTree::build(space, base));
    assert_eq!(
        tree.nodes(),
        one.nodes(),
        "{label}, base {base}: tree depends on the thread count"
    );
    assert_eq!(tree.build_evals(), one.build_evals(), "{label}");
    tree
}

#[test]
fn random_vectors_keep_every_invariant() {
    for (seed, n, dim) in [(21, 1500, 2), (22, 1200, 3), (23, 600, 8)] {
        let base = vectors(seed, n, dim, None);
        let queries = vector_queries(seed + 50, &base, 25, None);
        for metric in [Metric::Euclidean, Metric::Cityblock] {
            for b in [2.0, 1.3] {
                let label = format!("n={n} dim={dim} {metric}");
                let tree = build_checked(vector_space(&base, metric.clone()), b, &label);
                let q = queries.as_vectors().unwrap();
                let rows = q.rows_f32(0, q.len());
                let qs: Vec<&[f32]> = rows.chunks(dim).collect();
                for k in [1, 7] {
                    let want = voisin::reference::knn(&base, &queries, k, &metric).unwrap();
                    let got = search::knn(&tree, &qs, k).unwrap();
                    compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("{label} k={k}: {e}"));
                }
                let r = 0.1 * (dim as f64).sqrt();
                let want = voisin::reference::range(&base, &queries, r, &metric).unwrap();
                let got = search::range(&tree, &qs, r).unwrap();
                compare_range(&want, &got, 0.0).unwrap_or_else(|e| panic!("{label}: {e}"));
            }
        }
    }
}

#[test]
fn duplicates_and_ties() {
    // Grids of 3 values: most points have exact duplicates and distances tie everywhere.
    for (seed, n, dim) in [(31, 900, 2), (32, 700, 3), (33, 300, 1)] {
        let base = vectors(seed, n, dim, Some(3));
        for metric in [Metric::Euclidean, Metric::Cityblock, Metric::Chebyshev] {
            for b in [2.0, 1.3] {
                let tree = build_checked(vector_space(&base, metric.clone()), b, "grid");
                let nodes = tree.nodes().len();
                assert!(
                    nodes <= 3usize.pow(dim as u32),
                    "{nodes} nodes for a 3^{dim} grid"
                );
            }
        }
    }
    // One point repeated: a root and nothing but duplicates.
    let same = vectors(34, 50, 4, Some(1));
    let tree = build_checked(vector_space(&same, Metric::Euclidean), 2.0, "all equal");
    assert_eq!(tree.nodes().len(), 1);
}

#[test]
fn shipped_words_under_levenshtein() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/words.txt");
    let text = std::fs::read_to_string(path).expect("data/words.txt is shipped");
    let list: Vec<&str> = text.lines().step_by(47).collect();
    let words = StringSet::from_strings(&list).unwrap();
    let space = StringSpace::new(words.clone(), Metric::Levenshtein).unwrap();
    let tree = build_checked(space, 2.0, "word list");
    let base: Dataset = words.into();
    let queries: Dataset =
        StringSet::from_strings(text.lines().skip(5).step_by(4001).map(|w| format!("{w}e")))
            .unwrap()
            .into();
    let qs: Vec<&[char]> = queries.as_strings().unwrap().iter().collect();
    for r in [1.0, 2.0] {
        let want = voisin::reference::range(&base, &queries, r, &Metric::Levenshtein).unwrap();
        let got = search::range(&tree, &qs, r).unwrap();
        compare_range(&want, &got, 0.0).unwrap_or_else(|e| panic!("words r={r}: {e}"));
    }
    // Random words over a tiny alphabet: many duplicates, many equal distances.
    let tiny = words_set(41, 1500, "ab", 9);
    build_checked(
        StringSpace::new(tiny, Metric::Levenshtein).unwrap(),
        2.0,
        "ab words",
    );
}

#[test]
fn user_metric() {
    // Points of a 2-d torus of side 100 under the wrap-around L1 distance.
    let items: Vec<(u32, u32)> = (0..1200u32)
        .map(|i| ((i * 37) % 100, (i * 91 + i / 13) % 100))
        .collect();
    let wrap = |a: u32, b: u32| {
        let d = a.abs_diff(b);
        d.min(100 - d)
    };
    let torus = |a: &(u32, u32), b: &(u32, u32)| (wrap(a.0, b.0) + wrap(a.1, b.1)) as f64;
    let space = UserSpace::new(items.clone(), torus);
    let tree = CoverTree::build(space, 2.0);
    tree.check_invariants().unwrap();
    let queries = [(0u32, 0u32), (50, 50), (99, 1), (13, 77)];
    let got = search::range(&tree, &queries, 3.0).unwrap();
    for (q, query) in queries.iter().enumerate() {
        let want: Vec<u32> = {
            let mut w: Vec<(f64, u32)> = (0..items.len())
                .map(|i| (torus(query, &items[i]), i as u32))
                .filter(|x| x.0 <= 3.0)
                .collect();
            w.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            w.into_iter().map(|x| x.1).collect()
        };
        assert_eq!(got.row(q).0, want.as_slice(), "query {q}");
    }
}

fn words_set(seed: u64, n: usize, alphabet: &str, max_len: usize) -> StringSet {
    words(seed, n, alphabet, max_len)
        .as_strings()
        .unwrap()
        .clone()
}

#[test]
fn broken_user_distances_do_not_hang_the_build() {
    // Not metrics: NaN, infinite and negative values. The build must still end, every item once.
    let items: Vec<u32> = (0..200).collect();
    let nan = |a: &u32, b: &u32| {
        if (a + b).is_multiple_of(7) {
            f64::NAN
        } else {
            a.abs_diff(*b) as f64
        }
    };
    let inf = |a: &u32, b: &u32| {
        if a != b && (a * b).is_multiple_of(5) {
            f64::INFINITY
        } else {
            a.abs_diff(*b) as f64
        }
    };
    let neg = |a: &u32, b: &u32| if a == b { 0.0 } else { -1.0 - (a ^ b) as f64 };
    CoverTree::build(UserSpace::new(items.clone(), nan), 2.0)
        .check_layout()
        .unwrap();
    CoverTree::build(UserSpace::new(items.clone(), inf), 2.0)
        .check_layout()
        .unwrap();
    CoverTree::build(UserSpace::new(items, neg), 2.0)
        .check_layout()
        .unwrap();
}
