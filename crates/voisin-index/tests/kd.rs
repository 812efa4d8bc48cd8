//! The k-d tree against the f64 brute-force reference on what stresses a box tree: every point
//! equal, a few distinct values (ties across leaves), leaves of one item, sets far from the
//! origin, dimensions 1 to 17, k from 1 to past n; its file (items only, the tree rebuilt); and
//! its refusal of what it cannot index.

mod common;

use common::*;
use voisin::{Dataset, Metric, VectorSet};
use voisin_index::{file, DatasetIndex, Index, Kind, Params};

const METRICS: [Metric; 5] = [
    Metric::Euclidean,
    Metric::Cityblock,
    Metric::Chebyshev,
    Metric::Minkowski(3.0),
    Metric::Minkowski(1.5),
];

fn check(base: &Dataset, queries: &Dataset, label: &str) {
    for metric in &METRICS {
        let index = DatasetIndex::build(base, metric.clone(), Kind::Kd, &Params::default())
            .unwrap_or_else(|e| panic!("{label} {metric}: {e}"));
        let what = format!("{label}, {metric}");
        equals_reference(&index, base, queries, metric, &[0.0, 0.5, 1.0, 3.0], &what);
    }
}

fn shifted(set: &Dataset, by: f32) -> Dataset {
    let v = set.as_vectors().unwrap();
    let values = v.rows_f32(0, v.len()).iter().map(|x| x + by).collect();
    VectorSet::from_f32(v.len(), v.dim(), values)
        .unwrap()
        .into()
}

#[test]
fn equals_brute_force_on_adversarial_sets() {
    for (seed, n, dim, grid) in [
        (1, 1, 3, None),
        (2, 2, 1, Some(1)),
        (3, 13, 2, Some(2)),
        (4, 300, 1, Some(5)),
        (5, 257, 3, Some(3)),
        (6, 400, 3, None),
        (7, 150, 16, None),
        (8, 90, 17, Some(2)),
    ] {
        let base = vectors(seed, n, dim, grid);
        let queries = vector_queries(seed + 50, &base, 15, grid);
        check(&base, &queries, &format!("n={n} d={dim} grid={grid:?}"));
    }
}

#[test]
fn every_point_equal_and_far_from_the_origin() {
    let same: Dataset = VectorSet::from_f32(60, 3, vec![7.0; 180]).unwrap().into();
    check(&same, &vectors(9, 5, 3, Some(9)), "all equal");
    let base = shifted(&vectors(10, 300, 3, None), 1.0e4);
    let queries = shifted(
        &vector_queries(11, &vectors(10, 300, 3, None), 10, None),
        1.0e4,
    );
    check(&base, &queries, "far from the origin");
}

#[test]
fn prunes_in_low_dimension() {
    // Not a timing test: a box tree over uniform 2-d points measures a small share of them.
    let base = vectors(12, 5000, 2, None);
    let queries = vectors(13, 50, 2, None);
    let index =
        DatasetIndex::build(&base, Metric::Euclidean, Kind::Kd, &Params::default()).unwrap();
    let res = index.knn(&queries, 10).unwrap();
    let per_query = res.stats.distance_evals as f64 / 50.0;
    assert!(per_query < 200.0, "{per_query} evaluations per query");
    if let DatasetIndex::Vectors(Index::Kd(t)) = &index {
        assert!(t.depth() <= 13, "depth {}", t.depth());
    } else {
        panic!("not a kd index");
    }
}

#[test]
fn file_keeps_the_items_and_rebuilds_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let base = vectors(14, 200, 3, Some(4));
    let queries = vector_queries(15, &base, 10, Some(4));
    let index =
        DatasetIndex::build(&base, Metric::Cityblock, Kind::Kd, &Params::default()).unwrap();
    let path = dir.path().join("kd.vidx");
    file::save(&index, &path).unwrap();
    let back = file::load(&path).unwrap();
    assert_eq!(back.kind(), Kind::Kd);
    assert_eq!(back.describe(), index.describe());
    let (a, b) = (
        index.knn(&queries, 4).unwrap(),
        back.knn(&queries, 4).unwrap(),
    );
    assert_eq!((a.indices, a.distances), (b.indices, b.distances));
}

#[test]
fn refuses_what_has_no_coordinates_or_box_bound() {
    let words = words(16, 20, "ab", 4);
    let e = DatasetIndex::build(&words, Metric::Levenshtein, Kind::Kd, &Params::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("the kd index takes vectors under euclidean, cityblock, chebyshev or minkowski:P, not 20 strings under levenshtein (use lc, sss or cover)"),
        "{e}"
    );
    let v = vectors(17, 20, 3, None);
    for m in [Metric::Cosine, Metric::SqEuclidean, Metric::InnerProduct] {
        let e = DatasetIndex::build(&v, m.clone(), Kind::Kd, &Params::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("the kd index takes vectors under"), "{m}: {e}");
    }
    assert_eq!("kd".parse::<Kind>().unwrap(), Kind::Kd);
    let e = "ball".parse::<Kind>().unwrap_err().to_string();
    assert!(e.contains("(known: lc, sss, cover, kd)"), "{e}");
}
