//! Checkpointed graphs: stopped after a pass and resumed, on the engine itself and across it
//! and the CPU engine (a checkpoint written by one engine resumes on any other), against the
//! reference graph; refused as invalid input where the engine does not support them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use voisin::engine::Op;
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{reference, Dataset, Engine, Error, KnnResult, Metric, Result};
use voisin_engines::{open, Device, EngineConfig};

use crate::check::{open_default, refused, Opened};
use crate::data::{self, with_zero_and_duplicate_rows};
use crate::Subject;

/// A fresh, empty directory under the system's temporary one.
pub fn scratch(what: &str) -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "voisin-conformance-{}-{}-{what}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Checkpoints in `dir` with passes of 512 rows, resumed or not, stopping after `stop` passes.
fn options(dir: &PathBuf, resume: bool, stop: Option<usize>) -> CheckpointOptions {
    CheckpointOptions {
        pass_rows: Some(512),
        stop_after: stop,
        ..CheckpointOptions::new(dir, resume)
    }
}

/// `first` builds until it has saved one pass (or the end, for a graph of fewer passes), then
/// `second` resumes to the end.
fn stopped_then_resumed(
    first: &dyn Engine,
    second: &dyn Engine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    what: &str,
) -> Result<KnnResult> {
    let dir = scratch("stop");
    match first.graph_checkpointed(data, k, metric, &options(&dir, false, Some(1))) {
        Err(Error::Device(msg)) => assert!(msg.contains("stopped after"), "{what}: {msg}"),
        Err(e) => {
            std::fs::remove_dir_all(&dir).ok();
            return Err(e);
        }
        Ok(_) => {}
    }
    let got = second.graph_checkpointed(data, k, metric, &options(&dir, true, None));
    std::fs::remove_dir_all(&dir).ok();
    got
}

/// 1300 tied rows (three passes of 512 rows) under two metrics, k = 10 and n − 1; 700 rows of
/// f64 values f32 does not hold and 600 words, k = 10.
pub fn stop_and_resume(subjects: &[Subject]) {
    let engines = open_default(subjects);
    let one_thread = EngineConfig {
        threads: Some(1),
        ..Default::default()
    };
    let cpu = open(Device::Cpu, &one_thread).unwrap();
    let mut rng = data::rng(13);
    let tied = data::vectors(
        1300,
        4,
        with_zero_and_duplicate_rows(data::ties(&mut rng, 1300, 4), 4),
    );
    let wide = data::element_types(&mut rng, 700, 2).swap_remove(5).1;
    let words = data::words(&mut rng, 600);
    let cases: [(&str, &Dataset, Metric, usize); 5] = [
        ("ties", &tied, Metric::Euclidean, 10),
        ("ties", &tied, Metric::Euclidean, tied.len() - 1),
        ("ties", &tied, Metric::Cosine, 10),
        ("f64", &wide, Metric::SqEuclidean, 10),
        ("words", &words, Metric::Levenshtein, 10),
    ];
    for (what, data, metric, k) in cases {
        let want = reference::graph(data, k, &metric).unwrap();
        for o in &engines {
            check(o, cpu.as_ref(), data, k, &metric, &want, what);
        }
    }
}

/// One engine's checkpointed graphs: on its own, then CPU-written resumed by it and the other
/// way round; or, unsupported, refused.
fn check(
    o: &Opened,
    cpu: &dyn Engine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    want: &KnnResult,
    what: &str,
) {
    let e = o.engine.as_ref();
    let what = format!("{}: {what} {metric} k={k}", o.name);
    if !o.supports(&[data], metric, Op::GraphCheckpointed) {
        let dir = scratch("refused");
        refused(
            e.graph_checkpointed(data, k, metric, &options(&dir, false, None)),
            &what,
        );
        std::fs::remove_dir_all(&dir).ok();
        return;
    }
    let tol = o.tolerance(data, metric, Op::GraphCheckpointed);
    let runs: [(&str, &dyn Engine, &dyn Engine); 3] = [
        ("alone", e, e),
        ("after the cpu", cpu, e),
        ("before the cpu", e, cpu),
    ];
    for (how, first, second) in runs {
        let what = format!("{what} {how}");
        let got = stopped_then_resumed(first, second, data, k, metric, &what)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        crate::check::Answer::same(&got, want, tol, &what);
    }
}
