//! Bounded max-heap of the k smallest `(key, index)` pairs seen so far.

use super::less;

/// Keeps the k smallest `(key, index)` pairs by [`super::less`].
#[derive(Clone, Debug)]
pub struct TopK {
    k: usize,
    /// Max-heap: `items[0]` is the worst kept pair.
    items: Vec<(f64, u32)>,
}

impl TopK {
    /// An empty heap that keeps at most `k` pairs (none for `k` = 0).
    pub fn new(k: usize) -> Self {
        TopK {
            k,
            items: Vec::with_capacity(k),
        }
    }

    /// Pairs kept so far, at most `k`.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no pair is kept yet.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether `k` pairs are held, so that a new pair is kept only if it beats the worst (always
    /// true for `k` = 0).
    pub fn is_full(&self) -> bool {
        self.items.len() >= self.k
    }

    /// The worst kept key once k pairs are held; `+inf` before.
    pub fn threshold(&self) -> f64 {
        if self.is_full() && self.k > 0 {
            self.items[0].0
        } else {
            f64::INFINITY
        }
    }

    /// Offers a pair; returns whether it was kept.
    pub fn push(&mut self, key: f64, idx: u32) -> bool {
        if self.k == 0 {
            return false;
        }
        if self.items.len() < self.k {
            self.items.push((key, idx));
            self.sift_up(self.items.len() - 1);
            return true;
        }
        let (wk, wi) = self.items[0];
        if !less(key, idx, wk, wi) {
            return false;
        }
        self.items[0] = (key, idx);
        self.sift_down(0);
        true
    }

    /// The kept pairs, sorted by (key, index).
    pub fn into_sorted(mut self) -> Vec<(f64, u32)> {
        self.items
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.items
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            let (pk, pi) = self.items[parent];
            let (ck, ci) = self.items[i];
            if less(pk, pi, ck, ci) {
                self.items.swap(parent, i);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.items.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut largest = i;
            for c in [l, r] {
                if c < n {
                    let (ck, ci) = self.items[c];
                    let (lk, li) = self.items[largest];
                    if less(lk, li, ck, ci) {
                        largest = c;
                    }
                }
            }
            if largest == i {
                break;
            }
            self.items.swap(i, largest);
            i = largest;
        }
    }
}
