//! The seam itself: what `supports` says against what the engine does, prepared bases, and
//! cancellation.

use std::sync::Arc;

use rand::rngs::StdRng;

use voisin::engine::{Cancel, Op};
use voisin::{reference, Dataset, Error, KnnResult, Metric, RangeResult};
use voisin_engines::EngineConfig;

use crate::check::{open_all, open_default, radius, Answer, Opened};
use crate::data;
use crate::graph::scratch;
use crate::Subject;

/// Every metric on f32 vectors, f64 vectors f32 does not hold, and words, for every operation:
/// answered as the reference answers where the engine supports it, refused as invalid input
/// where it does not (or where the metric does not apply at all).
pub fn every_metric_on_every_kind_and_op(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(17);
    let kinds: [(&str, Dataset); 3] = [
        ("f32", data::vectors(45, 5, data::ties(&mut rng, 45, 5))),
        ("f64", data::element_types(&mut rng, 45, 5).swap_remove(5).1),
        ("words", data::words(&mut rng, 45)),
    ];
    for (what, set) in &kinds {
        for metric in data::all_metrics() {
            crate::check::knn_graph_range(&engines, set, set, &metric, &[4], what);
            let want = reference::graph(set, 4, &metric);
            for o in &engines {
                let dir = scratch("kinds");
                let opts = voisin::graph::checkpoint::CheckpointOptions::new(&dir, false);
                let got = o.engine.graph_checkpointed(set, 4, &metric, &opts);
                std::fs::remove_dir_all(&dir).ok();
                let op = Op::GraphCheckpointed;
                o.judge(
                    &[set],
                    &metric,
                    op,
                    got,
                    &want,
                    &format!("{what} graph k=4"),
                );
            }
        }
    }
}

/// A base prepared once and searched batch after batch (none, one, a few and many queries):
/// k-NN and range byte for byte as the engine answers afresh, and as the reference does.
/// Preparing under a metric the engine does not support is refused, then or at the first
/// search.
pub fn prepared(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(19);
    let (n, d) = (257, 7);
    let vectors = data::vectors(n, d, data::ties(&mut rng, n, d));
    let words = data::words(&mut rng, n);
    let vector_batches: Vec<Dataset> = [0, 1, 20, 100]
        .iter()
        .map(|&m| data::vectors(m, d, data::normal(&mut rng, m, d)))
        .collect();
    let word_batches: Vec<Dataset> = [0, 1, 30]
        .iter()
        .map(|&m| data::words(&mut rng, m))
        .collect();
    let cases: [(&Dataset, &[Dataset], Vec<Metric>); 2] = [
        (&vectors, &vector_batches, data::vector_metrics()),
        (&words, &word_batches, data::string_metrics()),
    ];
    for (base, batches, metrics) in cases {
        let shared = Arc::new(base.clone());
        for metric in metrics {
            let want = wanted(base, batches, &metric, &[1, 7, base.len() + 3]);
            for o in &engines {
                prepared_one(o, &shared, batches, &metric, &want, &base.describe());
            }
        }
    }
}

/// A base of two tiles (the CPU engine's search tiles are 1024 rows; the last one partial) in
/// each element type and far from the origin, prepared once and searched by one query, a few,
/// and more than one query block (256 rows), under each way the CPU engine prepares rows: byte
/// for byte as the engine answers afresh, and as the reference does, whether the engine keeps
/// the prepared tiles (the default budget) or prepares them at every search (the 64 KiB
/// subject: the tiles' 34 KB exceed half its budget).
pub fn prepared_tiles(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(29);
    let d = 7;
    // f32, f16, u8, f64 f32 cannot hold, and data far from the origin.
    let kinds = |rng: &mut StdRng, m: usize| {
        let mut all = data::element_types(rng, m, d);
        all.push(("offset", data::vectors(m, d, data::offset(rng, m, d))));
        [0, 1, 3, 5, 8].map(|i| all[i].clone())
    };
    let bases = kinds(&mut rng, 1024 + 37);
    let batches = [1, 3, 257].map(|m| kinds(&mut rng, m));
    // Each way of preparing rows: centred, normalised, centred and normalised, as they are
    // (matrix products), and the direct kernels'.
    let metrics = [
        Metric::Euclidean,
        Metric::Cosine,
        Metric::Correlation,
        Metric::InnerProduct,
        Metric::Cityblock,
    ];
    for (i, (kind, base)) in bases.into_iter().enumerate() {
        let base = Arc::new(base);
        let queries: Vec<Dataset> = batches.iter().map(|b| b[i].1.clone()).collect();
        for metric in &metrics {
            let want = wanted(&base, &queries, metric, &[1, 10]);
            for o in &engines {
                prepared_one(o, &base, &queries, metric, &want, kind);
            }
        }
    }
}

/// The reference's answers to one batch of queries: k-NN for each k, and range at a radius
/// (the same for every batch of a base).
struct Wanted {
    knn: Vec<(usize, voisin::Result<KnnResult>)>,
    radius: f64,
    range: voisin::Result<RangeResult>,
}

/// The reference's answers to each batch, worked out once for every engine.
fn wanted(base: &Dataset, batches: &[Dataset], metric: &Metric, ks: &[usize]) -> Vec<Wanted> {
    let r = radius(base, &batches[batches.len() - 1], metric);
    batches
        .iter()
        .map(|queries| Wanted {
            knn: ks
                .iter()
                .map(|&k| (k, reference::knn(base, queries, k, metric)))
                .collect(),
            radius: r,
            range: reference::range(base, queries, r, metric),
        })
        .collect()
}

fn prepared_one(
    o: &Opened,
    base: &Arc<Dataset>,
    batches: &[Dataset],
    metric: &Metric,
    wanted: &[Wanted],
    kind: &str,
) {
    let what = format!("{}: prepared {metric} on {kind}", o.name);
    let prepared = Arc::clone(&o.engine).prepare(Arc::clone(base), metric);
    if !o.supports(&[base], metric, Op::Knn) {
        let refusal = prepared.and_then(|p| p.knn(&batches[0], 1));
        crate::check::refused(refusal, &what);
        return;
    }
    let prepared = prepared.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(prepared.len(), base.len(), "{what}");
    assert_eq!(prepared.metric(), metric, "{what}");
    let tol = |op| o.tolerance(base, metric, op);
    for (queries, want) in batches.iter().zip(wanted) {
        let what = format!("{what}, {} queries", queries.len());
        for (k, knn) in &want.knn {
            alike(
                prepared.knn(queries, *k),
                o.engine.knn(base, queries, *k, metric),
                knn,
                tol(Op::Knn),
                &format!("{what} k={k}"),
            );
        }
        let r = want.radius;
        alike(
            prepared.range(queries, r),
            o.engine.range(base, queries, r, metric),
            &want.range,
            tol(Op::Range),
            &format!("{what} r={r}"),
        );
    }
}

/// A prepared base's answer: byte for byte the engine's afresh, and the reference's.
fn alike<T: Answer>(
    got: voisin::Result<T>,
    fresh: voisin::Result<T>,
    want: &voisin::Result<T>,
    tol: f32,
    what: &str,
) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    got.same(&fresh.unwrap(), 0.0, &format!("{what} against the engine"));
    got.same(want.as_ref().unwrap(), tol, what);
}

/// A cancelled token ends every call, on vectors and on strings, with `Error::Cancelled`;
/// reset, the same engine answers again.
pub fn cancel(subjects: &[Subject]) {
    let token = Cancel::new();
    let engines = open_all(subjects, || EngineConfig {
        cancel: Some(token.clone()),
        ..Default::default()
    });
    let mut rng = data::rng(23);
    let vectors = data::vectors(300, 8, data::normal(&mut rng, 300, 8));
    let words = data::words(&mut rng, 300);
    for (set, metric) in [(&vectors, Metric::Euclidean), (&words, Metric::Levenshtein)] {
        let shared = Arc::new(set.clone());
        for o in &engines {
            token.cancel();
            let what = |call: &str| format!("{}: {call} on {}, cancelled", o.name, set.describe());
            let e = o.engine.as_ref();
            cancelled(e.knn(set, set, 5, &metric), &what("knn"));
            cancelled(e.range(set, set, 1.0, &metric), &what("range"));
            cancelled(e.graph(set, 5, &metric), &what("graph"));
            if o.supports(&[set], &metric, Op::GraphCheckpointed) {
                let dir = scratch("cancel");
                let opts = voisin::graph::checkpoint::CheckpointOptions::new(&dir, false);
                let got = e.graph_checkpointed(set, 5, &metric, &opts);
                std::fs::remove_dir_all(&dir).ok();
                cancelled(got, &what("checkpointed graph"));
            }
            let prepared = Arc::clone(&o.engine).prepare(Arc::clone(&shared), &metric);
            cancelled(prepared.and_then(|p| p.knn(set, 5)), &what("prepared knn"));
            token.reset();
            let got = e.knn(set, set, 5, &metric).unwrap();
            let want = reference::knn(set, set, 5, &metric).unwrap();
            got.same(
                &want,
                o.tolerance(set, &metric, Op::Knn),
                &what("knn, reset"),
            );
        }
    }
}

fn cancelled<T>(got: voisin::Result<T>, what: &str) {
    match got {
        Err(Error::Cancelled) => {}
        Err(e) => panic!("{what}: ended with another error: {e:?}"),
        Ok(_) => panic!("{what}: answered"),
    }
}
