//! Key tiles for metrics without a matrix-product form: levenshtein on strings, user metrics
//! on vectors or strings, and built-in metrics on f64 vectors that f32 cannot approximate. Keys are exact (f64) and only rounded to f32 for the tile, so the
//! bound is one f32 rounding; the drivers re-rank the few candidates on the f64 key.

use super::tiles::{Bound, TileSource};
use crate::data::Dataset;
use crate::metric::{exact, levenshtein, simd, Metric};

/// Rows of an item tile: just the index range, items are read in place.
#[derive(Default)]
pub struct ItemRows {
    start: usize,
    end: usize,
}

/// Exact keys between items of two data sets under a string metric or a user metric.
pub struct ItemTiles<'a> {
    metric: &'a Metric,
    base: &'a Dataset,
    queries: &'a Dataset,
}

impl<'a> ItemTiles<'a> {
    pub fn new(metric: &'a Metric, base: &'a Dataset, queries: &'a Dataset) -> Self {
        ItemTiles {
            metric,
            base,
            queries,
        }
    }
}

impl TileSource for ItemTiles<'_> {
    type Rows = ItemRows;

    fn prepare_base(&self, start: usize, end: usize, out: &mut ItemRows) {
        *out = ItemRows { start, end };
    }

    fn prepare_query(&self, start: usize, end: usize, out: &mut ItemRows) {
        *out = ItemRows { start, end };
    }

    fn keys(&self, q: &ItemRows, b: &ItemRows, cutoff: f64, keys: &mut Vec<f32>) -> Bound {
        keys.clear();
        match (self.metric, self.base, self.queries) {
            (Metric::Levenshtein, Dataset::Strings(bs), Dataset::Strings(qs)) => {
                // Edit distances are small integers: exact in f32, so the bound is zero.
                let max = if cutoff.is_finite() {
                    cutoff.max(0.0) as usize
                } else {
                    usize::MAX
                };
                for j in q.start..q.end {
                    let pattern = levenshtein::Pattern::new(qs.get(j));
                    for i in b.start..b.end {
                        let d = if max == usize::MAX {
                            Some(pattern.distance(bs.get(i)))
                        } else {
                            pattern.bounded(bs.get(i), max)
                        };
                        keys.push(d.map_or(f32::INFINITY, |d| d as f32));
                    }
                }
                Bound { rel: 0.0, abs: 0.0 }
            }
            _ => {
                for j in q.start..q.end {
                    for i in b.start..b.end {
                        keys.push(self.exact(i, j) as f32);
                    }
                }
                // One rounding from f64 to f32.
                Bound {
                    rel: simd::U32,
                    abs: f32::MIN_POSITIVE as f64,
                }
            }
        }
    }

    fn exact(&self, i: usize, j: usize) -> f64 {
        exact::item_key(self.metric, self.base, i, self.queries, j)
    }
}
