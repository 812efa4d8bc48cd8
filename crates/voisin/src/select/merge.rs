//! Merging k-lists sorted by (key, index): the step that combines shards, tiles and ranks.

use super::less;

/// Merges two lists sorted by (key, index) and keeps the first `k`. The lists must come from
/// disjoint item sets (shards): a pair present in both would be kept twice.
pub fn merge_sorted(a: &[(f64, u32)], b: &[(f64, u32)], k: usize) -> Vec<(f64, u32)> {
    let mut out = Vec::with_capacity(k.min(a.len() + b.len()));
    let (mut i, mut j) = (0, 0);
    while out.len() < k && (i < a.len() || j < b.len()) {
        let take_a = j >= b.len() || (i < a.len() && less(a[i].0, a[i].1, b[j].0, b[j].1));
        if take_a {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out
}
