//! GPU benchmark of the CUDA engine on the standard workloads (bench/RESULTS.md): search 1M×128 base,
//! 10k queries, k=10 and k=1000; graph 1M×128, k=10. Random normal f32 from a fixed seed,
//! written once as .fbin under the data directory so that bench/gpu/torch_peer.py measures the
//! same data in the same run. Prints one JSON line per case (end-to-end seconds, host arrays in,
//! host results out) and appends them to `<dir>/voisin_bench.jsonl`.
//!
//! Each engine variant (`--variants`, default fp32,fp32-fused,tf32,tf32-fused: GEMM arithmetic
//! and whether small-k passes fuse distance and selection) runs every case; the plain fp32 one
//! keeps the bare case names that bench/gpu/torch_peer.py tabulates, the others get the variant
//! as a suffix ("knn k=10 tf32-fused"). Graphs run per arithmetic only (fusion does not apply).
//!
//! `--batches 100,1000` adds a prepared base (uploaded once, [`Engine::prepare`]) answering
//! batches of that many of the queries (k=10, the median of 20 batches): the fitted-estimator
//! case of bench/py_bench.py without Python.
//!
//! usage: gpu_bench [--dir /tmp/vbench] [--base 1000000] [--queries 10000] [--dim 128]
//!                  [--graph 1000000] [--reps 3] [--ks 10,1000] [--variants fp32,tf32-fused]
//!                  [--batches 100,1000]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::probe::StderrProbe;
use voisin_cuda::{CudaEngine, CudaOptions, Fusion, Precision};

struct Args {
    dir: PathBuf,
    base: usize,
    queries: usize,
    dim: usize,
    graph: usize,
    reps: usize,
    ks: Vec<usize>,
    variants: Vec<String>,
    batches: Vec<usize>,
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
        variants: ["fp32", "fp32-fused", "tf32", "tf32-fused"]
            .map(String::from)
            .to_vec(),
        batches: Vec::new(),
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
            "--variants" => a.variants = v.split(',').map(String::from).collect(),
            "--batches" => a.batches = v.split(',').map(|b| b.parse().expect("batch")).collect(),
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

/// The engine options of a variant name: "fp32" or "tf32", optionally "-fused" (fusion on
/// wherever it applies) or "-auto" (the engine's default choice).
fn options(variant: &str) -> CudaOptions {
    let (arith, fusion) = variant.split_once('-').unwrap_or((variant, "off"));
    CudaOptions {
        precision: arith.parse::<Precision>().expect("fp32 or tf32"),
        fusion: match fusion {
            "fused" => Fusion::On,
            f => f.parse::<Fusion>().expect("fused, auto or off"),
        },
        ..Default::default()
    }
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
    let engines: Vec<(String, std::sync::Arc<CudaEngine>)> = a
        .variants
        .iter()
        .map(|v| {
            let e = CudaEngine::with_options(0, options(v)).expect("a CUDA GPU");
            // Phase timings on stderr, as scripts/gpu-check asks with VOISIN_CUDA_TRACE.
            if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
                e.set_probe(std::sync::Arc::new(StderrProbe))
                    .expect("the GPU");
            }
            (v.clone(), std::sync::Arc::new(e))
        })
        .collect();
    let device = engines[0].1.device_name();
    // Warm-up: NVRTC compilation, module load and cuBLAS initialisation stay out of the numbers.
    let small = data(&a.dir.join("warm.fbin"), 5000, a.dim, 3);
    for (_, engine) in &engines {
        engine.knn(&small, &small, 10, &Metric::Euclidean).unwrap();
        engine.graph(&small, 10, &Metric::Euclidean).unwrap();
    }

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
    let name = |case: &str, v: &str| {
        if v == "fp32" {
            case.to_string()
        } else {
            format!("{case} {v}")
        }
    };
    let (nb, nq, d) = (a.base as f64, a.queries as f64, a.dim as f64);
    let mut first_ids: Option<Vec<u32>> = None;
    for (v, engine) in &engines {
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
                // Every variant is exact: their ids must agree with each other.
                match &first_ids {
                    None => {
                        // Ids of the first 1000 queries for the peer's agreement check.
                        let ids: Vec<u8> = r.indices[..1000.min(a.queries) * k]
                            .iter()
                            .flat_map(|i| i.to_le_bytes())
                            .collect();
                        std::fs::write(a.dir.join("voisin_knn10_ids.bin"), ids).unwrap();
                        first_ids = Some(r.indices.clone());
                    }
                    Some(ids) => assert!(ids == &r.indices, "variant {v}: ids differ"),
                }
            }
            report(
                &name(&format!("knn k={k}"), v),
                2.0 * nb * nq * d,
                times,
                &r.stats,
            );
        }
    }
    if !a.batches.is_empty() {
        let base = std::sync::Arc::new(base.clone());
        let prepared: Vec<_> = engines
            .iter()
            .map(|(_, e)| {
                std::sync::Arc::clone(e)
                    .prepare(std::sync::Arc::clone(&base), &Metric::Euclidean)
                    .unwrap()
            })
            .collect();
        let cpu = voisin::cpu::CpuEngine::default();
        let qs = queries.as_vectors().unwrap();
        for &b in &a.batches {
            let b = b.min(a.queries);
            let q: Dataset = VectorSet::from_f32(b, a.dim, qs.rows_f32(0, b).into_owned())
                .unwrap()
                .into();
            // What every variant must answer: the CPU engine's ids and distances.
            let want = cpu.knn(&base, &q, 10, &Metric::Euclidean).unwrap();
            for ((v, engine), prepared) in engines.iter().zip(&prepared) {
                prepared.knn(&q, 10).unwrap();
                let mut times = Vec::new();
                let mut last = None;
                for _ in 0..20 {
                    let t = Instant::now();
                    last = Some(prepared.knn(&q, 10).unwrap());
                    times.push(t.elapsed().as_secs_f64());
                }
                let r = last.unwrap();
                let plain = engine.knn(&base, &q, 10, &Metric::Euclidean).unwrap();
                assert!(
                    plain.indices == r.indices,
                    "variant {v}: prepared ids differ"
                );
                assert!(
                    want.indices == r.indices && want.distances == r.distances,
                    "variant {v}: batch {b} differs from the CPU engine"
                );
                let flops = 2.0 * nb * q.len() as f64 * d;
                report(
                    &name(&format!("prepared knn batch={b}"), v),
                    flops,
                    times,
                    &r.stats,
                );
            }
        }
    }
    if a.graph > 0 {
        let g = if a.graph == a.base {
            base
        } else {
            data(&a.dir.join("graph.fbin"), a.graph, a.dim, 4)
        };
        let mut first_graph: Option<Vec<u32>> = None;
        for (v, engine) in &engines {
            if v.contains('-') {
                continue;
            }
            let t = Instant::now();
            let r = engine.graph(&g, 10, &Metric::Euclidean).unwrap();
            let secs = t.elapsed().as_secs_f64();
            let n = a.graph as f64;
            // The floor counts the half matrix the symmetric schedule computes.
            report(&name("graph k=10", v), n * n * d, vec![secs], &r.stats);
            match &first_graph {
                None => {
                    let ids: Vec<u8> = r.indices[..1000.min(a.graph) * 10]
                        .iter()
                        .flat_map(|i| i.to_le_bytes())
                        .collect();
                    std::fs::write(a.dir.join("voisin_graph10_ids.bin"), ids).unwrap();
                    first_graph = Some(r.indices);
                }
                Some(ids) => assert!(ids == &r.indices, "variant {v}: graph ids differ"),
            }
        }
    }
}
