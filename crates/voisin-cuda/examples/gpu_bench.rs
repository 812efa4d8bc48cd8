//! GPU benchmark of the CUDA engine on the standard workloads (SPEC §5): search 1M×128 base,
//! 10k queries, k=10 and k=1000; graph 1M×128, k=10. Random normal f32 from a fixed seed,
//! written once as .fbin under the data directory so that bench/gpu/torch_peer.py measures the
//! same data in the same run. Prints one JSON line per case (end-to-end seconds, host arrays in,
//! host results out) and appends them to `<dir>/voisin_bench.jsonl`.
//!
//! usage: gpu_bench [--dir /tmp/vbench] [--base 1000000] [--queries 10000] [--dim 128]
//!                  [--graph 1000000] [--reps 3] [--ks 10,1000]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::CudaEngine;

struct Args {
    dir: PathBuf,
    base: usize,
    queries: usize,
    dim: usize,
    graph: usize,
    reps: usize,
    ks: Vec<usize>,
}

fn parse() -> Args {
    let mut a = Args {
        dir: "/tmp/vbench".into(),
        base: 1_000_000,
        queries: 10_000,
        dim: 128,
        graph: 1_000_000,
        reps: 3,
        ks: vec![10, 1000],
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).map(String::as_str).unwrap_or("");
        let num = || v.parse::<usize>().expect("a number");
        match pair[0].as_str() {
            "--dir" => a.dir = v.into(),
            "--base" => a.base = num(),
            "--queries" => a.queries = num(),
            "--dim" => a.dim = num(),
            "--graph" => a.graph = num(),
            "--reps" => a.reps = num(),
            "--ks" => a.ks = v.split(',').map(|k| k.parse().expect("k")).collect(),
            o => panic!("unknown option {o}"),
        }
    }
    a
}

/// Random normal rows from `seed`, cached as .fbin (u32 n, u32 d, row-major f32).
fn data(path: &Path, n: usize, d: usize, seed: u64) -> Dataset {
    let values = match std::fs::read(path) {
        Ok(b) if b.len() == 8 + n * d * 4 => bytemuck_f32(&b[8..]),
        _ => {
            let mut rng = StdRng::seed_from_u64(seed);
            let v: Vec<f32> = (0..n * d).map(|_| rng.sample(StandardNormal)).collect();
            let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
            f.write_all(&(n as u32).to_le_bytes()).unwrap();
            f.write_all(&(d as u32).to_le_bytes()).unwrap();
            for x in &v {
                f.write_all(&x.to_le_bytes()).unwrap();
            }
            v
        }
    };
    VectorSet::from_f32(n, d, values).unwrap().into()
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = parse();
    std::fs::create_dir_all(&a.dir).unwrap();
    let t = Instant::now();
    let base = data(&a.dir.join("base.fbin"), a.base, a.dim, 1);
    let queries = data(&a.dir.join("queries.fbin"), a.queries, a.dim, 2);
    eprintln!("data ready in {:.1}s", t.elapsed().as_secs_f64());
    let engine = CudaEngine::new(0).expect("a CUDA GPU");
    let device = engine.device_name();
    // Warm-up: NVRTC compilation, module load and cuBLAS initialisation stay out of the numbers.
    let small = data(&a.dir.join("warm.fbin"), 5000, a.dim, 3);
    engine.knn(&small, &small, 10, &Metric::Euclidean).unwrap();
    engine.graph(&small, 10, &Metric::Euclidean).unwrap();

    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(a.dir.join("voisin_bench.jsonl"))
        .unwrap();
    let mut report = |case: &str, flops: f64, times: Vec<f64>, stats: &voisin::Stats| {
        let line = format!(
            "{{\"case\":\"{case}\",\"seconds\":{:.6},\"flops\":{flops:.6e},\"device\":\"{device}\",\
             \"compute_s\":{:.6},\"select_s\":{:.6},\"exact_evals\":{}}}",
            median(times),
            stats.compute.as_secs_f64(),
            stats.select.as_secs_f64(),
            stats.exact_evals
        );
        println!("{line}");
        writeln!(log, "{line}").unwrap();
    };
    let (nb, nq, d) = (a.base as f64, a.queries as f64, a.dim as f64);
    for &k in &a.ks {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..a.reps {
            let t = Instant::now();
            let r = engine.knn(&base, &queries, k, &Metric::Euclidean).unwrap();
            times.push(t.elapsed().as_secs_f64());
            last = Some(r);
        }
        let r = last.unwrap();
        if k == 10 {
            // Ids of the first 1000 queries for the peer's agreement check.
            let ids: Vec<u8> = r.indices[..1000.min(a.queries) * k]
                .iter()
                .flat_map(|i| i.to_le_bytes())
                .collect();
            std::fs::write(a.dir.join("voisin_knn10_ids.bin"), ids).unwrap();
        }
        report(&format!("knn k={k}"), 2.0 * nb * nq * d, times, &r.stats);
    }
    if a.graph > 0 {
        let g = if a.graph == a.base {
            base
        } else {
            data(&a.dir.join("graph.fbin"), a.graph, a.dim, 4)
        };
        let t = Instant::now();
        let r = engine.graph(&g, 10, &Metric::Euclidean).unwrap();
        let secs = t.elapsed().as_secs_f64();
        let n = a.graph as f64;
        // The floor counts the half matrix the symmetric schedule computes.
        report("graph k=10", n * n * d, vec![secs], &r.stats);
        let ids: Vec<u8> = r.indices[..1000.min(a.graph) * 10]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect();
        std::fs::write(a.dir.join("voisin_graph10_ids.bin"), ids).unwrap();
    }
}
