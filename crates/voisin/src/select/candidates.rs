//! Candidate buffer for selection under an error bound.
//!
//! A fast pass (f32 GEMM, f32 SIMD, tensor cores) computes approximate keys whose error is
//! bounded: each item's exact key lies in `[lower, upper]`. Let `T` be the k-th smallest
//! `upper` seen. Any item with `lower > T` is beaten strictly by k items and cannot be among the
//! k nearest, whatever the tie-break; every other item stays a candidate. After the pass the
//! candidates are re-ranked on exact keys. The buffer is compacted when it grows, so memory per
//! query stays near `2k` in normal data (more only when many items are truly tied). Bounds are
//! stored as f32 rounded outward (12 bytes an entry): filtering stays conservative, and the
//! exact re-rank never reads them.

/// Candidates of one query.
#[derive(Clone, Debug)]
pub struct Candidates {
    k: usize,
    /// (lower, upper, index)
    items: Vec<(f32, f32, u32)>,
    /// k-th smallest upper bound among all items offered so far (`+inf` until k were offered).
    threshold: f32,
    /// Compact when `items.len()` reaches this.
    cap: usize,
}

/// Bytes one candidate entry takes, for sizing work to a memory budget.
pub const ENTRY_BYTES: usize = std::mem::size_of::<(f32, f32, u32)>();

fn down(x: f64) -> f32 {
    let f = x as f32;
    if (f as f64) > x {
        f.next_down()
    } else {
        f
    }
}

fn up(x: f64) -> f32 {
    let f = x as f32;
    if (f as f64) < x {
        f.next_up()
    } else {
        f
    }
}

impl Candidates {
    pub fn new(k: usize) -> Self {
        Candidates {
            k,
            items: Vec::new(),
            threshold: f32::INFINITY,
            cap: (2 * k).max(k + 32),
        }
    }

    /// Items whose lower bound exceeds this are rejected; callers use it to skip work.
    #[inline]
    pub fn threshold(&self) -> f64 {
        self.threshold as f64
    }

    /// Offers an item with its exact key known to lie in `[lower, upper]`.
    #[inline]
    pub fn push(&mut self, lower: f64, upper: f64, idx: u32) {
        let lower = down(lower);
        if lower > self.threshold || self.k == 0 {
            return;
        }
        self.items.push((lower, up(upper), idx));
        if self.items.len() >= self.cap {
            self.compact();
        }
    }

    /// Recomputes the threshold and drops items that can no longer be among the k nearest.
    pub fn compact(&mut self) {
        if self.items.len() >= self.k && self.k > 0 {
            let mut uppers: Vec<f32> = self.items.iter().map(|c| c.1).collect();
            let (_, kth, _) = uppers.select_nth_unstable_by(self.k - 1, f32::total_cmp);
            self.threshold = self.threshold.min(*kth);
            let t = self.threshold;
            self.items.retain(|c| c.0 <= t);
        }
        // When many items are tied within the bound the buffer cannot shrink: grow the cap so
        // compaction stays amortised O(1) per push.
        self.cap = self.cap.max(2 * self.items.len());
    }

    /// Merges another query's buffer for the same query (from another tile or thread).
    pub fn absorb(&mut self, other: &Candidates) {
        for &(lo, hi, i) in &other.items {
            self.push(lo as f64, hi as f64, i);
        }
    }

    /// The surviving candidate indices.
    pub fn into_indices(mut self) -> Vec<u32> {
        self.compact();
        self.items.into_iter().map(|c| c.2).collect()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_that_may_be_in_top_k() {
        let mut c = Candidates::new(2);
        // exact keys 1, 2, 3, 10 with bound 0.6: items 0,1 are certain; 2's lower (2.4) is
        // below item 1's upper (2.6), so it stays; 3 goes.
        for (i, v) in [1.0, 2.0, 3.0, 10.0].into_iter().enumerate() {
            c.push(v - 0.6, v + 0.6, i as u32);
        }
        let mut got = c.into_indices();
        got.sort();
        assert_eq!(got, vec![0, 1, 2]);
    }
}
