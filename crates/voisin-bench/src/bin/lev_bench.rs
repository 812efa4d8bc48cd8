//! Levenshtein range and k-NN search throughput: a word list as base, queries drawn from it with one
//! random edit each (seeded), timed on the CUDA engine and the CPU engine on the same machine;
//! checks both against each other.
//!   usage: lev_bench WORDS.txt [N_QUERIES] [SEED]

use std::time::Instant;

use rand::prelude::*;
use voisin::cpu::CpuEngine;
use voisin::{reference, Dataset, Engine, Metric, StringSet};
use voisin_cuda::CudaEngine;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).map(String::as_str).unwrap_or("data/words.txt");
    let nq: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(40_000);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    let words: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let alphabet: Vec<char> = {
        let mut a: Vec<char> = words.iter().flat_map(|w| w.chars()).collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let queries: Vec<String> = (0..nq)
        .map(|_| {
            let mut v: Vec<char> = words[rng.gen_range(0..words.len())].chars().collect();
            let c = alphabet[rng.gen_range(0..alphabet.len())];
            match rng.gen_range(0..3) {
                0 if !v.is_empty() => {
                    let i = rng.gen_range(0..v.len());
                    v[i] = c;
                }
                1 if v.len() > 1 => {
                    v.remove(rng.gen_range(0..v.len()));
                }
                _ => v.insert(rng.gen_range(0..=v.len()), c),
            }
            v.into_iter().collect()
        })
        .collect();
    let base: Dataset = StringSet::from_strings(&words).unwrap().into();
    let qs: Dataset = StringSet::from_strings(&queries).unwrap().into();
    let gpu = CudaEngine::new(0).expect("a CUDA GPU");
    let cpu = CpuEngine::default();
    let lev = Metric::Levenshtein;
    println!(
        "levenshtein range: {} base words, {nq} queries, seed {seed}, {}",
        words.len(),
        gpu.device_name()
    );
    // Warm-up: loads the kernel and the driver's JIT.
    gpu.range(&base, &qs, 1.0, &lev).unwrap();
    for r in [0.0, 1.0, 2.0, 3.0] {
        let t = Instant::now();
        let g = gpu.range(&base, &qs, r, &lev).unwrap();
        let tg = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let c = cpu.range(&base, &qs, r, &lev).unwrap();
        let tc = t.elapsed().as_secs_f64();
        let same = reference::compare_range(&c, &g, 0.0);
        println!(
            "r={r}: cuda {:.3} s = {:.0} queries/s (kernel {:.3} s, upload {:.3} s, host {:.3} s); \
             cpu ({} threads) {:.3} s = {:.0} queries/s; {} hits; equal: {:?}",
            tg,
            nq as f64 / tg,
            g.stats.compute.as_secs_f64(),
            g.stats.transfer.as_secs_f64(),
            g.stats.select.as_secs_f64(),
            rayon::current_num_threads(),
            tc,
            nq as f64 / tc,
            g.indices.len(),
            same
        );
    }
    // k-NN by increasing radius on the GPU; the CPU engine on a tenth of the queries (its
    // exhaustive scan would take minutes), compared on that tenth.
    let few: Dataset = StringSet::from_strings(&queries[..nq / 10]).unwrap().into();
    for k in [1, 10, 100] {
        let t = Instant::now();
        gpu.knn(&base, &qs, k, &lev).unwrap();
        let tg = t.elapsed().as_secs_f64();
        let gf = gpu.knn(&base, &few, k, &lev).unwrap();
        let t = Instant::now();
        let c = cpu.knn(&base, &few, k, &lev).unwrap();
        let tc = t.elapsed().as_secs_f64();
        println!(
            "knn k={k}: cuda {:.3} s = {:.0} queries/s; cpu ({} threads) {:.0} queries/s; \
             equal on {} queries: {:?}",
            tg,
            nq as f64 / tg,
            rayon::current_num_threads(),
            (nq / 10) as f64 / tc,
            nq / 10,
            reference::compare_knn(&c, &gf, 0.0)
        );
    }
}
