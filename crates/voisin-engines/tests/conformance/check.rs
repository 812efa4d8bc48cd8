//! How the suite judges an answer: against the reference's when the engine supports the
//! request, as a refusal (invalid input) when it does not.

use std::sync::Arc;

use voisin::engine::Op;
use voisin::{reference, Dataset, Engine, Error, KnnResult, Metric, RangeResult, Result};
use voisin_engines::EngineConfig;

use crate::Subject;

/// An opened subject.
pub struct Opened {
    pub name: &'static str,
    pub engine: Arc<dyn Engine>,
}

/// Every subject, opened with `config()`.
pub fn open_all(subjects: &[Subject], config: impl Fn() -> EngineConfig) -> Vec<Opened> {
    subjects
        .iter()
        .map(|s| Opened {
            name: s.name,
            engine: s.open_with(config()),
        })
        .collect()
}

/// Every subject with the default configuration.
pub fn open_default(subjects: &[Subject]) -> Vec<Opened> {
    open_all(subjects, EngineConfig::default)
}

impl Opened {
    /// Whether the engine supports `op` under `metric` on every one of `sets`.
    pub fn supports(&self, sets: &[&Dataset], metric: &Metric, op: Op) -> bool {
        sets.iter().all(|d| self.engine.supports(d, metric, op))
    }

    /// How far its distances may be from the reference's: not at all where the CPU answers
    /// (the same exact keys, converted the same way), within the f32 rounding of the exact
    /// value where a GPU does.
    pub fn tolerance(&self, data: &Dataset, metric: &Metric, op: Op) -> f32 {
        if self.engine.answering(data, metric, op).starts_with("cpu") {
            0.0
        } else {
            1e-6
        }
    }

    /// Judges `got`, the engine's answer to `op` under `metric` on `sets` (base first): when
    /// the request is invalid as made (`want` is an error) or the engine does not support it,
    /// it must be refused as invalid input; otherwise it must equal `want`.
    pub fn judge<T: Answer>(
        &self,
        sets: &[&Dataset],
        metric: &Metric,
        op: Op,
        got: Result<T>,
        want: &Result<T>,
        what: &str,
    ) {
        let what = format!("{}: {what} {metric} {op:?}", self.name);
        match want {
            Err(e) => refused(got, &format!("{what} (the reference: {e})")),
            Ok(_) if !self.supports(sets, metric, op) => {
                refused(got, &format!("{what} (not supported)"))
            }
            Ok(want) => {
                let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                got.same(want, self.tolerance(sets[0], metric, op), &what);
            }
        }
    }
}

/// The request must have been refused as invalid input.
pub fn refused<T>(got: Result<T>, what: &str) {
    match got {
        Err(Error::InvalidInput(_)) => {}
        Err(e) => panic!("{what}: refused with an error of the wrong kind: {e:?}"),
        Ok(_) => panic!("{what}: answered, should have been refused as invalid input"),
    }
}

/// A result compared with the reference's, row by row.
pub trait Answer {
    /// What must match before the rows are compared: queries and k, or the row offsets.
    fn shape(&self) -> Vec<usize>;

    fn rows(&self) -> usize;

    fn row(&self, q: usize) -> (&[u32], &[f32]);

    fn same(&self, want: &Self, tol: f32, what: &str) {
        assert_eq!(
            self.shape(),
            want.shape(),
            "{what}: queries and k, or results per query"
        );
        for q in 0..want.rows() {
            let ((gi, gd), (wi, wd)) = (self.row(q), want.row(q));
            same_row(q, gi, gd, wi, wd, tol, what);
        }
    }
}

impl Answer for KnnResult {
    fn shape(&self) -> Vec<usize> {
        vec![self.n_queries, self.k]
    }

    fn rows(&self) -> usize {
        self.n_queries
    }

    fn row(&self, q: usize) -> (&[u32], &[f32]) {
        KnnResult::row(self, q)
    }
}

impl Answer for RangeResult {
    fn shape(&self) -> Vec<usize> {
        self.offsets.clone()
    }

    fn rows(&self) -> usize {
        self.n_queries()
    }

    fn row(&self, q: usize) -> (&[u32], &[f32]) {
        RangeResult::row(self, q)
    }
}

/// The same ids in the same order; the same distance bits, or within `tol` relative (with an
/// absolute floor of `tol`).
fn same_row(q: usize, gi: &[u32], gd: &[f32], wi: &[u32], wd: &[f32], tol: f32, what: &str) {
    assert_eq!(
        gi, wi,
        "{what}: ids of query {q} (distances {gd:?} vs {wd:?})"
    );
    for (a, b) in gd.iter().zip(wd) {
        let close = if tol == 0.0 {
            a.to_bits() == b.to_bits()
        } else {
            (a - b).abs() <= tol * b.abs().max(1.0)
        };
        assert!(close, "{what}: a distance of query {q}: {a} vs {b}");
    }
}

/// A radius that returns a few percent of the base: the median over the queries of the
/// distance to their (n/20)-th nearest item (0 when there are no queries).
pub fn radius(base: &Dataset, queries: &Dataset, metric: &Metric) -> f64 {
    let Ok(probe) = reference::knn(base, queries, (base.len() / 20).max(1), metric) else {
        return 0.0;
    };
    let mut d: Vec<f32> = (0..probe.n_queries)
        .filter_map(|q| probe.row(q).1.last().copied())
        .collect();
    d.sort_by(f32::total_cmp);
    d.get(d.len() / 2).map_or(0.0, |&r| f64::from(r))
}

/// k-NN, graph and range on `base` and `queries` under `metric` against the reference, on every
/// engine: k-NN and graph for each of `ks`, range at [`radius`].
pub fn knn_graph_range(
    engines: &[Opened],
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
    ks: &[usize],
    what: &str,
) {
    let pair: &[&Dataset] = &[base, queries];
    for &k in ks {
        let want = reference::knn(base, queries, k, metric);
        let what_k = format!("{what} knn k={k}");
        each(engines, pair, metric, Op::Knn, &want, &what_k, |e| {
            e.knn(base, queries, k, metric)
        });
        let want = reference::graph(base, k, metric);
        let what_k = format!("{what} graph k={k}");
        each(engines, &[base], metric, Op::Graph, &want, &what_k, |e| {
            e.graph(base, k, metric)
        });
    }
    let r = radius(base, queries, metric);
    let want = reference::range(base, queries, r, metric);
    let what_r = format!("{what} range r={r}");
    each(engines, pair, metric, Op::Range, &want, &what_r, |e| {
        e.range(base, queries, r, metric)
    });
}

/// Every engine's answer to one request (`call`), judged against `want`.
fn each<T: Answer>(
    engines: &[Opened],
    sets: &[&Dataset],
    metric: &Metric,
    op: Op,
    want: &Result<T>,
    what: &str,
    call: impl Fn(&dyn Engine) -> Result<T>,
) {
    for o in engines {
        o.judge(sets, metric, op, call(o.engine.as_ref()), want, what);
    }
}
