//! Cancellation through the factory's `EngineConfig::cancel`: a set token ends every call with
//! `Error::Cancelled`, including a token set while the work runs (from the progress callback).

use std::sync::Arc;

use voisin::engine::Cancel;
use voisin::{Dataset, Error, Metric, VectorSet};
use voisin_engines::{open, Device, EngineConfig};

fn data(n: usize, dim: usize) -> Dataset {
    let values = (0..n * dim)
        .map(|i| ((i * 7919) % 1000) as f32 / 7.0)
        .collect();
    Dataset::Vectors(VectorSet::from_f32(n, dim, values).unwrap())
}

#[test]
fn a_cancelled_token_ends_knn_range_and_graph() {
    let cancel = Cancel::new();
    let config = EngineConfig {
        threads: Some(2),
        cancel: Some(cancel.clone()),
        ..Default::default()
    };
    let engine = open(Device::Cpu, &config).unwrap();
    let (base, queries, m) = (data(300, 8), data(20, 8), Metric::Euclidean);
    assert!(engine.knn(&base, &queries, 5, &m).is_ok());
    cancel.cancel();
    let knn = engine.knn(&base, &queries, 5, &m).err().unwrap();
    assert!(matches!(knn, Error::Cancelled), "{knn}");
    let range = engine.range(&base, &queries, 1.0, &m).err().unwrap();
    assert!(matches!(range, Error::Cancelled), "{range}");
    let graph = engine.graph(&base, 5, &m).err().unwrap();
    assert!(matches!(graph, Error::Cancelled), "{graph}");
    assert!(!graph.is_user_error() && graph.is_cancelled());
}

#[test]
fn a_token_set_while_the_graph_runs_stops_it() {
    let cancel = Cancel::new();
    let from_progress = cancel.clone();
    let config = EngineConfig {
        threads: Some(1),
        memory_budget: Some(1 << 16),
        progress: Some(Arc::new(move |_, _| from_progress.cancel())),
        cancel: Some(cancel),
        ..Default::default()
    };
    let engine = open(Device::Cpu, &config).unwrap();
    let err = engine
        .graph(&data(3000, 4), 10, &Metric::Euclidean)
        .err()
        .unwrap();
    assert!(matches!(err, Error::Cancelled), "{err}");
}
