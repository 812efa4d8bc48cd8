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

/// A result compared with the reference's.
pub trait Answer {
    fn same(&self, want: &Self, tol: f32, what: &str);
}

impl Answer for KnnResult {
    fn same(&self, want: &Self, tol: f32, what: &str) {
        assert_eq!(
            (self.n_queries, self.k),
            (want.n_queries, want.k),
            "{what}: queries and k"
        );
        for q in 0..want.n_queries {
            let ((gi, gd), (wi, wd)) = (self.row(q), want.row(q));
            same_row(q, gi, gd, wi, wd, tol, what);
        }
    }
}

impl Answer for RangeResult {
    fn same(&self, want: &Self, tol: f32, what: &str) {
        assert_eq!(self.offsets, want.offsets, "{what}: results per query");
        for q in 0..want.n_queries() {
            let ((gi, gd), (wi, wd)) = (self.row(q), want.row(q));
            same_row(q, gi, gd, wi, wd, tol, what);
        }
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
    for &k in ks {
        let want = reference::knn(base, queries, k, metric);
        for o in engines {
            let got = o.engine.knn(base, queries, k, metric);
            o.judge(
                &[base, queries],
                metric,
                Op::Knn,
                got,
                &want,
                &format!("{what} knn k={k}"),
            );
        }
        let want = reference::graph(base, k, metric);
        for o in engines {
            let got = o.engine.graph(base, k, metric);
            o.judge(
                &[base],
                metric,
                Op::Graph,
                got,
                &want,
                &format!("{what} graph k={k}"),
            );
        }
    }
    let r = radius(base, queries, metric);
    let want = reference::range(base, queries, r, metric);
    for o in engines {
        let got = o.engine.range(base, queries, r, metric);
        o.judge(
            &[base, queries],
            metric,
            Op::Range,
            got,
            &want,
            &format!("{what} range r={r}"),
        );
    }
}
