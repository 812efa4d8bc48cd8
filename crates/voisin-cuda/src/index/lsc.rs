//! List of Superclusters ([Barrientos13] §5.2; docs/design/lc-multi-gpu-superclusters.md): a
//! List of Clusters larger than the device memory it may use, streamed through one GPU.
//!
//! Consecutive clusters are grouped into superclusters whose copies fit a share of the memory;
//! a CPU pre-filter skips the superclusters no query can reach, and the next needed supercluster
//! is copied on the copy stream while the current one is searched on the engine's stream and
//! the host stages the one after (see `GpuLsc::stream`).
//! Each supercluster is an ordinary `GpuLc` over a run of clusters, so its answers are exact;
//! they are merged per query on the host (`spread.rs`).

use std::ops::Range;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaEvent, PinnedHostSlice};
use rayon::prelude::*;
use voisin::engine::check_k;
use voisin::{Error, KnnResult, RangeResult, Result, Stats, VectorSet};
use voisin_index::space::Space;
use voisin_index::{ListOfClusters, MetricIndex, StreamStats, VectorSpace};

use super::lc::{mark, GpuLc, LcHost, STAGING_PADDING};
use super::spread::{add_knn_rows, add_stats, knn_result, order_row, run_bytes, Gathered, Row};
use crate::engine::CudaEngine;
use crate::runtime::context::{dev, is_oom, Gpu};
use crate::runtime::loaded::elapsed_ms;

/// A group of consecutive clusters: centre = its first cluster's centre; radius = the distance
/// of the largest exact key from the centre to any of its items.
#[derive(PartialEq)]
struct Supercluster {
    run: Range<usize>,
    centre: u32,
    radius: f64,
}

/// A List of Clusters (or a run of its clusters) searched by streaming superclusters through
/// one GPU.
pub struct GpuLsc<'a> {
    engine: &'a CudaEngine,
    lc: &'a ListOfClusters<VectorSpace>,
    /// The clusters of `lc` streamed.
    run: Range<usize>,
    /// The superclusters now; cut again with half the share when the device runs out of memory.
    layout: RwLock<Arc<Layout>>,
}

/// Superclusters of at most `share` device bytes each, and the working-set budget of each
/// supercluster's search (fixed within a search: see `Searcher::budget`).
#[derive(PartialEq)]
struct Layout {
    share: usize,
    scs: Vec<Supercluster>,
    budget: usize,
}

/// One supercluster on its way to the device: its searcher and the copy's events.
struct InFlight<'a> {
    sc: usize,
    lc: GpuLc<'a>,
    /// The copy's start and end on the copy stream, until the engine's stream waits for the end
    /// ([`InFlight::arrive`]).
    copy: Option<(CudaEvent, CudaEvent)>,
}

impl InFlight<'_> {
    /// Makes the engine's stream wait for the copy (the search reads it after); returns the
    /// copy's events, for the timing.
    fn arrive(&mut self, gpu: &Gpu) -> Result<(CudaEvent, CudaEvent)> {
        let (_, end) = self.copy.as_ref().expect("a copy arrives once");
        gpu.stream.wait(end).map_err(dev("ordering the streams"))?;
        Ok(self.copy.take().expect("checked above"))
    }
}

impl Drop for InFlight<'_> {
    /// Its device buffers are freed on the engine's stream: a copy that stream never waited for
    /// (a failed search leaves the next supercluster in flight) is waited for here first, or it
    /// could write into memory the pool has handed out again.
    fn drop(&mut self) {
        if let Some((_, end)) = &self.copy {
            let _ = end.synchronize();
        }
    }
}

/// A supercluster staged on the host: its arrays in the device layout, also written into
/// buffer `buf` of [`Pinned`], waiting for its device phase ([`GpuLsc::send`]).
struct Staged {
    sc: usize,
    host: LcHost,
    buf: usize,
}

/// A page-locked buffer the copies go through, and the event after the last copy that reads it
/// (it is refilled only once that copy is over).
#[derive(Default)]
struct Buffer {
    bytes: Option<PinnedHostSlice<u8>>,
    done: Option<CudaEvent>,
}

impl Drop for Buffer {
    /// Freed only once its last copy is over (a failed search may leave one in flight).
    fn drop(&mut self) {
        if let Some(e) = &self.done {
            let _ = e.synchronize();
        }
    }
}

/// The two page-locked buffers, used in turn: the newest copy reads one while the next
/// supercluster is staged into the other.
struct Pinned {
    ctx: Arc<CudaContext>,
    /// Bytes a buffer is allocated with: enough for the layout's largest supercluster, so that
    /// no buffer is allocated (or freed) once searches run; a page-locked allocation may
    /// synchronise the device (the CUDA Programming Guide's implicit synchronisation), which
    /// would stop the copy overlapping the search.
    size: usize,
    bufs: [Buffer; 2],
    /// The buffer the newest copy reads; the other is the one to stage into.
    sent: usize,
    /// Host intervals spent staging (packing and filling, not waiting for a copy to end).
    staging: Vec<(Instant, Instant)>,
}

impl Pinned {
    /// No buffer allocated yet; the first staging goes to buffer 0.
    fn new(ctx: Arc<CudaContext>, size: usize) -> Self {
        Pinned {
            ctx,
            size,
            bufs: Default::default(),
            sent: 1,
            staging: Vec::new(),
        }
    }

    /// Stages supercluster `s` of `layout` (clusters of `lc`) into the buffer the newest copy
    /// does not read: packs it, waits until that buffer's last copy is over, and fills it.
    /// Host work only, without the engine lock, so that it runs beside a search.
    fn stage(
        &mut self,
        lc: &ListOfClusters<VectorSpace>,
        layout: &Layout,
        s: usize,
    ) -> Result<Staged> {
        let packing = Instant::now();
        let host = LcHost::of(lc, layout.scs[s].run.clone())?;
        self.staging.push((packing, Instant::now()));
        let at = self.sent ^ 1;
        let b = &mut self.bufs[at];
        if let Some(done) = &b.done {
            done.synchronize().map_err(dev("waiting for a copy"))?;
        }
        let filling = Instant::now();
        let need = host.staged_bytes();
        if b.bytes.as_ref().is_none_or(|p| p.len() < need) {
            b.bytes = None;
            // SAFETY: every byte a copy reads is written by `LcHost::stage` first.
            let p = unsafe { self.ctx.alloc_pinned::<u8>(need.max(self.size)) }
                .map_err(dev("allocating page-locked memory"))?;
            b.bytes = Some(p);
        }
        let p = b.bytes.as_mut().expect("allocated above");
        host.stage(p.as_mut_slice().map_err(dev("reading pinned memory"))?);
        self.staging.push((filling, Instant::now()));
        Ok(Staged {
            sc: s,
            host,
            buf: at,
        })
    }
}

impl<'a> GpuLsc<'a> {
    /// Groups `lc`'s clusters into superclusters of at most `share` device bytes each (at least
    /// one cluster each); nothing is copied yet.
    pub fn new(
        engine: &'a CudaEngine,
        lc: &'a ListOfClusters<VectorSpace>,
        share: usize,
    ) -> Result<Self> {
        Self::with_clusters(engine, lc, 0..lc.clusters().len(), share)
    }

    /// [`GpuLsc::new`] over clusters `run` of `lc` alone (a part of a spread index).
    pub fn with_clusters(
        engine: &'a CudaEngine,
        lc: &'a ListOfClusters<VectorSpace>,
        run: Range<usize>,
        share: usize,
    ) -> Result<Self> {
        GpuLc::check(lc)?;
        if run.end > lc.clusters().len() || run.start > run.end {
            return Err(Error::invalid(format!(
                "clusters {run:?} are not within the index's {}",
                lc.clusters().len()
            )));
        }
        let layout = RwLock::new(Arc::new(Self::layout(lc, run.clone(), share)));
        Ok(GpuLsc {
            engine,
            lc,
            run,
            layout,
        })
    }

    /// Clusters `run` of `lc` grouped into superclusters of at most `share` device bytes each
    /// (at least one cluster each).
    fn layout(lc: &ListOfClusters<VectorSpace>, run: Range<usize>, share: usize) -> Layout {
        let mut runs = Vec::new();
        let mut start = run.start;
        while start < run.end {
            let mut end = start + 1;
            while end < run.end && run_bytes(lc, start..end + 1) <= share {
                end += 1;
            }
            runs.push(start..end);
            start = end;
        }
        let space = lc.space();
        let (clusters, members, _) = lc.parts();
        let scs = runs
            .into_iter()
            .map(|run| {
                let centre = clusters[run.start].center;
                let c = space.item(centre as usize);
                let first = clusters[run.start].start;
                let last = clusters[run.end - 1].end;
                let ids = clusters[run.clone()]
                    .par_iter()
                    .map(|cl| cl.center)
                    .chain(members[first..last].par_iter().copied());
                let key = ids
                    .map(|x| space.key(c, space.item(x as usize)))
                    .reduce(|| 0.0, f64::max);
                Supercluster {
                    run,
                    centre,
                    radius: space.to_distance(key),
                }
            })
            .collect();
        // A search's slots, and the answers waiting on the device, each take about a share.
        Layout {
            share,
            scs,
            budget: share.max(crate::ops::MIN_BUDGET),
        }
    }

    /// The layout now (a search keeps the one it started with).
    fn current(&self) -> Arc<Layout> {
        now(&self.layout)
    }

    /// Runs `search` on the current layout; when the device runs out of memory, cuts the
    /// superclusters again with half the share (and so half the working budget, down to
    /// [`crate::ops::MIN_BUDGET`]) and starts over (see [`shrinking`]). Answers do not depend
    /// on the layout: it only changes the work.
    fn shrinking<T>(
        &self,
        search: impl FnMut(&Layout) -> Result<(T, StreamStats)>,
    ) -> Result<(T, StreamStats)> {
        let smaller = |now: &Layout| {
            let s = Self::layout(self.lc, self.run.clone(), now.share / 2);
            (s.scs != now.scs || s.budget != now.budget).then_some(s)
        };
        let ((r, mut st), shrinks) = shrinking(&self.layout, smaller, search)?;
        st.shrinks += shrinks;
        Ok((r, st))
    }

    /// Number of superclusters.
    pub fn superclusters(&self) -> usize {
        self.current().scs.len()
    }

    /// Every indexed item within `radius` of each query, rows sorted by (distance, index), and
    /// what streaming did.
    pub fn range(&self, queries: &VectorSet, radius: f64) -> Result<(RangeResult, StreamStats)> {
        self.lc.space().metric().check_radius(radius)?;
        let t = Instant::now();
        let q = self.query_rows(queries)?;
        let nq = queries.len();
        self.shrinking(|layout| {
            let mut got = Gathered::new(nq);
            let streamed = self.stream(layout, &q, &mut vec![radius; nq], |lc, qids, sub, _| {
                let r = lc.range(sub, radius)?;
                got.add(qids, &r);
                Ok(r.indices.len())
            })?;
            Ok((got.finish(self.lc.space(), &q, t), streamed))
        })
    }

    /// The k nearest indexed items of each query (k capped at the number of items), ties by
    /// the smaller index, and what streaming did. Superclusters are searched in order, each
    /// by the queries whose k-th distance so far does not rule it out.
    pub fn knn(&self, queries: &VectorSet, k: usize) -> Result<(KnnResult, StreamStats)> {
        check_k(k)?;
        let t = Instant::now();
        let q = self.query_rows(queries)?;
        let nq = queries.len();
        let space = self.lc.space();
        let d = space.dim();
        let items: usize = self.current().scs.iter().map(|s| self.items(s)).sum();
        let k = k.min(items);
        self.shrinking(|layout| {
            let mut rows: Vec<Row> = vec![Vec::new(); nq];
            // A query's bound: the exact distance of its k-th answer so far (infinite before k).
            let mut bound = vec![f64::INFINITY; nq];
            let mut stats = Stats::default();
            let streamed = if k == 0 {
                StreamStats::default()
            } else {
                self.stream(layout, &q, &mut bound, |lc, qids, sub, bound| {
                    let r = lc.knn(sub, k)?;
                    add_knn_rows(&mut rows, qids, &r);
                    add_stats(&mut stats, &r.stats);
                    let mut mine: Vec<(usize, Row)> = qids
                        .iter()
                        .map(|&i| (i, std::mem::take(&mut rows[i])))
                        .collect();
                    let kth: Vec<f64> = mine
                        .par_iter_mut()
                        .map(|(i, row)| {
                            let query = &q[*i * d..(*i + 1) * d];
                            order_row(space, query, row, Some(k));
                            match row.get(k - 1) {
                                Some(&(_, id)) => {
                                    space.to_distance(space.key(query, space.item(id as usize)))
                                }
                                None => f64::INFINITY,
                            }
                        })
                        .collect();
                    for ((i, row), b) in mine.into_iter().zip(kth) {
                        rows[i] = row;
                        bound[i] = b;
                    }
                    Ok(r.indices.len())
                })?
            };
            stats.compute = t.elapsed();
            Ok((knn_result(rows, k, stats)?, streamed))
        })
    }

    /// Items of a supercluster (centres and members).
    fn items(&self, s: &Supercluster) -> usize {
        let c = &self.lc.clusters()[s.run.clone()];
        c.len() + c.iter().map(|c| c.end - c.start).sum::<usize>()
    }

    fn query_rows(&self, queries: &VectorSet) -> Result<Vec<f32>> {
        let d = self.lc.space().dim();
        if queries.dim() != d {
            return Err(Error::invalid(format!(
                "queries have dimension {} but the index holds vectors of dimension {d}",
                queries.dim()
            )));
        }
        queries.require_f32_exact("metric indexes")?;
        Ok(queries.rows_f32(0, queries.len()).into_owned())
    }

    /// Streams the superclusters some query reaches — query i reaches a supercluster unless its
    /// distance to the centre minus the radius exceeds `bound(i)` beyond the index's rounding
    /// allowance — and calls `search` with each copy, the ids of the queries that reach it
    /// (ascending) and their rows, in chunks; `search` returns how many answers it found.
    /// `bound` is asked again after every search (k-NN bounds shrink).
    ///
    /// A pipeline of three superclusters: while one is searched (on the engine's stream), the
    /// next one's copy runs on the copy stream and the host stages the one after (packs it
    /// and, once the current one's copy is over, fills the page-locked buffer that copy read;
    /// only the quick device phase, [`GpuLsc::send`], takes the engine lock). The next one is
    /// the first after the current one that some query reaches under the bounds known before
    /// the current search, the one after it likewise, and each is searched by the queries that
    /// still reach it after the search before it. Answers do not depend on this schedule.
    fn stream(
        &self,
        layout: &Layout,
        q: &[f32],
        bound: &mut [f64],
        mut search: impl FnMut(&GpuLc<'a>, &[usize], &VectorSet, &mut [f64]) -> Result<usize>,
    ) -> Result<StreamStats> {
        let space = self.lc.space();
        let d = space.dim();
        let nq = q.len() / d;
        let mut st = StreamStats {
            superclusters: layout.scs.len(),
            ..Default::default()
        };
        if nq == 0 {
            return Ok(st);
        }
        // Distances from every query to a supercluster's centre, computed when first needed.
        let mut centre_dist: Vec<Vec<f64>> = vec![Vec::new(); layout.scs.len()];
        let reaching = |centre_dist: &mut Vec<Vec<f64>>, bound: &[f64], s: usize| -> Vec<usize> {
            let sc = &layout.scs[s];
            if centre_dist[s].is_empty() {
                let c = space.item(sc.centre as usize);
                centre_dist[s] = q
                    .par_chunks(d)
                    .map(|x| space.to_distance(space.key(x, c)))
                    .collect();
            }
            let dq = &centre_dist[s];
            (0..nq)
                .into_par_iter()
                .filter(|&i| !space.beyond(dq[i] - sc.radius, bound[i], dq[i] + sc.radius))
                .collect()
        };
        let next_after = |centre_dist: &mut Vec<Vec<f64>>, bound: &[f64], from: usize| {
            (from..layout.scs.len()).find(|&s| !reaching(centre_dist, bound, s).is_empty())
        };
        let (origin, ctx) = {
            let gpu = self.engine.lock()?;
            (mark(&gpu.stream)?, gpu.ctx.clone())
        };
        let host_origin = Instant::now();
        // Host intervals of the searches (from a supercluster's first chunk to its last).
        let mut searching = Vec::new();
        let largest = layout.scs.iter().map(|s| run_bytes(self.lc, s.run.clone()));
        let mut pinned = Pinned::new(ctx, largest.max().unwrap_or(0) + STAGING_PADDING);
        let (lc, mut copies, mut searches) = (self.lc, Vec::new(), Vec::new());
        // Answers per query (twice the largest rate seen), to size the chunks of queries.
        let mut per_query = 64usize;
        // The pipeline fills: the first supercluster is copied, the next staged meanwhile.
        let mut cur = match next_after(&mut centre_dist, bound, 0) {
            Some(s) => Some(self.send(layout, pinned.stage(lc, layout, s)?, &mut pinned)?),
            None => None,
        };
        let mut staged = match cur
            .as_ref()
            .and_then(|c| next_after(&mut centre_dist, bound, c.sc + 1))
        {
            Some(s) => Some(pinned.stage(lc, layout, s)?),
            None => None,
        };
        while let Some(mut now) = cur.take() {
            // The copy lands before the search reads it.
            copies.push(now.arrive(&*self.engine.lock()?)?);
            // The staged supercluster was picked under the bounds before the last search. If
            // those that search left rule it out for every query it is skipped (its staging
            // wasted, its buffer free again) and the first one after it that some query still
            // reaches is staged now, in the open. Either way the one copied next is the first
            // after `now` that some query reaches under the bounds known now.
            if let Some(x) = staged.take_if(|x| reaching(&mut centre_dist, bound, x.sc).is_empty())
            {
                staged = match next_after(&mut centre_dist, bound, x.sc + 1) {
                    Some(s) => Some(pinned.stage(lc, layout, s)?),
                    None => None,
                };
            }
            // The one after the staged one, picked under the bounds known now, is staged beside
            // the search (in the buffer `now`'s copy read: staging waits for that copy's end).
            let after = staged
                .as_ref()
                .and_then(|x| next_after(&mut centre_dist, bound, x.sc + 1));
            let qids = reaching(&mut centre_dist, bound, now.sc);
            // The staged one's device phase alone (allocations, queued copies), last before the
            // search, so that the host does as little as it can between the copy's start and
            // the search's (the pre-filter above scans every query).
            cur = match staged.take() {
                Some(x) => Some(self.send(layout, x, &mut pinned)?),
                None => None,
            };
            let mut staging = None;
            let job = after.map(|s| (s, &mut pinned, &mut staging));
            let searched = rayon::in_place_scope(|scope| -> Result<()> {
                if let Some((s, pinned, staging)) = job {
                    scope.spawn(move |_| *staging = Some(pinned.stage(lc, layout, s)));
                }
                // The answers of a search wait on the device until it ends: queries go in
                // chunks whose answers, at the rate seen so far, fit the budget.
                let began = Instant::now();
                let mut at = 0;
                while at < qids.len() {
                    let take = (layout.budget / (8 * per_query))
                        .max(64)
                        .min(qids.len() - at);
                    let ids = &qids[at..at + take];
                    let rows: Vec<f32> = ids
                        .iter()
                        .flat_map(|&i| q[i * d..(i + 1) * d].iter().copied())
                        .collect();
                    let sub = VectorSet::from_f32(ids.len(), d, rows)?;
                    // Marks around the search call alone, queued right before its first upload:
                    // the engine's stream counts as searching from then to the answers'
                    // download, not while the host builds a chunk or merges answers.
                    let start = mark(&self.engine.lock()?.stream)?;
                    let found = search(&now.lc, ids, &sub, bound)?;
                    searches.push((start, mark(&self.engine.lock()?.stream)?));
                    per_query = per_query.max(2 * found.div_ceil(take));
                    at += take;
                }
                if !qids.is_empty() {
                    searching.push((began, Instant::now()));
                }
                Ok(())
            });
            // The search's error first: out of memory there makes the caller shrink the layout.
            searched?;
            staged = staging.transpose()?;
        }
        st.copied = copies.len();
        // Intervals in seconds from `origin`.
        let at = |e: &CudaEvent| -> Result<f64> {
            Ok(elapsed_ms(&origin, e).map_err(dev("timing the streams"))? as f64 / 1e3)
        };
        let spans = |v: &[(CudaEvent, CudaEvent)]| -> Result<Vec<(f64, f64)>> {
            v.iter().map(|(a, b)| Ok((at(a)?, at(b)?))).collect()
        };
        (st.copy_s, st.overlapped_s) = covered(&spans(&copies)?, &spans(&searches)?);
        let host = |v: &[(Instant, Instant)]| -> Vec<(f64, f64)> {
            let s = |t: &Instant| t.duration_since(host_origin).as_secs_f64();
            v.iter().map(|(a, b)| (s(a), s(b))).collect()
        };
        (st.stage_s, st.stage_hidden_s) = covered(&host(&pinned.staging), &host(&searching));
        Ok(st)
    }

    /// The device phase of a staged supercluster: allocates its buffers, queues its copies on
    /// the copy stream from the page-locked buffer it was staged into (the host returns once
    /// they are queued) and makes its searcher. The only phase of a copy that takes the engine
    /// lock, and a quick one (no host packing), so that the copy is in flight before the search
    /// that follows starts.
    fn send(&self, layout: &Layout, x: Staged, pinned: &mut Pinned) -> Result<InFlight<'a>> {
        let gpu = self.engine.lock()?;
        let copy = gpu.copy_stream();
        let b = &mut pinned.bufs[x.buf];
        let bytes = b.bytes.as_ref().expect("staged into");
        let queued = x.host.upload_behind(
            &gpu,
            bytes.as_slice().map_err(dev("reading pinned memory"))?,
        );
        // After every copy queued (all of them, or those queued before a failure).
        let end = mark(copy)?;
        b.done = Some(mark(copy)?);
        pinned.sent = x.buf;
        let made = queued.and_then(|(start, lc_dev)| {
            let budget = Some(layout.budget);
            let lc = GpuLc::on_device(self.engine, &gpu, self.lc, &x.host, lc_dev, budget)?;
            Ok((start, lc))
        });
        match made {
            Ok((start, lc)) => Ok(InFlight {
                sc: x.sc,
                lc,
                copy: Some((start, end)),
            }),
            Err(e) => {
                // The failure dropped device buffers (freed on the engine's stream) that a
                // queued copy may still write: it ends before anything is allocated again.
                let _ = end.synchronize();
                Err(e)
            }
        }
    }
}

/// Seconds covered by the intervals `a`, and of those the seconds that intervals `b` cover too
/// (the intervals of one list do not overlap one another: copies follow one another on the
/// copy stream, searches on the engine's stream or on the calling thread, stagings on the
/// host one after the other).
fn covered(a: &[(f64, f64)], b: &[(f64, f64)]) -> (f64, f64) {
    let mut total = 0.0;
    let mut both = 0.0;
    for &(a0, a1) in a {
        total += (a1 - a0).max(0.0);
        for &(b0, b1) in b {
            both += (a1.min(b1) - a0.max(b0)).max(0.0);
        }
    }
    (total, both)
}

/// The layout in `slot` now (a search keeps the one it started with).
fn now<L>(slot: &RwLock<Arc<L>>) -> Arc<L> {
    Arc::clone(&slot.read().unwrap_or_else(|p| p.into_inner()))
}

/// Runs `search` on the layout in `slot`; when it fails with [`Error::OutOfMemory`], puts
/// `smaller(layout)` in its place (kept for later searches) and starts over, until `smaller`
/// has nothing smaller (then the error is returned). Returns the answer and how many times the
/// layout shrank.
fn shrinking<L, T>(
    slot: &RwLock<Arc<L>>,
    smaller: impl Fn(&L) -> Option<L>,
    mut search: impl FnMut(&L) -> Result<T>,
) -> Result<(T, usize)> {
    let mut shrinks = 0;
    loop {
        let now = now(slot);
        match search(&now) {
            Ok(r) => return Ok((r, shrinks)),
            Err(e) if is_oom(&e) => match smaller(&now) {
                Some(s) => {
                    *slot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(s);
                    shrinks += 1;
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search that runs out of memory above `fits` bytes.
    fn search(fits: usize, tried: &mut Vec<usize>) -> impl FnMut(&usize) -> Result<usize> + '_ {
        move |&share| {
            tried.push(share);
            if share > fits {
                Err(Error::OutOfMemory(format!("{share} bytes")))
            } else {
                Ok(share)
            }
        }
    }

    fn half(floor: usize) -> impl Fn(&usize) -> Option<usize> {
        move |&s| (s / 2 >= floor).then_some(s / 2)
    }

    #[test]
    fn out_of_memory_halves_the_share_until_it_fits_and_keeps_it() {
        let slot = RwLock::new(Arc::new(64));
        let mut tried = Vec::new();
        let got = shrinking(&slot, half(1), search(10, &mut tried)).unwrap();
        assert_eq!(got, (8, 3));
        assert_eq!(tried, [64, 32, 16, 8]);
        assert_eq!(**slot.read().unwrap(), 8, "the smaller layout is kept");
        let mut tried = Vec::new();
        assert_eq!(
            shrinking(&slot, half(1), search(10, &mut tried)).unwrap(),
            (8, 0)
        );
        assert_eq!(tried, [8]);
    }

    #[test]
    fn covered_counts_each_interval_and_the_part_the_others_cover() {
        let copies = [(0.0, 1.0), (1.0, 3.0), (5.0, 6.0)];
        let searches = [(0.5, 2.0), (2.5, 2.75), (4.0, 4.5)];
        assert_eq!(covered(&copies, &searches), (4.0, 1.75));
        assert_eq!(covered(&copies, &[]), (4.0, 0.0));
        assert_eq!(covered(&[], &searches), (0.0, 0.0));
    }

    #[test]
    fn out_of_memory_at_the_smallest_layout_and_other_errors_are_returned() {
        let slot = RwLock::new(Arc::new(64));
        let mut tried = Vec::new();
        let e = shrinking(&slot, half(16), search(10, &mut tried)).unwrap_err();
        assert!(is_oom(&e), "{e:?}");
        assert_eq!(tried, [64, 32, 16]);
        let slot = RwLock::new(Arc::new(64));
        let mut calls = 0;
        let e = shrinking(&slot, half(1), |_: &usize| -> Result<()> {
            calls += 1;
            Err(Error::invalid("bad query"))
        })
        .unwrap_err();
        assert!(!is_oom(&e), "{e:?}");
        assert_eq!((calls, **slot.read().unwrap()), (1, 64));
    }
}
