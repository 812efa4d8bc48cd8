//! A prepared base (fit once, query many) answers exactly as the engine does on the same
//! base: byte-identical k-NN and range results, batch after batch.

use std::sync::Arc;

use voisin::{Dataset, Metric, VectorSet};
use voisin_engines::{open_shared, Device, EngineConfig};

fn data(n: usize, dim: usize, seed: usize) -> Dataset {
    let values = (0..n * dim)
        .map(|i| (((i + seed) * 7919) % 1013) as f32 / 13.0 - 30.0)
        .collect();
    Dataset::Vectors(VectorSet::from_f32(n, dim, values).unwrap())
}

#[test]
fn prepared_equals_unprepared_on_the_cpu() {
    let config = EngineConfig {
        threads: Some(2),
        ..Default::default()
    };
    let engine = open_shared(Device::Cpu, &config).unwrap();
    let base = Arc::new(data(700, 12, 1));
    for metric in Metric::builtins() {
        if !engine.supports(&base, &metric, voisin::engine::Op::Knn) {
            continue;
        }
        let prepared = Arc::clone(&engine)
            .prepare(Arc::clone(&base), &metric)
            .unwrap();
        assert_eq!(prepared.len(), 700);
        assert_eq!(prepared.metric(), &metric);
        for (batch, seed) in [(1, 2), (37, 3), (300, 4)] {
            let queries = data(batch, 12, seed);
            for k in [1, 10, 1000] {
                let want = engine.knn(&base, &queries, k, &metric).unwrap();
                let got = prepared.knn(&queries, k).unwrap();
                assert_eq!(got.indices, want.indices, "{metric} k={k}");
                assert_eq!(got.distances, want.distances, "{metric} k={k}");
            }
            let radius = if metric == Metric::InnerProduct {
                0.0
            } else {
                1.0
            };
            let want = engine.range(&base, &queries, radius, &metric).unwrap();
            let got = prepared.range(&queries, radius).unwrap();
            assert_eq!((got.offsets, got.indices), (want.offsets, want.indices));
        }
    }
}

#[test]
fn preparing_under_a_metric_that_does_not_apply_is_invalid_input() {
    let engine = open_shared(Device::Cpu, &EngineConfig::default()).unwrap();
    let err = engine
        .prepare(Arc::new(data(3, 2, 0)), &Metric::Levenshtein)
        .err()
        .unwrap();
    assert!(err.is_user_error(), "{err}");
}
