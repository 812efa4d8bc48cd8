//! Searches over data on the device: how a candidate pass runs, decided once (`route`), and
//! one runner per pair method behind one trait (`pairs`); k-NN of a resident base (`knn`), the
//! graph's triangle schedule and shares (`graph`), the pilots that shape both (`pilot`), bases
//! streamed in shards (`stream`), the merge of shards' candidate lists (`shard`), the one range
//! tail (`range`), and the one prove-widen-re-rank step over a [`finish::CandidateSource`]
//! (`finish`) that every k-NN search ends with.
//!
//! A search runs in a [`SearchCtx`]: one GPU, the plan of the metric, the engine's options and its
//! counters. Reads `ops`, `numerics`, `runtime`; never the engine (`engine`) above it.

pub(crate) mod finish;
pub(crate) mod graph;
pub(crate) mod knn;
pub(crate) mod pairs;
pub(crate) mod pilot;
pub(crate) mod range;
pub(crate) mod route;
pub(crate) mod shard;
pub(crate) mod stream;

use std::sync::atomic::{AtomicUsize, Ordering};

use voisin::Result;

use crate::numerics::plan::Numerics;
use crate::ops::{Budget, MIN_BUDGET};
use crate::options::{CudaOptions, Select};
use crate::runtime::context::{is_oom, Gpu};

/// What an engine counts for diagnostics (the results never depend on them).
#[derive(Default)]
pub(crate) struct Counters {
    /// Working sets shrunk after an allocation failure.
    pub shrinks: AtomicUsize,
    /// Base shards streamed.
    pub streamed: AtomicUsize,
    /// k-NN queries and graph rows whose finish ran on the host.
    pub host_finished: AtomicUsize,
    /// k-NN queries and graph rows whose first lists did not prove, widened and finished on
    /// the device (search/knn.rs `widen_on_device`).
    pub widened_on_device: AtomicUsize,
    /// Chunks of a base that k-NN passes filtered with fused tile pairs (search/knn.rs).
    pub pair_chunks: AtomicUsize,
}

impl Counters {
    /// An allocation failure on `gpu` made a working set halve: counted, and noted to the
    /// GPU's probe.
    pub fn shrank(&self, gpu: &Gpu) {
        self.shrinks.fetch_add(1, Ordering::Relaxed);
        gpu.phases()
            .note(format_args!("out of device memory: working set halved"));
    }
}

/// Where a search runs: the GPU (held by the caller), the plan of its metric, the engine's
/// options (selection, fusion, working-set size, cancellation) and counters. Phase timings go to
/// the GPU's probe (`Gpu::phases`).
#[derive(Clone, Copy)]
pub(crate) struct SearchCtx<'a> {
    pub gpu: &'a Gpu,
    pub plan: &'a Numerics,
    pub opts: &'a CudaOptions,
    pub counters: &'a Counters,
}

impl<'a> SearchCtx<'a> {
    /// The working-set budget now: the option's bytes, at most a quarter of the free memory
    /// (measuring it synchronises the context).
    pub fn budget(&self) -> Result<Budget> {
        Budget::measure(self.gpu, self.opts.tile_bytes)
    }

    /// The selection the engine was asked for.
    pub fn select(&self) -> Select {
        self.opts.select
    }

    /// The selection a widening pass uses: never one that refuses the larger list.
    pub fn widen_select(&self) -> Select {
        match self.opts.select {
            Select::Radix => Select::Radix,
            _ => Select::Auto,
        }
    }

    /// `Err(Error::Cancelled)` once the caller set [`CudaOptions::cancel`].
    pub fn check_cancel(&self) -> Result<()> {
        voisin::engine::check_cancel(self.opts.cancel.as_ref())
    }

    /// Runs `f` on the working-set budget, halving it after each out-of-memory failure: the
    /// free-memory estimate can be too optimistic (the inputs' own buffers, fragmentation,
    /// another process), and smaller tiles only cost speed.
    pub fn shrinking<T>(
        &self,
        budget: Budget,
        mut f: impl FnMut(&Budget) -> Result<T>,
    ) -> Result<T> {
        let mut b = budget;
        loop {
            match f(&b) {
                Err(e) if is_oom(&e) && b.bytes > MIN_BUDGET => {
                    self.gpu.release_cache();
                    b.bytes = (b.bytes / 2).max(MIN_BUDGET);
                    self.counters.shrank(self.gpu);
                }
                r => return r,
            }
        }
    }
}
