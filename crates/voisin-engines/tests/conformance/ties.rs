//! Every item tied at the k-th distance (`voisin::ties`, the CLI's `--ties all`, Python's
//! `ties="all"`) on every engine, against the reference's (`reference::knn_ties`,
//! `reference::graph_ties`): k-NN, graph, a prepared base and the checkpointed graph, on
//! tie-heavy data (small integers with zero and duplicate rows in dimensions 1, 3 and 127,
//! every element type, words, rows that are all one point) under every metric, at k from 1 to
//! n − 1. Ids must be the reference's in its order; distances as [`Opened::judge`] says.

use std::sync::Arc;

use voisin::engine::Op;
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{reference, ties, Dataset, Metric};

use crate::check::{open_default, Opened};
use crate::data::{self, with_zero_and_duplicate_rows};
use crate::graph::scratch;
use crate::Subject;

/// Small integers, element types, words and all-equal rows, every metric that applies.
pub fn tie_heavy(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let mut rng = data::rng(44);
    for (n, m, d) in [(203, 29, 1), (131, 17, 3), (67, 9, 127)] {
        let tied = |rng: &mut _, rows| {
            data::vectors(
                rows,
                d,
                with_zero_and_duplicate_rows(data::ties(rng, rows, d), d),
            )
        };
        let (base, queries) = (tied(&mut rng, n), tied(&mut rng, m));
        for metric in data::vector_metrics() {
            let what = format!("ties n={n} d={d}");
            each(&engines, &base, &queries, &metric, &[1, 10, n - 1], &what);
        }
    }
    let (n, m, d) = (97, 13, 4);
    let bases = data::element_types(&mut rng, n, d);
    let queries = data::element_types(&mut rng, m, d);
    for ((what, base), (_, queries)) in bases.iter().zip(&queries) {
        for metric in data::vector_metrics() {
            each(&engines, base, queries, &metric, &[1, 7], what);
        }
    }
    let words = data::words(&mut rng, 151);
    let asked = data::words(&mut rng, 17);
    for metric in data::string_metrics() {
        each(&engines, &words, &asked, &metric, &[1, 10], "words");
    }
    let one_point = data::vectors(70, 3, vec![0.25; 210]);
    for metric in data::vector_metrics() {
        each(
            &engines,
            &one_point,
            &one_point,
            &metric,
            &[1, 69],
            "one point",
        );
    }
}

/// k-NN, graph, prepared k-NN and (where the engine keeps them) the checkpointed graph, with
/// ties, for each k, on every engine.
fn each(
    engines: &[Opened],
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
    ks: &[usize],
    what: &str,
) {
    let shared = Arc::new(base.clone());
    for &k in ks {
        let want = reference::knn_ties(base, queries, k, metric);
        let want_graph = reference::graph_ties(base, k, metric);
        let what = format!("{what} ties k={k}");
        for o in engines {
            let e = o.engine.as_ref();
            let pair = [base, queries];
            let got = ties::knn_on(e, base, queries, k, metric);
            o.judge(&pair, metric, Op::Knn, got, &want, &format!("{what} knn"));
            let got = ties::graph_on(e, base, k, metric);
            o.judge(
                &[base],
                metric,
                Op::Graph,
                got,
                &want_graph,
                &format!("{what} graph"),
            );
            let got = Arc::clone(&o.engine)
                .prepare(Arc::clone(&shared), metric)
                .and_then(|p| ties::knn(base, queries, k, metric, &|q, w| p.knn(q, w)));
            o.judge(
                &pair,
                metric,
                Op::Knn,
                got,
                &want,
                &format!("{what} prepared"),
            );
            if k == 1 {
                let dir = scratch("ties");
                let opts = CheckpointOptions::new(&dir, false);
                let graph = |w| e.graph_checkpointed(base, w, metric, &opts);
                let got = ties::graph(base, k, metric, &graph, &|q, w| e.knn(base, q, w, metric));
                std::fs::remove_dir_all(&dir).ok();
                let op = Op::GraphCheckpointed;
                o.judge(
                    &[base],
                    metric,
                    op,
                    got,
                    &want_graph,
                    &format!("{what} checkpointed"),
                );
            }
        }
    }
}
