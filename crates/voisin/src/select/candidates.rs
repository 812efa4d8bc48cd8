//! Candidate buffer for selection under an error bound.
//!
//! A fast pass (f32 GEMM, f32 SIMD, tensor cores) computes approximate keys whose error is
//! bounded: each item's exact key lies in `[lower, upper]`. Let `T` be the k-th smallest
//! `upper` seen. Any item with `lower > T` is beaten strictly by k items and cannot be among the
//! k nearest, whatever the tie-break; every other item stays a candidate. After the pass the
//! candidates are re-ranked on exact keys. `T` is kept exact at every push by a k-entry max-heap
//! of upper bounds, so a scan's limit tightens as soon as a better item arrives (a threshold
//! refreshed only at compaction let several times more items through). The buffer of
//! candidates is compacted when it grows, so memory per
//! query stays near `2k` in normal data (more only when many items are truly tied). Bounds are
//! stored as f32 rounded outward (12 bytes an entry): filtering stays conservative, and the
//! exact re-rank never reads them.

use std::collections::BinaryHeap;

/// Candidates of one query.
#[derive(Clone, Debug)]
pub struct Candidates {
    k: usize,
    /// (lower, upper, index)
    items: Vec<(f32, f32, u32)>,
    /// The k smallest upper bounds offered so far, as order-preserving bit patterns
    /// ([`order_bits`]), in a max-heap: the top is the threshold once k were offered.
    uppers: BinaryHeap<u32>,
    /// k-th smallest upper bound among all items offered so far (`+inf` until k were offered).
    threshold: f32,
    /// Compact when `items.len()` reaches this.
    cap: usize,
}

/// Bytes one candidate entry takes, for sizing work to a memory budget (the heap of upper
/// bounds adds 4 bytes per k).
pub const ENTRY_BYTES: usize = std::mem::size_of::<(f32, f32, u32)>();

/// Maps an f32 to a u32 whose unsigned order is `f32::total_cmp`'s order.
fn order_bits(x: f32) -> u32 {
    let b = x.to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Inverse of [`order_bits`].
fn from_order_bits(b: u32) -> f32 {
    f32::from_bits(if b >> 31 == 1 { b & 0x7fff_ffff } else { !b })
}

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
    /// An empty buffer for the `k` nearest of one query; with `k` = 0 it keeps nothing.
    pub fn new(k: usize) -> Self {
        Candidates {
            k,
            items: Vec::new(),
            uppers: BinaryHeap::with_capacity(k),
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
        let upper = up(upper);
        self.items.push((lower, upper, idx));
        let bits = order_bits(upper);
        if self.uppers.len() < self.k {
            self.uppers.push(bits);
        } else if bits < *self.uppers.peek().expect("k > 0") {
            *self.uppers.peek_mut().expect("k > 0") = bits;
        }
        if self.uppers.len() == self.k {
            self.threshold = from_order_bits(*self.uppers.peek().expect("k > 0"));
        }
        if self.items.len() >= self.cap {
            self.compact();
        }
    }

    /// Drops items that can no longer be among the k nearest. Items behind the k smallest
    /// upper bounds have `lower ≤ upper ≤ T`, so they always stay and the heap stays valid.
    pub fn compact(&mut self) {
        let t = self.threshold;
        self.items.retain(|c| c.0 <= t);
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
    pub fn into_indices(self) -> Vec<u32> {
        self.into_entries().into_iter().map(|c| c.2).collect()
    }

    /// The surviving candidates as (lower, upper, index), bounds rounded outward to f32.
    pub fn into_entries(mut self) -> Vec<(f32, f32, u32)> {
        self.compact();
        self.items
    }

    /// Candidates held now; some may be dropped by the next [`Candidates::compact`].
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no candidate is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_bits_follow_total_order() {
        let xs = [
            f32::NEG_INFINITY,
            -3.5,
            -0.0,
            0.0,
            1e-40,
            2.0,
            f32::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(order_bits(w[0]) < order_bits(w[1]), "{} {}", w[0], w[1]);
        }
        for x in xs {
            assert_eq!(from_order_bits(order_bits(x)).to_bits(), x.to_bits());
        }
    }

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
