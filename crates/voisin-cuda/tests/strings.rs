//! Levenshtein range search, k-NN search and graphs on the CUDA engine against the reference, exactly, on fresh random
//! words over small alphabets (ASCII, é, 漢, emoji), with empty strings, lengths 63/64/65 and
//! longer (the host path), and radii 0–3. Needs a CUDA GPU: `--include-ignored`.

use rand::prelude::*;
use voisin::{reference, Dataset, Engine, Metric, StringSet};
use voisin_cuda::CudaEngine;

fn seed() -> u64 {
    let s = rand::random::<u64>();
    eprintln!("seed {s}");
    s
}

/// A word over the first `alpha` chars of a mixed alphabet; a fifth of lengths at the word
/// boundary (63, 64, 65), some empty, some long.
fn word(rng: &mut StdRng, alpha: usize) -> String {
    const CHARS: [char; 6] = ['a', 'b', 'é', '漢', '😀', 'z'];
    let len = match rng.gen_range(0..10) {
        0 => 0,
        1 | 2 => rng.gen_range(63..=65),
        3 => rng.gen_range(66..140),
        _ => rng.gen_range(1..12),
    };
    (0..len).map(|_| CHARS[rng.gen_range(0..alpha)]).collect()
}

/// A copy of `w` with up to `edits` random substitutions, insertions or deletions.
fn mutate(rng: &mut StdRng, w: &str, edits: usize) -> String {
    let mut v: Vec<char> = w.chars().collect();
    for _ in 0..rng.gen_range(0..=edits) {
        let c = ['a', 'é', '漢', '😀'][rng.gen_range(0..4)];
        match rng.gen_range(0..3) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] = c;
            }
            1 if !v.is_empty() => {
                v.remove(rng.gen_range(0..v.len()));
            }
            _ => v.insert(rng.gen_range(0..=v.len()), c),
        }
    }
    v.into_iter().collect()
}

fn sets(rng: &mut StdRng, nb: usize, nq: usize, alpha: usize) -> (Dataset, Dataset) {
    let mut base: Vec<String> = (0..nb).map(|_| word(rng, alpha)).collect();
    base.push(String::new());
    base.push(base[0].clone());
    let mut qs: Vec<String> = (0..nq)
        .map(|i| {
            if i % 2 == 0 {
                let b = &base[rng.gen_range(0..base.len())];
                mutate(rng, b, 3)
            } else {
                word(rng, alpha)
            }
        })
        .collect();
    qs.push(String::new());
    (
        StringSet::from_strings(base).unwrap().into(),
        StringSet::from_strings(qs).unwrap().into(),
    )
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_matches_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engine = CudaEngine::new(0).expect("a CUDA GPU");
    for alpha in [2, 4, 6] {
        let (base, queries) = sets(&mut rng, 1500, 300, alpha);
        for radius in [0.0, 1.0, 2.0, 3.0, 2.5] {
            let want = reference::range(&base, &queries, radius, &Metric::Levenshtein).unwrap();
            let got = engine
                .range(&base, &queries, radius, &Metric::Levenshtein)
                .unwrap();
            reference::compare_range(&want, &got, 0.0)
                .unwrap_or_else(|e| panic!("alphabet {alpha}, radius {radius}: {e}"));
            assert!(
                want.indices.len() > queries.len() / 4,
                "the data must produce hits (alphabet {alpha}, radius {radius})"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_edge_sets() {
    let engine = CudaEngine::new(0).expect("a CUDA GPU");
    let words = |v: &[&str]| -> Dataset { StringSet::from_strings(v).unwrap().into() };
    let lev = Metric::Levenshtein;
    let base = words(&["", "a", "ab", "é漢", "😀😀"]);
    for queries in [words(&[]), words(&[""]), words(&["a", "漢", "😀"])] {
        for radius in [0.0, 1.0, 1e9] {
            let want = reference::range(&base, &queries, radius, &lev).unwrap();
            let got = engine.range(&base, &queries, radius, &lev).unwrap();
            reference::compare_range(&want, &got, 0.0).unwrap();
        }
    }
    let got = engine.range(&words(&[]), &base, 2.0, &lev).unwrap();
    assert_eq!(got.offsets, vec![0; 6]);
    // k-NN and graphs on the same edge sets, k past the base included.
    for queries in [words(&[]), words(&[""]), words(&["a", "漢", "😀"])] {
        assert!(engine.knn(&base, &queries, 0, &lev).is_err());
        for k in [1, 4, 5, 9] {
            let want = reference::knn(&base, &queries, k, &lev).unwrap();
            let got = engine.knn(&base, &queries, k, &lev).unwrap();
            reference::compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("k {k}: {e}"));
        }
    }
    for k in [1, 4, 9] {
        let want = reference::graph(&base, k, &lev).unwrap();
        let got = engine.graph(&base, k, &lev).unwrap();
        reference::compare_knn(&want, &got, 0.0).unwrap_or_else(|e| panic!("graph k {k}: {e}"));
    }
}

/// k-NN search and graphs by increasing radius: k = 1 (duplicates at distance 0), 10, 100 and
/// n − 1 (the radius has to grow to cover every item), on the same random words as the range
/// test, long host-path queries included.
#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_and_graph_match_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let engine = CudaEngine::new(0).expect("a CUDA GPU");
    let lev = Metric::Levenshtein;
    for alpha in [2, 6] {
        let (base, queries) = sets(&mut rng, 700, 150, alpha);
        let n = base.len();
        for k in [1, 10, 100, n - 1] {
            let want = reference::knn(&base, &queries, k, &lev).unwrap();
            let got = engine.knn(&base, &queries, k, &lev).unwrap();
            reference::compare_knn(&want, &got, 0.0)
                .unwrap_or_else(|e| panic!("knn alphabet {alpha}, k {k}: {e}"));
            let want = reference::graph(&base, k, &lev).unwrap();
            let got = engine.graph(&base, k, &lev).unwrap();
            reference::compare_knn(&want, &got, 0.0)
                .unwrap_or_else(|e| panic!("graph alphabet {alpha}, k {k}: {e}"));
        }
    }
}
