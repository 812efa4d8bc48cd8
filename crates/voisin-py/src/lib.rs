//! `voisin._voisin`: the native half of the Python package.
//!
//! One class, [`Index`]: a base data set (vectors read in place from a NumPy array, or strings),
//! a metric and the engine that answers over it. The Python half (`python/voisin`) checks and
//! converts inputs, builds the public functions and the scikit-learn estimators on it.
//!
//! Every request runs on a worker thread (of rayon's global pool) while the calling thread waits
//! with the GIL released, waking every 100 ms to look for signals (Ctrl-C raises
//! `KeyboardInterrupt`) and to hand progress to a Python callback. Engine errors become
//! `ValueError` (bad input) or `RuntimeError` (device failure) with the engine's one-line
//! message; a panic becomes a `RuntimeError`, never a `PanicException`.

mod engine;

/// The allocator of the `voisin` binary (crates/voisin-cli/src/main.rs says why). Memory the
/// extension hands to NumPy stays Rust's: arrays made from Rust vectors free them through it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use half::f16;
use numpy::{Element, PyArray1, PyArray2, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{
    PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use voisin::data::{Buffer, SharedSlice, VectorData};
use voisin::engine::{Cancel, Op, Prepared, ProgressFn};
use voisin::metric::CustomMetric;
use voisin::{Dataset, Engine, Metric, StringSet, VectorSet};

use engine::EngineConfig;

/// An engine error as the Python exception it stands for.
fn py_err(e: voisin::Error) -> PyErr {
    match e {
        voisin::Error::InvalidInput(m) => PyValueError::new_err(m),
        voisin::Error::Device(m) => PyRuntimeError::new_err(m),
        voisin::Error::Io(e) => PyOSError::new_err(e.to_string()),
        voisin::Error::OutOfMemory(m) => PyMemoryError::new_err(m),
        voisin::Error::Cancelled => PyKeyboardInterrupt::new_err("cancelled"),
    }
}

/// Rows of a C-contiguous, aligned NumPy array read in place. The reference keeps the array
/// alive; NumPy never moves an array's data while a reference to it exists.
struct NumpyRows<T> {
    _owner: Py<PyAny>,
    ptr: *const T,
    len: usize,
}

// SAFETY: the pointer is into memory owned by the referenced array, which outlives `self`; it
// is only read.
unsafe impl<T> Send for NumpyRows<T> {}
unsafe impl<T> Sync for NumpyRows<T> {}

impl<T> SharedSlice<T> for NumpyRows<T> {
    fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised, aligned values (checked when built).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A 2-D array as vector storage: in place when C-contiguous and aligned, copied otherwise.
fn vector_rows<T: Element + bytemuck::Pod>(
    arr: &Bound<'_, PyArray2<T>>,
    wrap: fn(Buffer<T>) -> VectorData,
) -> PyResult<VectorSet> {
    let (n, d) = (arr.shape()[0], arr.shape()[1]);
    let ptr = arr.data() as *const T;
    let buffer = if arr.is_c_contiguous() && (ptr as usize).is_multiple_of(align_of::<T>()) {
        Buffer::Shared(Arc::new(NumpyRows {
            _owner: arr.clone().into_any().unbind(),
            ptr,
            len: n * d,
        }))
    } else {
        Buffer::Owned(arr.readonly().as_array().iter().copied().collect())
    };
    VectorSet::new(n, d, wrap(buffer)).map_err(py_err)
}

/// Refuses NaN and infinite values with their position (the CLI's message, less its file name
/// and its `--allow-nan` hint). Strings pass.
fn check_finite(what: &str, data: &Dataset) -> voisin::Result<()> {
    let Some(v) = data.as_vectors() else {
        return Ok(());
    };
    match v.find_non_finite() {
        None => Ok(()),
        Some((row, col)) => Err(voisin::Error::invalid(format!(
            "{what}: {}",
            v.non_finite_line(row, col)
        ))),
    }
}

/// A data set from what the Python half hands over: a 2-D float32/float16/uint8/float64 array or a
/// list of `str`. Its values are not yet checked for NaN and infinities ([`check_finite`]).
fn dataset(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Dataset> {
    if let Ok(list) = obj.cast::<PyList>() {
        let mut set = StringSet::new();
        for (i, item) in list.iter().enumerate() {
            let s = item.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what}: item {i} is not a str (strings take metric levenshtein)"
                ))
            })?;
            set.push(&s.to_cow()?).map_err(py_err)?;
        }
        return Ok(set.into());
    }
    let set = if let Ok(a) = obj.cast::<PyArray2<f32>>() {
        vector_rows(a, VectorData::F32)?
    } else if let Ok(a) = obj.cast::<PyArray2<f16>>() {
        vector_rows(a, VectorData::F16)?
    } else if let Ok(a) = obj.cast::<PyArray2<u8>>() {
        vector_rows(a, VectorData::U8)?
    } else if let Ok(a) = obj.cast::<PyArray2<f64>>() {
        // f32 storage when every value is an f32 number, else f64, answered exactly.
        vector_rows(a, VectorData::compact_buffer)?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected a 2-D float32, float16, uint8 or float64 array or a list of str"
        )));
    };
    Ok(set.into())
}

/// Where a Python metric function's first exception waits for the end of the request.
type MetricError = Arc<Mutex<Option<PyErr>>>;

/// A Python callable as a user metric. The first exception it raises is kept and re-raised when
/// the request ends; the pairs measured after it count as infinitely far.
struct PyDistance {
    func: Py<PyAny>,
    error: MetricError,
}

impl PyDistance {
    fn call(&self, args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>>) -> f64 {
        Python::attach(|py| {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return f64::INFINITY;
            }
            let value = args(py).and_then(|r| r.extract::<f64>());
            match value {
                Ok(v) if !v.is_nan() => v,
                Ok(_) => {
                    *slot = Some(PyValueError::new_err("the metric function returned NaN"));
                    f64::INFINITY
                }
                Err(e) => {
                    *slot = Some(e);
                    f64::INFINITY
                }
            }
        })
    }
}

/// A metric from a name (`"euclidean"`, `"minkowski:3"`, …) or a callable.
fn metric(obj: &Bound<'_, PyAny>) -> PyResult<(Metric, Option<MetricError>)> {
    if let Ok(name) = obj.cast::<PyString>() {
        let m: Metric = name.to_cow()?.parse().map_err(py_err)?;
        return Ok((m, None));
    }
    if !obj.is_callable() {
        return Err(PyTypeError::new_err(
            "metric must be a name such as 'euclidean' or a callable f(a, b) -> float",
        ));
    }
    let name = obj
        .getattr("__name__")
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| "callable".into());
    let error = Arc::new(Mutex::new(None));
    let vectors = Arc::new(PyDistance {
        func: obj.clone().unbind(),
        error: error.clone(),
    });
    let strings = vectors.clone();
    let wide = vectors.clone();
    let custom = CustomMetric {
        name,
        vectors: Some(Arc::new(move |a: &[f32], b: &[f32]| {
            vectors.call(|py| {
                let a = PyArray1::from_iter(py, a.iter().map(|&x| f64::from(x)));
                let b = PyArray1::from_iter(py, b.iter().map(|&x| f64::from(x)));
                vectors.func.bind(py).call1((a, b))
            })
        })),
        // The stored values themselves: f64 data reaches the function unrounded.
        vectors_f64: Some(Arc::new(move |a: &[f64], b: &[f64]| {
            wide.call(|py| {
                let a = PyArray1::from_slice(py, a);
                let b = PyArray1::from_slice(py, b);
                wide.func.bind(py).call1((a, b))
            })
        })),
        strings: Some(Arc::new(move |a: &[char], b: &[char]| {
            strings.call(|py| {
                let a: String = a.iter().collect();
                let b: String = b.iter().collect();
                strings.func.bind(py).call1((a, b))
            })
        })),
    };
    Ok((Metric::Custom(custom), Some(error)))
}

/// Work done and to do, written by the engine from any thread, read by the waiting thread.
#[derive(Default)]
struct Progress {
    done: AtomicU64,
    total: AtomicU64,
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// A base data set, a metric and the engine that answers over it.
///
/// Not part of the public API: use `voisin.knn`, `voisin.range_search`, `voisin.knn_graph` or
/// the estimators.
#[pyclass(frozen, module = "voisin._voisin")]
struct Index {
    data: Arc<Dataset>,
    metric: Metric,
    engine: Arc<dyn Engine>,
    progress: Arc<Progress>,
    metric_error: Option<MetricError>,
    /// Nanoseconds the engine took for the last request (for benchmarks).
    last_call: Arc<AtomicU64>,
    /// The engine's cancellation token, set on Ctrl-C.
    cancel: Cancel,
    /// Whether the base's values are known to be finite: scanned when the index is built, or,
    /// for a one-shot call (`check=False`), beside its first request.
    base_checked: Arc<AtomicBool>,
    /// A fitted base (`check=True`): prepared by the engine at its first search and kept for
    /// the next ones (on a GPU, the rows stay in device memory while the index lives).
    kept: Option<Arc<Kept>>,
}

/// The slot of a fitted base's prepared form, empty until its first search.
type Kept = Mutex<Option<Arc<dyn Prepared>>>;

/// The prepared base in `slot`, made by `engine` at the first call.
fn prepared(
    slot: &Kept,
    engine: &Arc<dyn Engine>,
    base: &Arc<Dataset>,
    metric: &Metric,
) -> voisin::Result<Arc<dyn Prepared>> {
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = &*slot {
        return Ok(Arc::clone(p));
    }
    let p: Arc<dyn Prepared> = Arc::from(Arc::clone(engine).prepare(Arc::clone(base), metric)?);
    *slot = Some(Arc::clone(&p));
    Ok(p)
}

/// (distances, indices) arrays handed to Python.
type KnnOut<'py> = (Bound<'py, PyArray2<f64>>, Bound<'py, PyArray2<i64>>);
/// (offsets, indices, distances) arrays handed to Python.
type RangeOut<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
);

/// Distances as float64 and indices as int64, `n × k`, converted off the GIL.
type KnnArrays = (usize, usize, Vec<f64>, Vec<i64>);
/// CSR offsets, indices and distances of a range search.
type RangeArrays = (Vec<i64>, Vec<i64>, Vec<f64>);

fn knn_arrays(r: voisin::KnnResult) -> KnnArrays {
    let d = r.distances.iter().map(|&x| f64::from(x)).collect();
    let i = r.indices.iter().map(|&x| i64::from(x)).collect();
    (r.n_queries, r.k, d, i)
}

fn knn_out<'py>(py: Python<'py>, (n, k, d, i): KnnArrays) -> PyResult<KnnOut<'py>> {
    Ok((
        PyArray1::from_vec(py, d).reshape([n, k])?,
        PyArray1::from_vec(py, i).reshape([n, k])?,
    ))
}

impl Index {
    /// One request: checks the queries against the base, times the engine call `ask`, and
    /// converts its result with `convert`, all on the worker thread (see [`Index::run`]).
    ///
    /// NaN and infinities (in the queries, and in the base while it is not checked) are
    /// refused with their position. An engine that refuses them itself (the GPU's norms show
    /// them at no cost) is trusted with that, and the values are scanned only after such a
    /// refusal, to name the first one. Otherwise, while the base is not checked, the scan runs
    /// on its own thread beside the engine's call, so that a one-shot call does not read a large
    /// base once more before the work starts; a value it finds stops the engine through the
    /// cancellation token, and its error is the answer. Queries alone are scanned before the
    /// call.
    fn request<R, T: Send + 'static>(
        &self,
        py: Python<'_>,
        progress: Option<&Bound<'_, PyAny>>,
        queries: Option<Dataset>,
        op: Op,
        ask: impl FnOnce(&Arc<dyn Engine>, &Arc<Dataset>, Option<&Dataset>, &Metric) -> voisin::Result<R>
            + Send
            + 'static,
        convert: impl FnOnce(R) -> T + Send + 'static,
    ) -> PyResult<T> {
        let (engine, base, metric) = (self.engine.clone(), self.data.clone(), self.metric.clone());
        let (clock, checked, cancel) = (
            self.last_call.clone(),
            self.base_checked.clone(),
            self.cancel.clone(),
        );
        self.run(py, progress, move || {
            let scan_base = !checked.load(Ordering::Acquire);
            let scan = || {
                (if scan_base {
                    check_finite("base", &base)
                } else {
                    Ok(())
                })
                .and_then(|()| {
                    queries
                        .as_ref()
                        .map_or(Ok(()), |q| check_finite("queries", q))
                })
            };
            let call = || {
                queries
                    .as_ref()
                    .map_or(Ok(()), |q| voisin::engine::check_pair(&base, q, &metric))
                    .and_then(|()| {
                        let start = Instant::now();
                        let answer = ask(&engine, &base, queries.as_ref(), &metric);
                        clock.store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        answer
                    })
            };
            let engine_refuses = [Some(&*base), queries.as_ref()]
                .into_iter()
                .flatten()
                .all(|d| engine.refuses_non_finite(d, &metric, op));
            let answer = if engine_refuses {
                let answer = call();
                if let Err(voisin::Error::InvalidInput(_)) = &answer {
                    scan()?;
                }
                answer
            } else if !scan_base {
                // Queries alone cost less to scan than to search: scanned first, here, a small
                // batch pays no thread for it.
                scan().and_then(|()| call())
            } else {
                std::thread::scope(|s| {
                    let side = s.spawn(|| {
                        let found = scan();
                        if found.is_err() {
                            cancel.cancel();
                        }
                        found
                    });
                    let answer = call();
                    side.join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
                    answer
                })
            };
            if answer.is_ok() && scan_base {
                checked.store(true, Ordering::Release);
            }
            answer.map(convert)
        })
    }

    /// Runs `job` on a worker thread; see the module documentation.
    fn run<T: Send + 'static>(
        &self,
        py: Python<'_>,
        progress: Option<&Bound<'_, PyAny>>,
        job: impl FnOnce() -> voisin::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        self.progress.done.store(0, Ordering::Relaxed);
        self.progress.total.store(0, Ordering::Relaxed);
        self.cancel.reset();
        if let Some(slot) = &self.metric_error {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let (tx, mut rx) = mpsc::channel();
        // A thread of rayon's global pool, started once: a fresh thread per request paid its
        // start, and on a GPU the driver's per-thread set-up, on every small batch.
        rayon::spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(job)));
        });
        let mut shown = (0, 0);
        loop {
            let (back, got) = py.detach(move || {
                let got = rx.recv_timeout(Duration::from_millis(100));
                (rx, got)
            });
            rx = back;
            if let Some(callback) = progress {
                let now = (
                    self.progress.done.load(Ordering::Relaxed),
                    self.progress.total.load(Ordering::Relaxed),
                );
                if now != shown && now.1 > 0 {
                    callback.call1(now)?;
                    shown = now;
                }
            }
            match got {
                Ok(answer) => {
                    if let Some(slot) = &self.metric_error {
                        if let Some(e) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                            return Err(e);
                        }
                    }
                    return match answer {
                        Ok(result) => result.map_err(py_err),
                        Err(p) => Err(PyRuntimeError::new_err(format!(
                            "voisin internal error: {}",
                            panic_message(p.as_ref())
                        ))),
                    };
                }
                // Ctrl-C: the engine is told to stop (it looks at the token between tiles and
                // query blocks), given a quarter of a second to do so, and the exception is raised.
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(interrupt) = py.check_signals() {
                        self.cancel.cancel();
                        py.detach(move || {
                            let _ = rx.recv_timeout(Duration::from_millis(250));
                        });
                        return Err(interrupt);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "voisin internal error: the worker ended without an answer",
                    ))
                }
            }
        }
    }
}

#[pymethods]
impl Index {
    /// `check=False` defers the scan of the base for NaN and infinities to the first request,
    /// where it runs beside the engine (for one-shot calls). A fitted base (`check=True`) is
    /// checked here and prepared by the engine at its first search, then kept for the next
    /// ones (on a GPU, in device memory).
    #[new]
    #[pyo3(signature = (data, metric_spec, device = "auto", precision = "auto", threads = None, memory = None, check = true))]
    fn new(
        data: &Bound<'_, PyAny>,
        metric_spec: &Bound<'_, PyAny>,
        device: &str,
        precision: &str,
        threads: Option<usize>,
        memory: Option<usize>,
        check: bool,
    ) -> PyResult<Self> {
        let data = dataset("base", data)?;
        if check {
            check_finite("base", &data).map_err(py_err)?;
        }
        let (metric, metric_error) = metric(metric_spec)?;
        voisin::engine::check_metric(&data, &metric).map_err(py_err)?;
        let progress = Arc::new(Progress::default());
        let sink = progress.clone();
        let progress_fn: ProgressFn = Arc::new(move |done, total| {
            sink.done.store(done, Ordering::Relaxed);
            sink.total.store(total, Ordering::Relaxed);
        });
        let config = EngineConfig {
            device: device.to_string(),
            precision: precision.to_string(),
            threads,
            memory_budget: memory,
            progress: Some(progress_fn),
            cancel: Cancel::new(),
        };
        let engine = catch_unwind(AssertUnwindSafe(|| engine::open(&config, &data, &metric)))
            .map_err(|p| {
                PyRuntimeError::new_err(format!(
                    "voisin internal error: {}",
                    panic_message(p.as_ref())
                ))
            })?
            .map_err(py_err)?;
        Ok(Index {
            data: Arc::new(data),
            metric,
            engine,
            progress,
            metric_error,
            last_call: Arc::new(AtomicU64::new(0)),
            cancel: config.cancel.clone(),
            base_checked: Arc::new(AtomicBool::new(check)),
            kept: check.then(|| Arc::new(Mutex::new(None))),
        })
    }

    /// Number of base items.
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// Dimension of the base vectors, None for strings.
    #[getter]
    fn dim(&self) -> Option<usize> {
        self.data.as_vectors().map(|v| v.dim())
    }

    /// The engine that answers over this base, e.g. "cpu (2 threads)" or "cuda:0" (under
    /// device="auto", the one the auto engine picks for it).
    #[getter]
    fn device(&self) -> String {
        self.engine.answering(&self.data, &self.metric, Op::Knn)
    }

    /// Seconds the engine itself took for the last request (input checks and result
    /// conversion excluded), for comparing the bindings' overhead.
    #[getter]
    fn last_call_seconds(&self) -> f64 {
        self.last_call.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// The metric's canonical name.
    #[getter]
    fn metric(&self) -> String {
        self.metric.name()
    }

    /// For each query, its k nearest base items: (distances, indices), each `n × k`.
    #[pyo3(signature = (queries, k, progress = None))]
    fn knn<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<KnnOut<'py>> {
        let queries = dataset("queries", queries)?;
        let kept = self.kept.clone();
        let arrays = self.request(
            py,
            progress,
            Some(queries),
            Op::Knn,
            move |e, base, q, m| {
                let q = q.unwrap_or(base);
                match &kept {
                    Some(slot) => prepared(slot, e, base, m)?.knn(q, k),
                    None => e.knn(base, q, k, m),
                }
            },
            knn_arrays,
        )?;
        knn_out(py, arrays)
    }

    /// For each base item, its k nearest other items: (distances, indices), each `n × k`.
    #[pyo3(signature = (k, progress = None))]
    fn graph<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<KnnOut<'py>> {
        let arrays = self.request(
            py,
            progress,
            None,
            Op::Graph,
            move |e, base, _, m| e.graph(base, k, m),
            knn_arrays,
        )?;
        knn_out(py, arrays)
    }

    /// Every base item within `radius` of each query, in CSR form: (offsets, indices,
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
        let kept = self.kept.clone();
        let (o, i, d): RangeArrays = self.request(
            py,
            progress,
            Some(queries),
            Op::Range,
            move |e, base, q, m| {
                let q = q.unwrap_or(base);
                match &kept {
                    Some(slot) => prepared(slot, e, base, m)?.range(q, radius),
                    None => e.range(base, q, radius, m),
                }
            },
            |r| {
                (
                    r.offsets.iter().map(|&x| x as i64).collect(),
                    r.indices.iter().map(|&x| i64::from(x)).collect(),
                    r.distances.iter().map(|&x| f64::from(x)).collect(),
                )
            },
        )?;
        Ok((
            PyArray1::from_vec(py, o),
            PyArray1::from_vec(py, i),
            PyArray1::from_vec(py, d),
        ))
    }
}

/// Whether a CUDA GPU with its driver, NVRTC and cuBLAS is usable.
#[pyfunction]
fn cuda_available() -> bool {
    engine::cuda_available()
}

#[pymodule]
fn _voisin(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Index>()?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    // float64 arrays (and integers past 2^24) are answered for their own values (f64 storage).
    m.add("EXACT_FLOAT64", true)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
