//! Range search on the device in two passes over the same tiles: count the pairs whose
//! approximate key may be within the radius, then fill their indices into CSR slots. Membership
//! is decided on the host on exact keys, so the result equals the CPU engine's.
//!
//! Owns the two-pass schedule; the filter threshold comes from the plan's bound (numerics/plan.rs).

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use voisin::{Metric, Result};

use crate::numerics::plan::Plan;
use crate::ops::device_set::DeviceSet;
use crate::ops::tile;
use crate::ops::Budget;
use crate::runtime::context::{dev, Gpu};

/// Candidate indices per query (CSR offsets and indices) whose exact key may be ≤ the query's
/// threshold on approximate keys `thr`.
pub(crate) fn candidates(
    gpu: &Gpu,
    plan: &Plan,
    base: &DeviceSet,
    queries: &DeviceSet,
    thr: &[f32],
    budget: &Budget,
) -> Result<(Vec<usize>, Vec<u32>)> {
    let (nb, nq) = (base.n, queries.n);
    let b_tile = nb.clamp(1, 16384);
    let q_tile = (budget.bytes / (b_tile * 4)).clamp(1, nq.clamp(1, 8192));
    let stream = &gpu.stream;
    let mut tile_buf =
        unsafe { stream.alloc::<f32>(q_tile * b_tile) }.map_err(dev("allocating"))?;
    let thr_dev: CudaSlice<f32> = stream
        .clone_htod(&if thr.is_empty() {
            vec![0.0]
        } else {
            thr.to_vec()
        })
        .map_err(dev("copying thresholds"))?;
    let mut counts: CudaSlice<u64> = stream
        .alloc_zeros(nq.max(1))
        .map_err(dev("allocating counts"))?;
    let cfg = |rows: usize| LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mode = plan.key as i32;
    // Both passes walk the same tiles; `fill` carries the cursor and output of the second.
    let mut pass = |counts: &mut CudaSlice<u64>,
                    fill: Option<(&mut CudaSlice<u64>, &mut CudaSlice<u32>)>|
     -> Result<()> {
        let mut fill = fill;
        for q0 in (0..nq).step_by(q_tile) {
            let q1 = (q0 + q_tile).min(nq);
            let qb = queries.block(q0, q1);
            for b0 in (0..nb).step_by(b_tile) {
                let b1 = (b0 + b_tile).min(nb);
                let bb = base.block(b0, b1);
                let (rows, cols) = (q1 - q0, b1 - b0);
                tile::compute(gpu, plan, &qb, &bb, &mut tile_buf.slice_mut(..), cols)?;
                let (ld, r, c) = (cols as i64, rows as i32, cols as i32);
                let t = thr_dev.slice(q0..q1);
                match fill.as_mut() {
                    None => {
                        let mut cnt = counts.slice_mut(q0..q1);
                        let mut l = stream.launch_builder(gpu.k.range_count()?);
                        l.arg(&tile_buf)
                            .arg(&ld)
                            .arg(&r)
                            .arg(&c)
                            .arg(&mode)
                            .arg(&qb.sqnorm)
                            .arg(&bb.sqnorm)
                            .arg(&t)
                            .arg(&mut cnt);
                        // SAFETY: matches range_count in kernels/finish/range.cu.
                        unsafe { l.launch(cfg(rows)) }.map_err(dev("range_count"))?;
                    }
                    Some((cursor, out)) => {
                        let mut cur = cursor.slice_mut(q0..q1);
                        let off = b0 as u32;
                        let mut l = stream.launch_builder(gpu.k.range_fill()?);
                        l.arg(&tile_buf)
                            .arg(&ld)
                            .arg(&r)
                            .arg(&c)
                            .arg(&mode)
                            .arg(&qb.sqnorm)
                            .arg(&bb.sqnorm)
                            .arg(&t)
                            .arg(&off)
                            .arg(&mut cur)
                            .arg(&mut **out);
                        // SAFETY: matches range_fill in kernels/finish/range.cu; the cursor starts
                        // at each row's offset and the first pass counted each row's slots.
                        unsafe { l.launch(cfg(rows)) }.map_err(dev("range_fill"))?;
                    }
                }
            }
        }
        Ok(())
    };
    if nq == 0 {
        return Ok((vec![0], Vec::new()));
    }
    pass(&mut counts, None)?;
    let hc = gpu.download(&counts.slice(..))?;
    let mut offsets = Vec::with_capacity(nq + 1);
    offsets.push(0usize);
    for &c in &hc[..nq] {
        offsets.push(offsets.last().unwrap() + c as usize);
    }
    let total = *offsets.last().unwrap();
    let starts: Vec<u64> = offsets[..nq].iter().map(|&o| o as u64).collect();
    let mut cursor = stream.clone_htod(&starts).map_err(dev("copying offsets"))?;
    let mut ids = unsafe { stream.alloc::<u32>(total.max(1)) }.map_err(dev("allocating"))?;
    pass(&mut counts, Some((&mut cursor, &mut ids)))?;
    let mut hi = gpu.download(&ids.slice(..))?;
    hi.truncate(total);
    Ok((offsets, hi))
}

/// Per query, the approximate-key threshold that keeps every pair the exact test accepts.
pub(crate) fn thresholds(
    plan: &Plan,
    metric: &Metric,
    radius: f64,
    qnorm: &[f64],
    base_max_norm: f64,
) -> Vec<f32> {
    // Widened so that every pair the exact test (`within` on the reported distance) accepts
    // passes the approximate filter, whatever the rounding of sqrt or powf.
    let rkey = metric.radius_to_key(radius);
    let rkey = rkey + rkey.abs() * 1e-9 + 1e-300;
    qnorm
        .iter()
        .map(|&qn| plan.approx_threshold(rkey, plan.abs_bound(qn, base_max_norm)))
        .collect()
}
