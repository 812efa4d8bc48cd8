//! Selection micro-benchmark: every `--select` variant on fixed random tiles (µs per tile, cold
//! and warm lists, GB/s against the device's measured copy bandwidth), then end-to-end k-NN
//! 1M×128 base / 10k queries per variant. Prints markdown tables (bench/NOTES.md, "Selection kernels compared").
//!
//! usage: select_bench [tiles|knn|all] [device]   (default all, device 0)

use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::select::bench_tile;
use voisin_cuda::{CudaEngine, CudaOptions, Select};

const VARIANTS: [Select; 4] = [Select::Block, Select::Radix, Select::Heap, Select::Quick];

fn tiles(device: usize) {
    let shapes = [
        (8192usize, 16384usize),
        (16384, 8192),
        (2048, 65536),
        (256, 1 << 20),
    ];
    let ks = [1usize, 10, 100, 1000, 4096];
    let mut cases = Vec::new();
    for sel in VARIANTS {
        for k in ks {
            cases.push((sel, k));
        }
    }
    cases.extend(ks.map(|k| (Select::Auto, k)));
    println!("| tile | variant | k | list | cold µs | warm µs | warm GB/s | % of copy |");
    println!("|---|---|---|---|---|---|---|---|");
    for (rows, cols) in shapes {
        let res = match bench_tile(device, rows, cols, &cases, 5) {
            Ok(r) => r,
            Err(e) => {
                println!("| {rows}×{cols} | error: {e} | | | | | | |");
                continue;
            }
        };
        let bytes = (rows * cols * 4) as f64;
        let mut copy_gbs = 0.0;
        for (&(sel, k), r) in cases.iter().zip(&res) {
            match r {
                Ok(t) => {
                    copy_gbs = 2.0 * bytes / t.copy_us / 1e3;
                    let gbs = bytes / t.warm_us / 1e3;
                    let name = if sel == Select::Auto {
                        format!("auto→{}", t.mode)
                    } else {
                        sel.to_string()
                    };
                    println!(
                        "| {rows}×{cols} | {name} | {k} | {} | {:.0} | {:.0} | {:.0} | {:.0} % |",
                        t.width,
                        t.cold_us,
                        t.warm_us,
                        gbs,
                        100.0 * gbs / copy_gbs
                    );
                }
                Err(_) => println!("| {rows}×{cols} | {sel} | {k} | refused | | | | |"),
            }
        }
        println!("| {rows}×{cols} | (device copy, read+write) | | | | | {copy_gbs:.0} | 100 % |");
    }
}

fn normal(n: usize, d: usize, seed: u64) -> Dataset {
    let v: Vec<f32> = (0..n)
        .into_par_iter()
        .flat_map_iter(|r| {
            let mut rng = StdRng::seed_from_u64(seed ^ (r as u64).wrapping_mul(0x9e37_79b9));
            (0..d)
                .map(move |_| rng.sample::<f32, _>(StandardNormal))
                .collect::<Vec<_>>()
        })
        .collect();
    VectorSet::from_f32(n, d, v).unwrap().into()
}

fn knn(device: usize) {
    let (base, queries) = (normal(1 << 20, 128, 1), normal(10_000, 128, 2));
    println!("| knn 1M×128, 10k queries | k | median s (3 runs) | runs | ids = auto's |");
    println!("|---|---|---|---|---|");
    for k in [10usize, 100, 1000] {
        let mut first: Option<Vec<u32>> = None;
        for sel in [Select::Auto].into_iter().chain(VARIANTS) {
            let e = CudaEngine::with_options(
                device,
                CudaOptions {
                    select: sel,
                    ..Default::default()
                },
            )
            .expect("a CUDA GPU");
            let mut times = Vec::new();
            let mut ids = None;
            let mut refused = None;
            for _ in 0..4 {
                let t = Instant::now();
                match e.knn(&base, &queries, k, &Metric::Euclidean) {
                    Ok(r) => ids = Some(r.indices),
                    Err(err) => {
                        refused = Some(err.to_string());
                        break;
                    }
                }
                times.push(t.elapsed().as_secs_f64());
            }
            if let Some(err) = refused {
                println!("| {sel} | {k} | refused: {err} | | |");
                continue;
            }
            let runs = times.split_off(1); // the first call warms up (kernels, staging)
            let mut sorted = runs.clone();
            sorted.sort_by(f64::total_cmp);
            let ids = ids.expect("a result");
            let same = match &first {
                None => {
                    first = Some(ids);
                    "(reference)".to_string()
                }
                Some(f) => format!("{}", *f == ids),
            };
            let list: Vec<String> = runs.iter().map(|t| format!("{t:.3}")).collect();
            println!(
                "| {sel} | {k} | {:.3} | {} | {same} |",
                sorted[1],
                list.join(" ")
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map(String::as_str).unwrap_or("all");
    let device = args.get(2).and_then(|d| d.parse().ok()).unwrap_or(0);
    if what == "tiles" || what == "all" {
        tiles(device);
    }
    if what == "knn" || what == "all" {
        knn(device);
    }
}
