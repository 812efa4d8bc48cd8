//! Block primitives for drivers that spread work over processes from Python (`voisin.dask`):
//! the exact neighbour lists of one block pair of a graph, of one base shard against a block
//! of queries (k-NN and range), the one merge of such lists, and the rows of a block they end
//! as, shaped by the one-process path's [`results::shape`] over the core's `voisin::shape`
//! (f32 or exact f64 distances, the item itself first, a self-join's pairs; the exact f64
//! distance of an entry is its key's, `Metric::key_to_distance`, as the one process computes
//! it). Pairs cross blocks: the pair {i, j} lives in row min(i, j), so a block hands each
//! earlier block the entries pointing into it ([`pair_pieces`]) and a block's pair rows are
//! the core's `pair_rows` over its own entries and those ([`block_pairs`]). The Python half
//! deals the blocks to a Dask cluster's workers and reduces their lists; here the engines
//! measure (a graph's blocks through the core's [`TileGraph`] seam, searches through
//! [`Engine`]) and the core merges ([`merge_lists`]). Nothing here schedules.
//!
//! Lists travel as NumPy arrays: exact f64 keys and u32 global indices, one row per item, each
//! row sorted by (key, index), the order every engine's results have (range lists: flat, with
//! offsets). The keys are the core's exact keys, which every engine computes bit for bit alike,
//! and the merge keeps the first k under that total order, so it is associative and
//! commutative: the rows made from merged lists are byte-identical to one process's whatever
//! the worker count, the order of the merges or the retries.
//!
//! A graph's block pair (I, J), I < J, on the CPU is one tile pair of the CPU engine's
//! [`TileGraph`] share over the two blocks copied into one set (a block is small next to the
//! distances measured on it): each pair is measured once, for both sides. On a GPU the engine's
//! share holds approximate lists whose proof needs every other item of the set, so the pair is
//! two exact k-NN searches (I among J, J among I) whose results are keyed on the host. A block
//! with itself is a whole graph through the seam on either device (share, then finish).
//! Inputs are read in place (float32 C-contiguous); every call runs with the GIL released.

use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rayon::prelude::*;

use voisin::cpu::CpuEngine;
use voisin::engine::{Cancel, Op};
use voisin::graph::{merge_lists, List, PassRows, TileGraph};
use voisin::metric::exact::item_key;
use voisin::metric::scale::f32_value;
use voisin::shape;
use voisin::{
    Dataset, Engine, Error, KnnResult, Metric, RangeResult, Result, StringSet, VectorSet,
};
use voisin_cuda::CudaEngine;
use voisin_engines::Device;

use crate::engine::{self, EngineConfig};
use crate::results::{self, Answer, Form};
use crate::{dataset, metric, py_err, MetricError};

/// Lists of equal length handed to Python: keys `n × w` (f64) and indices `n × w` (u32).
type ListsOut<'py> = (Bound<'py, PyArray2<f64>>, Bound<'py, PyArray2<u32>>);
/// Range lists handed to Python: offsets (`n + 1`, int64), keys and indices (flat).
type RangeListsOut<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<u32>>,
);

/// Rows of equal length, row-major.
struct Rect {
    n: usize,
    w: usize,
    keys: Vec<f64>,
    ids: Vec<u32>,
}

impl Rect {
    /// `rows` (sorted, local indices) with `offset` added to every index; their lengths must
    /// agree (every row of a block meets the same items).
    fn of(rows: &[List], offset: usize) -> Result<Rect> {
        let w = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != w) {
            return Err(Error::device("block lists of unequal lengths (bug)"));
        }
        let (mut keys, mut ids) = (Vec::with_capacity(rows.len() * w), Vec::new());
        ids.reserve(rows.len() * w);
        for &(key, i) in rows.iter().flatten() {
            keys.push(key);
            ids.push(global(i, offset)?);
        }
        Ok(Rect {
            n: rows.len(),
            w,
            keys,
            ids,
        })
    }

    fn out(self, py: Python<'_>) -> PyResult<ListsOut<'_>> {
        Ok((
            PyArray1::from_vec(py, self.keys).reshape([self.n, self.w])?,
            PyArray1::from_vec(py, self.ids).reshape([self.n, self.w])?,
        ))
    }
}

/// Index `i` of a block that starts at item `offset`, in the whole set.
fn global(i: u32, offset: usize) -> Result<u32> {
    u32::try_from(i as usize + offset)
        .map_err(|_| Error::invalid("more than 2^32 items: indices do not fit in u32"))
}

/// Row `r` of lists `n × w` given as flat keys and indices.
fn row(keys: &[f64], ids: &[u32], w: usize, r: usize) -> List {
    let span = r * w..(r + 1) * w;
    keys[span.clone()]
        .iter()
        .copied()
        .zip(ids[span].iter().copied())
        .collect()
}

/// Entries sorted by (key, index), the order of every engine's results.
fn sorted(mut list: List) -> List {
    list.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    list
}

/// The exact lists of the rows of `queries` among `base` from an engine's k-NN search: its
/// indices (the exact top k by (key, index)) with their exact keys.
fn keyed_knn(
    e: &dyn Engine,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    m: &Metric,
) -> Result<PassRows> {
    let res = e.knn(base, queries, k, m)?;
    Ok((0..res.n_queries)
        .into_par_iter()
        .map(|q| keyed(res.row(q).0, base, queries, q, m))
        .collect())
}

/// Query `q`'s result indices with their exact keys, sorted.
fn keyed(ids: &[u32], base: &Dataset, queries: &Dataset, q: usize, m: &Metric) -> List {
    sorted(
        ids.iter()
            .map(|&i| (item_key(m, base, i as usize, queries, q), i))
            .collect(),
    )
}

/// Every row of the graph of `data` (k capped at n − 1) through the [`TileGraph`] seam: one
/// share of the whole triangle at tile edge `edge`, then its rows finished.
fn whole_graph<E: TileGraph>(
    e: &E,
    data: &Dataset,
    k: usize,
    m: &Metric,
    edge: usize,
) -> Result<PassRows> {
    let n = data.len();
    if n < 2 || k == 0 {
        return Ok(vec![List::new(); n]);
    }
    let mut running = None;
    e.extend(data, k, m, &mut running, edge, &|_, _| true)?;
    let share = running.ok_or_else(|| Error::device("graph share without lists (bug)"))?;
    e.finish(data, m, &share, 0..n)
}

/// The CPU engine's lists of the rows of `a` among `b` and of `b` among `a` (local indices):
/// the one tile pair (0, 1) of a share over the two sets as one, tile edge `a.len()` (a block
/// pair I < J has |I| ≥ |J|: only the last block is shorter).
fn cross_share(
    e: &CpuEngine,
    a: &Dataset,
    b: &Dataset,
    k: usize,
    m: &Metric,
) -> Result<(PassRows, PassRows)> {
    let both = joined(a, b)?;
    let mut running = None;
    e.extend(&both, k, m, &mut running, a.len(), &|i, j| (i, j) == (0, 1))?;
    let mut lists = running
        .ok_or_else(|| Error::device("graph share without lists (bug)"))?
        .lists;
    let at = a.len() as u32;
    let of_b = lists.split_off(a.len());
    let of_a = lists
        .into_iter()
        .map(|l| l.into_iter().map(|(key, i)| (key, i - at)).collect())
        .collect();
    Ok((of_a, of_b))
}

/// `a`'s items then `b`'s as one set (vectors of f64 storage stay f64; the others are f32
/// exactly, the exact keys of either being the same).
fn joined(a: &Dataset, b: &Dataset) -> Result<Dataset> {
    match (a, b) {
        (Dataset::Vectors(x), Dataset::Vectors(y)) => {
            let wide = [x, y]
                .iter()
                .any(|v| v.elem_type() == voisin::data::ElemType::F64);
            let set = if wide {
                let mut rows = x.rows_f64(0, x.len()).into_owned();
                rows.extend_from_slice(&y.rows_f64(0, y.len()));
                VectorSet::from_f64(x.len() + y.len(), x.dim(), rows)
            } else {
                let mut rows = x.rows_f32(0, x.len()).into_owned();
                rows.extend_from_slice(&y.rows_f32(0, y.len()));
                VectorSet::from_f32(x.len() + y.len(), x.dim(), rows)
            };
            Ok(set?.into())
        }
        (Dataset::Strings(x), Dataset::Strings(y)) => {
            let all = (0..x.len())
                .map(|i| x.get_string(i))
                .chain((0..y.len()).map(|i| y.get_string(i)));
            Ok(StringSet::from_strings(all)?.into())
        }
        _ => Err(Error::invalid(
            "blocks of one set must all be vectors or all strings",
        )),
    }
}

/// Runs `job` with the GIL released; a user metric's first exception (kept in `slot`) is the
/// answer when it raised one, a panic a `RuntimeError`.
fn detached<T: Send>(
    py: Python<'_>,
    slot: Option<&MetricError>,
    job: impl FnOnce() -> Result<T> + Send,
) -> PyResult<T> {
    let got = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)));
    if let Some(e) = slot.and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take()) {
        return Err(e);
    }
    match got {
        Ok(answer) => answer.map_err(py_err),
        Err(p) => Err(PyRuntimeError::new_err(format!(
            "voisin internal error: {}",
            crate::panic_message(p.as_ref())
        ))),
    }
}

/// The engines one worker process measures blocks with: the CPU engine, and the CUDA engine on
/// the worker's GPU under `cuda` (or `auto` when a GPU is usable).
///
/// Not part of the public API: `voisin.dask` keeps one per worker process.
#[pyclass(frozen, module = "voisin._voisin")]
pub struct BlockEngine {
    device: Device,
    cpu: CpuEngine,
    cuda: Option<CudaEngine>,
}

impl BlockEngine {
    /// The GPU when it takes `op` over `data` under `metric`; under `device="cuda"` what it
    /// cannot take is refused as the one-process functions refuse it.
    fn gpu_for(&self, data: &Dataset, m: &Metric, op: Op) -> Result<Option<&CudaEngine>> {
        let Some(gpu) = &self.cuda else {
            return Ok(None);
        };
        if self.device.is_cuda() {
            if voisin_engines::gpu_answers(data, m, op) {
                Ok(Some(gpu))
            } else {
                Err(engine::cpu_only(m, data))
            }
        } else if voisin_cuda::supports(data, m, op) {
            Ok(Some(gpu))
        } else {
            Ok(None)
        }
    }

    /// The engine answering `op` over `data`.
    fn for_op(&self, data: &Dataset, m: &Metric, op: Op) -> Result<&dyn Engine> {
        Ok(match self.gpu_for(data, m, op)? {
            Some(gpu) => gpu,
            None => &self.cpu,
        })
    }

    /// Local lists of a graph's block pair (see the module doc): `rows` among `cols` and
    /// `cols` among `rows`, or `rows` among themselves without `cols`.
    fn pair(
        &self,
        rows: &Dataset,
        cols: Option<&Dataset>,
        k: usize,
        m: &Metric,
    ) -> Result<(PassRows, PassRows)> {
        let Some(cols) = cols else {
            // The checkpointed-graph op: what the GPU's shares and proofs take (vectors).
            let own = match self.gpu_for(rows, m, Op::GraphCheckpointed)? {
                Some(gpu) => whole_graph(gpu, rows, k, m, gpu.tile_edge(rows, k, m)?)?,
                None => whole_graph(&self.cpu, rows, k, m, rows.len().max(1))?,
            };
            return Ok((own, PassRows::new()));
        };
        if rows.len() < cols.len() {
            return Err(Error::invalid(
                "graph block pair: the row block must be at least as long as the column block",
            ));
        }
        match self.gpu_for(rows, m, Op::Knn)? {
            Some(gpu) => Ok((
                keyed_knn(gpu, cols, rows, k, m)?,
                keyed_knn(gpu, rows, cols, k, m)?,
            )),
            None => cross_share(&self.cpu, rows, cols, k, m),
        }
    }
}

#[pymethods]
impl BlockEngine {
    #[new]
    #[pyo3(signature = (device = "auto", precision = "auto", threads = None, memory = None))]
    fn new(
        device: &str,
        precision: &str,
        threads: Option<usize>,
        memory: Option<usize>,
    ) -> PyResult<Self> {
        let config = EngineConfig {
            device: device.to_string(),
            precision: precision.to_string(),
            threads,
            memory_budget: memory,
            progress: None,
            cancel: Cancel::new(),
        };
        let (device, cpu, cuda) = engine::open_parts(&config).map_err(py_err)?;
        Ok(BlockEngine { device, cpu, cuda })
    }

    /// The engines this worker measures with, e.g. "cpu (2 threads)" or "cuda:0 + cpu (...)".
    #[getter]
    fn device(&self) -> String {
        match &self.cuda {
            Some(gpu) => format!("{} + {}", gpu.name(), self.cpu.name()),
            None => self.cpu.name(),
        }
    }

    /// The exact lists (keys, global indices) of a graph's block pair: block `rows` (items from
    /// `starts.0`) among block `cols` (from `starts.1`) and `cols` among `rows`; without `cols`,
    /// `rows` among themselves (the second lists are then `None`). At most `k` per row.
    #[pyo3(signature = (rows, cols, starts, k, metric_spec))]
    fn graph_pair<'py>(
        &self,
        py: Python<'py>,
        rows: &Bound<'py, PyAny>,
        cols: Option<&Bound<'py, PyAny>>,
        starts: (usize, usize),
        k: usize,
        metric_spec: &Bound<'py, PyAny>,
    ) -> PyResult<(ListsOut<'py>, Option<ListsOut<'py>>)> {
        let rows = dataset("rows", rows)?.0;
        let cols = cols.map(|c| dataset("cols", c).map(|d| d.0)).transpose()?;
        let (m, slot) = metric(metric_spec)?;
        let (a, b) = detached(py, slot.as_ref(), || {
            let (a, b) = self.pair(&rows, cols.as_ref(), k, &m)?;
            // Rows among cols hold cols' items; a diagonal block's rows its own.
            let a_at = if cols.is_some() { starts.1 } else { starts.0 };
            let b = cols.as_ref().map(|_| Rect::of(&b, starts.0)).transpose()?;
            Ok((Rect::of(&a, a_at)?, b))
        })?;
        Ok((a.out(py)?, b.map(|b| b.out(py)).transpose()?))
    }

    /// The exact lists (keys, global indices) of every query among the base shard `base`, whose
    /// first item is `base_start`: at most `k` a row.
    #[pyo3(signature = (base, queries, base_start, k, metric_spec))]
    fn knn_shard<'py>(
        &self,
        py: Python<'py>,
        base: &Bound<'py, PyAny>,
        queries: &Bound<'py, PyAny>,
        base_start: usize,
        k: usize,
        metric_spec: &Bound<'py, PyAny>,
    ) -> PyResult<ListsOut<'py>> {
        let (base, queries) = (dataset("base", base)?.0, dataset("queries", queries)?.0);
        let (m, slot) = metric(metric_spec)?;
        detached(py, slot.as_ref(), || {
            voisin::engine::check_pair(&base, &queries, &m)?;
            let e = self.for_op(&base, &m, Op::Knn)?;
            Rect::of(&keyed_knn(e, &base, &queries, k, &m)?, base_start)
        })?
        .out(py)
    }

    /// Every base item of the shard `base` (first item `base_start`) within `radius` of each
    /// query, as range lists: (offsets, keys, global indices), rows sorted by (key, index).
    #[pyo3(signature = (base, queries, base_start, radius, metric_spec))]
    fn range_shard<'py>(
        &self,
        py: Python<'py>,
        base: &Bound<'py, PyAny>,
        queries: &Bound<'py, PyAny>,
        base_start: usize,
        radius: f64,
        metric_spec: &Bound<'py, PyAny>,
    ) -> PyResult<RangeListsOut<'py>> {
        let (base, queries) = (dataset("base", base)?.0, dataset("queries", queries)?.0);
        let (m, slot) = metric(metric_spec)?;
        let flat = detached(py, slot.as_ref(), || {
            voisin::engine::check_pair(&base, &queries, &m)?;
            let e = self.for_op(&base, &m, Op::Range)?;
            let res = e.range(&base, &queries, radius, &m)?;
            let rows: PassRows = (0..res.n_queries())
                .into_par_iter()
                .map(|q| keyed(res.row(q).0, &base, &queries, q, &m))
                .collect();
            Flat::of(&rows, base_start)
        })?;
        Ok(flat.out(py))
    }
}

/// Range lists, flat: row r's entries are `offsets[r]..offsets[r + 1]`.
struct Flat {
    offsets: Vec<i64>,
    keys: Vec<f64>,
    ids: Vec<u32>,
}

impl Flat {
    /// `rows` (sorted, local indices) with `offset` added to every index.
    fn of(rows: &[List], offset: usize) -> Result<Flat> {
        let mut out = Flat {
            offsets: Vec::with_capacity(rows.len() + 1),
            keys: Vec::new(),
            ids: Vec::new(),
        };
        out.offsets.push(0);
        for r in rows {
            for &(key, i) in r {
                out.keys.push(key);
                out.ids.push(global(i, offset)?);
            }
            out.offsets.push(out.keys.len() as i64);
        }
        Ok(out)
    }

    fn out(self, py: Python<'_>) -> RangeListsOut<'_> {
        (
            PyArray1::from_vec(py, self.offsets),
            PyArray1::from_vec(py, self.keys),
            PyArray1::from_vec(py, self.ids),
        )
    }
}

/// Rectangular lists read from Python: keys and indices of one shape.
fn rect_in<'a>(
    keys: &'a PyReadonlyArray2<'_, f64>,
    ids: &'a PyReadonlyArray2<'_, u32>,
) -> PyResult<(&'a [f64], &'a [u32], usize, usize)> {
    let (ks, is) = (keys.shape(), ids.shape());
    if ks != is {
        return Err(py_err(Error::invalid(format!(
            "block lists: keys of shape {ks:?} but indices of shape {is:?}"
        ))));
    }
    Ok((keys.as_slice()?, ids.as_slice()?, ks[0], ks[1]))
}

/// The first `k` of each row of two sets of lists of the same rows over disjoint items: the
/// core's merge, row by row (associative and commutative: the order is total).
#[pyfunction]
#[pyo3(signature = (a_keys, a_ids, b_keys, b_ids, k))]
pub fn merge_block_lists<'py>(
    py: Python<'py>,
    a_keys: PyReadonlyArray2<'py, f64>,
    a_ids: PyReadonlyArray2<'py, u32>,
    b_keys: PyReadonlyArray2<'py, f64>,
    b_ids: PyReadonlyArray2<'py, u32>,
    k: usize,
) -> PyResult<ListsOut<'py>> {
    let (ak, ai, n, aw) = rect_in(&a_keys, &a_ids)?;
    let (bk, bi, nb, bw) = rect_in(&b_keys, &b_ids)?;
    if n != nb {
        return Err(py_err(Error::invalid(format!(
            "block lists to merge hold {n} and {nb} rows"
        ))));
    }
    let rect = detached(py, None, || {
        let rows: PassRows = (0..n)
            .into_par_iter()
            .map(|r| merge_lists(&row(ak, ai, aw, r), &row(bk, bi, bw, r), k))
            .collect();
        Rect::of(&rows, 0)
    })?;
    rect.out(py)
}

/// Range lists of one query block over disjoint base shards, merged: every entry of both, each
/// row sorted by (key, index).
#[pyfunction]
pub fn merge_range_lists<'py>(
    py: Python<'py>,
    a: (
        PyReadonlyArray1<'py, i64>,
        PyReadonlyArray1<'py, f64>,
        PyReadonlyArray1<'py, u32>,
    ),
    b: (
        PyReadonlyArray1<'py, i64>,
        PyReadonlyArray1<'py, f64>,
        PyReadonlyArray1<'py, u32>,
    ),
) -> PyResult<RangeListsOut<'py>> {
    let a = (a.0.as_slice()?, a.1.as_slice()?, a.2.as_slice()?);
    let b = (b.0.as_slice()?, b.1.as_slice()?, b.2.as_slice()?);
    let flat = detached(py, None, || {
        let (ra, rb) = (range_rows_in(a)?, range_rows_in(b)?);
        if ra.len() != rb.len() {
            return Err(Error::invalid(format!(
                "range lists to merge hold {} and {} rows",
                ra.len(),
                rb.len()
            )));
        }
        let rows: PassRows = ra
            .par_iter()
            .zip(&rb)
            .map(|(x, y)| merge_lists(x, y, usize::MAX))
            .collect();
        Flat::of(&rows, 0)
    })?;
    Ok(flat.out(py))
}

/// Rows of flat range lists, each checked to lie within the entries.
fn range_rows_in((offsets, keys, ids): (&[i64], &[f64], &[u32])) -> Result<PassRows> {
    if keys.len() != ids.len() || offsets.first() != Some(&0) {
        return Err(Error::invalid(
            "range lists: malformed offsets, keys or indices",
        ));
    }
    offsets
        .windows(2)
        .map(|w| {
            let span = usize::try_from(w[0]).ok().zip(usize::try_from(w[1]).ok());
            match span {
                Some((a, b)) if a <= b && b <= keys.len() => Ok(keys[a..b]
                    .iter()
                    .copied()
                    .zip(ids[a..b].iter().copied())
                    .collect()),
                _ => Err(Error::invalid("range lists: offsets out of order or range")),
            }
        })
        .collect()
}

/// Checks merged lists before they become results (they may come back from a folder): every
/// row `k` entries, indices below `n_items` and never the row's own item (`self_start`: the
/// item of row 0 of a graph block), keys not NaN, entries strictly in (key, index) order.
fn checked_rows(
    (keys, ids, n, w): (&[f64], &[u32], usize, usize),
    k: Option<usize>,
    n_items: usize,
    self_start: Option<usize>,
) -> Result<PassRows> {
    if let Some(k) = k.filter(|&k| k != w) {
        return Err(Error::invalid(format!(
            "block lists hold {w} entries a row, not k = {k}"
        )));
    }
    (0..n)
        .into_par_iter()
        .map(|r| {
            let list = row(keys, ids, w, r);
            check_row(&list, r, n_items, self_start.map(|s| s + r))?;
            Ok(list)
        })
        .collect()
}

/// One row's checks (see [`checked_rows`]).
fn check_row(list: &[(f64, u32)], r: usize, n_items: usize, own: Option<usize>) -> Result<()> {
    let bad = |what: String| Err(Error::invalid(format!("block lists: row {r} {what}")));
    for (e, &(key, i)) in list.iter().enumerate() {
        if i as usize >= n_items || own == Some(i as usize) || key.is_nan() {
            return bad(format!("holds neighbour {i} with key {key}"));
        }
        if e > 0 && !voisin::graph::lists::ordered(list[e - 1], (key, i)) {
            return bad("is not in order".into());
        }
    }
    Ok(())
}

/// How merged lists become rows: `voisin.dask`'s `_Rows`, read by attribute. `k`: entries a
/// row of k-NN lists; `n`: items of the set the indices point into (the columns);
/// `include_self`, `exact`: as the one-process functions' `include_self` and
/// `distances="f64"`.
#[derive(FromPyObject)]
pub struct Rows<'py> {
    k: usize,
    spec: Bound<'py, PyAny>,
    n: usize,
    include_self: bool,
    exact: bool,
}

impl Rows<'_> {
    /// The [`Form`] of a block's rows (NumPy arrays, not CSR: the client picks the index type
    /// once for the whole result, [`csr_narrow`]); the item itself, where asked, is already in
    /// them ([`knn_block_rows`]).
    fn form(&self) -> Form {
        Form {
            exact: self.exact,
            ..Form::default()
        }
    }
}

/// The exact distance of every key, in order: what the one process recomputes for
/// `distances="f64"` (its keys are these keys).
fn exact_of(keys: &[f64], m: &Metric) -> Vec<f64> {
    keys.par_iter()
        .with_min_len(256)
        .map(|&key| m.key_to_distance(key))
        .collect()
}

/// Merged lists of `k` a row as the one-process functions return them, shaped by the one
/// [`results::shape`]: `(distances, indices)`, float32 (float64 exact with `rows.exact`) and
/// int64. The lists are checked first ([`checked_rows`]); `first` is a graph block's first
/// item (no row may hold its own item) and `items` the block's own items, with which
/// `include_self` adds each row's item by its own key (`voisin::shape::rows_with_self`).
#[pyfunction]
#[pyo3(signature = (keys, ids, rows, first = None, items = None))]
pub fn knn_block_rows<'py>(
    py: Python<'py>,
    keys: PyReadonlyArray2<'py, f64>,
    ids: PyReadonlyArray2<'py, u32>,
    rows: Rows<'py>,
    first: Option<usize>,
    items: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let lists = rect_in(&keys, &ids)?;
    let (m, _) = metric(&rows.spec)?;
    let own = match (rows.include_self, first, items) {
        (false, ..) => None,
        (true, Some(first), Some(items)) => Some((first, dataset("items", items)?.0)),
        (true, ..) => {
            return Err(py_err(Error::invalid(
                "block rows: include_self needs the block's first item and its items",
            )))
        }
    };
    let (form, k, n) = (rows.form(), rows.k, rows.n);
    let out = detached(py, None, || {
        let mut checked = checked_rows(lists, Some(k), n, first)?;
        let k = match &own {
            Some((first, items)) if items.len() == checked.len() => {
                shape::rows_with_self(&mut checked, items, *first, &m);
                k + 1
            }
            Some(_) => {
                return Err(Error::invalid(
                    "block rows: items and rows differ in number",
                ))
            }
            None => k,
        };
        let keys: Vec<f64> = match form.exact {
            true => checked.iter().flatten().map(|e| e.0).collect(),
            false => Vec::new(),
        };
        let answer = Answer::Knn(KnnResult::from_rows(checked, k, &m));
        Ok(results::shape(answer, form, n, |_| exact_of(&keys, &m)))
    })?;
    out.into_py(py)
}

/// Flat lists read from Python: (offsets, keys, indices).
type FlatIn<'py> = (
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, u32>,
);

/// The rows of flat lists, each checked ([`check_row`]; no own-item check).
fn flat_rows(lists: &FlatIn<'_>, n_items: usize) -> PyResult<PassRows> {
    let flat = (
        lists.0.as_slice()?,
        lists.1.as_slice()?,
        lists.2.as_slice()?,
    );
    let rows = range_rows_in(flat).map_err(py_err)?;
    for (r, list) in rows.iter().enumerate() {
        check_row(list, r, n_items, None).map_err(py_err)?;
    }
    Ok(rows)
}

/// Merged range lists as the one-process `range_search` returns them, shaped by the one
/// [`results::shape`]: (offsets, indices, distances), int64 and float32 (float64 exact with
/// `rows.exact`); checked first.
#[pyfunction]
pub fn range_block_rows<'py>(
    py: Python<'py>,
    lists: FlatIn<'py>,
    rows: Rows<'py>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (m, _) = metric(&rows.spec)?;
    let (form, n) = (rows.form(), rows.n);
    let listed = flat_rows(&lists, n)?;
    let keys = lists.1.as_slice()?;
    let out = detached(py, None, || {
        let answer = Answer::Range(RangeResult::from_rows(listed, &m));
        Ok(results::shape(answer, form, n, |_| exact_of(keys, &m)))
    })?;
    out.into_py(py)
}

/// Pair entries handed to Python: (rows, indices, keys), flat, global item numbers.
type PiecesOut<'py> = (
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<f64>>,
);

/// The entries of a block's lists (flat, checked; row 0 is item `first`) whose pair belongs to
/// an earlier block (`pairs=True`: the pair {q, j}, j < q, lives in row j), one piece for each
/// block that starts at `starts[c]` (the first items of the blocks before this one, rising
/// from 0): (rows, indices, keys), in row order.
#[pyfunction]
pub fn pair_pieces<'py>(
    py: Python<'py>,
    lists: FlatIn<'py>,
    first: usize,
    starts: Vec<usize>,
    n_items: usize,
) -> PyResult<Vec<PiecesOut<'py>>> {
    if starts.first().is_some_and(|&s| s != 0) || starts.windows(2).any(|w| w[0] >= w[1]) {
        return Err(py_err(Error::invalid(
            "pair pieces: block starts must rise from 0",
        )));
    }
    let listed = flat_rows(&lists, n_items)?;
    let mut pieces = vec![(Vec::new(), Vec::new(), Vec::new()); starts.len()];
    for (r, list) in listed.iter().enumerate() {
        for &(key, j) in list.iter().filter(|&&(_, j)| (j as usize) < first) {
            let c = starts.partition_point(|&s| s <= j as usize) - 1;
            let piece = &mut pieces[c];
            piece.0.push(global(r as u32, first).map_err(py_err)?);
            piece.1.push(j);
            piece.2.push(key);
        }
    }
    Ok(pieces
        .into_iter()
        .map(|(rows, ids, keys)| {
            (
                PyArray1::from_vec(py, rows),
                PyArray1::from_vec(py, ids),
                PyArray1::from_vec(py, keys),
            )
        })
        .collect())
}

/// Pair entries read from Python: (rows, indices, keys).
type PiecesIn<'py> = (
    PyReadonlyArray1<'py, u32>,
    PyReadonlyArray1<'py, u32>,
    PyReadonlyArray1<'py, f64>,
);

/// The pair rows (`pairs=True`) of a block whose row 0 is item `first`, from its own lists
/// (flat, checked) and the [`pair_pieces`] of the blocks after it, in block order: the core's
/// [`voisin::shape::pair_rows`] over the entries in the one process's order, shaped by the
/// one [`results::shape`] as (offsets, indices, distances), int64 and float32 (float64 exact
/// with `rows.exact`, from each kept entry's exact key).
#[pyfunction]
pub fn block_pairs<'py>(
    py: Python<'py>,
    lists: FlatIn<'py>,
    first: usize,
    pieces: Vec<PiecesIn<'py>>,
    rows: Rows<'py>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (m, _) = metric(&rows.spec)?;
    let (form, n) = (rows.form(), rows.n);
    let listed = flat_rows(&lists, n)?;
    let mut incoming = Vec::with_capacity(pieces.len());
    for (rs, ids, keys) in &pieces {
        let (rs, ids, keys) = (rs.as_slice()?, ids.as_slice()?, keys.as_slice()?);
        if rs.len() != ids.len() || rs.len() != keys.len() {
            return Err(py_err(Error::invalid("pair pieces of unequal lengths")));
        }
        incoming.push((rs, ids, keys));
    }
    let out = detached(py, None, || {
        let dist = |key: f64| f32_value(m.key_to_distance(key));
        let own = listed.iter().enumerate().flat_map(|(r, list)| {
            list.iter()
                .map(move |&(key, j)| (first + r, j, dist(key), key))
        });
        let later = incoming.iter().flat_map(|&(rs, ids, keys)| {
            (0..rs.len()).map(move |e| (rs[e] as usize, ids[e], dist(keys[e]), keys[e]))
        });
        let paired = voisin::shape::pair_rows(first..first + listed.len(), own.chain(later));
        let keys: Vec<f64> = paired.iter().flatten().map(|&(_, _, key)| key).collect();
        let kept = paired
            .into_iter()
            .map(|row| row.into_iter().map(|(d, j, _)| (d, j)).collect())
            .collect();
        let answer = Answer::Range(RangeResult::from_rows_by(kept, f64::from));
        Ok(results::shape(answer, form, n, |_| exact_of(&keys, &m)))
    })?;
    out.into_py(py)
}

/// Whether a CSR result of `columns` columns, `offsets` row offsets and `entries` entries
/// takes int32 indices, as the one-process `output="csr"` does ([`results::narrow_csr`]).
#[pyfunction]
pub fn csr_narrow(columns: usize, offsets: usize, entries: usize) -> bool {
    results::narrow_csr(columns, offsets, entries)
}

/// Refuses NaN and infinite values of a block whose first item is item `start` of the whole
/// set, naming the value's row in the whole set (the one-process functions' line).
#[pyfunction]
pub fn check_block(
    py: Python<'_>,
    what: &str,
    block: &Bound<'_, PyAny>,
    start: usize,
) -> PyResult<()> {
    let data = dataset(what, block)?.0;
    detached(py, None, || {
        let Some(v) = data.as_vectors() else {
            return Ok(());
        };
        match v.find_non_finite() {
            None => Ok(()),
            Some((row, col)) => {
                let line = v.non_finite_line(row, col);
                let local = format!("row {row},");
                let whole = format!("row {},", start + row);
                Err(Error::invalid(format!(
                    "{what}: {}",
                    line.replacen(&local, &whole, 1)
                )))
            }
        }
    })
}

/// Adds this module's class and functions to the extension.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BlockEngine>()?;
    m.add_function(wrap_pyfunction!(merge_block_lists, m)?)?;
    m.add_function(wrap_pyfunction!(merge_range_lists, m)?)?;
    m.add_function(wrap_pyfunction!(knn_block_rows, m)?)?;
    m.add_function(wrap_pyfunction!(range_block_rows, m)?)?;
    m.add_function(wrap_pyfunction!(pair_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(block_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(csr_narrow, m)?)?;
    m.add_function(wrap_pyfunction!(check_block, m)?)?;
    Ok(())
}
