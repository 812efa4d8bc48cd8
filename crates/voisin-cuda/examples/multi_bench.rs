//! Multi-GPU benchmark (issue 4): k-NN graph 2M×128, k=10, and k-NN search 4M×128 base, 10k
//! queries, k=10, on 1, 2 and 4 GPUs of the same machine in the same run (counts above the
//! machine's GPUs are skipped). Random normal f32 from fixed seeds, made in parallel in memory.
//! Times are end to end per engine call (host arrays in, exact results out); search is the
//! median of `--reps`, the graph one run. Prints one JSON line per case, then a speedup table,
//! and checks that every GPU count returns the same ids and distances.
//!
//! usage: multi_bench [--graph 2000000] [--base 4000000] [--queries 10000] [--dim 128]
//!                    [--gpus 1,2,4] [--reps 3]

use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use voisin::{Dataset, Engine, KnnResult, Metric, VectorSet};
use voisin_cuda::MultiGpu;

struct Args {
    graph: usize,
    base: usize,
    queries: usize,
    dim: usize,
    gpus: Vec<usize>,
    reps: usize,
}

fn parse() -> Args {
    let mut a = Args {
        graph: 2_000_000,
        base: 4_000_000,
        queries: 10_000,
        dim: 128,
        gpus: vec![1, 2, 4],
        reps: 3,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).map(String::as_str).unwrap_or("");
        let num = || v.parse::<usize>().expect("a number");
        match pair[0].as_str() {
            "--graph" => a.graph = num(),
            "--base" => a.base = num(),
            "--queries" => a.queries = num(),
            "--dim" => a.dim = num(),
            "--reps" => a.reps = num().max(1),
            "--gpus" => a.gpus = v.split(',').map(|g| g.parse().expect("a count")).collect(),
            o => panic!("unknown option {o}"),
        }
    }
    a
}

/// Random normal rows, 64k rows per seeded chunk so the data do not depend on the thread count.
fn data(n: usize, d: usize, seed: u64) -> Dataset {
    let mut v = vec![0f32; n * d];
    v.par_chunks_mut(65536 * d)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng = StdRng::seed_from_u64(seed * 1_000_003 + c as u64);
            chunk
                .iter_mut()
                .for_each(|x| *x = rng.sample(StandardNormal));
        });
    VectorSet::from_f32(n, d, v).unwrap().into()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn same(a: &KnnResult, b: &KnnResult) -> bool {
    a.indices == b.indices && a.distances == b.distances
}

fn main() {
    let a = parse();
    let avail = voisin_cuda::device_count();
    let counts: Vec<usize> = a.gpus.iter().copied().filter(|&g| g <= avail).collect();
    eprintln!("{avail} GPU(s); running on {counts:?}");
    let t = Instant::now();
    let base = data(a.base, a.dim, 1);
    let queries = data(a.queries, a.dim, 2);
    let gset = if a.graph > 0 {
        Some(data(a.graph, a.dim, 4))
    } else {
        None
    };
    eprintln!("data ready in {:.1}s", t.elapsed().as_secs_f64());
    let small = data(5000, a.dim, 3);
    let m = Metric::Euclidean;
    // (case, gpus, seconds)
    let mut rows: Vec<(&str, usize, f64)> = Vec::new();
    let mut first: [Option<KnnResult>; 2] = [None, None];
    let mut agree = true;
    for &g in &counts {
        let devices: Vec<usize> = (0..g).collect();
        let engine = MultiGpu::new(&devices).expect("CUDA GPUs");
        // Warm-up: module load and cuBLAS initialisation on every GPU stay out of the numbers.
        engine.knn(&small, &small, 10, &m).unwrap();
        engine.graph(&small, 10, &m).unwrap();
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..a.reps {
            let t = Instant::now();
            let r = engine.knn(&base, &queries, 10, &m).unwrap();
            times.push(t.elapsed().as_secs_f64());
            last = Some(r);
        }
        let r = last.unwrap();
        let secs = median(times);
        println!(
            "{{\"case\":\"knn {}x{} q={} k=10\",\"gpus\":{g},\"seconds\":{secs:.4},\
             \"transfer_s\":{:.4},\"compute_s\":{:.4},\"select_s\":{:.4},\"device\":\"{}\"}}",
            a.base,
            a.dim,
            a.queries,
            r.stats.transfer.as_secs_f64(),
            r.stats.compute.as_secs_f64(),
            r.stats.select.as_secs_f64(),
            engine.describe()
        );
        rows.push(("knn", g, secs));
        match &first[0] {
            None => first[0] = Some(r),
            Some(f) => agree &= same(f, &r),
        }
        if let Some(gset) = &gset {
            let t = Instant::now();
            let r = engine.graph(gset, 10, &m).unwrap();
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{{\"case\":\"graph {}x{} k=10\",\"gpus\":{g},\"seconds\":{secs:.3},\
                 \"transfer_s\":{:.4},\"compute_s\":{:.3},\"select_s\":{:.3},\"device\":\"{}\"}}",
                a.graph,
                a.dim,
                r.stats.transfer.as_secs_f64(),
                r.stats.compute.as_secs_f64(),
                r.stats.select.as_secs_f64(),
                engine.describe()
            );
            rows.push(("graph", g, secs));
            match &first[1] {
                None => first[1] = Some(r),
                Some(f) => agree &= same(f, &r),
            }
        }
    }
    println!("\n| case | GPUs | seconds | speedup vs 1 GPU |\n|---|---|---|---|");
    for &(case, g, secs) in &rows {
        let one = rows
            .iter()
            .find(|r| r.0 == case && r.1 == 1)
            .map_or(f64::NAN, |r| r.2);
        println!("| {case} | {g} | {secs:.3} | {:.2}x |", one / secs);
    }
    println!("\nall GPU counts returned identical ids and distances: {agree}");
    if !agree {
        std::process::exit(1);
    }
}
