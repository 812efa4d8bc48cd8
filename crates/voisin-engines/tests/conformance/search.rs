//! k-NN, range and graph answers against the reference: random and adversarial vectors, every
//! element type, strings, and the edges of the request shapes.

use voisin::engine::Op;
use voisin::{reference, Dataset, Metric, StringSet};

use crate::check::{knn_graph_range, open_default, refused};
use crate::data::{self, with_zero_and_duplicate_rows};
use crate::Subject;

/// Every vector metric on normal, tied and offset data with zero and duplicate rows, in
/// dimensions 1, 3, 127 and 1025, at sizes that are no multiple of any tile.
pub fn random_and_adversarial(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(7);
    for (n, m, d) in [(203, 29, 1), (301, 23, 3), (131, 17, 127), (37, 9, 1025)] {
        for (gen_name, gen) in data::generators() {
            let base = data::vectors(n, d, with_zero_and_duplicate_rows(gen(&mut rng, n, d), d));
            let queries = data::vectors(m, d, with_zero_and_duplicate_rows(gen(&mut rng, m, d), d));
            for metric in data::vector_metrics() {
                let what = format!("{gen_name} n={n} d={d}");
                knn_graph_range(&engines, &base, &queries, &metric, &[1, 10], &what);
            }
        }
    }
}

/// The same searches on every element type: f32, f16, bf16, u8, f64 holding f32 values, and
/// f64 values f32 does not hold (answered for their own values by every engine that supports
/// them, the GPU's included; refused as invalid input by any that does not).
pub fn element_types(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(3);
    let (n, m, d) = (157, 21, 6);
    let bases = data::element_types(&mut rng, n, d);
    let queries = data::element_types(&mut rng, m, d);
    for ((what, base), (_, queries)) in bases.iter().zip(&queries) {
        for metric in data::vector_metrics() {
            knn_graph_range(&engines, base, queries, &metric, &[1, 7], what);
        }
    }
}

/// Words under levenshtein and under a user metric.
pub fn strings(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(5);
    let base = data::words(&mut rng, 233);
    let queries = data::words(&mut rng, 19);
    for metric in data::string_metrics() {
        knn_graph_range(&engines, &base, &queries, &metric, &[1, 10, 232], "words");
    }
}

/// k at and beyond the items available, k = 0, empty queries, an empty base, one and two
/// items, one dimension, and requests that are invalid as made (dimensions or kinds that do not match,
/// metrics that do not apply, bad radii).
pub fn edge_shapes(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(11);
    let (n, d) = (37, 5);
    let base = data::vectors(n, d, data::normal(&mut rng, n, d));
    let queries = data::vectors(4, d, data::normal(&mut rng, 4, d));
    let none = data::vectors(0, d, vec![]);
    for metric in data::vector_metrics() {
        knn_graph_range(
            &engines,
            &base,
            &queries,
            &metric,
            &[0, n - 1, n, n + 5],
            "k at the edges",
        );
        knn_graph_range(&engines, &base, &none, &metric, &[1, n + 1], "no queries");
        knn_graph_range(&engines, &none, &queries, &metric, &[1, 3], "empty base");
        for rows in [1, 2] {
            let tiny = data::vectors(rows, d, data::normal(&mut rng, rows, d));
            knn_graph_range(&engines, &tiny, &queries, &metric, &[1, 3], "tiny base");
        }
        let line = data::vectors(n, 1, data::ties(&mut rng, n, 1));
        let points = data::vectors(3, 1, vec![0.0, 2.0, 1.0]);
        knn_graph_range(&engines, &line, &points, &metric, &[1, 5], "one dimension");
    }
    for o in &engines {
        assert_eq!(
            o.engine
                .knn(&base, &queries, n + 5, &Metric::Euclidean)
                .unwrap()
                .k,
            n
        );
        assert_eq!(
            o.engine.graph(&base, n + 5, &Metric::Euclidean).unwrap().k,
            n - 1
        );
        let one = data::vectors(1, 3, vec![1.0, 2.0, 3.0]);
        let g = o.engine.graph(&one, 5, &Metric::Euclidean).unwrap();
        assert_eq!((g.n_queries, g.k, g.indices.len()), (1, 0, 0), "{}", o.name);
    }
    let words: Dataset = StringSet::from_strings(["a", "b"]).unwrap().into();
    let wide = data::vectors(2, d + 1, vec![0.0; 2 * (d + 1)]);
    for o in &engines {
        let e = &o.engine;
        let what = |w: &str| format!("{}: {w}", o.name);
        refused(
            e.knn(&base, &wide, 1, &Metric::Euclidean),
            &what("dimensions"),
        );
        refused(
            e.range(&base, &wide, 1.0, &Metric::Euclidean),
            &what("dimensions"),
        );
        refused(e.knn(&base, &words, 1, &Metric::Euclidean), &what("kinds"));
        refused(
            e.knn(&words, &base, 1, &Metric::Levenshtein),
            &what("kinds"),
        );
        refused(e.graph(&base, 1, &Metric::Levenshtein), &what("metric"));
        refused(e.graph(&words, 1, &Metric::Cosine), &what("metric"));
        refused(
            e.range(&base, &queries, -1.0, &Metric::Euclidean),
            &what("radius"),
        );
        refused(
            e.range(&base, &queries, f64::NAN, &Metric::Euclidean),
            &what("NaN"),
        );
        // The reference says the same of each.
        assert!(reference::knn(&base, &wide, 1, &Metric::Euclidean).is_err());
        assert!(
            !o.supports(&[&base], &Metric::Levenshtein, Op::Knn),
            "{}",
            o.name
        );
    }
}
