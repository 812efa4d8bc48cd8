//! Every index (the k-d tree where it applies) × {range, k-NN, k-NN graph} equals the f64 brute-force reference exactly (rel_tol 0): vectors
//! under every true metric (integer grids with ties and duplicates, continuous data, dims 1, 3,
//! 127), words under levenshtein, and user metrics both through `Metric::Custom` and a bare
//! `UserSpace`. Cover trees are checked for their invariants after every build.

mod common;

use common::*;
use voisin::metric::CustomMetric;
use voisin::{Dataset, Metric};
use voisin_index::{search, DatasetIndex, Index, Kind, MetricIndex, Params, Space, UserSpace};

fn check_all(base: &Dataset, queries: &Dataset, metric: &Metric, radii: &[f64], label: &str) {
    // The k-d tree where it applies (vectors under a coordinate-wise metric).
    let kd = voisin_index::check_kind(base, metric, Kind::Kd)
        .is_ok()
        .then(|| (Kind::Kd, Params::default()));
    for (kind, params) in configs(base.len()).into_iter().chain(kd) {
        let index = DatasetIndex::build(base, metric.clone(), kind, &params).unwrap();
        if let DatasetIndex::Vectors(Index::Cover(t)) = &index {
            t.check_invariants()
                .unwrap_or_else(|e| panic!("{label} {params:?}: {e}"));
        }
        if let DatasetIndex::Strings(Index::Cover(t)) = &index {
            t.check_invariants()
                .unwrap_or_else(|e| panic!("{label} {params:?}: {e}"));
        }
        let what = format!("{label}, {kind} {params:?}, {metric}");
        equals_reference(&index, base, queries, metric, radii, &what);
    }
}

#[test]
fn vectors_on_integer_grids_with_ties_and_duplicates() {
    for (seed, n, dim, grid) in [(1, 150, 1, 6), (2, 200, 2, 4), (3, 173, 3, 3)] {
        let base = vectors(seed, n, dim, Some(grid));
        let queries = vector_queries(seed + 100, &base, 20, Some(grid));
        for metric in [
            Metric::Euclidean,
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Minkowski(3.0),
        ] {
            check_all(&base, &queries, &metric, &[0.0, 1.0, 1.5, 2.0], "grid");
        }
    }
}

#[test]
fn vectors_continuous() {
    for (seed, n, dim) in [(4, 300, 3), (5, 61, 127)] {
        let base = vectors(seed, n, dim, None);
        let queries = vector_queries(seed + 100, &base, 15, None);
        for metric in [Metric::Euclidean, Metric::Cityblock, Metric::Minkowski(1.5)] {
            let typical = voisin::reference::knn(&base, &queries, 5, &metric).unwrap();
            let r = typical.distances[typical.distances.len() / 2] as f64;
            check_all(&base, &queries, &metric, &[0.0, r, 2.0 * r], "continuous");
        }
    }
}

#[test]
fn tiny_sets() {
    for n in [1, 2, 3] {
        let base = vectors(9, n, 2, Some(2));
        let queries = vectors(10, 4, 2, Some(3));
        check_all(
            &base,
            &queries,
            &Metric::Euclidean,
            &[0.0, 1.0, 10.0],
            "tiny",
        );
    }
}

#[test]
fn words_under_levenshtein() {
    // A three-letter alphabet makes many equal distances and duplicate words (and empty ones).
    let base = words(6, 400, "abc", 7);
    let queries = words(7, 30, "abcd", 8);
    check_all(
        &base,
        &queries,
        &Metric::Levenshtein,
        &[0.0, 1.0, 2.0, 3.5],
        "words",
    );
}

#[test]
fn shipped_word_list_sample() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/words.txt");
    let text = std::fs::read_to_string(path).expect("data/words.txt is shipped");
    let list: Vec<&str> = text.lines().step_by(211).collect();
    let base: Dataset = voisin::StringSet::from_strings(&list).unwrap().into();
    let queries: Dataset = voisin::StringSet::from_strings(
        text.lines().skip(17).step_by(3001).map(|w| format!("{w}s")),
    )
    .unwrap()
    .into();
    check_all(
        &base,
        &queries,
        &Metric::Levenshtein,
        &[1.0, 2.0],
        "word list",
    );
}

#[test]
fn user_metrics_through_metric_custom() {
    let l1 = CustomMetric::for_vectors("my_l1", |a: &[f32], b: &[f32]| {
        a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).sum()
    });
    let base = vectors(11, 120, 2, Some(5));
    let queries = vector_queries(12, &base, 10, Some(5));
    check_all(
        &base,
        &queries,
        &Metric::Custom(l1),
        &[0.0, 1.0, 3.0],
        "custom vectors",
    );

    // Hamming-like over chars, padded by length difference: a metric on strings.
    let ham = CustomMetric::for_strings("pad_hamming", |a: &[char], b: &[char]| {
        let common = a.iter().zip(b).filter(|(x, y)| x != y).count();
        (common + a.len().abs_diff(b.len())) as f64
    });
    let base = words(13, 150, "ab", 5);
    let queries = words(14, 12, "abc", 6);
    check_all(
        &base,
        &queries,
        &Metric::Custom(ham),
        &[0.0, 1.0, 2.0],
        "custom strings",
    );
}

#[test]
fn user_space_over_any_type() {
    // Points on a circle of 360 positions, circular distance: a metric on plain integers.
    let items: Vec<u32> = (0..300u32).map(|i| (i * 37 + i / 7) % 360).collect();
    let circ = |a: &u32, b: &u32| {
        let d = a.abs_diff(*b);
        d.min(360 - d) as f64
    };
    let queries: Vec<u32> = vec![0, 5, 90, 181, 359, 200];
    for (kind, params) in configs(items.len()) {
        let index = Index::build(UserSpace::new(items.clone(), circ), kind, &params);
        if let Index::Cover(t) = &index {
            t.check_invariants().unwrap();
        }
        for r in [0.0, 2.0, 10.0] {
            let got = search::range(&index, &queries, r).unwrap();
            for (q, query) in queries.iter().enumerate() {
                let mut want: Vec<(f64, u32)> = (0..items.len())
                    .map(|i| (circ(query, &items[i]), i as u32))
                    .filter(|x| x.0 <= r)
                    .collect();
                want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let ids: Vec<u32> = want.iter().map(|x| x.1).collect();
                assert_eq!(got.row(q).0, ids.as_slice(), "{kind} {params:?} r={r}");
            }
        }
        for k in [1, 4, 299, 300] {
            let got = search::knn(&index, &queries, k).unwrap();
            for (q, query) in queries.iter().enumerate() {
                let mut want: Vec<(f64, u32)> = (0..items.len())
                    .map(|i| (circ(query, &items[i]), i as u32))
                    .collect();
                want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let ids: Vec<u32> = want.iter().take(k).map(|x| x.1).collect();
                assert_eq!(got.row(q).0, ids.as_slice(), "{kind} {params:?} k={k}");
            }
        }
        assert!(index.space().len() == items.len());
    }
}

#[test]
fn indexes_prune() {
    // Not a timing test: on clustered low-dimensional data every index must skip most items.
    let base = vectors(15, 2000, 2, None);
    let queries = vectors(16, 50, 2, None);
    for kind in Kind::ALL {
        let index =
            DatasetIndex::build(&base, Metric::Euclidean, kind, &Params::default()).unwrap();
        let res = index.knn(&queries, 3).unwrap();
        let per_query = res.stats.distance_evals as f64 / 50.0;
        assert!(
            per_query < 0.5 * 2000.0,
            "{kind}: {per_query} evaluations per query"
        );
    }
}

#[test]
fn refuses_non_metrics_and_bad_requests() {
    let base = vectors(17, 10, 2, None);
    for m in [
        Metric::Cosine,
        Metric::SqEuclidean,
        Metric::InnerProduct,
        Metric::Correlation,
    ] {
        let err = DatasetIndex::build(&base, m, Kind::Lc, &Params::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("triangle inequality"), "{err}");
    }
    let index =
        DatasetIndex::build(&base, Metric::Euclidean, Kind::Sss, &Params::default()).unwrap();
    assert!(index.range(&vectors(1, 2, 3, None), 1.0).is_err());
    assert!(index.range(&words(1, 2, "a", 2), 1.0).is_err());
    assert!(index.range(&base, -1.0).is_err());
    assert!(index.knn(&base, 0).is_err());
    let bad = Params {
        base: 1.0,
        ..Params::default()
    };
    assert!(DatasetIndex::build(&base, Metric::Euclidean, Kind::Cover, &bad).is_err());
}
