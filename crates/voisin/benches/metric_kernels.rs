//! Throughput of the f32 distance kernels and of the bit-parallel edit distance.
//!
//! Each vector kernel runs with every instruction set the CPU has (portable Rust, SSE2 and
//! AVX2+FMA on x86-64), so the speed-up of run-time dispatch is visible; throughput is in
//! coordinates per second (GFLOP/s = Gelem/s × flops per coordinate: 2 for dot, 3 for l1,
//! linf and sq_l2). Shapes: one pair, one query against 1024 rows (`many`), and an 8-query ×
//! 1024-row tile (`block`), all at dimension 128.
//! Levenshtein compares the bit-parallel pattern with a plain dynamic programme.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use voisin::metric::levenshtein::{self, Pattern};
use voisin::metric::simd::{Isa, Kernel};

type PairFn = fn(&[f32], &[f32]) -> f32;

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

fn vector_kernels(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(7);
    let dim = 128;
    let rows = 1024;
    let quads = 8;
    let q = random(&mut rng, dim);
    let queries = random(&mut rng, quads * dim);
    let base = random(&mut rng, rows * dim);
    let kernels = [
        ("dot", Kernel::Dot),
        ("l1", Kernel::L1),
        ("linf", Kernel::Linf),
        ("sq_l2", Kernel::SqL2),
        ("minkowski3", Kernel::MinkowskiPow(3.0)),
        ("minkowski2.5", Kernel::MinkowskiPow(2.5)),
    ];
    for (name, k) in kernels {
        let mut g = c.benchmark_group(format!("{name}/dim{dim}"));
        // The straightforward sequential sum this module replaced, as the baseline.
        let scalar: Option<PairFn> = match k {
            Kernel::Dot => Some(|a, b| a.iter().zip(b).map(|(x, y)| x * y).sum()),
            Kernel::L1 => Some(|a, b| a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum()),
            _ => None,
        };
        if let Some(f) = scalar {
            let mut out = vec![0.0f32; rows];
            g.throughput(Throughput::Elements((dim * rows) as u64));
            g.bench_function(BenchmarkId::new("many", "scalar"), |b| {
                b.iter(|| {
                    for (o, row) in out.iter_mut().zip(base.chunks_exact(dim)) {
                        *o = f(black_box(&q), row);
                    }
                })
            });
        }
        for isa in Isa::available() {
            g.throughput(Throughput::Elements(dim as u64));
            g.bench_function(BenchmarkId::new("pair", isa.name()), |b| {
                b.iter(|| isa.pair(k, black_box(&q), black_box(&base[..dim])))
            });
            let mut out = vec![0.0f32; rows];
            g.throughput(Throughput::Elements((dim * rows) as u64));
            g.bench_function(BenchmarkId::new("many", isa.name()), |b| {
                b.iter(|| isa.many(k, black_box(&q), black_box(&base), dim, &mut out))
            });
            let mut tile = vec![0.0f32; quads * rows];
            g.throughput(Throughput::Elements((quads * dim * rows) as u64));
            g.bench_function(BenchmarkId::new("block", isa.name()), |b| {
                b.iter(|| isa.block(k, black_box(&queries), black_box(&base), dim, &mut tile))
            });
        }
        g.finish();
    }
}

/// The textbook O(nm) dynamic programme, the baseline the bit-parallel version replaces.
fn plain_dp(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

fn edit_distance(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(8);
    let alphabet: Vec<char> = "abcdefghijklmnopqrstuvwxyzé".chars().collect();
    let mut word = |len: usize| -> Vec<char> {
        (0..len)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
            .collect()
    };
    for len in [10usize, 64, 300] {
        let query = word(len);
        let words: Vec<Vec<char>> = (0..256).map(|_| word(len)).collect();
        let pattern = Pattern::new(&query);
        let mut g = c.benchmark_group(format!("levenshtein/len{len}"));
        g.throughput(Throughput::Elements(words.len() as u64));
        g.bench_function("plain_dp", |b| {
            b.iter(|| words.iter().map(|w| plain_dp(&query, w)).sum::<usize>())
        });
        g.bench_function("distance", |b| {
            b.iter(|| {
                words
                    .iter()
                    .map(|w| levenshtein::distance(&query, w))
                    .sum::<usize>()
            })
        });
        g.bench_function("pattern", |b| {
            b.iter(|| words.iter().map(|w| pattern.distance(w)).sum::<usize>())
        });
        g.bench_function("pattern_bounded2", |b| {
            b.iter(|| words.iter().filter_map(|w| pattern.bounded(w, 2)).count())
        });
        // Near copies (two substitutions): the cut-off cannot fire, only the band helps.
        let near: Vec<Vec<char>> = (0..words.len())
            .map(|i| {
                let mut w = query.clone();
                w[(i * 7) % len] = 'x';
                w[(i * 13 + 1) % len] = 'y';
                w
            })
            .collect();
        g.bench_function("pattern_bounded3_near", |b| {
            b.iter(|| near.iter().filter_map(|w| pattern.bounded(w, 3)).count())
        });
        g.finish();
    }
}

criterion_group!(benches, vector_kernels, edit_distance);
criterion_main!(benches);
