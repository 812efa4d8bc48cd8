//! `voisin._voisin.MetricIndex`: a metric index (List of Clusters, SSS, cover tree or k-d tree)
//! over a fixed set, built once and searched many times, through the index face
//! (`voisin_index::IndexEngine`) that the engine factory opens for `device` (`cpu`; `cuda` /
//! `cuda:N` the GPUs' index engine; `auto` each request where the factory routes it), and
//! written to or read from voisin's index files (those of `voisin index build` / `query`).
//!
//! It answers `knn`, `range` and `graph` with the signatures of `voisin._voisin.Index`, so the
//! Python half uses either alike. Requests run on a worker thread as `Index`'s do (lib.rs's
//! `Worker`): the GIL released, progress handed to a callback, Ctrl-C raising
//! `KeyboardInterrupt` (an index search does not look at the cancellation token, so it ends
//! in the background).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use voisin::engine::Cancel;
use voisin::{Dataset, Error};
use voisin_index::{file, DatasetIndex, IndexEngine, IndexOp, Kind, Params};

use crate::engine::{device, factory};
use crate::results::{self, Answer, Form};
use crate::{check_finite, dataset, metric, py_err, MetricError, Progress, Worker};

/// A metric index over a fixed set and the index engine that answers over it.
///
/// Not part of the public API: use `voisin.Index` or an estimator's `algorithm`.
#[pyclass(frozen, module = "voisin._voisin")]
pub(crate) struct MetricIndex {
    /// The indexed items (the index's own copy for an index read from a file).
    items: Arc<Dataset>,
    index: Arc<DatasetIndex>,
    engine: Arc<dyn IndexEngine>,
    progress: Arc<Progress>,
    cancel: Cancel,
    metric_error: Option<MetricError>,
    /// The end of a request interrupted before its worker stopped (see lib.rs's `Worker`).
    stopping: Mutex<Option<mpsc::Receiver<()>>>,
}

/// The index engine for a Python `device=` string and thread count.
fn open_engine(device_spec: &str, threads: Option<usize>) -> voisin::Result<Arc<dyn IndexEngine>> {
    let config = crate::engine::EngineConfig {
        device: device_spec.to_string(),
        precision: "auto".into(),
        threads,
        memory_budget: None,
        progress: None,
        cancel: Cancel::new(),
    };
    let dev = device(device_spec)?;
    let factory = factory(&config, voisin_cuda::Precision::default());
    voisin_engines::open_indexes(dev, &factory).map(Arc::from)
}

impl MetricIndex {
    fn worker(&self) -> Worker<'_> {
        Worker {
            progress: &self.progress,
            cancel: &self.cancel,
            metric_error: self.metric_error.as_ref(),
            stopping: &self.stopping,
        }
    }

    /// Runs `ask` (an answer over the indexed items for `queries`, the items themselves when
    /// `None`) on the worker thread and shapes it as `form` says, as `Index`'s requests are.
    fn shaped<'py>(
        &self,
        py: Python<'py>,
        progress: Option<&Bound<'py, PyAny>>,
        queries: Option<Dataset>,
        form: Form,
        ask: impl FnOnce(&dyn IndexEngine, &DatasetIndex, &Dataset) -> voisin::Result<Answer>
            + Send
            + 'static,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(q) = &queries {
            check_finite("queries", q).map_err(py_err)?;
        }
        let (engine, index, items) = (self.engine.clone(), self.index.clone(), self.items.clone());
        let out = self.worker().run(py, progress, move || {
            let q = queries.as_ref().unwrap_or(&items);
            let answer = ask(engine.as_ref(), &index, q)?;
            Ok(results::shape_over(
                answer,
                form,
                (&items, q),
                index.metric(),
            ))
        })?;
        out.into_py(py)
    }

    /// The search op of `queries` (what the factory routes by).
    fn op<'a>(&'a self, queries: &'a Dataset) -> IndexOp<'a> {
        IndexOp::Search {
            index: &self.index,
            queries,
        }
    }
}

#[pymethods]
impl MetricIndex {
    /// Builds the index `kind` ("lc", "sss", "cover", "kd") over `data` under `metric_spec`
    /// (checked for NaN and infinities first) on `device`.
    #[new]
    #[pyo3(signature = (data, metric_spec, kind, device = "auto", threads = None, cluster_size = 32, alpha = 0.5, max_pivots = 64, radius_base = 2.0, progress = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        metric_spec: &Bound<'_, PyAny>,
        kind: &str,
        device: &str,
        threads: Option<usize>,
        cluster_size: usize,
        alpha: f64,
        max_pivots: usize,
        radius_base: f64,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let data = dataset("base", data)?.0;
        check_finite("base", &data).map_err(py_err)?;
        let (metric, metric_error) = metric(metric_spec)?;
        let kind: Kind = kind.parse().map_err(py_err)?;
        let params = Params {
            cluster_size,
            alpha,
            max_pivots,
            base: radius_base,
        };
        params.check().map_err(py_err)?;
        voisin::engine::check_metric(&data, &metric).map_err(py_err)?;
        let engine = open_engine(device, threads).map_err(py_err)?;
        let items = Arc::new(data);
        let (progress_state, cancel) = (Arc::new(Progress::default()), Cancel::new());
        let stopping = Mutex::new(None);
        let worker = Worker {
            progress: &progress_state,
            cancel: &cancel,
            metric_error: metric_error.as_ref(),
            stopping: &stopping,
        };
        let (e, d, sink) = (engine.clone(), items.clone(), progress_state.clone());
        let n = items.len() as u64;
        let index = worker.run(py, progress, move || {
            sink.total.store(n, Ordering::Relaxed);
            let placed = |done: usize| sink.done.store(done as u64, Ordering::Relaxed);
            e.build(&d, metric, kind, &params, &placed)
        })?;
        Ok(MetricIndex {
            items,
            index: Arc::new(index),
            engine,
            progress: progress_state,
            cancel,
            metric_error,
            stopping,
        })
    }

    /// Reads an index file (written by `save` or by `voisin index build`), to be searched on
    /// `device`. A file that is not a sound index is a `ValueError` naming the problem.
    #[staticmethod]
    #[pyo3(signature = (path, device = "auto", threads = None))]
    fn load(path: PathBuf, device: &str, threads: Option<usize>) -> PyResult<Self> {
        let engine = open_engine(device, threads).map_err(py_err)?;
        let index = file::load(&path).map_err(|e| match e {
            Error::Io(io) => {
                PyOSError::new_err(format!("{}: cannot read the index: {io}", path.display()))
            }
            other => py_err(Error::invalid(format!("{}: {other}", path.display()))),
        })?;
        Ok(MetricIndex {
            items: Arc::new(index.items().map_err(py_err)?),
            index: Arc::new(index),
            engine,
            progress: Arc::new(Progress::default()),
            cancel: Cancel::new(),
            metric_error: None,
            stopping: Mutex::new(None),
        })
    }

    /// Writes the index file (all or nothing; a user metric cannot be saved).
    fn save(&self, path: PathBuf) -> PyResult<()> {
        let bytes = file::to_bytes(&self.index).map_err(py_err)?;
        voisin::commit::write_file(&path, &bytes).map_err(|e| py_err(e.into()))
    }

    fn __len__(&self) -> usize {
        self.index.len()
    }

    /// Dimension of the indexed vectors, None for strings.
    #[getter]
    fn dim(&self) -> Option<usize> {
        self.items.as_vectors().map(|v| v.dim())
    }

    /// The structure: "lc", "sss", "cover" or "kd".
    #[getter]
    fn kind(&self) -> &'static str {
        self.index.kind().name()
    }

    /// The metric's canonical name.
    #[getter]
    fn metric(&self) -> String {
        self.index.metric().name()
    }

    /// Distance evaluations the build made (0 for an index read from a file).
    #[getter]
    fn build_evals(&self) -> u64 {
        self.index.build_evals()
    }

    /// "lc index over 1000 x 3 vectors (euclidean)".
    fn describe(&self) -> String {
        self.index.describe()
    }

    /// The engine that searches this index for queries like its items, e.g. "cpu" or the
    /// GPU's name.
    #[getter]
    fn device(&self) -> String {
        self.engine.answering(&self.op(&self.items))
    }

    /// For each query, its k nearest indexed items, shaped as `Index.knn` shapes them.
    #[pyo3(signature = (queries, k, progress = None, exact = false, csr = false))]
    fn knn<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
        exact: bool,
        csr: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let queries = dataset("queries", queries)?.0;
        let form = Form {
            exact,
            csr,
            ..Form::default()
        };
        self.shaped(py, progress, Some(queries), form, move |e, index, q| {
            e.knn(index, q, k).map(|s| Answer::Knn(s.result))
        })
    }

    /// For each indexed item, its k nearest other items, shaped as `Index.graph` shapes them.
    #[pyo3(signature = (k, progress = None, include_self = false, exact = false, pairs = false, csr = false))]
    #[allow(clippy::too_many_arguments)]
    fn graph<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
        include_self: bool,
        exact: bool,
        pairs: bool,
        csr: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let form = Form::of_graph(exact, include_self, pairs, csr)?;
        self.shaped(py, progress, None, form, move |e, index, items| {
            e.graph(index, items, k).map(Answer::Knn)
        })
    }

    /// Every indexed item within `radius` of each query, shaped as `Index.range` shapes them
    /// (`pairs`: the queries are the indexed items, each unordered pair once).
    #[pyo3(signature = (queries, radius, progress = None, exact = false, pairs = false, csr = false))]
    #[allow(clippy::too_many_arguments)]
    fn range<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        radius: f64,
        progress: Option<&Bound<'py, PyAny>>,
        exact: bool,
        pairs: bool,
        csr: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let queries = dataset("queries", queries)?.0;
        let form = Form {
            exact,
            pairs,
            csr,
            ..Form::default()
        };
        self.shaped(py, progress, Some(queries), form, move |e, index, q| {
            e.range(index, q, radius).map(|s| Answer::Range(s.result))
        })
    }
}
