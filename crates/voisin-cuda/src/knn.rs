//! k-NN search: tiles of queries against tiles of the base, candidates selected on the device,
//! then proved and re-ranked exactly on the host.
//!
//! Owns the query/base tiling of the search and the prove-widen-re-rank step that graph.rs
//! shares. The device returns, per query, some `K ≥ k` smallest approximate keys. Every item left
//! out has an approximate key at least the largest one kept (the *barrier*), so when
//! `lower(barrier) > upper(k-th kept)` no left-out item can be among the k nearest, whatever the
//! tie-break; otherwise that query is redone with a wider list. Survivors are re-ranked on exact
//! f64 keys with ties broken by index, which makes the result identical to the CPU engine's.

use std::time::Instant;

use cudarc::driver::{CudaSlice, CudaView};
use rayon::prelude::*;
use voisin::{Result, Stats};

use crate::context::{dev, Gpu};
use crate::prepare::{Plan, Rows};
use crate::select::{self, list_size, Select, TileAt};
use crate::tile::{self, Block};

/// Transformed rows resident on the device.
pub(crate) struct DeviceRows {
    pub rows: CudaSlice<f32>,
    pub sqnorm: CudaSlice<f32>,
    pub n: usize,
}

impl DeviceRows {
    pub fn upload(gpu: &Gpu, r: &Rows) -> Result<Self> {
        // cudarc refuses zero-length copies on some paths; keep one dummy value.
        let pad = |v: &[f32]| if v.is_empty() { vec![0.0] } else { v.to_vec() };
        Ok(DeviceRows {
            rows: gpu
                .stream
                .clone_htod(&pad(&r.values))
                .map_err(dev("copying rows to the device"))?,
            sqnorm: gpu
                .stream
                .clone_htod(&pad(&r.sqnorm))
                .map_err(dev("copying norms to the device"))?,
            n: r.n,
        })
    }

    /// Rows `a..b` as a tile operand.
    pub fn block(&self, a: usize, b: usize, dim: usize) -> Block<'_> {
        Block {
            rows: self.rows.slice(a * dim..(b * dim).max(a * dim + 1)),
            sqnorm: self.sqnorm.slice(a..b.max(a + 1)),
            n: b - a,
        }
    }
}

/// What the device selected for one query.
pub(crate) struct Raw {
    /// (approximate key, index), any order; no empty slots.
    pub cands: Vec<(f32, u32)>,
    /// Every eligible item is among `cands`: nothing to prove.
    pub complete: bool,
}

/// Working-set limits of one pass.
pub(crate) struct Budget {
    /// Bytes for distance tiles and candidate lists.
    pub bytes: usize,
}

/// Candidates for every row of `queries` against the whole base (self pairs not excluded).
pub(crate) fn candidates(
    gpu: &Gpu,
    plan: &Plan,
    base: &DeviceRows,
    queries: &Rows,
    kp: usize,
    sel: Select,
    budget: &Budget,
) -> Result<Vec<Raw>> {
    let (d, nb, nq) = (plan.dim, base.n, queries.n);
    let mut out = Vec::with_capacity(nq);
    if nq == 0 {
        return Ok(out);
    }
    let mode = sel.resolve(kp)?;
    let kc = kp.min(nb);
    let (q_tile, b_tile) = match mode {
        Select::Radix => {
            let per_query = nb * 4 + kc * 8;
            ((budget.bytes / per_query).clamp(1, nq), nb)
        }
        _ => {
            let b_tile = nb.min(16384);
            let per_query = b_tile * 4 + kp * 8;
            ((budget.bytes / per_query).clamp(1, nq.min(8192)), b_tile)
        }
    };
    let qdev = DeviceRows::upload(gpu, queries)?;
    let stream = &gpu.stream;
    let alloc = |n: usize| unsafe { stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"));
    let mut tile_buf = alloc(q_tile * b_tile)?;
    let list_len = q_tile * if mode == Select::Radix { kc } else { kp };
    let mut lv = alloc(list_len)?;
    let mut li = unsafe { stream.alloc::<u32>(list_len.max(1)) }.map_err(dev("allocating"))?;

    for q0 in (0..nq).step_by(q_tile) {
        let q1 = (q0 + q_tile).min(nq);
        let qn = q1 - q0;
        let qb = qdev.block(q0, q1, d);
        if mode == Select::Block {
            let len = qn * kp;
            select::fill_lists(gpu, &mut lv.slice_mut(..len), &mut li.slice_mut(..len))?;
        }
        for b0 in (0..nb).step_by(b_tile) {
            let b1 = (b0 + b_tile).min(nb);
            let bb = base.block(b0, b1, d);
            tile::compute(gpu, plan, &qb, &bb, &mut tile_buf.slice_mut(..), b1 - b0)?;
            let at = TileAt {
                rows: qn,
                cols: b1 - b0,
                ld: b1 - b0,
                key: plan.key,
                row_off: q0 as u32,
                col_off: b0 as u32,
                exclude_self: false,
            };
            let t: CudaView<'_, f32> = tile_buf.slice(..);
            let len = qn * if mode == Select::Radix { kc } else { kp };
            let (mut v, mut i) = (lv.slice_mut(..len), li.slice_mut(..len));
            if mode == Select::Radix {
                select::radix(gpu, &t, at, &qb.sqnorm, &bb.sqnorm, kc, &mut v, &mut i)?;
            } else {
                select::block(gpu, &t, at, &qb.sqnorm, &bb.sqnorm, &mut v, &mut i, kp)?;
            }
        }
        let width = if mode == Select::Radix { kc } else { kp };
        let len = qn * width;
        let hv = stream
            .clone_dtoh(&lv.slice(..len))
            .map_err(dev("copying candidates back"))?;
        let hi = stream
            .clone_dtoh(&li.slice(..len))
            .map_err(dev("copying candidates back"))?;
        for r in 0..qn {
            let cands: Vec<(f32, u32)> = (r * width..(r + 1) * width)
                .filter(|&j| hi[j] != u32::MAX)
                .map(|j| (hv[j], hi[j]))
                .collect();
            // Counted, not inferred from kc: a key that overflowed to +inf never passes the
            // block kernel's threshold, and such a list must not be taken as complete.
            out.push(Raw {
                complete: cands.len() >= nb,
                cands,
            });
        }
    }
    Ok(out)
}

/// Proves, widens and re-ranks.
///
/// `raws[q]` are the device's candidates for query `q`; `self_of(q)` names an index to drop
/// (graph); `n_elig` is the number of items a query may return; `kp` the list size used;
/// `redo(ids, kp)` recomputes candidates for some queries with a larger list; `exact(q, i)` is
/// the exact key. Returns per query its `k` nearest as (exact key, index), sorted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    plan: &Plan,
    qnorm: &[f64],
    base_max_norm: f64,
    k: usize,
    mut raws: Vec<Raw>,
    self_of: &(dyn Fn(usize) -> Option<u32> + Sync),
    n_total: usize,
    mut kp: usize,
    redo: &mut dyn FnMut(&[usize], usize) -> Result<Vec<Raw>>,
    exact: &(dyn Fn(usize, u32) -> f64 + Sync),
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let nq = raws.len();
    let abs: Vec<f64> = (0..nq)
        .map(|q| plan.abs_bound(qnorm[q], base_max_norm))
        .collect();
    // Sort each query's candidates, drop its self pair, and see whether the bound proves them.
    let check = |q: usize, raw: &mut Raw| -> bool {
        raw.cands
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let barrier = raw.cands.last().map(|c| c.0);
        if let Some(s) = self_of(q) {
            raw.cands.retain(|c| c.1 != s);
        }
        if raw.complete {
            return true;
        }
        match barrier {
            Some(b) if raw.cands.len() >= k => {
                plan.lower(b, abs[q]) > plan.upper(raw.cands[k - 1].0, abs[q])
            }
            _ => false,
        }
    };
    let mut failing: Vec<usize> = raws
        .par_iter_mut()
        .enumerate()
        .filter_map(|(q, r)| (!check(q, r)).then_some(q))
        .collect();
    if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
        eprintln!("[voisin-cuda] {} of {nq} queries need a wider list", failing.len());
    }
    let n_pow = n_total.next_power_of_two().max(1);
    while !failing.is_empty() {
        // Widen fourfold (or to everything): each retry costs a pass over the base for those
        // queries only, and ties wide enough to need it are rare outside adversarial data.
        kp = (kp * 4).min(n_pow);
        let again = redo(&failing, kp)?;
        let mut still = Vec::new();
        for (q, mut raw) in failing.iter().copied().zip(again) {
            if !check(q, &mut raw) {
                still.push(q);
            }
            raws[q] = raw;
        }
        if !still.is_empty() && kp >= n_pow {
            return Err(voisin::Error::device(
                "cuda: candidate widening did not converge (internal error)",
            ));
        }
        failing = still;
    }
    let t = Instant::now();
    let rows: Vec<(Vec<(f64, u32)>, u64)> = raws
        .par_iter()
        .enumerate()
        .map(|(q, raw)| {
            let kk = k.min(raw.cands.len());
            let thr = if kk == 0 {
                f64::NEG_INFINITY
            } else {
                plan.upper(raw.cands[kk - 1].0, abs[q])
            };
            let mut row: Vec<(f64, u32)> = raw
                .cands
                .iter()
                .take_while(|c| plan.lower(c.0, abs[q]) <= thr)
                .map(|&(_, i)| (exact(q, i), i))
                .collect();
            let evals = row.len() as u64;
            row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            row.truncate(k);
            (row, evals)
        })
        .collect();
    stats.select += t.elapsed();
    stats.exact_evals += rows.iter().map(|r| r.1).sum::<u64>();
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// The first list size to try for k.
pub(crate) fn first_list(k: usize) -> usize {
    list_size(k)
}
