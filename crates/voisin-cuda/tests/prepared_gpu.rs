//! A prepared base on the GPU (fit once, query many) answers as the unprepared CUDA engine
//! does, byte for byte, and as the CPU engine does (ids exactly): fresh random data, several
//! batch sizes, k = 1, 10, 1000, every vector metric.

mod common;

use std::sync::Arc;

use rand::prelude::*;
use voisin::cpu::CpuEngine;
use voisin::{Engine, Metric};
use voisin_cuda::Select;

#[test]
#[ignore = "needs a CUDA GPU"]
fn prepared_equals_unprepared_and_the_cpu() {
    let mut rng = StdRng::seed_from_u64(common::seed());
    let gpu = Arc::new(common::engine(Select::Auto));
    let cpu = CpuEngine::default();
    let base = Arc::new(common::normal(&mut rng, 3000, 24));
    for metric in Metric::builtins() {
        if metric == Metric::Levenshtein {
            continue;
        }
        let prepared = Arc::clone(&gpu)
            .prepare(Arc::clone(&base), &metric)
            .unwrap();
        for batch in [1, 100, 700] {
            let queries = common::normal(&mut rng, batch, 24);
            for k in [1, 10, 1000] {
                let what = format!("{metric} batch {batch} k {k}");
                let got = prepared.knn(&queries, k).unwrap();
                let plain = gpu.knn(&base, &queries, k, &metric).unwrap();
                common::identical(&got, &plain, &what);
                let want = cpu.knn(&base, &queries, k, &metric).unwrap();
                common::same_knn(&got, &want, &what);
            }
        }
    }
}
