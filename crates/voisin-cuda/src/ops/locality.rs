//! The k-NN graph's locality order and the tiles of its fused pairs that it lets skip
//! (kernels/select/locality.cu; docs/design/graph-tile-filter.md, "Session 25").
//!
//! On clustered data a pair of tiles costs the same whether its items are near or not: every
//! product runs, and the filter drops nearly all of them. A graph whose lists were seeded from a
//! spread sample knows each item's nearest sample item (the first entry of its seed list). The
//! sample is ordered along a projection tree on the host ([`tree_order`]) and the items by their
//! nearest sample item's place ([`order_by`]), which puts near items in the same blocks of
//! `PF_BM` rows. Each block gets a bounding sphere on the device (`block_spheres`), and before a
//! fused pair `pair_blocks` lists the kernel's tiles that could pass anything: a tile whose two
//! spheres are so far apart that the lowest key the tensor cores could compute for any of its
//! pairs (the exact key's lower bound less the plan's bound) is above every threshold the tile
//! is tested against is left out, rigorously.
//!
//! Owns the order, the reordered set, the spheres and the pairs' work lists; when the graph uses
//! them is search/graph.rs's.

use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{BoundParts, Plan, Storage, TileKey, TileRows};
use crate::ops::device_set::{DeviceRows, DeviceSet};
use crate::ops::select;
use crate::options::Precision;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// The bands of block distance a diagonal pair runs in, nearest first, its rows' survivors
/// merged after each ([`Locality::plan_pair`]): in locality order a row's neighbourhood lies in
/// its own and the next blocks, and under the seed's thresholds (which reach past it on
/// clustered data) a whole diagonal pair at once would offer a row its whole cluster, ~1,000
/// items against buffers of 256, which overflow and cut the lists short.
pub(crate) const DIAGONAL_BANDS: [(usize, usize); 5] =
    [(0, 1), (1, 2), (2, 4), (4, 8), (8, usize::MAX)];

/// Counters per pair: one per band.
const SLOTS: usize = DIAGONAL_BANDS.len();

/// The tiles of one fused pair to run ([`Locality::plan_pair`]): their numbers, and on the
/// device how many.
pub(crate) struct PairWork<'a> {
    pub list: CudaView<'a, u32>,
    pub len: CudaView<'a, u32>,
}

/// The locality order of a set on the device (the reordered set itself is [`Locality::new`]'s
/// other half) and its blocks' spheres.
pub(crate) struct Locality {
    perm: CudaSlice<u32>,
    inv: CudaSlice<u32>,
    centres: CudaSlice<f64>,
    radii: CudaSlice<f64>,
    /// The plan's bound at the set's largest norm (absolute part and slack) and its relative
    /// part: a computed key is at least (K − slack) / (1 + rel) for an exact key K.
    slack: f64,
    rel: f64,
    dim: usize,
    /// One pair's work list (room for every tile of a pair of whole tiles).
    work: CudaSlice<u32>,
    /// Each planned pair's count of tiles to run, and of their values, by the pair's number (a
    /// slot per band).
    lens: CudaSlice<u32>,
    values: CudaSlice<u64>,
}

/// Whether the graph of `n` items in tiles of `t` under `plan` runs in locality order: split
/// rows (fp16x3, what `auto` takes where TF32's pilot finds keys too close for its bound:
/// clustered data; where TF32 wins, as on normal, far and duplicate-heavy data, the spheres of
/// a block overlap nearly every other, and the order cost 55 ms and left no tile out of a 1M
/// graph, docs/design/graph-tile-filter.md "Session 25"), L2 keys (exact key ≥ dmin²) on f32
/// rows as given (the spheres are of the stored values, whose exact keys the plan bounds;
/// rows rounded from f64 are not the values the bound speaks of), tiles of whole kernel
/// blocks, and ids that fit the lists.
pub(crate) fn applies(plan: &Plan, n: usize, t: usize) -> bool {
    plan.precision == Precision::Fp16x3
        && plan.key == TileKey::L2
        && plan.storage == Storage::F32
        && plan.tile_rows() == TileRows::F32
        && !plan.widened()
        && t.is_multiple_of(abi::PF_BM)
        && abi::PF_BM == abi::PF_BN
        && n < u32::MAX as usize
}

/// The place of each of `s` points (rows of `ld` values, the first `d` read) along a
/// projection tree: each node's points ordered by their projections on the line through two
/// far points of the node (the farthest from its first point, and the farthest from that one)
/// and cut at a wide gap near the middle, down to pairs. Points of one cluster end up at
/// neighbouring places wherever the clusters are farther apart than they are wide.
pub(crate) fn tree_order(points: &[f32], ld: usize, d: usize, s: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..s as u32).collect();
    split(points, ld, d, &mut ids);
    let mut rank = vec![0u32; s];
    for (place, &i) in ids.iter().enumerate() {
        rank[i as usize] = place as u32;
    }
    rank
}

fn split(points: &[f32], ld: usize, d: usize, ids: &mut [u32]) {
    if ids.len() <= 2 || d == 0 {
        return;
    }
    let row = |i: u32| &points[i as usize * ld..i as usize * ld + d];
    let dist2 = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
            .sum()
    };
    let farthest = |from: &[f32]| {
        ids.iter()
            .copied()
            .map(|i| (dist2(row(i), from), i))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map_or(ids[0], |(_, i)| i)
    };
    let a = farthest(row(ids[0]));
    let b = farthest(row(a));
    let (pa, pb) = (row(a), row(b));
    let mut keyed: Vec<(f64, u32)> = ids
        .iter()
        .map(|&i| {
            let p: f64 = row(i)
                .iter()
                .zip(pa.iter().zip(pb))
                .map(|(&x, (&u, &v))| (x as f64 - u as f64) * (v as f64 - u as f64))
                .sum();
            (p, i)
        })
        .collect();
    keyed.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    for (slot, &(_, i)) in ids.iter_mut().zip(&keyed) {
        *slot = i;
    }
    // The cut: the widest gap between neighbouring projections, weighed towards balance (the
    // gap times the root of the smaller side), within the middle three quarters so that the
    // tree stays shallow. A cut in a gap between clusters keeps each cluster's points at
    // neighbouring places; a median cut through a cluster would leave it in two runs.
    let len = keyed.len();
    let edge = (len / 8).max(1);
    let mid = (edge..=len - edge)
        .max_by(|&i, &j| {
            let score = |i: usize| (keyed[i].0 - keyed[i - 1].0) * (i.min(len - i) as f64).sqrt();
            score(i).total_cmp(&score(j)).then(j.cmp(&i))
        })
        .unwrap_or(len / 2);
    let (lo, hi) = ids.split_at_mut(mid);
    rayon::join(|| split(points, ld, d, lo), || split(points, ld, d, hi));
}

/// The locality order of items whose nearest sample items are `heads` (an index of `rank`, or
/// anything else for none: such items go last): items by their head's place, ties by their
/// own index. Returns `perm`, position → item.
pub(crate) fn order_by(heads: &[u32], rank: &[u32]) -> Vec<u32> {
    let s = rank.len();
    let key = |h: u32| rank.get(h as usize).map_or(s, |&r| r as usize);
    let mut start = vec![0usize; s + 2];
    for &h in heads {
        start[key(h) + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut perm = vec![0u32; heads.len()];
    for (item, &h) in heads.iter().enumerate() {
        let k = key(h);
        perm[start[k]] = item as u32;
        start[k] += 1;
    }
    perm
}

/// The inverse of a permutation.
pub(crate) fn inverse(perm: &[u32]) -> Vec<u32> {
    let mut inv = vec![0u32; perm.len()];
    for (p, &r) in perm.iter().enumerate() {
        inv[r as usize] = p as u32;
    }
    inv
}

/// Rows `from[p]` of `src` (rows of `ld` 32-bit values), in that order, each value other than
/// `NO_INDEX` mapped through `map` where given (kernels/select/locality.cu `gather_rows`).
fn gather<T: DeviceRepr>(
    gpu: &Gpu,
    src: &CudaSlice<T>,
    ld: usize,
    from: &CudaSlice<u32>,
    map: Option<&CudaSlice<u32>>,
) -> Result<CudaSlice<T>> {
    debug_assert_eq!(std::mem::size_of::<T>(), 4);
    let n = from.len();
    debug_assert!(src.len() >= n * ld);
    // SAFETY: gather_rows writes every value of the n rows.
    let mut dst = unsafe { gpu.stream.alloc::<T>((n * ld).max(1)) }.map_err(dev("allocating"))?;
    let total = (n * ld) as u64;
    if total == 0 {
        return Ok(dst);
    }
    let cfg = select::over_slots(total);
    let (nn, ldi, null) = (n as u64, ld as i32, 0u64);
    let mut l = gpu.stream.launch_builder(gpu.k.gather_rows()?);
    l.arg(src).arg(&nn).arg(&ldi).arg(from);
    match map {
        Some(m) => l.arg(m),
        None => l.arg(&null),
    };
    l.arg(&mut dst);
    // SAFETY: matches gather_rows in kernels/select/locality.cu: src holds the rows `from`
    // names (a permutation of the set's rows), map (where given) one value per id, dst n × ld.
    unsafe { l.launch(cfg) }.map_err(dev("gather_rows"))?;
    Ok(dst)
}

impl Locality {
    /// `data` in locality order from its items' nearest sample items `heads` (rows of
    /// `sample`, a set of the same plan): the reordered copy (row p is the original row
    /// `perm[p]`, prepared as the plan prepares any set), and the order with its blocks'
    /// spheres and room for the work lists of `pairs` pairs of tiles of `t`. `None` where the
    /// rows are not f32 or the copy would not fit beside what is on the device.
    pub fn new(
        gpu: &Gpu,
        plan: &Plan,
        data: &DeviceSet<'_>,
        (heads, sample): (&CudaView<'_, u32>, &DeviceSet<'_>),
        t: usize,
        pairs: usize,
    ) -> Result<Option<(DeviceSet<'static>, Locality)>> {
        let (n, d, ld) = (data.n, plan.dim, data.raw_ld());
        let DeviceRows::F32(raw) = &data.raw else {
            return Ok(None);
        };
        let DeviceRows::F32(srows) = &sample.raw else {
            return Ok(None);
        };
        // The copy: the stored rows, their prepared rows, norms and spheres; a half left free.
        let blocks = n.div_ceil(abi::PF_BM);
        let need = n * (ld + d + 4) * 4 + blocks * (d + 1) * 8;
        if gpu.free_memory()? < 2 * need {
            return Ok(None);
        }
        let heads = gpu.download(heads)?;
        let points = gpu.download(&srows.slice(..sample.n * ld))?;
        let rank = tree_order(&points, ld, d, sample.n);
        let perm_host = order_by(&heads, &rank);
        let inv_host = inverse(&perm_host);
        let s = &gpu.stream;
        let perm = s.clone_htod(&perm_host).map_err(dev("copying the order"))?;
        let inv = s.clone_htod(&inv_host).map_err(dev("copying the order"))?;
        let moved = gather(gpu, raw, ld, &perm, None)?;
        let set = DeviceSet::prepare(gpu, plan, DeviceRows::F32(moved), n)?;
        // SAFETY: block_spheres writes every centre and radius.
        let mut centres =
            unsafe { s.alloc::<f64>((blocks * d).max(1)) }.map_err(dev("allocating"))?;
        let mut radii = unsafe { s.alloc::<f64>(blocks.max(1)) }.map_err(dev("allocating"))?;
        if blocks > 0 {
            let DeviceRows::F32(rows) = &set.raw else {
                unreachable!("gathered as f32 above")
            };
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let (nn, dd, ldl, bm) = (n as i64, d as i32, ld as i64, abi::PF_BM as i32);
            let mut l = s.launch_builder(gpu.k.block_spheres()?);
            l.arg(rows)
                .arg(&nn)
                .arg(&dd)
                .arg(&ldl)
                .arg(&bm)
                .arg(&mut centres)
                .arg(&mut radii);
            // SAFETY: matches block_spheres in kernels/select/locality.cu: rows holds n rows of
            // ld values (d read), centres blocks × d, radii blocks.
            unsafe { l.launch(cfg) }.map_err(dev("block_spheres"))?;
        }
        // The bound of the pair at the set's largest norm covers every pair (it grows with the
        // norms); `lower` subtracts the slack once more.
        let parts = BoundParts::of(plan);
        let top = set.max_norm();
        let slack = plan.abs_bound(top, top) + parts.tiny;
        let per_pair = (t / abi::PF_BM).pow(2);
        // SAFETY: pair_blocks writes the entries it counts; nothing reads past the count.
        let work = unsafe { s.alloc::<u32>(per_pair.max(1)) }.map_err(dev("allocating"))?;
        let lens = s
            .alloc_zeros::<u32>((pairs * SLOTS).max(1))
            .map_err(dev("allocating"))?;
        let values = s
            .alloc_zeros::<u64>((pairs * SLOTS).max(1))
            .map_err(dev("allocating"))?;
        Ok(Some((
            set,
            Locality {
                perm,
                inv,
                centres,
                radii,
                slack,
                rel: parts.rel,
                dim: d,
                work,
                lens,
                values,
            },
        )))
    }

    /// Lists pair number `p`'s kernel tiles that may pass anything: rows `i0..i0 + na` and
    /// columns `j0..j0 + nb` of the reordered set (both starting at whole blocks), tested
    /// against the lists of `kp` slots `row_list` and, with `both`, `col_list` (their rows'
    /// and columns' as they stand when the pair runs next on the stream); with `band` (an
    /// index of [`DIAGONAL_BANDS`]) only the tiles of blocks that far apart. Each pair (and
    /// band) is planned once.
    #[allow(clippy::too_many_arguments)]
    pub fn plan_pair(
        &mut self,
        gpu: &Gpu,
        (p, band): (usize, Option<usize>),
        (i0, na): (usize, usize),
        (j0, nb): (usize, usize),
        (row_list, col_list): (&CudaView<'_, f32>, &CudaView<'_, f32>),
        kp: usize,
        both: bool,
    ) -> Result<PairWork<'_>> {
        debug_assert!(i0.is_multiple_of(abi::PF_BM) && j0.is_multiple_of(abi::PF_BM));
        let tiles = na.div_ceil(abi::PF_BM) * nb.div_ceil(abi::PF_BN);
        debug_assert!(tiles <= self.work.len());
        let cfg = LaunchConfig {
            grid_dim: ((tiles * 32).div_ceil(256).max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (d, rb0, cb0) = (
            self.dim as i32,
            (i0 / abi::PF_BM) as i32,
            (j0 / abi::PF_BM) as i32,
        );
        let (na, nb, kp, both) = (na as i32, nb as i32, kp as i32, both as i32);
        let (lo, hi) = band.map_or((0, usize::MAX), |b| DIAGONAL_BANDS[b]);
        let (lo, hi) = (lo as i32, hi.min(i32::MAX as usize) as i32);
        let slot = p * SLOTS + band.unwrap_or(0);
        {
            let mut len = self.lens.slice_mut(slot..slot + 1);
            let mut values = self.values.slice_mut(slot..slot + 1);
            let mut l = gpu.stream.launch_builder(gpu.k.pair_blocks()?);
            l.arg(&self.centres)
                .arg(&self.radii)
                .arg(&d)
                .arg(&rb0)
                .arg(&cb0)
                .arg(&na)
                .arg(&nb)
                .arg(row_list)
                .arg(col_list)
                .arg(&kp)
                .arg(&both)
                .arg(&lo)
                .arg(&hi)
                .arg(&self.slack)
                .arg(&self.rel)
                .arg(&mut self.work)
                .arg(&mut len)
                .arg(&mut values);
            // SAFETY: matches pair_blocks in kernels/select/locality.cu: the spheres cover every
            // block of the set, the lists na (nb) rows of kp, work has room for every tile, and
            // the pair's counts are zero (each pair is planned once).
            unsafe { l.launch(cfg) }.map_err(dev("pair_blocks"))?;
        }
        Ok(PairWork {
            list: self.work.slice(..tiles.max(1)),
            len: self.lens.slice(slot..slot + 1),
        })
    }

    /// How many kernel tiles the pairs numbered `pairs` ran (waits for them).
    pub fn tiles_run(&self, gpu: &Gpu, pairs: std::ops::Range<usize>) -> Result<u64> {
        if pairs.is_empty() {
            return Ok(0);
        }
        let lens = gpu.download(&self.lens.slice(pairs.start * SLOTS..pairs.end * SLOTS))?;
        Ok(lens.iter().map(|&c| c as u64).sum())
    }

    /// The values (rows × columns) of the tiles each pair ran, by the pair's number, for the
    /// first `pairs` pairs (waits for them; 0 for a pair never planned).
    pub fn values_run(&self, gpu: &Gpu, pairs: usize) -> Result<Vec<u64>> {
        if pairs == 0 {
            return Ok(Vec::new());
        }
        let slots = gpu.download(&self.values.slice(..pairs * SLOTS))?;
        Ok(slots.chunks(SLOTS).map(|c| c.iter().sum()).collect())
    }

    /// Lists of the set's items (rows of `kp`, ids included) moved from the original order to
    /// locality order (`into_order`) or back.
    pub fn move_lists(
        &self,
        gpu: &Gpu,
        (val, idx): (&CudaSlice<f32>, &CudaSlice<u32>),
        kp: usize,
        into_order: bool,
    ) -> Result<(CudaSlice<f32>, CudaSlice<u32>)> {
        // Row p of the moved lists is row from[p]; an id q becomes ids[q].
        let (from, ids) = if into_order {
            (&self.perm, &self.inv)
        } else {
            (&self.inv, &self.perm)
        };
        Ok((
            gather(gpu, val, kp, from, None)?,
            gather(gpu, idx, kp, from, Some(ids))?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Points of well-separated clusters, shuffled: the tree puts each cluster's points at
    /// neighbouring places, whatever their input order.
    #[test]
    fn the_tree_keeps_clusters_together() {
        let mut rng = StdRng::seed_from_u64(3);
        let (clusters, per, d, ld) = (37, 11, 5, 8);
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..d).map(|_| rng.gen_range(-1000.0..1000.0)).collect())
            .collect();
        let mut labels: Vec<usize> = (0..clusters * per).map(|i| i / per).collect();
        for i in (1..labels.len()).rev() {
            labels.swap(i, rng.gen_range(0..=i));
        }
        let mut points = vec![0f32; labels.len() * ld];
        for (i, &c) in labels.iter().enumerate() {
            for j in 0..d {
                points[i * ld + j] = centres[c][j] + rng.gen_range(-1.0..1.0);
            }
            // Padding past d is never read.
            points[i * ld + d..(i + 1) * ld].fill(f32::NAN);
        }
        let rank = tree_order(&points, ld, d, labels.len());
        let mut by_place = vec![usize::MAX; labels.len()];
        for (i, &r) in rank.iter().enumerate() {
            assert_eq!(by_place[r as usize], usize::MAX, "place {r} twice");
            by_place[r as usize] = labels[i];
        }
        // Each cluster occupies one run of places.
        let runs = 1 + by_place.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(runs, clusters);
        // One point, two, none.
        assert_eq!(tree_order(&[1.0], 1, 1, 1), vec![0]);
        assert_eq!(tree_order(&[], 1, 1, 0), Vec::<u32>::new());
    }

    /// Items go by their head's place, ties by index; items without a head last; the
    /// inverse undoes the order.
    #[test]
    fn items_follow_their_heads() {
        let rank = [2, 0, 1];
        let heads = [0, 1, u32::MAX, 2, 1, 0, 7];
        let perm = order_by(&heads, &rank);
        assert_eq!(perm, vec![1, 4, 3, 0, 5, 2, 6]);
        let inv = inverse(&perm);
        for (p, &r) in perm.iter().enumerate() {
            assert_eq!(inv[r as usize] as usize, p);
        }
        assert_eq!(order_by(&[], &rank), Vec::<u32>::new());
    }
}
