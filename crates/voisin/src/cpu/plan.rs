//! Tile sizes and work splitting for the CPU drivers, derived from the memory budget and the
//! thread count, plus the shared run context (progress, counters).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::{check_cancel, Cancel, ProgressFn};
use crate::error::Result;

/// Rows per tile on each side. 256 query rows × 1024 base rows of f32 keys is 1 MiB: it stays in
/// L2 while it is scanned, and the product is large enough for the GEMM kernel to run near peak.
pub const QUERY_BLOCK: usize = 256;
pub const BASE_TILE: usize = 1024;
/// Square tiles of the graph (rows and columns come from the same set).
/// The graph's block, which is also the checkpoint layout's.
pub const GRAPH_TILE: usize = crate::graph::BLOCK_ROWS;

/// Shared state of one engine call.
pub struct Ctx {
    pub threads: usize,
    pub memory_budget: usize,
    progress: Option<ProgressFn>,
    cancel: Option<Cancel>,
    total: AtomicU64,
    done: AtomicU64,
    pub evals: AtomicU64,
    pub exact_evals: AtomicU64,
}

impl Ctx {
    pub fn new(threads: usize, memory_budget: usize, progress: Option<ProgressFn>) -> Self {
        Ctx {
            threads,
            memory_budget,
            progress,
            cancel: None,
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
            evals: AtomicU64::new(0),
            exact_evals: AtomicU64::new(0),
        }
    }

    /// The caller's cancellation token, looked at where progress is reported.
    pub fn with_cancel(mut self, cancel: Option<Cancel>) -> Self {
        self.cancel = cancel;
        self
    }

    /// True once the caller cancelled: drivers stop taking new tiles, and the call ends with
    /// [`Ctx::check_cancel`]'s error (nothing computed after that is kept or saved).
    pub fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_cancelled)
    }

    /// `Err(Error::Cancelled)` once the caller cancelled.
    pub fn check_cancel(&self) -> Result<()> {
        check_cancel(self.cancel.as_ref())
    }

    pub fn add_total(&self, units: u64) {
        self.total.fetch_add(units, Ordering::Relaxed);
    }

    pub fn advance(&self, units: u64) {
        let done = self.done.fetch_add(units, Ordering::Relaxed) + units;
        if let Some(p) = &self.progress {
            p(done, self.total.load(Ordering::Relaxed));
        }
    }

    pub fn count(&self, evals: u64) {
        self.evals.fetch_add(evals, Ordering::Relaxed);
    }

    pub fn count_exact(&self, evals: u64) {
        self.exact_evals.fetch_add(evals, Ordering::Relaxed);
    }
}

/// Splits `0..n` into consecutive ranges of at most `size`.
pub fn ranges(n: usize, size: usize) -> Vec<(usize, usize)> {
    let size = size.max(1);
    (0..n.div_ceil(size))
        .map(|b| (b * size, ((b + 1) * size).min(n)))
        .collect()
}

/// Splits `0..n` into `parts` ranges whose boundaries are multiples of `align`.
pub fn segments(n: usize, parts: usize, align: usize) -> Vec<(usize, usize)> {
    let tiles = n.div_ceil(align.max(1)).max(1);
    let parts = parts.clamp(1, tiles);
    (0..parts)
        .map(|p| {
            let (a, b) = (tiles * p / parts, tiles * (p + 1) / parts);
            ((a * align).min(n), (b * align).min(n))
        })
        .filter(|(a, b)| a < b)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_without_overlap() {
        for n in [0, 1, 5, 1023, 1024, 1025, 10_000] {
            for parts in [1, 2, 3, 7] {
                let s = segments(n, parts, 256);
                let mut next = 0;
                for (a, b) in &s {
                    assert_eq!(*a, next);
                    assert!(a < b);
                    next = *b;
                }
                assert_eq!(next, n);
            }
        }
    }
}
