//! `voisin._voisin`: the native half of the Python package.
//!
//! Two classes: [`Index`], a base data set (vectors read in place from a NumPy array, or
//! strings), a metric and the brute-force engine that answers over it; and
//! `indexes::MetricIndex`, a metric index over a set with the index engine that answers over it
//! (index files too). The Python half (`python/voisin`) checks and converts inputs, builds the
//! public functions, `voisin.Index` and the scikit-learn estimators on them.
//!
//! Every request runs on a worker thread (of rayon's global pool) while the calling thread waits
//! with the GIL released, waking every 100 ms to look for signals (Ctrl-C raises
//! `KeyboardInterrupt`) and to hand progress to a Python callback. Engine errors become
//! `ValueError` (bad input) or `RuntimeError` (device failure) with the engine's one-line
//! message; a panic becomes a `RuntimeError`, never a `PanicException`.

mod blocks;
mod cuda;
mod dlpack;
mod engine;
mod indexes;
mod results;

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
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use voisin::data::{Buffer, SharedSlice, VectorData};
use voisin::engine::{Cancel, Op, Prepared, ProgressFn};
use voisin::metric::CustomMetric;
use voisin::{Dataset, Engine, Metric, StringSet, VectorSet};

use engine::EngineConfig;
use results::{Answer, Form};

/// An engine error as the Python exception it stands for, in Python's words
/// ([`python_words`]).
fn py_err(e: voisin::Error) -> PyErr {
    match e {
        voisin::Error::InvalidInput(m) => PyValueError::new_err(python_words(&m)),
        voisin::Error::Device(m) => PyRuntimeError::new_err(python_words(&m)),
        voisin::Error::Io(e) => PyOSError::new_err(e.to_string()),
        voisin::Error::OutOfMemory(m) => PyMemoryError::new_err(python_words(&m)),
        voisin::Error::Cancelled => PyKeyboardInterrupt::new_err("cancelled"),
    }
}

/// The command line's options in an engine message as the Python keyword arguments that set
/// them: `--threads` is `n_jobs`, `--device cpu` is `device='cpu'`, `--precision auto` is
/// `precision='auto'`. The engines speak the command line's language, which most of their
/// users read; the bindings translate here, the one place that knows both.
fn python_words(message: &str) -> String {
    const KEYWORDS: [(&str, &str, bool); 6] = [
        // (flag, keyword, whether a value follows)
        ("threads", "n_jobs", false),
        ("memory", "memory", false),
        ("device", "device", true),
        ("precision", "precision", true),
        ("distances", "distances", true),
        ("include-self", "include_self", false),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let flag_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(after.len());
        let flag = &after[..flag_len];
        match KEYWORDS.iter().find(|(f, _, _)| *f == flag) {
            Some((_, keyword, true)) if after[flag_len..].starts_with(' ') => {
                let value = &after[flag_len + 1..];
                let len = value
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == ':' || c == '_'))
                    .unwrap_or(value.len());
                out.push_str(&format!("{keyword}='{}'", &value[..len]));
                rest = &value[len..];
            }
            Some((_, keyword, _)) => {
                out.push_str(keyword);
                rest = &after[flag_len..];
            }
            None => {
                out.push_str("--");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Rows read in place from memory a Python object owns: a C-contiguous, aligned NumPy array
/// (NumPy never moves an array's data while a reference to it exists) or a DLPack capsule
/// (its tensor lives while the capsule does). The reference keeps the owner alive.
struct PyRows<T> {
    _owner: Py<PyAny>,
    ptr: *const T,
    len: usize,
}

impl<T> PyRows<T> {
    /// `len` values at `ptr`, owned by `owner`: the caller checked that they are initialised
    /// and aligned, and live as long as `owner`.
    fn new(owner: Py<PyAny>, ptr: *const T, len: usize) -> Self {
        PyRows {
            _owner: owner,
            ptr,
            len,
        }
    }
}

// SAFETY: the pointer is into memory owned by the referenced object, which outlives `self`;
// it is only read.
unsafe impl<T> Send for PyRows<T> {}
unsafe impl<T> Sync for PyRows<T> {}

impl<T> SharedSlice<T> for PyRows<T> {
    fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised, aligned values (checked when built).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A 2-D array as vector storage: in place when C-contiguous and aligned, copied otherwise;
/// with the bytes copied.
fn vector_rows<T: Element + bytemuck::Pod>(
    arr: &Bound<'_, PyArray2<T>>,
    wrap: fn(Buffer<T>) -> VectorData,
) -> PyResult<(VectorSet, u64)> {
    let (n, d) = (arr.shape()[0], arr.shape()[1]);
    let ptr = arr.data() as *const T;
    let (buffer, copied) =
        if arr.is_c_contiguous() && (ptr as usize).is_multiple_of(align_of::<T>()) {
            let rows = PyRows::new(arr.clone().into_any().unbind(), ptr, n * d);
            (Buffer::Shared(Arc::new(rows)), 0)
        } else {
            let values: Vec<T> = arr.readonly().as_array().iter().copied().collect();
            let bytes = std::mem::size_of_val(values.as_slice()) as u64;
            (Buffer::Owned(values), bytes)
        };
    let set = VectorSet::new(n, d, wrap(buffer)).map_err(py_err)?;
    // f64 values that are all f32 numbers are stored as f32: a copy.
    let compacted = std::mem::size_of::<T>() == 8 && set.elem_type() != voisin::data::ElemType::F64;
    let copied = if compacted {
        (n * d * 4) as u64
    } else {
        copied
    };
    Ok((set, copied))
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

/// A data set from what the Python half hands over: a 2-D float32/float16/uint8/float64 array,
/// a host tensor with `__dlpack__` ([`dlpack`]) or a list of `str`; with the bytes of vectors
/// copied to read it (0 when read in place). Its values are not yet checked for NaN and
/// infinities ([`check_finite`]).
fn dataset(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<(Dataset, u64)> {
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
        return Ok((set.into(), 0));
    }
    let (set, copied) = if let Ok(a) = obj.cast::<PyArray2<f32>>() {
        vector_rows(a, VectorData::F32)?
    } else if let Ok(a) = obj.cast::<PyArray2<f16>>() {
        vector_rows(a, VectorData::F16)?
    } else if let Ok(a) = obj.cast::<PyArray2<u8>>() {
        vector_rows(a, VectorData::U8)?
    } else if let Ok(a) = obj.cast::<PyArray2<f64>>() {
        // f32 storage when every value is an f32 number, else f64, answered exactly.
        vector_rows(a, VectorData::compact_buffer)?
    } else if obj.hasattr("__dlpack__")? {
        dlpack::vectors(what, obj)?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected a 2-D float32, float16, uint8 or float64 array, a tensor with \
             __dlpack__, or a list of str"
        )));
    };
    Ok((set.into(), copied))
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
    /// Bytes of the base's vectors the bindings copied to read it (0 when read in place).
    base_copied: u64,
    /// What the last request measured, for `Index.stats`.
    last_stats: Arc<Mutex<CallStats>>,
    /// The end of an interrupted request whose worker may still run.
    stopping: Mutex<Option<mpsc::Receiver<()>>>,
}

/// What one request measured: the engine's [`voisin::Stats`] and the bytes of the queries'
/// vectors the bindings copied.
#[derive(Default)]
struct CallStats {
    engine: voisin::Stats,
    queries_copied: u64,
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

impl Index {
    /// One request: checks the queries against the base, times the engine call `ask`, keeps
    /// its stats and shapes its answer as `form` says, all on the worker thread (see
    /// [`Index::run`]).
    ///
    /// NaN and infinities (in the queries, and in the base while it is not checked) are
    /// refused with their position. An engine that refuses them itself (the GPU's norms show
    /// them at no cost) is trusted with that, and the values are scanned only after such a
    /// refusal, to name the first one. Otherwise, while the base is not checked, the scan runs
    /// on its own thread beside the engine's call, so that a one-shot call does not read a large
    /// base once more before the work starts; a value it finds stops the engine through the
    /// cancellation token, and its error is the answer. Queries alone are scanned before the
    /// call.
    fn request<'py>(
        &self,
        py: Python<'py>,
        progress: Option<&Bound<'py, PyAny>>,
        queries: Option<(Dataset, u64)>,
        op: Op,
        form: Form,
        ask: impl FnOnce(
                &Arc<dyn Engine>,
                &Arc<Dataset>,
                Option<&Dataset>,
                &Metric,
            ) -> voisin::Result<Answer>
            + Send
            + 'static,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (engine, base, metric) = (self.engine.clone(), self.data.clone(), self.metric.clone());
        let (queries, queries_copied) = match queries {
            Some((q, copied)) => (Some(q), copied),
            None => (None, 0),
        };
        let last = self.last_stats.clone();
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
            let answer = answer?;
            *last.lock().unwrap_or_else(|p| p.into_inner()) = CallStats {
                engine: answer.stats().clone(),
                queries_copied,
            };
            let queries = queries.as_ref().unwrap_or(&base);
            Ok(results::shape_over(answer, form, (&base, queries), &metric))
        })
        .and_then(|out| out.into_py(py))
    }

    /// Runs `job` on a worker thread; see the module documentation.
    fn run<T: Send + 'static>(
        &self,
        py: Python<'_>,
        progress: Option<&Bound<'_, PyAny>>,
        job: impl FnOnce() -> voisin::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let worker = Worker {
            progress: &self.progress,
            cancel: &self.cancel,
            metric_error: self.metric_error.as_ref(),
            stopping: &self.stopping,
        };
        worker.run(py, progress, job)
    }
}

/// What a request's worker thread reports to the waiting thread: progress, the cancellation
/// token (set on Ctrl-C), a Python metric function's first exception, and the end of a
/// request interrupted before its worker stopped.
pub(crate) struct Worker<'a> {
    pub(crate) progress: &'a Progress,
    pub(crate) cancel: &'a Cancel,
    pub(crate) metric_error: Option<&'a MetricError>,
    pub(crate) stopping: &'a Mutex<Option<mpsc::Receiver<()>>>,
}

impl Worker<'_> {
    /// Runs `job` on a worker thread; see the module documentation.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        py: Python<'_>,
        progress: Option<&Bound<'_, PyAny>>,
        job: impl FnOnce() -> voisin::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        // A request interrupted before its worker stopped still holds the engine's token: it
        // ends before this one resets it.
        let stopping = self
            .stopping
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(done) = stopping {
            let (done, ended) = wait(py, done, None);
            if let Err(e) = ended {
                *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
                return Err(e);
            }
        }
        self.progress.done.store(0, Ordering::Relaxed);
        self.progress.total.store(0, Ordering::Relaxed);
        self.cancel.reset();
        if let Some(slot) = &self.metric_error {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let (tx, rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        // A thread of rayon's global pool, started once: a fresh thread per request paid its
        // start, and on a GPU the driver's per-thread set-up, on every small batch.
        rayon::spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(job)));
            let _ = done_tx.send(());
        });
        let shown = std::cell::Cell::new((0, 0));
        let show = || -> PyResult<()> {
            if let Some(callback) = progress {
                let now = (
                    self.progress.done.load(Ordering::Relaxed),
                    self.progress.total.load(Ordering::Relaxed),
                );
                if now != shown.get() && now.1 > 0 {
                    callback.call1(now)?;
                    shown.set(now);
                }
            }
            Ok(())
        };
        match wait(py, rx, Some(&show)).1 {
            Ok(answer) => {
                if let Some(slot) = &self.metric_error {
                    if let Some(e) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        return Err(e);
                    }
                }
                match answer {
                    Ok(result) => result.map_err(py_err),
                    Err(p) => Err(PyRuntimeError::new_err(format!(
                        "voisin internal error: {}",
                        panic_message(p.as_ref())
                    ))),
                }
            }
            // Ctrl-C (or an exception from the progress callback): the engine is told to stop
            // (it looks at the token between tiles and query blocks) and the exception raised
            // at once; the next request waits for the worker to end.
            Err(e) => {
                self.cancel.cancel();
                *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
                Err(e)
            }
        }
    }
}

/// How often the calling thread looks for signals (and progress) while a worker runs: Ctrl-C
/// raises `KeyboardInterrupt` within this time.
const POLL: Duration = Duration::from_millis(10);

/// The value `rx` receives, waited for with the GIL released, looking every [`POLL`] for
/// signals (a raised `KeyboardInterrupt` ends the wait) and calling `tick`; with `rx` back.
fn wait<T: Send>(
    py: Python<'_>,
    mut rx: mpsc::Receiver<T>,
    tick: Option<&dyn Fn() -> PyResult<()>>,
) -> (mpsc::Receiver<T>, PyResult<T>) {
    loop {
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(POLL);
            (rx, got)
        });
        rx = back;
        let ticked = tick.map_or(Ok(()), |tick| tick());
        let step = match got {
            Ok(value) => Some(Ok(value)),
            Err(RecvTimeoutError::Timeout) => {
                ticked.and_then(|()| py.check_signals()).err().map(Err)
            }
            Err(RecvTimeoutError::Disconnected) => Some(Err(PyRuntimeError::new_err(
                "voisin internal error: the worker ended without an answer",
            ))),
        };
        if let Some(step) = step {
            return (rx, step);
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
        let (data, base_copied) = dataset("base", data)?;
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
            base_copied,
            last_stats: Arc::default(),
            stopping: Mutex::new(None),
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

    /// What the last request measured: the engine's phase times (seconds), distance and
    /// exact evaluations, device and arithmetic, and the bytes of vectors the bindings copied
    /// to read the base and the queries (0 when read in place).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let last = self.last_stats.lock().unwrap_or_else(|p| p.into_inner());
        let s = &last.engine;
        let d = PyDict::new(py);
        d.set_item("device", &s.device)?;
        d.set_item("arithmetic", &s.arithmetic)?;
        d.set_item("engine_s", self.last_call_seconds())?;
        d.set_item("compute_s", s.compute.as_secs_f64())?;
        d.set_item("select_s", s.select.as_secs_f64())?;
        d.set_item("transfer_s", s.transfer.as_secs_f64())?;
        d.set_item("distance_evals", s.distance_evals)?;
        d.set_item("exact_evals", s.exact_evals)?;
        d.set_item("base_copied_bytes", self.base_copied)?;
        d.set_item("queries_copied_bytes", last.queries_copied)?;
        Ok(d)
    }

    /// For each query, its k nearest base items: `(distances, indices)`, each `n × k`, or
    /// with `csr` the rows `(offsets, indices, distances)`; `exact`: float64 exact distances;
    /// `ties`: every base item at the k-th distance too (`voisin::ties`), as rows
    /// `(offsets, indices, distances)` of their own lengths.
    #[pyo3(signature = (queries, k, progress = None, exact = false, csr = false, ties = false))]
    #[allow(clippy::too_many_arguments)]
    fn knn<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        progress: Option<&Bound<'py, PyAny>>,
        exact: bool,
        csr: bool,
        ties: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let queries = dataset("queries", queries)?;
        let kept = self.kept.clone();
        let form = Form {
            exact,
            csr,
            ..Form::default()
        };
        self.request(
            py,
            progress,
            Some(queries),
            Op::Knn,
            form,
            move |e, base, q, m| {
                let q = q.unwrap_or(base);
                let fitted = kept.as_ref().map(|s| prepared(s, e, base, m)).transpose()?;
                let lists = |q: &Dataset, k| match &fitted {
                    Some(p) => p.knn(q, k),
                    None => e.knn(base, q, k, m),
                };
                if ties {
                    voisin::ties::knn(base, q, k, m, &lists).map(Answer::Range)
                } else {
                    lists(q, k).map(Answer::Knn)
                }
            },
        )
    }

    /// For each base item, its k nearest other items, shaped as for [`Index::knn`];
    /// `include_self` adds the item itself by its own distance (k + 1 entries a row, k may be
    /// 0; `voisin::shape::include_self`), `pairs` gives each unordered pair once as rows
    /// `(offsets, indices, distances)`; `ties` every other item at the k-th distance too, as
    /// rows of their own lengths.
    #[pyo3(signature = (k, progress = None, include_self = false, exact = false, pairs = false, csr = false, ties = false))]
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
        ties: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let form = Form::of_graph(exact, include_self, pairs, csr)?;
        self.request(py, progress, None, Op::Graph, form, move |e, base, _, m| {
            if k == 0 {
                // k = 0 with `include_self`: rows of the item alone (no other item to find).
                let n = base.len();
                Ok(match ties {
                    true => Answer::Range(voisin::RangeResult {
                        offsets: vec![0; n + 1],
                        ..Default::default()
                    }),
                    false => Answer::Knn(voisin::KnnResult {
                        n_queries: n,
                        ..Default::default()
                    }),
                })
            } else if ties {
                voisin::ties::graph_on(e.as_ref(), base, k, m).map(Answer::Range)
            } else {
                e.graph(base, k, m).map(Answer::Knn)
            }
        })
    }

    /// Every base item within `radius` of each query, as rows `(offsets, indices,
    /// distances)` sorted by distance then index; `pairs`: a self-join's unordered pairs once
    /// (the queries are the base).
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
        let queries = dataset("queries", queries)?;
        let kept = self.kept.clone();
        let form = Form {
            exact,
            pairs,
            csr,
            ..Form::default()
        };
        self.request(
            py,
            progress,
            Some(queries),
            Op::Range,
            form,
            move |e, base, q, m| {
                let q = q.unwrap_or(base);
                match &kept {
                    Some(slot) => prepared(slot, e, base, m)?.range(q, radius),
                    None => e.range(base, q, radius, m),
                }
                .map(Answer::Range)
            },
        )
    }
}

/// Whether a CUDA GPU with its driver, NVRTC and cuBLAS is usable.
#[pyfunction]
fn cuda_available() -> bool {
    engine::cuda_available()
}

/// An engine message in Python's words (for the tests of [`python_words`]).
#[pyfunction]
fn _python_words(message: &str) -> String {
    python_words(message)
}

#[pymodule]
fn _voisin(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Index>()?;
    m.add_class::<indexes::MetricIndex>()?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    blocks::register(m)?;
    m.add_function(wrap_pyfunction!(_python_words, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_info, m)?)?;
    cuda::hand_over_python_path(m.py())?;
    // float64 arrays (and integers past 2^24) are answered for their own values (f64 storage).
    m.add("EXACT_FLOAT64", true)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
