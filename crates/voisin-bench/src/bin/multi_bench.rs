//! Multi-GPU benchmark (docs/design/multi-gpu.md): k-NN graph 2M×128, k=10, and k-NN search 4M×128 base, 10k
//! queries, k=10, on 1, 2 and 4 GPUs of the same machine in the same run (counts above the
//! machine's GPUs are skipped). Random normal f32 from fixed seeds, made in parallel in memory.
//! Times are end to end per engine call (host arrays in, exact results out); search is the
//! median of `--reps`, the graph one run. Prints one JSON line per case, then a speedup table,
//! and checks that every GPU count returns the same ids and distances.
//!
//! The graph also runs with one process per GPU (each computes its cyclic share of the tile
//! pairs with `CudaEngine::graph_tiles`, writes it as bytes, the parent merges and finishes on
//! GPU 0): the path an MPI rank per GPU would take, timed end to end from the spawn.
//!
//! usage: multi_bench [--graph 2000000] [--base 4000000] [--queries 10000] [--dim 128]
//!                    [--gpus 1,2,4] [--reps 3] [--one-device] [--no-processes]
//!        multi_bench --child G --of N --edge E --graph N --dim D --out FILE   (internal)

use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use voisin::{Dataset, Engine, KnnResult, Metric, VectorSet};
use voisin_cuda::probe::StderrProbe;
use voisin_cuda::{cyclic_share, CudaEngine, MultiGpu, PartialGraph};

struct Args {
    child: Option<(usize, usize, usize, String)>,
    graph: usize,
    base: usize,
    queries: usize,
    dim: usize,
    gpus: Vec<usize>,
    reps: usize,
    /// Every engine on GPU 0 (`--one-device`): the host side of N GPUs on a one-GPU machine.
    one_device: bool,
    /// Skip the one-process-per-GPU graph (`--no-processes`).
    no_processes: bool,
}

fn parse() -> Args {
    let mut a = Args {
        child: None,
        graph: 2_000_000,
        base: 4_000_000,
        queries: 10_000,
        dim: 128,
        gpus: vec![1, 2, 4],
        reps: 3,
        one_device: false,
        no_processes: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    a.one_device = argv.iter().any(|a| a == "--one-device");
    a.no_processes = argv.iter().any(|a| a == "--no-processes");
    let argv: Vec<String> = argv
        .into_iter()
        .filter(|a| a != "--one-device" && a != "--no-processes")
        .collect();
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
            "--child" => a.child = Some((num(), 1, 1, String::new())),
            "--of" => a.child.as_mut().expect("--child first").1 = num(),
            "--edge" => a.child.as_mut().expect("--child first").2 = num(),
            "--out" => a.child.as_mut().expect("--child first").3 = v.to_string(),
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

/// One process's share of the graph, written to `out`.
fn child(a: &Args, gpu: usize, of: usize, edge: usize, out: &str) {
    let t = Instant::now();
    let g = data(a.graph, a.dim, 4);
    let e = CudaEngine::new(gpu).expect("a CUDA GPU");
    let ready = t.elapsed().as_secs_f64();
    let nt = a.graph.div_ceil(edge);
    let part = e
        .graph_tiles(&g, 10, &Metric::Euclidean, edge, &cyclic_share(nt, of, gpu))
        .unwrap();
    std::fs::write(out, part.to_bytes()).unwrap();
    eprintln!(
        "child {gpu}/{of}: data and engine {ready:.2}s, share and write {:.2}s",
        t.elapsed().as_secs_f64() - ready
    );
}

/// The graph with one process per GPU: spawn, wait, read, merge, finish on GPU 0.
fn graph_by_processes(a: &Args, gset: &Dataset, gpus: usize, finisher: &CudaEngine) -> KnnResult {
    let edge = finisher.graph_tile_edge(a.graph, 10).unwrap();
    let dir = std::env::temp_dir();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..gpus)
        .map(|g| {
            let out = dir.join(format!("multi_bench_share_{g}.bin"));
            let child = std::process::Command::new(&exe)
                .args(["--child", &g.to_string(), "--of", &gpus.to_string()])
                .args(["--edge", &edge.to_string(), "--graph", &a.graph.to_string()])
                .args(["--dim", &a.dim.to_string(), "--out", out.to_str().unwrap()])
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let parts: Vec<PartialGraph> = children
        .into_iter()
        .map(|(mut c, out)| {
            assert!(c.wait().unwrap().success(), "a child failed");
            PartialGraph::from_bytes(&std::fs::read(out).unwrap()).unwrap()
        })
        .collect();
    let merged = PartialGraph::merge(parts).unwrap();
    finisher
        .graph_finish(gset, &Metric::Euclidean, merged)
        .unwrap()
}

fn main() {
    let a = parse();
    if let Some((gpu, of, edge, out)) = &a.child {
        child(&a, *gpu, *of, *edge, out);
        return;
    }
    let avail = voisin_cuda::device_count();
    let counts: Vec<usize> = a
        .gpus
        .iter()
        .copied()
        .filter(|&g| g <= avail || a.one_device)
        .collect();
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
        let devices: Vec<usize> = (0..g).map(|d| if a.one_device { 0 } else { d }).collect();
        let engine = MultiGpu::new(&devices).expect("CUDA GPUs");
        // Phase timings on stderr, as scripts/gpu-check asks with VOISIN_CUDA_TRACE.
        if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
            for e in engine.engines() {
                e.set_probe(std::sync::Arc::new(StderrProbe))
                    .expect("the GPU");
            }
        }
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
    if let Some(gset) = &gset {
        let finisher = CudaEngine::new(0).expect("a CUDA GPU");
        finisher.graph(&small, 10, &m).unwrap();
        for &g in counts
            .iter()
            .filter(|&&g| g > 1 && !a.one_device && !a.no_processes)
        {
            let t = Instant::now();
            let r = graph_by_processes(&a, gset, g, &finisher);
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{{\"case\":\"graph {}x{} k=10, one process per GPU\",\"gpus\":{g},\
                 \"seconds\":{secs:.3}}}",
                a.graph, a.dim
            );
            rows.push(("graph (processes)", g, secs));
            if let Some(f) = &first[1] {
                agree &= same(f, &r);
            }
        }
    }
    println!("\n| case | GPUs | seconds | speedup vs 1 GPU |\n|---|---|---|---|");
    for &(case, g, secs) in &rows {
        let base_case = case.split(' ').next().unwrap_or(case);
        let one = rows
            .iter()
            .find(|r| r.0 == base_case && r.1 == 1)
            .map_or(f64::NAN, |r| r.2);
        println!("| {case} | {g} | {secs:.3} | {:.2}x |", one / secs);
    }
    println!("\nall GPU counts returned identical ids and distances: {agree}");
    if !agree {
        std::process::exit(1);
    }
}
