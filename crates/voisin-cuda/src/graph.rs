//! k-NN graph (self-join) on the device with the symmetric tiling of seed 000 §3.2: only tiles
//! (I, J) with I ≤ J are computed; each gives row candidates to the items of I and, through a
//! transposed copy, column candidates to the items of J. Self pairs are skipped in the kernel.
//!
//! Owns the triangle schedule; proving and re-ranking are knn.rs's `finish`.

use cudarc::driver::CudaView;
use rayon::prelude::*;
use voisin::Result;

use crate::context::{dev, Gpu};
use crate::device_set::DeviceSet;
use crate::knn::{Budget, Raw};
use crate::prepare::Plan;
use crate::select::{self, TileAt};
use crate::tile;

/// Which tile pairs (I, J), I ≤ J, of the triangle a caller computes.
pub type TileOwner<'a> = dyn Fn(usize, usize) -> bool + Sync + 'a;

/// The tile edge of the symmetric schedule for `n` items and lists of `kp` under `budget`:
/// square tiles within the budget, one buffer or two when the column candidates go through a
/// transpose. Large tiles mean fewer, larger sgemm calls and launches (16384² is 1 GiB).
pub(crate) fn tile_edge(n: usize, kp: usize, budget: &Budget) -> usize {
    let bufs = if kp == select::COLS_KP { 1 } else { 2 };
    let mut t = 16384usize.min(n.max(1));
    while t > 64 && bufs * t * t * 4 > budget.bytes {
        t /= 2;
    }
    t
}

/// Block-select candidates (`kp` per item, self excluded) for every item of `data`, from the
/// tile pairs (I, J) of edge `t` with I ≤ J that `owns` accepts. An item's list covers the items
/// of the owned pairs that hold it, and is complete when it holds all of them, so the lists of
/// callers that split the triangle between them merge with `shard::merge`.
pub(crate) fn symmetric_candidates(
    gpu: &Gpu,
    plan: &Plan,
    data: &DeviceSet,
    kp: usize,
    t: usize,
    owns: &TileOwner<'_>,
) -> Result<Vec<Raw>> {
    let (n, d) = (data.n, plan.dim);
    let nt = n.div_ceil(t);
    let size = |it: usize| ((it + 1) * t).min(n) - it * t;
    // How many other items each tile row's lists see, for completeness.
    let seen: Vec<usize> = (0..nt)
        .map(|it| {
            (0..nt)
                .filter(|&jt| owns(it.min(jt), it.max(jt)))
                .map(|jt| size(jt) - usize::from(jt == it))
                .sum()
        })
        .collect();
    let stream = &gpu.stream;
    let alloc = |len: usize| unsafe { stream.alloc::<f32>(len.max(1)) }.map_err(dev("allocating"));
    let mut lv = alloc(n * kp)?;
    let mut li = unsafe { stream.alloc::<u32>((n * kp).max(1)) }.map_err(dev("allocating"))?;
    select::fill_lists(gpu, &mut lv.slice_mut(..), &mut li.slice_mut(..))?;
    let mut tile_buf = alloc(t * t)?;
    let mut trans = alloc(if kp == select::COLS_KP { 1 } else { t * t })?;
    // With VOISIN_CUDA_TRACE, the first row of tiles is timed step by step (synchronising
    // after each kernel) to split the graph's time between sgemm, selection and transpose.
    let probe = std::env::var_os("VOISIN_CUDA_TRACE").is_some();
    let mut spent = [0f64; 4];
    let mut mark = |it: usize, slot: usize, since: &mut std::time::Instant| -> Result<()> {
        if probe && it == 0 {
            stream.synchronize().map_err(dev("synchronising"))?;
            spent[slot] += since.elapsed().as_secs_f64();
            *since = std::time::Instant::now();
        }
        Ok(())
    };
    for it in 0..nt {
        let (i0, i1) = (it * t, ((it + 1) * t).min(n));
        let bi = data.block(i0, i1, d);
        for jt in (it..nt).filter(|&jt| owns(it, jt)) {
            let (j0, j1) = (jt * t, ((jt + 1) * t).min(n));
            let bj = data.block(j0, j1, d);
            let (ni, nj) = (i1 - i0, j1 - j0);
            let mut since = std::time::Instant::now();
            mark(it, 3, &mut since)?;
            tile::compute(gpu, plan, &bi, &bj, &mut tile_buf.slice_mut(..), nj)?;
            mark(it, 0, &mut since)?;
            let rows_at = TileAt {
                rows: ni,
                cols: nj,
                ld: nj,
                key: plan.key,
                row_off: i0 as u32,
                col_off: j0 as u32,
                exclude_self: true,
            };
            let view: CudaView<'_, f32> = tile_buf.slice(..);
            select::block(
                gpu,
                &view,
                rows_at,
                &bi.sqnorm,
                &bj.sqnorm,
                &mut lv.slice_mut(i0 * kp..i1 * kp),
                &mut li.slice_mut(i0 * kp..i1 * kp),
                kp,
            )?;
            mark(it, 1, &mut since)?;
            if jt != it && kp == select::COLS_KP {
                let cols_at = TileAt {
                    exclude_self: true,
                    ..rows_at
                };
                select::cols(
                    gpu,
                    &view,
                    cols_at,
                    &bi.sqnorm,
                    &bj.sqnorm,
                    &mut lv.slice_mut(j0 * kp..j1 * kp),
                    &mut li.slice_mut(j0 * kp..j1 * kp),
                )?;
                mark(it, 1, &mut since)?;
            } else if jt != it {
                select::transpose(gpu, &view, ni, nj, nj, &mut trans.slice_mut(..), ni)?;
                mark(it, 2, &mut since)?;
                let cols_at = TileAt {
                    rows: nj,
                    cols: ni,
                    ld: ni,
                    key: plan.key,
                    row_off: j0 as u32,
                    col_off: i0 as u32,
                    exclude_self: true,
                };
                select::block(
                    gpu,
                    &trans.slice(..),
                    cols_at,
                    &bj.sqnorm,
                    &bi.sqnorm,
                    &mut lv.slice_mut(j0 * kp..j1 * kp),
                    &mut li.slice_mut(j0 * kp..j1 * kp),
                    kp,
                )?;
                mark(it, 1, &mut since)?;
            }
        }
    }
    if probe {
        eprintln!(
            "[voisin-cuda] graph first tile row ({nt} tiles of {t}): sgemm {:.1} ms, select \
             {:.1} ms, transpose {:.1} ms",
            spent[0] * 1e3,
            spent[1] * 1e3,
            spent[2] * 1e3
        );
    }
    let hv = gpu.download(&lv.slice(..))?;
    let hi = gpu.download(&li.slice(..))?;
    Ok((0..n)
        .into_par_iter()
        .map(|r| {
            let cands: Vec<(f32, u32)> = (r * kp..(r + 1) * kp)
                .filter(|&j| hi[j] != u32::MAX)
                .map(|j| (hv[j], hi[j]))
                .collect();
            Raw {
                complete: cands.len() >= seen[r / t],
                cands,
            }
        })
        .collect())
}
