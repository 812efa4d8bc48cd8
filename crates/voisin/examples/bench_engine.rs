//! Times the CPU engine alone on `.fbin` files, without the CLI's loading and writing:
//! `bench_engine knn BASE.fbin QUERY.fbin K [RUNS]`, `bench_engine graph DATA.fbin K [RUNS]`
//! or `bench_engine fitted BASE.fbin QUERY.fbin K BATCH [RUNS]` (a base prepared once, then
//! each run a fresh slice of BATCH queries: a fitted base's latency per call).
//! Prints one line per run with the seconds spent; used by bench/cpu_bench.py and
//! bench/cpu_latency.py.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;
use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, Metric, VectorSet};

fn read_fbin(path: &str) -> Dataset {
    let (n, d, values) = read_fbin_values(path);
    VectorSet::from_f32(n, d, values).unwrap().into()
}

fn read_fbin_values(path: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let n = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let d = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let values: Vec<f32> = bytes[8..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (n, d, values)
}

/// The queries file cut into consecutive batches of `batch` rows (at least one batch).
fn batches_of(path: &str, batch: usize) -> Vec<Dataset> {
    let (n, d, values) = read_fbin_values(path);
    assert!(
        batch <= n,
        "{path} holds {n} queries, fewer than a batch of {batch}"
    );
    values
        .chunks_exact(batch * d)
        .map(|rows| VectorSet::from_f32(batch, d, rows.to_vec()).unwrap().into())
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = CpuEngine::default();
    let metric: Metric = std::env::var("METRIC")
        .unwrap_or("euclidean".into())
        .parse()
        .unwrap();
    let (runs_arg, job): (usize, Box<dyn Fn() -> usize>) = match args[1].as_str() {
        "knn" => {
            let (b, q, k) = (
                read_fbin(&args[2]),
                read_fbin(&args[3]),
                args[4].parse().unwrap(),
            );
            let m = metric.clone();
            (
                5,
                Box::new(move || engine.knn(&b, &q, k, &m).unwrap().indices.len()),
            )
        }
        "graph" => {
            let (x, k) = (read_fbin(&args[2]), args[3].parse().unwrap());
            let m = metric.clone();
            (
                4,
                Box::new(move || engine.graph(&x, k, &m).unwrap().indices.len()),
            )
        }
        "fitted" => {
            let base = Arc::new(read_fbin(&args[2]));
            let (k, batch): (usize, usize) = (args[4].parse().unwrap(), args[5].parse().unwrap());
            let batches = batches_of(&args[3], batch);
            let prepared = Arc::new(engine).prepare(base, &metric).unwrap();
            let next = Cell::new(0);
            (
                6,
                Box::new(move || {
                    let i = next.replace(next.get() + 1);
                    let q = &batches[i % batches.len()];
                    prepared.knn(q, k).unwrap().indices.len()
                }),
            )
        }
        other => panic!("unknown job {other}"),
    };
    let runs = args.get(runs_arg).map_or(3, |r| r.parse().unwrap());
    for _ in 0..runs {
        let t = Instant::now();
        let n = job();
        println!("{:.6} {}", t.elapsed().as_secs_f64(), n);
    }
}
