//! What a request's result becomes for Python: the forms the keyword arguments ask for
//! ([`Form`]: the item itself first, pairs, exact f64 distances, CSR index types), shaped on
//! the worker thread by the core's [`voisin::shape`] (the CLI's conventions), then handed to
//! NumPy without a copy (arrays made from the vectors themselves). The one-process requests
//! (`lib.rs`) and the row blocks of `voisin.dask` (`blocks.rs`) are shaped here alike.
//!
//! Distances are float32 (each exact distance rounded to f32, what the engines return) or,
//! with `exact`, float64 (the exact values: recomputed for the returned entries only, or
//! read from the exact keys a block's lists carry).
//! Indices are int64, or for `csr` the index type scipy.sparse would convert them to (int32
//! while every index, offset and the shape fit), so that building the matrix copies nothing.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

pub use voisin::shape::Answer;
use voisin::{Dataset, Metric};

/// How a result is handed to Python (the native methods' keyword arguments).
#[derive(Clone, Copy, Debug, Default)]
pub struct Form {
    /// Exact f64 distances (`distances="f64"`) instead of their f32 roundings.
    pub exact: bool,
    /// Each graph row holds the item itself, by its own distance (`include_self=True`): added
    /// by [`shape_over`] (the core's `voisin::shape::include_self`) or, for a row block, by
    /// `voisin::shape::rows_with_self` before its rows are assembled (rows of k, or of their own
    /// lengths with every tie).
    pub include_self: bool,
    /// Each unordered pair of a self-join once, as ragged rows (`pairs=True`).
    pub pairs: bool,
    /// Ragged rows with scipy.sparse's index type, for a CSR matrix.
    pub csr: bool,
}

impl Form {
    /// The form of a graph request (`Index.graph`, `MetricIndex.graph`): `include_self` and
    /// `pairs` exclude each other.
    pub fn of_graph(exact: bool, include_self: bool, pairs: bool, csr: bool) -> PyResult<Form> {
        if include_self && pairs {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "include_self and pairs exclude each other (pairs never hold an item itself)",
            ));
        }
        Ok(Form {
            exact,
            include_self,
            pairs,
            csr,
        })
    }
}

pub enum Dist {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

pub enum Ints {
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A shaped result, ready for NumPy.
pub enum Out {
    /// `n × k` (distances, indices).
    Rows {
        n: usize,
        k: usize,
        dist: Dist,
        ind: Vec<i64>,
    },
    /// CSR rows: (offsets, indices, distances).
    Ragged {
        offsets: Ints,
        ind: Ints,
        dist: Dist,
    },
}

/// [`shape`] for a request over its sets: the item itself added to each graph row for
/// `form.include_self` (a graph), exact distances recomputed from the stored values.
pub fn shape_over(
    answer: Answer,
    form: Form,
    (base, queries): (&Dataset, &Dataset),
    metric: &Metric,
) -> Out {
    let answer = match form.include_self {
        true => answer.include_self(base, metric),
        false => answer,
    };
    let exact = |a: &Answer| a.exact((base, queries), metric, form.include_self);
    shape(answer, form, base.len(), exact)
}

/// Shapes `answer` (over a base of `columns` items, the item itself already in each row where
/// asked) as `form` says; `exact` gives the exact f64 distance of every entry of the answer it
/// is handed (after `pairs`), in result order, and is called only for `form.exact`. `pairs`
/// needs a self-join (the caller checked).
pub fn shape(
    answer: Answer,
    form: Form,
    columns: usize,
    exact: impl FnOnce(&Answer) -> Vec<f64>,
) -> Out {
    let answer = if form.pairs {
        Answer::Range(answer.pairs())
    } else {
        answer
    };
    let exact = form.exact.then(|| exact(&answer));
    match answer {
        Answer::Knn(r) => {
            let dist = match exact {
                Some(d) => Dist::F64(d),
                None => Dist::F32(r.distances),
            };
            let (n, k, indices) = (r.n_queries, r.k, r.indices);
            if form.csr {
                let offsets = (0..=n).map(|q| q * k).collect();
                ragged(offsets, indices, dist, columns)
            } else {
                let ind = indices.iter().map(|&x| i64::from(x)).collect();
                Out::Rows { n, k, dist, ind }
            }
        }
        Answer::Range(r) => {
            let dist = match exact {
                Some(d) => Dist::F64(d),
                None => Dist::F32(r.distances),
            };
            let (offsets, indices) = (r.offsets, r.indices);
            if form.csr {
                ragged(offsets, indices, dist, columns)
            } else {
                Out::Ragged {
                    offsets: Ints::I64(offsets.iter().map(|&x| x as i64).collect()),
                    ind: Ints::I64(indices.iter().map(|&x| i64::from(x)).collect()),
                    dist,
                }
            }
        }
    }
}

/// Whether a CSR matrix of `columns` columns, `offsets` row offsets and `entries` stored
/// entries takes int32 indices (scipy.sparse's choice), rather than int64.
pub fn narrow_csr(columns: usize, offsets: usize, entries: usize) -> bool {
    let fits = |x: usize| x <= i32::MAX as usize;
    fits(columns) && fits(offsets) && fits(entries)
}

/// CSR rows in scipy.sparse's index type for a matrix of `columns` columns.
fn ragged(offsets: Vec<usize>, indices: Vec<u32>, dist: Dist, columns: usize) -> Out {
    let entries = offsets.last().copied().unwrap_or(0);
    if narrow_csr(columns, offsets.len(), entries) {
        Out::Ragged {
            offsets: Ints::I32(offsets.iter().map(|&x| x as i32).collect()),
            // Every index is below `columns`, which fits; the vector is converted in place.
            ind: Ints::I32(indices.into_iter().map(|x| x as i32).collect()),
            dist,
        }
    } else {
        Out::Ragged {
            offsets: Ints::I64(offsets.iter().map(|&x| x as i64).collect()),
            ind: Ints::I64(indices.iter().map(|&x| i64::from(x)).collect()),
            dist,
        }
    }
}

fn dist_array<'py>(py: Python<'py>, d: Dist) -> Bound<'py, PyAny> {
    match d {
        Dist::F32(v) => PyArray1::from_vec(py, v).into_any(),
        Dist::F64(v) => PyArray1::from_vec(py, v).into_any(),
    }
}

fn int_array<'py>(py: Python<'py>, i: Ints) -> Bound<'py, PyAny> {
    match i {
        Ints::I32(v) => PyArray1::from_vec(py, v).into_any(),
        Ints::I64(v) => PyArray1::from_vec(py, v).into_any(),
    }
}

impl Out {
    /// `(distances, indices)` of shape `n × k`, or `(offsets, indices, distances)`.
    pub fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        match self {
            Out::Rows { n, k, dist, ind } => {
                let dist = dist_array(py, dist).call_method1("reshape", ((n, k),))?;
                let ind = PyArray1::from_vec(py, ind).reshape([n, k])?.into_any();
                PyTuple::new(py, [dist, ind])
            }
            Out::Ragged { offsets, ind, dist } => PyTuple::new(
                py,
                [
                    int_array(py, offsets),
                    int_array(py, ind),
                    dist_array(py, dist),
                ],
            ),
        }
    }
}
