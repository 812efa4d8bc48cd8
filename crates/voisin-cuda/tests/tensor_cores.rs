//! Every input type (f32, f16, bf16, u8) under every arithmetic (`auto` and the explicit ones
//! its data can take) against the CPU engine: k-NN, graph and range, ids AND distances equal
//! byte for byte; ties and duplicates; k = 1, 10, 100, 256, 1000, n − 1; dims 1, 3, 127, 1025;
//! data far from the origin; a streamed f16 base; a prepared f16 base with f32 queries; the
//! refusals of choices the data cannot take; `--stats`' arithmetic; `auto`'s TF32 pilot on
//! normal and clustered f32 data; the graph's warm tile pairs, fused on tensor cores and not.
//! docs/design/tensor-core-inputs.md. Every test needs a CUDA GPU:
//! `cargo test -p voisin-cuda --test tensor_cores -- --ignored --test-threads 1`.

mod common;
use common::{graph_rows, precisions, seed, subspaces, takes};

use std::sync::Arc;

use half::{bf16, f16};
use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::cpu::CpuEngine;
use voisin::data::{ElemType, VectorData};
use voisin::{Dataset, Engine, KnnResult, Metric, RangeResult, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Precision};

/// `n` rows of `d` values `offset + N(0, 1)·spread` stored as `elem` (u8: 0..=255 integers
/// around 128 + offset), every `dup`-th row a copy of the one before (ties).
fn typed(rng: &mut StdRng, elem: ElemType, n: usize, d: usize, offset: f32, dup: usize) -> Dataset {
    typed_rows(rng, elem, n, d, |_| offset, dup)
}

/// As [`typed`], row r's values around `offset(r)`.
fn typed_rows(
    rng: &mut StdRng,
    elem: ElemType,
    n: usize,
    d: usize,
    offset: impl Fn(usize) -> f32,
    dup: usize,
) -> Dataset {
    let mut v: Vec<f32> = (0..n * d)
        .map(|i| {
            let (x, offset): (f32, f32) = (rng.sample(StandardNormal), offset(i / d.max(1)));
            match elem {
                ElemType::U8 => (128.0 + offset + 40.0 * x).round().clamp(0.0, 255.0),
                _ => offset + x,
            }
        })
        .collect();
    for r in (1..n).step_by(dup.max(1)) {
        let (a, b) = v.split_at_mut(r * d);
        b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
    }
    let data = match elem {
        ElemType::F32 => VectorData::F32(v.into()),
        ElemType::F16 => VectorData::F16(
            v.iter()
                .map(|&x| f16::from_f32(x))
                .collect::<Vec<_>>()
                .into(),
        ),
        ElemType::Bf16 => VectorData::Bf16(
            v.iter()
                .map(|&x| bf16::from_f32(x))
                .collect::<Vec<_>>()
                .into(),
        ),
        ElemType::U8 => VectorData::U8(v.iter().map(|&x| x as u8).collect::<Vec<_>>().into()),
        ElemType::F64 => unreachable!(),
    };
    VectorSet::new(n, d, data).unwrap().into()
}

fn gpu(precision: Precision) -> CudaEngine {
    with_fusion(precision, voisin_cuda::Fusion::Auto)
}

/// An engine of `precision` and `fusion`, otherwise the defaults.
fn with_fusion(precision: Precision, fusion: voisin_cuda::Fusion) -> CudaEngine {
    let opts = CudaOptions {
        precision,
        fusion,
        ..Default::default()
    };
    CudaEngine::with_options(0, opts).expect("a CUDA GPU")
}

/// An engine of `precision` and `fusion` whose 3 MiB tile budget gives a graph 512-item tiles,
/// so that most pairs of a set of a few thousand items are filtered.
fn small_tiles(precision: Precision, fusion: voisin_cuda::Fusion) -> CudaEngine {
    let opts = CudaOptions {
        precision,
        fusion,
        tile_bytes: 3 << 20,
        ..Default::default()
    };
    CudaEngine::with_options(0, opts).expect("a CUDA GPU")
}

fn same(got: &KnnResult, want: &KnnResult, what: &str) {
    common::identical(got, want, what);
}

fn same_range(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.indices, want.indices, "{what}: indices");
    assert_eq!(got.distances, want.distances, "{what}: distances");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_input_type_and_precision_matches_the_cpu() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let (n, nq, d) = (1100, 60, 127);
    let metrics = [
        Metric::Euclidean,
        Metric::SqEuclidean,
        Metric::InnerProduct,
        Metric::Cosine,
        Metric::Cityblock,
    ];
    for elem in [ElemType::F16, ElemType::Bf16, ElemType::U8, ElemType::F32] {
        let base = typed(&mut rng, elem, n, d, 0.0, 7);
        let queries = typed(&mut rng, elem, nq, d, 0.0, 5);
        for p in precisions(elem) {
            let g = gpu(p);
            for metric in &metrics {
                if !takes(p, elem, metric) {
                    continue;
                }
                for k in [1, 10, 100, 256, 1000] {
                    let what = format!("{elem:?} {p} {metric} knn k={k}");
                    let got = g.knn(&base, &queries, k, metric).unwrap();
                    same(&got, &cpu.knn(&base, &queries, k, metric).unwrap(), &what);
                }
                for k in [1, 10, 256, n - 1] {
                    let what = format!("{elem:?} {p} {metric} graph k={k}");
                    let got = g.graph(&base, k, metric).unwrap();
                    same(&got, &cpu.graph(&base, k, metric).unwrap(), &what);
                }
                // A radius around the 10th neighbour of the first query.
                let ten = cpu.knn(&base, &queries, 10, metric).unwrap();
                let radius = ten.row(0).1[9] as f64;
                let what = format!("{elem:?} {p} {metric} range {radius}");
                let got = g.range(&base, &queries, radius, metric).unwrap();
                same_range(
                    &got,
                    &cpu.range(&base, &queries, radius, metric).unwrap(),
                    &what,
                );
            }
        }
    }
}

/// The k-NN graph's warm tile pairs, filtered by the fused tile pair on tensor cores
/// (ops/pair.rs: TF32 plans on scaled f16, f16, bf16, int8) and, with fusion off or under fp32,
/// by the tile filter
/// over a written tile: a small tile budget gives 512-item tiles, so most pairs of a 2,100-item
/// set are filtered and the last tile is ragged. Every input type, dims that are and are not
/// whole 16-byte rows, duplicates, data near and far from the origin; byte for byte against the
/// CPU engine.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_tile_pairs_fused_and_not_match_the_cpu() {
    use voisin_cuda::Fusion;
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let n = 2100;
    let metrics = [
        Metric::Euclidean,
        Metric::SqEuclidean,
        Metric::InnerProduct,
        Metric::Cosine,
    ];
    for (elem, d, offset) in [
        (ElemType::F32, 128, 0.0),
        (ElemType::F32, 12, 40.0),
        (ElemType::F32, 3, 0.0),
        (ElemType::F32, 127, 5.0),
        (ElemType::F16, 127, 0.0),
        (ElemType::F16, 1025, 0.0),
        (ElemType::Bf16, 3, 0.0),
        (ElemType::U8, 127, 0.0),
        (ElemType::U8, 20, 60.0),
    ] {
        let data = typed(&mut rng, elem, n, d, offset, 9);
        for metric in &metrics {
            for k in [1, 10, 100, n - 1] {
                let want = cpu.graph(&data, k, metric).unwrap();
                for p in precisions(elem) {
                    if !takes(p, elem, metric) {
                        continue;
                    }
                    for fusion in [Fusion::Auto, Fusion::Off] {
                        let g = small_tiles(p, fusion);
                        let what = format!("{elem:?} d={d} {p} {fusion:?} {metric} graph k={k}");
                        same(&g.graph(&data, k, metric).unwrap(), &want, &what);
                    }
                }
            }
        }
    }
}

/// k-NN passes of batches past fused_filter's (ops/fused.rs `FusedKernel::Pair`) filter the
/// base with the graph's fused tile pair, rows only: a threshold pass over a sample spread over
/// the base, then chunks of the base, each merged before the next. Every input type on its
/// tensor cores (TF32 plans on scaled f16), dims that are and are not whole 16-byte rows,
/// duplicates, a base whose first 3,000 items lie far from the queries, and k = 1000 (lists of
/// 2048, merged a block a row). Byte for byte against the CPU engine, with fusion on and off;
/// the pairs must have run (k = 100 aside: a pilot may widen its list past them).
#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_fused_pairs_on_every_input_type() {
    use voisin_cuda::Fusion;
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let (n, nq, head) = (20_000, 700, 3000);
    for (elem, d, p) in [
        (ElemType::F32, 128, Precision::Tf32),
        (ElemType::F32, 3, Precision::Tf32),
        (ElemType::F32, 127, Precision::Tf32),
        (ElemType::F32, 127, Precision::Fp16x3),
        (ElemType::F16, 127, Precision::Fp16),
        (ElemType::Bf16, 64, Precision::Bf16),
        (ElemType::U8, 128, Precision::Int8),
    ] {
        let far = if elem == ElemType::U8 { 100.0 } else { 30.0 };
        for far_head in [false, true] {
            let offset = |r: usize| if far_head && r < head { far } else { 0.0 };
            let base = typed_rows(&mut rng, elem, n, d, offset, 9);
            let queries = typed(&mut rng, elem, nq, d, 0.0, 7);
            let metrics = match elem {
                ElemType::U8 => vec![Metric::Euclidean, Metric::SqEuclidean],
                _ => vec![Metric::Euclidean, Metric::InnerProduct, Metric::Cosine],
            };
            for metric in metrics.iter().filter(|m| takes(p, elem, m)) {
                for k in [1, 10, 100, 1000] {
                    let want = cpu.knn(&base, &queries, k, metric).unwrap();
                    for fusion in [Fusion::Auto, Fusion::Off] {
                        let g = with_fusion(p, fusion);
                        let what = format!(
                            "{elem:?} d={d} {p} {fusion:?} {metric} far head {far_head} knn k={k}"
                        );
                        same(&g.knn(&base, &queries, k, metric).unwrap(), &want, &what);
                        // Lists of k = 100 may be a pilot's longer list, which the pairs
                        // may not serve; k = 1000's (2048, the pilot skipped) they do.
                        let chunks = g.fused_pair_chunks();
                        if fusion == Fusion::Off || k != 100 {
                            assert_eq!(chunks > 0, fusion == Fusion::Auto, "{what}: {chunks}");
                        }
                    }
                }
            }
        }
    }
}

/// TF32 graphs, whose fused tile pairs tile the prepared rows as f16 scaled per row by a power
/// of two (kernels/distance/scaled_half.cu), and fp16x3 graphs, whose pairs tile them split
/// into two f16 halves, on rows that test the scaling: groups of
/// near-duplicate rows at magnitudes from 1e-15 to 1e14, rows of one large value and others
/// 2⁻¹⁰ to 2⁻³⁰ of it (some below f16's normal range once scaled), zero rows; small tiles so most
/// pairs are fused. From d = 1024 the written tiles run on the scaled rows too (cuBLAS, then
/// brought back to scale: ops/scaled.rs), fused or not; d = 2100 sums two chunks. Byte for byte
/// against the CPU engine, with fusion on and off.
#[test]
#[ignore = "needs a CUDA GPU"]
fn scaled_half_pairs_on_rows_of_every_magnitude() {
    use voisin_cuda::Fusion;
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let n = 1500;
    for d in [3usize, 20, 127, 1025, 2100] {
        let centres: Vec<Vec<f32>> = (0..30)
            .map(|_| (0..d).map(|_| rng.sample(StandardNormal)).collect())
            .collect();
        let mut v = Vec::with_capacity(n * d);
        for i in 0..n {
            let g = i % 30;
            let scale = 10f32.powi(g as i32 - 15);
            for (c, &centre) in centres[g].iter().enumerate() {
                let x: f32 = rng.sample(StandardNormal);
                v.push(match i % 7 {
                    // One large value, the others far below it.
                    5 => {
                        if c == 0 {
                            1e3 * (1.0 + x * 1e-3)
                        } else {
                            x * 2f32.powi(-rng.gen_range(10..30))
                        }
                    }
                    6 if i % 21 == 6 => 0.0,
                    _ => scale * (centre + 1e-3 * x),
                });
            }
        }
        let data: Dataset = VectorSet::from_f32(n, d, v).unwrap().into();
        for metric in [Metric::Euclidean, Metric::InnerProduct, Metric::Cosine] {
            for k in [1, 10, 60] {
                let want = cpu.graph(&data, k, &metric).unwrap();
                for p in [Precision::Tf32, Precision::Fp16x3] {
                    for fusion in [Fusion::Auto, Fusion::Off] {
                        let g = small_tiles(p, fusion);
                        let what = format!("d={d} {p} {metric} k={k} {fusion:?}");
                        same(&g.graph(&data, k, &metric).unwrap(), &want, &what);
                    }
                }
            }
        }
    }
}

/// The storage's own tensor cores (f16, bf16; int8 for u8) on every dimension class (none a
/// multiple of 8: the stored half rows are padded on the device), near the origin and far from
/// it (no translation on half storage: the bound widens, the answers stay exact; u8 values
/// then pile up at 255), with many duplicates.
#[test]
#[ignore = "needs a CUDA GPU"]
fn own_cores_dims_far_data_and_duplicates() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    for elem in [ElemType::F16, ElemType::Bf16, ElemType::U8] {
        let g = gpu(Precision::Auto);
        let metrics = match elem {
            ElemType::U8 => [Metric::Euclidean, Metric::SqEuclidean],
            _ => [Metric::Euclidean, Metric::InnerProduct],
        };
        for d in [1usize, 3, 127, 1025] {
            for offset in [0.0f32, 100.0] {
                for dup in [2usize, 50] {
                    let base = typed(&mut rng, elem, 700, d, offset, dup);
                    let queries = typed(&mut rng, elem, 40, d, offset, dup);
                    for metric in metrics.clone() {
                        let what = format!("{elem:?} d={d} offset {offset} dup {dup} {metric}");
                        for k in [1, 10, 100] {
                            let got = g.knn(&base, &queries, k, &metric).unwrap();
                            assert_eq!(got.stats.arithmetic, format!("{}", precision_of(elem)));
                            let want = cpu.knn(&base, &queries, k, &metric).unwrap();
                            same(&got, &want, &format!("{what} knn k={k}"));
                        }
                        let got = g.graph(&base, 10, &metric).unwrap();
                        same(&got, &cpu.graph(&base, 10, &metric).unwrap(), &what);
                    }
                }
            }
        }
    }
}

fn precision_of(elem: ElemType) -> Precision {
    match elem {
        ElemType::F16 => Precision::Fp16,
        ElemType::Bf16 => Precision::Bf16,
        ElemType::U8 => Precision::Int8,
        _ => Precision::Fp32,
    }
}

/// `--stats` names the arithmetic `auto` chose; explicit choices the data cannot take are
/// refused in one line; mixed storage runs on f32 copies.
#[test]
#[ignore = "needs a CUDA GPU"]
fn auto_reports_and_explicit_choices_are_checked() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let f16_set = typed(&mut rng, ElemType::F16, 500, 16, 0.0, 3);
    let f32_set = typed(&mut rng, ElemType::F32, 500, 16, 0.0, 3);
    let u8_set = typed(&mut rng, ElemType::U8, 500, 16, 0.0, 3);
    let auto = gpu(Precision::Auto);
    let e = Metric::Euclidean;
    let arith = |b: &Dataset, q: &Dataset, m: &Metric| {
        auto.knn(b, q, 5, m).unwrap().stats.arithmetic.clone()
    };
    assert_eq!(arith(&f16_set, &f16_set, &e), "fp16");
    assert_eq!(arith(&u8_set, &u8_set, &e), "int8");
    // f32 rows under a GEMM metric: fp32 or TF32 as the pilot finds (see
    // `auto_picks_tf32_where_its_pilot_proves_cheaply`); SIMT metrics stay fp32.
    for (b, q, m) in [
        (&f32_set, &f32_set, &e),
        (&u8_set, &u8_set, &Metric::InnerProduct),
        (&u8_set, &f32_set, &e),
        (&f16_set, &f32_set, &e),
        (&f16_set, &f16_set, &Metric::Cosine),
    ] {
        let a = arith(b, q, m);
        assert!(a == "fp32" || a == "tf32", "{m}: {a}");
    }
    assert_eq!(arith(&f16_set, &f16_set, &Metric::Cityblock), "fp32");
    let mixed = auto.knn(&f16_set, &f32_set, 7, &e).unwrap();
    same(
        &mixed,
        &cpu.knn(&f16_set, &f32_set, 7, &e).unwrap(),
        "mixed",
    );
    for (p, data, m) in [
        (Precision::Fp16, &f32_set, &e),
        (Precision::Bf16, &f16_set, &e),
        (Precision::Fp16, &f16_set, &Metric::Cosine),
        (Precision::Int8, &f32_set, &e),
        (Precision::Int8, &u8_set, &Metric::InnerProduct),
    ] {
        let err = gpu(p).knn(data, data, 3, m).unwrap_err().to_string();
        assert!(
            err.contains("--precision") && !err.contains('\n'),
            "{p} {m}: {err}"
        );
    }
}

/// f32 rows of standard normal values: `n` for the base, `nq` for the queries.
fn normal_f32(rng: &mut StdRng, n: usize, nq: usize, d: usize) -> (Dataset, Dataset) {
    let mut rows = |m: usize| -> Dataset {
        let v = (0..m * d).map(|_| rng.sample(StandardNormal)).collect();
        VectorSet::from_f32(m, d, v).unwrap().into()
    };
    (rows(n), rows(nq))
}

/// Points on `count` random 8-d affine subspaces (common/subspaces.rs): `n` for the base and
/// `nq` for the queries, both spread over every subspace.
fn clustered_f32(
    rng: &mut StdRng,
    n: usize,
    nq: usize,
    d: usize,
    count: usize,
) -> (Dataset, Dataset) {
    let spaces = subspaces::subspaces(rng, count, d);
    let mut rows = |m: usize| -> Dataset {
        let v = subspaces::rows_on(rng, &spaces, m, d);
        VectorSet::from_f32(m, d, v).unwrap().into()
    };
    (rows(n), rows(nq))
}

/// The graph rows of 200 evenly spaced items of `base` against the CPU engine's
/// (common/graph_rows.rs), ids and distances exactly.
fn graph_rows_match(got: &KnnResult, base: &Dataset, k: usize, metric: &Metric, what: &str) {
    let picks = graph_rows::picks(base.len(), 200);
    for (&i, (wi, wd)) in picks
        .iter()
        .zip(graph_rows::expected(base, &picks, k, metric))
    {
        let (gi, gd) = got.row(i);
        assert!(
            gi == wi.as_slice() && gd == wd.as_slice(),
            "{what}: row {i}"
        );
    }
}

/// The graph in locality order (ops/locality.rs, fp16x3 plans): 5,000 items in tiles of 512 (a
/// ragged last one) under a small tile budget, so the lists are seeded, the set reordered by
/// each item's nearest sample item, diagonal pairs run in bands of block distance, and the
/// kernel tiles whose blocks' spheres lie too far apart left out of the fused pairs.
/// Clustered data (8 subspaces of 625 items: blocks of 128 rows of one cluster, mostly) and
/// normal data, d = 3, 127, 128, both L2 metrics, every f32
/// arithmetic (the others as a reference), k = 1, 10, 100, 256, n − 1: byte for byte against
/// the CPU engine. Under fp16x3 (a bound near fp32's) the clustered graph of k = 10 (lists of 32
/// in the symmetric schedule) at d = 127 and 128 must have left pairs out: its count of
/// evaluations, exact ones included, is under the triangle's (at d = 3 the 8-d subspaces
/// overlap, and nothing need be left out).
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_in_locality_order_matches_the_cpu() {
    use voisin_cuda::Fusion;
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let n = 5000;
    let triangle = (n * (n - 1) / 2) as u64;
    for d in [3, 127, 128] {
        let sets = [
            ("clustered", clustered_f32(&mut rng, n, 1, d, 8).0),
            ("normal", normal_f32(&mut rng, n, 1, d).0),
        ];
        for (kind, data) in &sets {
            for metric in [Metric::Euclidean, Metric::SqEuclidean] {
                for k in [1, 10, 100, 256, n - 1] {
                    let want = cpu.graph(data, k, &metric).unwrap();
                    for p in [
                        Precision::Auto,
                        Precision::Fp32,
                        Precision::Tf32,
                        Precision::Fp16x3,
                    ] {
                        let g = small_tiles(p, Fusion::Auto);
                        let got = g.graph(data, k, &metric).unwrap();
                        let what = format!("{kind} d={d} {p} {metric} graph k={k}");
                        same(&got, &want, &what);
                        if *kind == "clustered" && p == Precision::Fp16x3 {
                            eprintln!("{what}: {} evaluations", got.stats.distance_evals);
                        }
                        if *kind == "clustered" && p == Precision::Fp16x3 && k == 10 && d > 3 {
                            assert!(
                                got.stats.distance_evals < triangle,
                                "{what}: {} evaluations, no tile left out",
                                got.stats.distance_evals
                            );
                        }
                    }
                }
            }
        }
    }
}

/// `auto` on f32 data: its pilot weighs TF32's tile saving against the exact evaluations its
/// wider bound adds. On 400,000 normal points the saving wins (TF32); on 8,000 points on eight
/// 8-d subspaces (as dense on each as gpu_bench's clustered kind) TF32's bound needs long lists
/// and the k-NN keeps fp32, while the euclidean graph takes split rows (fp16x3, whose bound
/// proves near fp32's lists; cosine's closer keys may keep fp32). k-NN and graphs under
/// euclidean and cosine, a prepared base keeping the choice of its first search; `--stats`
/// names what ran and the answers equal the CPU engine's, as those of the explicit choices
/// (which run no pilot) do.
#[test]
#[ignore = "needs a CUDA GPU"]
fn auto_picks_tf32_where_its_pilot_proves_cheaply() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let (nq, d) = (300, 128);
    let cases = [
        ("normal", normal_f32(&mut rng, 400_000, nq, d), "tf32"),
        ("clustered", clustered_f32(&mut rng, 8000, nq, d, 8), "fp32"),
    ];
    let g = Arc::new(gpu(Precision::Auto));
    for (what, (base, queries), want) in &cases {
        for metric in [Metric::Euclidean, Metric::Cosine] {
            let say = format!("{what} {metric}");
            for k in [1, 10, 100] {
                let got = g.knn(base, queries, k, &metric).unwrap();
                let cpu_knn = cpu.knn(base, queries, k, &metric).unwrap();
                same(&got, &cpu_knn, &format!("{say} knn k={k}"));
                assert_eq!(got.stats.arithmetic, *want, "{say} knn k={k}");
            }
            let got = g.graph(base, 10, &metric).unwrap();
            let graph_want = match (*want, &metric) {
                ("fp32", Metric::Euclidean) => "fp16x3",
                ("fp32", _) if got.stats.arithmetic == "fp16x3" => "fp16x3",
                _ => want,
            };
            assert_eq!(got.stats.arithmetic, graph_want, "{say} graph");
            if base.len() <= 10_000 {
                same(&got, &cpu.graph(base, 10, &metric).unwrap(), &say);
            } else {
                graph_rows_match(&got, base, 10, &metric, &say);
            }
            for p in [Precision::Fp32, Precision::Tf32, Precision::Fp16x3] {
                let got = gpu(p).knn(base, queries, 10, &metric).unwrap();
                assert_eq!(got.stats.arithmetic, p.name(), "{say} explicit");
                let cpu_knn = cpu.knn(base, queries, 10, &metric).unwrap();
                same(&got, &cpu_knn, &format!("{say} explicit {p}"));
            }
        }
        // A prepared base decides at its first search (k = 10) and keeps it (k = 100).
        let shared = Arc::new(base.clone());
        let prepared = Arc::clone(&g).prepare(shared, &Metric::Euclidean).unwrap();
        for k in [10, 100] {
            let got = prepared.knn(queries, k).unwrap();
            let want_knn = cpu.knn(base, queries, k, &Metric::Euclidean).unwrap();
            same(&got, &want_knn, &format!("{what} prepared k={k}"));
            assert_eq!(got.stats.arithmetic, *want, "{what} prepared k={k}");
        }
    }
}

/// A prepared f16 (u8) base answers f16 (u8) batches on its resident stored rows and f32
/// batches through the engine's f32 path, all equal to the CPU engine.
#[test]
#[ignore = "needs a CUDA GPU"]
fn prepared_f16_and_u8_bases_with_any_queries() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let g = Arc::new(gpu(Precision::Auto));
    for (own, metric) in [
        (ElemType::F16, Metric::Euclidean),
        (ElemType::F16, Metric::InnerProduct),
        (ElemType::F16, Metric::Cosine),
        (ElemType::U8, Metric::Euclidean),
        (ElemType::U8, Metric::InnerProduct),
    ] {
        let base = Arc::new(typed(&mut rng, own, 3000, 24, 0.0, 9));
        let prepared = Arc::clone(&g).prepare(Arc::clone(&base), &metric).unwrap();
        for elem in [own, ElemType::F32] {
            let queries = typed(&mut rng, elem, 200, 24, 0.0, 4);
            for k in [1, 10, 1000] {
                let what = format!("{metric} {elem:?} queries k={k}");
                let got = prepared.knn(&queries, k).unwrap();
                same(&got, &cpu.knn(&base, &queries, k, &metric).unwrap(), &what);
            }
            let radius = cpu.knn(&base, &queries, 10, &metric).unwrap().row(0).1[9] as f64;
            let got = prepared.range(&queries, radius).unwrap();
            let want = cpu.range(&base, &queries, radius, &metric).unwrap();
            same_range(&got, &want, &format!("{metric} {elem:?} range"));
        }
    }
}

/// An f16 (u8) base larger than the memory the engine may use streams through in f16 (u8)
/// shards: f16 rows of 30 values padded to 32 by the shard loader, u8 rows tiled as int8.
#[test]
#[ignore = "needs a CUDA GPU"]
fn streamed_f16_and_u8_bases() {
    let mut rng = StdRng::seed_from_u64(seed());
    let cpu = CpuEngine::default();
    let opts = CudaOptions {
        device_memory: Some(40 << 20),
        ..Default::default()
    };
    let g = CudaEngine::with_options(0, opts).expect("a CUDA GPU");
    for elem in [ElemType::F16, ElemType::U8] {
        let base = typed(&mut rng, elem, 400_000, 30, 0.0, 11);
        let queries = typed(&mut rng, elem, 50, 30, 0.0, 5);
        for k in [1, 10, 100] {
            let got = g.knn(&base, &queries, k, &Metric::Euclidean).unwrap();
            assert_eq!(got.stats.arithmetic, precision_of(elem).to_string());
            let want = cpu.knn(&base, &queries, k, &Metric::Euclidean).unwrap();
            same(&got, &want, &format!("streamed {elem:?} k={k}"));
        }
    }
}
