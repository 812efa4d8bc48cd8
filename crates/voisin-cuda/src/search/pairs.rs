//! One runner per way a pair of row blocks runs, behind one trait ([`PairRunner`]), as
//! [`super::finish::CandidateSource`] stands for where a finish gets its candidates: written
//! tiles and selection ([`Written`]), the tile filter on written tiles ([`Filtered`]),
//! fused_filter over a base at once ([`FusedFilter`]), the fused tile pair ([`Fused`]) and the
//! fused tile pair in locality order ([`LocalityFused`]). A pair is rows of one set against
//! columns of another (or the same), its candidates into the rows' running lists and, for a
//! graph's pair of two tiles, the columns'. The k-NN's passes (search/knn.rs) and the graph's
//! shares (search/graph.rs) are drivers over them: they walk their blocks and pairs in order
//! and hand each to the runner their route names (search/route.rs).
//!
//! Owns how each method launches its kernels and merges its survivors; which method runs,
//! on which rows and in which order, is the route's and the drivers'.

use std::ops::Range;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use voisin::Result;

use crate::numerics::plan::Numerics;
use crate::ops::device_set::DeviceSet;
use crate::ops::fused::{self, FilterKernel};
use crate::ops::locality::{Locality, DIAGONAL_BANDS};
use crate::ops::pair::{self, Operands, PairKind};
use crate::ops::scaled::ScaledRows;
use crate::ops::select::{self, ListsOut, Select, TileAt, TileIn};
use crate::ops::survivors::{self, FilterInto, Survivors};
use crate::ops::tile::{self, Block, Product};
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};
use crate::search::route;

/// Running lists on the device: `width` slots per row.
pub(crate) struct Lists {
    pub val: CudaSlice<f32>,
    pub idx: CudaSlice<u32>,
    pub width: usize,
}

impl Lists {
    /// Rows `rows` of the lists, to write.
    fn out(&mut self, rows: Range<usize>) -> (CudaViewMut<'_, f32>, CudaViewMut<'_, u32>) {
        let at = rows.start * self.width..rows.end * self.width;
        (self.val.slice_mut(at.clone()), self.idx.slice_mut(at))
    }

    /// The keys of rows `rows`.
    fn keys(&self, rows: Range<usize>) -> CudaView<'_, f32> {
        self.val
            .slice(rows.start * self.width..rows.end * self.width)
    }

    /// Merges the survivors of `from` into rows `rows` (the first `rows.len()` of its buffers).
    pub fn merge(&mut self, gpu: &Gpu, rows: Range<usize>, from: &mut Survivors) -> Result<()> {
        let (n, width) = (rows.len(), self.width);
        let (mut val, mut idx) = self.out(rows);
        let lists = ListsOut {
            val: &mut val,
            idx: &mut idx,
            width,
        };
        survivors::merge(gpu, n, lists, from)
    }
}

/// A set as the runners read it: its rows on the device and the scaled f16 copy of them, where
/// the route made one.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'d, 's> {
    pub data: &'d DeviceSet<'s>,
    pub copy: Option<&'d ScaledRows>,
}

impl<'d, 's> Operand<'d, 's> {
    /// Rows `items` as a written tile reads them: the copy's where `on_copy` (and a copy was
    /// made), the tiles' own otherwise.
    fn written(&self, on_copy: bool, items: &Range<usize>) -> Block<'d> {
        match self.copy.filter(|_| on_copy) {
            Some(c) => c.block(self.data, items.start, items.end),
            None => self.data.block(items.start, items.end),
        }
    }

    /// The rows a fused tile pair of `kind` reads.
    fn pairs(&self, kind: PairKind) -> Operands<'d, 's> {
        Operands::new(self.data, kind, self.copy)
    }
}

/// One side of a pair: items `items` of `set`, whose lists are the lists' rows from `list` on.
pub(crate) struct Part<'d, 's> {
    pub set: Operand<'d, 's>,
    pub items: Range<usize>,
    pub list: usize,
}

impl<'d> Part<'d, '_> {
    fn rows(&self) -> Range<usize> {
        self.list..self.list + self.items.len()
    }

    /// The part's own rows on the device (their norms are the tile's).
    fn block(&self) -> Block<'d> {
        self.set.data.block(self.items.start, self.items.end)
    }
}

/// A pair of row blocks: `rows` against `cols`, the rows' lists taking its candidates and, with
/// `both` (a graph's pair of two tiles), the columns'.
pub(crate) struct Pair<'d, 's> {
    pub rows: Part<'d, 's>,
    pub cols: Part<'d, 's>,
    pub both: bool,
    /// Each item's pair with itself skipped (a graph).
    pub exclude_self: bool,
    /// The rows' survivors merge after this pair; otherwise they wait in their buffer (a
    /// graph's filtered pairs, [`PairRunner::flush`]).
    pub merge_rows: bool,
    /// The pair's number in the share (a graph in locality order plans each pair once).
    pub number: usize,
}

impl Pair<'_, '_> {
    fn at(&self, key: crate::numerics::plan::TileKey) -> TileAt {
        let (rows, cols) = (self.rows.items.len(), self.cols.items.len());
        TileAt {
            rows,
            cols,
            ld: cols,
            key,
            row_off: self.rows.items.start as u32,
            col_off: self.cols.items.start as u32,
            exclude_self: self.exclude_self,
        }
    }
}

/// One way of running a pair of row blocks. `tile` is the pass's buffer for a written tile (a
/// block's rows × a tile's columns).
pub(crate) trait PairRunner {
    /// Runs `pair`: its candidates into `lists`.
    fn run(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()>;

    /// Told before pair number `p` of a share runs (whatever runs it).
    fn next_pair(&mut self, gpu: &Gpu, p: usize) -> Result<()> {
        let _ = (gpu, p);
        Ok(())
    }

    /// Merges the survivors of rows `rows` still waiting in the runner's buffers.
    fn flush(&mut self, gpu: &Gpu, lists: &mut Lists, rows: Range<usize>) -> Result<()> {
        let _ = (gpu, lists, rows);
        Ok(())
    }

    /// What is left once a share's last pair ran; returns the pairs of items the method never
    /// computed (counted as the graph counts evaluations).
    fn finish(&mut self, gpu: &Gpu, lists: &mut Lists) -> Result<u64> {
        let _ = (gpu, lists);
        Ok(0)
    }
}

/// A written tile of `pair` in `tile` under `product` (on the scaled copies where `on_copy`):
/// the tile's description for the selection and filter kernels.
fn write_tile(
    gpu: &Gpu,
    (product, on_copy, plan): (Product, bool, &Numerics),
    tile: &mut CudaSlice<f32>,
    pair: &Pair,
) -> Result<TileAt> {
    let (r, c) = (&pair.rows, &pair.cols);
    let (rb, cb) = (
        r.set.written(on_copy, &r.items),
        c.set.written(on_copy, &c.items),
    );
    tile::compute(gpu, product, plan, &rb, &cb, &mut tile.slice_mut(..), cb.n)?;
    Ok(pair.at(plan.key))
}

/// Writes `pair`'s tile ([`write_tile`]) and hands `then` its description for the kernels that
/// read it: the values, where they sit, and both sides' norms.
fn on_tile<T>(
    gpu: &Gpu,
    how: (Product, bool, &Numerics),
    tile: &mut CudaSlice<f32>,
    pair: &Pair,
    then: impl FnOnce(TileIn<'_>) -> Result<T>,
) -> Result<T> {
    let at = write_tile(gpu, how, tile, pair)?;
    let values: CudaView<'_, f32> = tile.slice(..);
    let (rb, cb) = (pair.rows.block(), pair.cols.block());
    then(TileIn {
        values: &values,
        at,
        rn: &rb.sqnorm,
        cn: &cb.sqnorm,
    })
}

/// Written tiles, selected into the running lists (`mode`); a graph's columns through the
/// column kernel where its lists are that kernel's, through a transposed copy (`trans`)
/// otherwise.
pub(crate) struct Written<'p> {
    pub plan: &'p Numerics,
    pub product: Product,
    /// The tiles read the scaled copies (where the route made them).
    pub on_copy: bool,
    pub mode: Select,
    /// Room for a transposed tile (a graph whose lists are wider than the column kernel's).
    pub trans: Option<CudaSlice<f32>>,
}

impl PairRunner for Written<'_> {
    fn run(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()> {
        let (how, mode) = ((self.product, self.on_copy, self.plan), self.mode);
        let trans = &mut self.trans;
        on_tile(gpu, how, tile, pair, |rows_in| {
            let width = lists.width;
            {
                let (mut val, mut idx) = lists.out(pair.rows.rows());
                let out = ListsOut {
                    val: &mut val,
                    idx: &mut idx,
                    width,
                };
                select::run(gpu, mode, rows_in, out)?;
            }
            if !pair.both {
                return Ok(());
            }
            let (mut val, mut idx) = lists.out(pair.cols.rows());
            match trans {
                None => {
                    debug_assert_eq!(width, select::COLS_KP);
                    let cols_at = TileAt {
                        exclude_self: true,
                        ..rows_in.at
                    };
                    let tile = TileIn {
                        at: cols_at,
                        ..rows_in
                    };
                    select::cols(gpu, tile, &mut val, &mut idx)
                }
                Some(trans) => {
                    let at = rows_in.at;
                    let (ni, nj) = (at.rows, at.cols);
                    select::transpose(
                        gpu,
                        rows_in.values,
                        ni,
                        nj,
                        nj,
                        &mut trans.slice_mut(..),
                        ni,
                    )?;
                    let cols_at = TileAt {
                        rows: nj,
                        cols: ni,
                        ld: ni,
                        key: at.key,
                        row_off: at.col_off,
                        col_off: at.row_off,
                        exclude_self: true,
                    };
                    let trans_view = trans.slice(..);
                    let tile = TileIn {
                        values: &trans_view,
                        at: cols_at,
                        rn: rows_in.cn,
                        cn: rows_in.rn,
                    };
                    let out = ListsOut {
                        val: &mut val,
                        idx: &mut idx,
                        width,
                    };
                    select::block(gpu, tile, out)
                }
            }
        })
    }
}

/// The survivor buffers of a graph's filtered pairs, for their rows and their columns, and the
/// merges: the columns' at once (the next pair's columns are another tile), the rows' where
/// the pair says so, or at [`PairRunner::flush`].
pub(crate) struct Merges {
    pub rows: Survivors,
    pub cols: Survivors,
}

impl Merges {
    /// Buffers of `cap` slots for `t` rows each.
    pub fn new(gpu: &Gpu, t: usize, cap: usize) -> Result<Merges> {
        Ok(Merges {
            rows: Survivors::new(gpu, t, cap, true)?,
            cols: Survivors::new(gpu, t, cap, true)?,
        })
    }

    /// The filter's targets for `pair`: the rows' lists and buffer, the columns' (`col_list`,
    /// given with `both`).
    fn targets<'a>(
        &'a mut self,
        (row_list, col_list): (&'a CudaView<'a, f32>, Option<&'a CudaView<'a, f32>>),
        width: usize,
    ) -> FilterInto<'a, 'a> {
        FilterInto {
            rows: row_list,
            row_out: &mut self.rows,
            cols: col_list.map(|list| (list, &mut self.cols)),
            width,
        }
    }

    /// The merges after `pair`'s filter.
    fn after(&mut self, gpu: &Gpu, lists: &mut Lists, pair: &Pair) -> Result<()> {
        if pair.both {
            lists.merge(gpu, pair.cols.rows(), &mut self.cols)?;
        }
        if pair.merge_rows {
            lists.merge(gpu, pair.rows.rows(), &mut self.rows)?;
        }
        Ok(())
    }
}

/// A graph's warm pairs through written tiles read once by the tile filter, for their rows and
/// columns (ops/survivors.rs).
pub(crate) struct Filtered<'p> {
    pub plan: &'p Numerics,
    pub product: Product,
    pub on_copy: bool,
    pub merges: Merges,
}

impl Filtered<'_> {
    /// The tile filter of `pair`, without the merges.
    fn filter(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &Lists,
        pair: &Pair,
    ) -> Result<()> {
        let how = (self.product, self.on_copy, self.plan);
        let merges = &mut self.merges;
        on_tile(gpu, how, tile, pair, |rows_in| {
            let row_list = lists.keys(pair.rows.rows());
            let col_list = pair.both.then(|| lists.keys(pair.cols.rows()));
            let into = merges.targets((&row_list, col_list.as_ref()), lists.width);
            survivors::tile_filter(gpu, rows_in, into)
        })
    }
}

impl PairRunner for Filtered<'_> {
    fn run(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()> {
        self.filter(gpu, tile, lists, pair)?;
        self.merges.after(gpu, lists, pair)
    }

    fn flush(&mut self, gpu: &Gpu, lists: &mut Lists, rows: Range<usize>) -> Result<()> {
        lists.merge(gpu, rows, &mut self.merges.rows)
    }
}

/// The fused tile pair of `kind` (ops/pair.rs): the dot products in registers, filtered against
/// the rows' (and, with `both`, the columns') thresholds; a k-NN pass's chunks of the base
/// (rows only, merged after each chunk into the block's lists, `survivors`) and a graph's warm
/// pairs (`merges`).
pub(crate) struct Fused<'p> {
    pub plan: &'p Numerics,
    pub kind: PairKind,
    pub out: FusedOut,
}

/// Where a fused pair's survivors go (one per pass: the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum FusedOut {
    /// A k-NN block's rows: one buffer, merged after each chunk.
    Rows(Survivors),
    /// A graph's rows and columns.
    Both(Merges),
}

impl Fused<'_> {
    /// The fused kernel over `pair`, only the kernel tiles `work` lists where given, without the
    /// merges.
    fn filter(
        &mut self,
        gpu: &Gpu,
        lists: &Lists,
        pair: &Pair,
        work: Option<&crate::ops::locality::PairWork<'_>>,
    ) -> Result<()> {
        let (rops, cops) = (
            pair.rows.set.pairs(self.kind),
            pair.cols.set.pairs(self.kind),
        );
        let row_list = lists.keys(pair.rows.rows());
        let col_list = pair.both.then(|| lists.keys(pair.cols.rows()));
        let into = match &mut self.out {
            FusedOut::Rows(out) => FilterInto {
                rows: &row_list,
                row_out: out,
                cols: None,
                width: lists.width,
            },
            FusedOut::Both(m) => m.targets((&row_list, col_list.as_ref()), lists.width),
        };
        let at = pair::PairAt {
            row_off: pair.rows.items.start as u32,
            col_off: pair.cols.items.start as u32,
            exclude_self: pair.exclude_self,
        };
        let rows = (&rops, pair.rows.items.clone());
        let cols = (&cops, pair.cols.items.clone());
        pair::filter(gpu, self.plan, rows, cols, at, into, work)
    }

    /// The merges after `pair`'s kernel.
    fn after(&mut self, gpu: &Gpu, lists: &mut Lists, pair: &Pair) -> Result<()> {
        match &mut self.out {
            FusedOut::Rows(out) => lists.merge(gpu, pair.rows.rows(), out),
            FusedOut::Both(m) => m.after(gpu, lists, pair),
        }
    }
}

impl PairRunner for Fused<'_> {
    fn run(
        &mut self,
        gpu: &Gpu,
        _: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()> {
        self.filter(gpu, lists, pair, None)?;
        self.after(gpu, lists, pair)
    }

    fn flush(&mut self, gpu: &Gpu, lists: &mut Lists, rows: Range<usize>) -> Result<()> {
        match &mut self.out {
            FusedOut::Both(m) => lists.merge(gpu, rows, &mut m.rows),
            FusedOut::Rows(_) => Ok(()),
        }
    }
}

/// A planned pair of a share in locality order: its number, kernel tiles, values, and whether
/// it is a diagonal pair (half of whose values count as evaluations).
#[derive(Clone, Copy)]
pub(crate) struct Planned {
    pub pair: usize,
    pub tiles: u64,
    pub values: u64,
    pub diagonal: bool,
}

/// A graph's warm pairs in locality order (ops/locality.rs): fused pairs (or, where the split
/// copy did not fit, the tile filter) whose kernel tiles are planned against the lists'
/// thresholds before they run, only those whose blocks' spheres are near enough to pass
/// anything running; a diagonal pair in bands of block distance, nearest first, its rows merged
/// after each (ops/locality.rs `DIAGONAL_BANDS`). Planning stops once the diagonal pairs and
/// the first tile row ran nine tenths of their tiles or more ([`route::keeps_planning`]).
pub(crate) struct LocalityFused<'p> {
    pub order: Locality,
    pub warm: Warmed<'p>,
    pub planned: Vec<Planned>,
    pub planning: bool,
    /// The pair at which planning is weighed: after the diagonal pairs and the first tile row.
    pub check_at: usize,
    /// The pairs of the share (every pair of the set's triangle).
    pub pairs: usize,
}

/// The method a share in locality order runs its warm pairs with (one per share).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Warmed<'p> {
    Fused(Fused<'p>),
    Filtered(Filtered<'p>),
}

impl LocalityFused<'_> {
    /// The kernel tiles the planned pairs listed.
    pub fn planned_tiles(&self) -> u64 {
        self.planned.iter().map(|p| p.tiles).sum()
    }
}

impl PairRunner for LocalityFused<'_> {
    fn next_pair(&mut self, gpu: &Gpu, p: usize) -> Result<()> {
        if p == self.check_at && self.planning {
            let ran = self.order.tiles_run(gpu, 0..p)?;
            let tiles = self.planned_tiles();
            self.planning = route::keeps_planning(ran, tiles);
            gpu.phases().note(format_args!(
                "graph: locality order, {ran} of {} kernel tiles run in the first {p} pairs{}",
                tiles,
                if self.planning {
                    ""
                } else {
                    "; planning stops"
                }
            ));
        }
        Ok(())
    }

    fn run(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()> {
        let fused = match &mut self.warm {
            Warmed::Filtered(f) => return f.run(gpu, tile, lists, pair),
            Warmed::Fused(f) => f,
        };
        let (p, diagonal) = (pair.number, !pair.both);
        let bands = if diagonal { DIAGONAL_BANDS.len() } else { 1 };
        let (ni, nj) = (pair.rows.items.len(), pair.cols.items.len());
        let (i0, j0, kp) = (pair.rows.items.start, pair.cols.items.start, lists.width);
        for band in 0..bands {
            if band > 0 {
                let FusedOut::Both(m) = &mut fused.out else {
                    unreachable!("a graph's pairs merge rows and columns")
                };
                lists.merge(gpu, pair.rows.rows(), &mut m.rows)?;
            }
            let (row_list, col_list) = (lists.keys(pair.rows.rows()), lists.keys(pair.cols.rows()));
            let work = if self.planning || diagonal {
                if band == 0 {
                    self.planned.push(Planned {
                        pair: p,
                        tiles: (ni.div_ceil(abi::PF_BM) * nj.div_ceil(abi::PF_BN)) as u64,
                        values: (ni * nj) as u64,
                        diagonal,
                    });
                }
                let lists = (&row_list, &col_list);
                let which = (p, diagonal.then_some(band));
                Some(
                    self.order
                        .plan_pair(gpu, which, (i0, ni), (j0, nj), lists, kp, pair.both)?,
                )
            } else {
                None
            };
            fused.filter(gpu, lists, pair, work.as_ref())?;
        }
        fused.after(gpu, lists, pair)
    }

    fn flush(&mut self, gpu: &Gpu, lists: &mut Lists, rows: Range<usize>) -> Result<()> {
        match &mut self.warm {
            Warmed::Fused(f) => f.flush(gpu, lists, rows),
            Warmed::Filtered(f) => f.flush(gpu, lists, rows),
        }
    }

    /// The values of the tiles left out were never computed: they leave the evaluations'
    /// count (halved on diagonal pairs, as the count halves those). The lists go back to the
    /// set's own order.
    fn finish(&mut self, gpu: &Gpu, lists: &mut Lists) -> Result<u64> {
        let ran = self.order.tiles_run(gpu, 0..self.pairs)?;
        let values = self.order.values_run(gpu, self.pairs)?;
        let skipped = self
            .planned
            .iter()
            .map(|p| p.values.saturating_sub(values[p.pair]) / if p.diagonal { 2 } else { 1 })
            .sum();
        gpu.phases().note(format_args!(
            "graph: locality order, {ran} of {} kernel tiles run in {} planned pairs \
             ({skipped} pairs of items left out)",
            self.planned_tiles(),
            self.planned.len()
        ));
        let kp = lists.width;
        (lists.val, lists.idx) = self
            .order
            .move_lists(gpu, (&lists.val, &lists.idx), kp, false)?;
        Ok(skipped)
    }
}

/// fused_filter over a base at once (ops/fused.rs) for a k-NN block whose lists hold their
/// thresholds alone: one launch, one merge (without floors: a row whose buffer overflowed is
/// left as it was), then the span of the overflowing rows redone through written tiles over
/// the whole base.
pub(crate) struct FusedFilter<'p> {
    pub plan: &'p Numerics,
    pub kernel: FilterKernel,
    pub out: Survivors,
    /// The written tiles that redo overflowing rows, and the base tile they take.
    pub redo: Written<'p>,
    pub b_tile: usize,
}

impl PairRunner for FusedFilter<'_> {
    fn run(
        &mut self,
        gpu: &Gpu,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        pair: &Pair,
    ) -> Result<()> {
        let (q0, qn, kp) = (pair.rows.items.start, pair.rows.items.len(), lists.width);
        gpu.stream
            .memset_zeros(&mut self.out.count.slice_mut(..qn))
            .map_err(dev("clearing counters"))?;
        let (q, base) = (pair.rows.set.data, pair.cols.set.data);
        let qb = q.block(q0, q0 + qn);
        // fused_filter takes the whole base at once.
        debug_assert_eq!(pair.cols.items, 0..base.n);
        base.ensure(gpu, base.n)?;
        let all = base.block(0, base.n);
        {
            let last = lists.val.slice(kp - 1..);
            let thr = fused::Thresholds {
                values: &last,
                stride: kp,
            };
            fused::filter(gpu, self.kernel, self.plan, &qb, &all, thr, &mut self.out)?;
        }
        lists.merge(gpu, pair.rows.rows(), &mut self.out)?;
        let counts = gpu.download(&self.out.count.slice(..qn))?;
        let cap = self.out.cap;
        let over: Vec<usize> = (0..qn).filter(|&r| counts[r] as usize > cap).collect();
        if let (Some(&lo), Some(&hi)) = (over.first(), over.last()) {
            // Rare (a sample's threshold far above the query's final one): the span of the
            // overflowing queries is redone with ordinary tiles.
            let rows = Part {
                set: pair.rows.set,
                items: q0 + lo..q0 + hi + 1,
                list: lo,
            };
            self.redo
                .pass(gpu, self.b_tile, tile, lists, rows, pair.cols.set)?;
        }
        let mean = counts.iter().map(|&c| c as f64).sum::<f64>() / qn as f64;
        gpu.phases().note(format_args!(
            "fused: {mean:.0} survivors per query (cap {cap}), {} overflowing",
            over.len()
        ));
        Ok(())
    }
}

impl Written<'_> {
    /// A k-NN pass of written tiles: the lists of `rows` (filled first, for running lists)
    /// against every item of `cols` in tiles of `b_tile` items, each tile's rows brought up
    /// first where the set goes up behind the work (device_set.rs).
    pub fn pass(
        &mut self,
        gpu: &Gpu,
        b_tile: usize,
        tile: &mut CudaSlice<f32>,
        lists: &mut Lists,
        rows: Part<'_, '_>,
        cols: Operand<'_, '_>,
    ) -> Result<()> {
        if !self.mode.whole_rows() {
            let (mut v, mut i) = lists.out(rows.rows());
            select::fill_lists(gpu, &mut v, &mut i)?;
        }
        let n = cols.data.n;
        for b0 in (0..n).step_by(b_tile) {
            let b1 = (b0 + b_tile).min(n);
            cols.data.ensure(gpu, b1)?;
            let pair = Pair {
                rows: Part {
                    set: rows.set,
                    items: rows.items.clone(),
                    list: rows.list,
                },
                cols: Part {
                    set: cols,
                    items: b0..b1,
                    list: 0,
                },
                both: false,
                exclude_self: false,
                merge_rows: true,
                number: 0,
            };
            self.run(gpu, tile, lists, &pair)?;
        }
        Ok(())
    }
}
