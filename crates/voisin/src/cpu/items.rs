//! Key tiles for metrics without a matrix-product form: levenshtein on strings, user metrics
//! on vectors or strings, and built-in metrics on f64 vectors that f32 cannot approximate. Keys are exact (f64) and only rounded to f32 for the tile, so the
//! bound is one f32 rounding; the drivers re-rank the few candidates on the f64 key.

use super::tiles::{Bound, Cutoff, TileSource};
use crate::data::Dataset;
use crate::metric::levenshtein::Pattern;
use crate::metric::{exact, simd, Metric};

/// Base items longer than this (one 64-char block of the bit-parallel scan) are the pattern
/// of their pairs with shorter queries.
const LONG_ITEM: usize = 64;

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

    fn keys(&self, q: &ItemRows, b: &ItemRows, cutoff: Cutoff, keys: &mut Vec<f32>) -> Bound {
        keys.clear();
        match (self.metric, self.base, self.queries) {
            (Metric::Levenshtein, Dataset::Strings(bs), Dataset::Strings(qs)) => {
                // Patterns of the tile's long base items, each built on its first use: the
                // longer string of a pair is the pattern, so that the scan runs over the
                // shorter one (a 1 MiB line against words costs a few columns of blocks, not
                // a million columns).
                let mut long: Vec<Option<Pattern>> = Vec::new();
                long.resize_with(b.end - b.start, || None);
                for (r, j) in (q.start..q.end).enumerate() {
                    let query = qs.get(j);
                    // Built on the first pair that needs a scan: under a tight cutoff most
                    // pairs of a long query are refused by their lengths alone.
                    let mut pattern = None;
                    for (c, i) in (b.start..b.end).enumerate() {
                        let item = bs.get(i);
                        let limit = cutoff.at(r, c);
                        // Edit distances are integers: ≤ limit is ≤ ⌊limit⌋.
                        let max = match limit.is_finite() {
                            true => limit.max(0.0) as usize,
                            false => usize::MAX,
                        };
                        let d = if query.len().abs_diff(item.len()) > max {
                            None
                        } else if item.len() > LONG_ITEM && item.len() > query.len() {
                            long[c]
                                .get_or_insert_with(|| Pattern::new(item))
                                .bounded(query, max)
                        } else {
                            pattern
                                .get_or_insert_with(|| Pattern::new(query))
                                .bounded(item, max)
                        };
                        keys.push(d.map_or(f32::INFINITY, |d| d as f32));
                    }
                }
                // Edit distances are small integers: exact in f32, so the bound is zero.
                Bound::new(0.0, 0.0)
            }
            _ => {
                for j in q.start..q.end {
                    for i in b.start..b.end {
                        keys.push(self.exact(i, j) as f32);
                    }
                }
                // One rounding from f64 to f32.
                Bound::new(simd::U32, f32::MIN_POSITIVE as f64)
            }
        }
    }

    fn uses_cutoff(&self) -> bool {
        matches!(self.metric, Metric::Levenshtein)
    }

    /// Edit distances below 2²⁴ are exact in f32, and a tile's key is then the exact key
    /// (its bound is zero). A larger distance may have been rounded (a key of 2²⁴ or more).
    fn key_from_bounds(&self, lower: f32, upper: f32) -> Option<f64> {
        let exact = matches!(self.metric, Metric::Levenshtein)
            && lower == upper
            && (0.0..16_777_216.0).contains(&lower);
        exact.then_some(lower as f64)
    }

    fn exact(&self, i: usize, j: usize) -> f64 {
        exact::item_key(self.metric, self.base, i, self.queries, j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuEngine, CpuOptions};
    use crate::metric::levenshtein;
    use crate::{reference, Engine, StringSet};
    use proptest::prelude::*;

    const LOWER: &[char] = &['a', 'b', 'c', 'd'];
    const OTHER: &[char] = &['X', 'Y', 'é', '中', 'a'];

    /// Strings of both alphabets (which share one letter), some longer than a block.
    fn strings() -> impl Strategy<Value = Vec<String>> {
        let one = prop_oneof![
            prop::collection::vec(prop::sample::select(LOWER), 0..12),
            prop::collection::vec(prop::sample::select(OTHER), 0..200),
            prop::collection::vec(prop::sample::select(&OTHER[..4]), 60..300),
        ];
        prop::collection::vec(one.prop_map(|v| v.into_iter().collect::<String>()), 1..9)
    }

    /// Every entry of a tile under a per-row and per-column cutoff: the exact distance when it
    /// is at most the cutoff (equality included), +inf or the exact distance otherwise.
    fn check_tile(base: &[String], queries: &[String], rows: &[f64], cols: &[f64]) {
        let (b, q) = (
            Dataset::from(StringSet::from_strings(base).unwrap()),
            Dataset::from(StringSet::from_strings(queries).unwrap()),
        );
        let tiles = ItemTiles::new(&Metric::Levenshtein, &b, &q);
        let (mut rb, mut rq, mut keys) = (ItemRows::default(), ItemRows::default(), Vec::new());
        tiles.prepare_base(0, base.len(), &mut rb);
        tiles.prepare_query(0, queries.len(), &mut rq);
        let cutoff = Cutoff::Lists { rows, cols };
        let bound = tiles.keys(&rq, &rb, cutoff, &mut keys);
        assert!(bound.is_exact());
        for (r, qs) in queries.iter().enumerate() {
            for (c, bs) in base.iter().enumerate() {
                let (qc, bc): (Vec<char>, Vec<char>) = (qs.chars().collect(), bs.chars().collect());
                let d = levenshtein::distance(&qc, &bc) as f32;
                let (key, limit) = (keys[r * base.len() + c], cutoff.at(r, c));
                if d as f64 <= limit {
                    assert_eq!(key, d, "{qs:?} {bs:?} limit {limit}");
                } else {
                    assert!(key == d || key == f32::INFINITY, "{qs:?} {bs:?}: {key}");
                }
                assert_eq!(
                    tiles.key_from_bounds(key, key),
                    key.is_finite().then_some(d as f64)
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        #[test]
        fn cut_off_keys_are_exact_up_to_the_cutoff(
            base in strings(),
            queries in strings(),
            shift in prop::collection::vec(-2i32..3, 18),
            with_cols in any::<bool>(),
        ) {
            // Limits around the true distances, so that equality is met often.
            let chars = |s: &String| s.chars().collect::<Vec<char>>();
            let near = |s: &String, other: &String, at: usize| {
                let d = levenshtein::distance(&chars(s), &chars(other)) as i32;
                f64::from((d + shift[at % shift.len()]).max(0))
            };
            let rows: Vec<f64> = queries.iter().enumerate()
                .map(|(r, s)| near(s, &base[r % base.len()], r)).collect();
            let cols: Vec<f64> = match with_cols {
                true => base.iter().enumerate()
                    .map(|(c, s)| near(s, &queries[c % queries.len()], c + 7)).collect(),
                false => Vec::new(),
            };
            check_tile(&base, &queries, &rows, &cols);
        }
    }

    #[test]
    fn infinite_and_zero_cutoffs() {
        let words: Vec<String> = ["", "a", "abc", "XYé", &"Y".repeat(150), &"ab".repeat(90)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let n = words.len();
        for lim in [0.0, 0.5, 1.0, f64::INFINITY] {
            check_tile(&words, &words, &vec![lim; n], &[]);
            check_tile(&words, &words, &vec![lim; n], &vec![0.0; n]);
        }
    }

    /// Words with long lines among them, one sharing no character with the words and one
    /// sharing a few: the graph and the k-NN of the CPU engine equal the reference's,
    /// ties included (every word is at the same distance from the foreign line).
    #[test]
    fn long_lines_among_words_are_exact() {
        let mut items: Vec<String> = (0..300u32)
            .map(|i| {
                let w: String = (0..3 + i % 7)
                    .map(|t| (b'a' + ((i * 7 + t * 3) % 26) as u8) as char)
                    .collect();
                w
            })
            .collect();
        let foreign: String = "QWERTY0123456789".chars().cycle().take(20_000).collect();
        let mixed: String = "QWERTYab".chars().cycle().take(5_000).collect();
        items.insert(17, foreign);
        items.insert(150, mixed);
        let data = Dataset::from(StringSet::from_strings(&items).unwrap());
        let queries = Dataset::from(StringSet::from_strings(&items[10..30]).unwrap());
        let e = CpuEngine::new(CpuOptions {
            threads: Some(2),
            ..CpuOptions::default()
        })
        .unwrap();
        let m = Metric::Levenshtein;
        for k in [1, 3, 10] {
            let (want, got) = (
                reference::graph(&data, k, &m).unwrap(),
                e.graph(&data, k, &m),
            );
            let got = got.unwrap();
            assert_eq!(want.indices, got.indices, "graph k {k}");
            assert_eq!(want.distances, got.distances, "graph k {k}");
            let want = reference::knn(&data, &queries, k, &m).unwrap();
            let got = e.knn(&data, &queries, k, &m).unwrap();
            assert_eq!(want.indices, got.indices, "knn k {k}");
            assert_eq!(want.distances, got.distances, "knn k {k}");
        }
    }
}
