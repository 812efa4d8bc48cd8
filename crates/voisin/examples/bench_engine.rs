//! Times the CPU engine alone on `.fbin` files, without the CLI's loading and writing:
//! `bench_engine knn BASE.fbin QUERY.fbin K [RUNS]` or `bench_engine graph DATA.fbin K [RUNS]`.
//! Prints one line per run with the seconds spent; used by bench/cpu_bench.py.

use std::time::Instant;
use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, Metric, VectorSet};

fn read_fbin(path: &str) -> Dataset {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let n = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let d = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let values: Vec<f32> = bytes[8..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    VectorSet::from_f32(n, d, values).unwrap().into()
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
        other => panic!("unknown job {other}"),
    };
    let runs = args.get(runs_arg).map_or(3, |r| r.parse().unwrap());
    for _ in 0..runs {
        let t = Instant::now();
        let n = job();
        println!("{:.4} {}", t.elapsed().as_secs_f64(), n);
    }
}
