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
use std::sync::Arc;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use voisin::engine::Cancel;
use voisin::{Dataset, Error};
use voisin_index::{file, DatasetIndex, IndexEngine, IndexOp, Kind, Params};

use crate::engine::{device, factory};
use crate::{
    check_finite, dataset, knn_arrays, knn_out, metric, py_err, range_arrays, range_out, KnnOut,
    MetricError, Progress, RangeOut, Worker,
};

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
        }
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
        let data = dataset("base", data)?;
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
        let worker = Worker {
            progress: &progress_state,
            cancel: &cancel,
            metric_error: metric_error.as_ref(),
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

    /// For each query, its k nearest indexed items: (distances, indices), each `n × k`.
    #[pyo3(signature = (queries, k, progress = None))]
    fn knn<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<KnnOut<'py>> {
        let queries = dataset("queries", queries)?;
        check_finite("queries", &queries).map_err(py_err)?;
        let (engine, index) = (self.engine.clone(), self.index.clone());
        let arrays = self.worker().run(py, progress, move || {
            engine
                .knn(&index, &queries, k)
                .map(|s| knn_arrays(s.result))
        })?;
        knn_out(py, arrays)
    }

    /// For each indexed item, its k nearest other items: (distances, indices), each `n × k`.
    #[pyo3(signature = (k, progress = None))]
    fn graph<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<KnnOut<'py>> {
        let (engine, index, items) = (self.engine.clone(), self.index.clone(), self.items.clone());
        let arrays = self.worker().run(py, progress, move || {
            engine.graph(&index, &items, k).map(knn_arrays)
        })?;
        knn_out(py, arrays)
    }

    /// Every indexed item within `radius` of each query, in CSR form: (offsets, indices,
    /// distances), rows sorted by distance then index.
    #[pyo3(signature = (queries, radius, progress = None))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        radius: f64,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<RangeOut<'py>> {
        let queries = dataset("queries", queries)?;
        check_finite("queries", &queries).map_err(py_err)?;
        let (engine, index) = (self.engine.clone(), self.index.clone());
        let arrays = self.worker().run(py, progress, move || {
            engine
                .range(&index, &queries, radius)
                .map(|s| range_arrays(s.result))
        })?;
        Ok(range_out(py, arrays))
    }
}
