//! What an [`Answer`] becomes before it is written: a self-join reduced to each unordered pair
//! once (`--pairs`) and the distances recomputed as exact f64 values (`--distances f64`); the
//! item itself goes first in each graph row (`--include-self`) through
//! [`voisin::shape::include_self`]. The conventions and the work are the core's
//! ([`voisin::shape`]), shared with the Python package.

use voisin::{shape, Dataset, Metric, RangeResult};

use crate::output::Answer;

/// Each unordered pair {i, j}, i != j, once: in row min(i, j), sorted by distance then index.
pub fn pairs(answer: Answer) -> RangeResult {
    match answer {
        Answer::Knn(g) => shape::graph_pairs(g),
        Answer::Range(r) => shape::range_pairs(r),
    }
}

/// The exact f64 distance of every entry, in result order: query row q against base item i.
pub fn exact_distances(
    answer: &Answer,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Vec<f64> {
    match answer {
        Answer::Knn(r) => shape::knn_exact(r, base, queries, metric),
        Answer::Range(r) => shape::range_exact(r, base, queries, metric),
    }
}
