//! f64 storage on the CUDA engine (docs/design/f64-storage-gpu.md). Values that are f32 numbers
//! (f64 storage of f32 data) and values f32 cannot hold (random f64, int64 beyond 2^24, values
//! that collide once rounded to f32, far from the origin) run on the GPU: tiles on the rows
//! rounded to f32 under a widened bound, exact keys on the f64 values. Every answer must equal
//! the CPU engine's byte for byte and the f64 reference. Only values whose f32 rounding
//! overflows are refused, in one line, and the CPU engine answers them.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{engine, identical, same_knn, same_range, seed};

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::cpu::CpuEngine;
use voisin::data::ElemType;
use voisin::engine::Op;
use voisin::graph::checkpoint::{CheckpointOptions, GraphCheckpoints};
use voisin::{reference, Dataset, Engine, Metric, RangeResult, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, MultiGpu, Precision, Select};

/// Every built-in vector metric.
fn metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect()
}

/// f64 storage of `value(x)` for standard normal draws x, with row 2 a duplicate of row 0.
fn f64_normal(rng: &mut StdRng, n: usize, d: usize, value: impl Fn(f64) -> f64) -> Dataset {
    let mut v: Vec<f64> = (0..n * d)
        .map(|_| value(StandardNormal.sample(rng)))
        .collect();
    if n > 3 {
        let row = v[..d].to_vec();
        v[2 * d..3 * d].copy_from_slice(&row);
    }
    let set = VectorSet::from_f64(n, d, v).unwrap();
    assert_eq!(set.elem_type(), ElemType::F64);
    set.into()
}

/// f64 storage of f32 numbers, far from the origin, with duplicate rows.
fn f64_of_f32(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    f64_normal(rng, n, d, |x| (100.0 + x) as f32 as f64)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_storage_of_f32_numbers_matches_the_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    for &(n, d) in &[(500usize, 1usize), (700, 3), (400, 127), (200, 1025)] {
        let base = f64_of_f32(&mut rng, n, d);
        let queries = f64_of_f32(&mut rng, 23, d);
        for m in metrics() {
            for k in [1, 10, n - 1] {
                let what = format!("f64 n={n} d={d} k={k} {m}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
            }
            let want = reference::graph(&base, 10, &m).unwrap();
            same_knn(
                &e.graph(&base, 10, &m).unwrap(),
                &want,
                &format!("graph {m} d={d}"),
            );
            let probe = reference::knn(&base, &queries, 10, &m).unwrap();
            let radius = probe.distances[probe.distances.len() / 2] as f64;
            let want = reference::range(&base, &queries, radius, &m).unwrap();
            same_range(
                &e.range(&base, &queries, radius, &m).unwrap(),
                &want,
                &format!("range {m} d={d}"),
            );
        }
    }
}

fn on_gpu0(opts: CudaOptions) -> CudaEngine {
    CudaEngine::with_options(0, opts).expect("a CUDA GPU")
}

/// Random f64 values around `centre` (most of them not f32 numbers), with a duplicate row.
fn f64_random(rng: &mut StdRng, n: usize, d: usize, centre: f64) -> Dataset {
    f64_normal(rng, n, d, |x| centre + x)
}

/// Integers 1e8 + 0..16: f32 holds only every eighth of them, so rows that differ in f64
/// collide in f32, and the many equal keys tie.
fn f64_colliding(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let v: Vec<f64> = (0..n * d)
        .map(|_| 1e8 + rng.gen_range(0..16) as f64)
        .collect();
    let set = VectorSet::from_f64(n, d, v).unwrap();
    assert_eq!(set.elem_type(), ElemType::F64);
    set.into()
}

/// Values that f32 holds only as subnormals (1e-41) or not at all (1e-47 rounds to zero).
fn f64_tiny(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let v: Vec<f64> = (0..n * d)
        .map(|i| {
            let x: f64 = StandardNormal.sample(rng);
            x * if i % 3 == 0 { 1e-47 } else { 1e-41 }
        })
        .collect();
    VectorSet::from_f64(n, d, v).unwrap().into()
}

/// int64 values far from the origin (beyond 2^24, so stored as f64), many of them equal.
fn int64_far(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let v: Vec<i64> = (0..n * d)
        .map(|_| 1_000_000_000_000 + rng.gen_range(-40..40))
        .collect();
    let set = VectorSet::from_exact(n, d, &v).unwrap();
    assert_eq!(set.elem_type(), ElemType::F64);
    set.into()
}

fn same_range_bytes(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.indices, want.indices, "{what}: indices");
    let bits = |r: &RangeResult| r.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
    assert!(bits(got) == bits(want), "{what}: distances differ");
}

/// `e`'s knn (k = 1, 10, n − 1), graph and range of `base` and `queries` under every metric,
/// each equal to the CPU engine's byte for byte and to the f64 reference; or, where `e` does not
/// support the sets (keys beyond the tiles' range: minkowski's power sums of values about 1e12),
/// refused in one line that names the CPU engine.
fn check_all(e: &dyn Engine, base: &Dataset, queries: &Dataset, who: &str) {
    let cpu = CpuEngine::default();
    let n = base.len();
    for m in metrics() {
        if ![base, queries].iter().all(|s| e.supports(s, &m, Op::Knn)) {
            let err = e.knn(base, queries, 1, &m).unwrap_err();
            assert!(
                err.is_user_error() && err.to_string().contains("--device cpu"),
                "{who} {m}: {err}"
            );
            continue;
        }
        for k in [1, 10, n - 1] {
            let what = format!("{who}: knn n={n} k={k} {m}");
            let got = e.knn(base, queries, k, &m).unwrap();
            identical(&got, &cpu.knn(base, queries, k, &m).unwrap(), &what);
            same_knn(&got, &reference::knn(base, queries, k, &m).unwrap(), &what);
        }
        for k in [1, 10, n - 1] {
            let what = format!("{who}: graph n={n} k={k} {m}");
            let got = e.graph(base, k, &m).unwrap();
            identical(&got, &cpu.graph(base, k, &m).unwrap(), &what);
            same_knn(&got, &reference::graph(base, k, &m).unwrap(), &what);
        }
        let probe = reference::knn(base, queries, 10.min(n), &m).unwrap();
        for radius in [
            probe.distances[0] as f64,
            probe.distances[probe.distances.len() / 2] as f64,
        ] {
            let what = format!("{who}: range r={radius} {m}");
            let got = e.range(base, queries, radius, &m).unwrap();
            same_range_bytes(&got, &cpu.range(base, queries, radius, &m).unwrap(), &what);
            same_range(
                &got,
                &reference::range(base, queries, radius, &m).unwrap(),
                &what,
            );
        }
    }
}

/// f64 and int64 values f32 cannot hold, random, far out, tie-heavy and below f32's normal
/// range, d = 1, 3, 127, on the fp32 and TF32 engines.
#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_values_f32_cannot_hold_equal_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(seed());
    let fp32 = engine(Select::Auto);
    let tf32 = on_gpu0(CudaOptions {
        precision: Precision::Tf32,
        ..Default::default()
    });
    for &(n, d) in &[(300usize, 1usize), (400, 3), (250, 127)] {
        let sets = [
            (
                "random",
                f64_random(&mut rng, n, d, 0.0),
                f64_random(&mut rng, 17, d, 0.0),
            ),
            (
                "far",
                f64_random(&mut rng, n, d, 1e6),
                f64_random(&mut rng, 17, d, 1e6),
            ),
            (
                "colliding",
                f64_colliding(&mut rng, n, d),
                f64_colliding(&mut rng, 17, d),
            ),
            (
                "int64",
                int64_far(&mut rng, n, d),
                int64_far(&mut rng, 17, d),
            ),
            ("tiny", f64_tiny(&mut rng, n, d), f64_tiny(&mut rng, 17, d)),
        ];
        for (kind, base, queries) in &sets {
            check_all(&fp32, base, queries, &format!("fp32 {kind} d={d}"));
            check_all(&tf32, base, queries, &format!("tf32 {kind} d={d}"));
        }
        // f64 base, f32 queries and the other way round.
        let narrow = common::normal(&mut rng, 17, d);
        let (_, base, _) = &sets[0];
        check_all(
            &fp32,
            base,
            &narrow,
            &format!("f64 base, f32 queries d={d}"),
        );
        let wide = f64_random(&mut rng, 17, d, 0.0);
        let narrow_base = common::normal(&mut rng, n, d);
        check_all(
            &fp32,
            &narrow_base,
            &wide,
            &format!("f32 base, f64 queries d={d}"),
        );
    }
}

/// Two engines on GPU 0 (or GPUs 0 and 1), a small tile budget so that graphs deal several
/// triangle tiles, and checkpointed graph passes on one and two GPUs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_values_on_several_gpus_and_in_checkpointed_passes() {
    let mut rng = StdRng::seed_from_u64(seed());
    let two = if voisin_cuda::device_count() >= 2 {
        vec![0, 1]
    } else {
        vec![0, 0]
    };
    let small = CudaOptions {
        tile_bytes: 1 << 20,
        ..Default::default()
    };
    let pair = MultiGpu::with_options(&two, small.clone()).unwrap();
    let one = on_gpu0(small);
    let cpu = CpuEngine::default();
    for (kind, base, queries) in [
        (
            "random",
            f64_random(&mut rng, 1500, 5, 0.0),
            f64_random(&mut rng, 40, 5, 0.0),
        ),
        (
            "colliding",
            f64_colliding(&mut rng, 1300, 3),
            f64_colliding(&mut rng, 40, 3),
        ),
        (
            "int64",
            int64_far(&mut rng, 1100, 33),
            int64_far(&mut rng, 40, 33),
        ),
    ] {
        check_all(&pair, &base, &queries, &format!("multi {kind}"));
        // What the engines refuse, check_all has seen refused by name.
        for m in metrics()
            .into_iter()
            .filter(|m| one.supports(&base, m, Op::GraphCheckpointed))
        {
            for k in [1, 10, base.len() - 1] {
                let want = cpu.graph(&base, k, &m).unwrap();
                let engines: [(&str, &dyn GraphCheckpoints); 2] = [("one", &one), ("two", &pair)];
                for (who, e) in engines {
                    let dir = std::env::temp_dir().join(format!(
                        "voisin-f64-ckpt-{}-{}",
                        std::process::id(),
                        rand::random::<u32>()
                    ));
                    let opts = CheckpointOptions {
                        dir: dir.clone(),
                        resume: false,
                        pass_rows: Some(512),
                        stop_after: None,
                    };
                    let got = e.graph_checkpointed(&base, k, &m, &opts).unwrap();
                    std::fs::remove_dir_all(&dir).ok();
                    identical(&got, &want, &format!("checkpointed {who} {kind} {m} k={k}"));
                }
            }
        }
    }
}

/// A 256 MiB cap and a 600k × 64 f64 base (150 MiB of f32 rows on the device, 300 MiB
/// prepared): knn and range stream the base in shards.
#[test]
#[ignore = "needs a CUDA GPU"]
fn streamed_f64_base_equals_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = on_gpu0(CudaOptions {
        device_memory: Some(256 << 20),
        ..Default::default()
    });
    let cpu = CpuEngine::default();
    let base = f64_random(&mut rng, 600_000, 64, 1e6);
    let queries = f64_random(&mut rng, 23, 64, 1e6);
    for m in metrics() {
        let before = e.streamed_shards();
        for k in [1, 10] {
            let what = format!("streamed knn k={k} {m}");
            let got = e.knn(&base, &queries, k, &m).unwrap();
            identical(&got, &cpu.knn(&base, &queries, k, &m).unwrap(), &what);
        }
        assert!(e.streamed_shards() - before >= 4, "{m}: not streamed");
        let near = cpu.knn(&base, &queries, 20, &m).unwrap();
        let r = near.row(0).1[19] as f64;
        let what = format!("streamed range r={r} {m}");
        same_range_bytes(
            &e.range(&base, &queries, r, &m).unwrap(),
            &cpu.range(&base, &queries, r, &m).unwrap(),
            &what,
        );
    }
}

/// A prepared base (fit once, query many) of f64 values, searched with f64 and f32 queries:
/// each batch is widened for its own rounding, and answers as the CPU engine does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn prepared_f64_base_equals_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(seed());
    let gpu = std::sync::Arc::new(engine(Select::Auto));
    let cpu = CpuEngine::default();
    for (kind, base) in [
        ("random", f64_random(&mut rng, 3000, 24, 0.0)),
        ("colliding", f64_colliding(&mut rng, 2000, 3)),
        ("f32 base", common::normal(&mut rng, 3000, 24)),
    ] {
        let base = std::sync::Arc::new(base);
        let d = base.as_vectors().unwrap().dim();
        for m in metrics() {
            let prepared = std::sync::Arc::clone(&gpu)
                .prepare(std::sync::Arc::clone(&base), &m)
                .unwrap();
            let batches = [
                f64_random(&mut rng, 100, d, 0.0),
                common::normal(&mut rng, 100, d),
                f64_colliding(&mut rng, 50, d),
            ];
            for (b, queries) in batches.iter().enumerate() {
                for k in [1, 10, 1000] {
                    let what = format!("prepared {kind} {m} batch {b} k={k}");
                    let got = prepared.knn(queries, k).unwrap();
                    identical(&got, &cpu.knn(&base, queries, k, &m).unwrap(), &what);
                }
                let near = cpu.knn(&base, queries, 10, &m).unwrap();
                let r = near.row(0).1[9] as f64;
                same_range_bytes(
                    &prepared.range(queries, r).unwrap(),
                    &cpu.range(&base, queries, r, &m).unwrap(),
                    &format!("prepared range {kind} {m} batch {b}"),
                );
            }
        }
    }
}

/// Values whose f32 rounding overflows: answered on a copy scaled by a power of two where the
/// metric's keys allow it (equal to the CPU engine byte for byte), else refused in one line
/// naming the value and the CPU engine, which answers them.
#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_values_beyond_f32_are_scaled_or_refused_and_the_cpu_answers_them() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    let (n, d) = (300, 5);
    let mut vals: Vec<f64> = (0..n * d)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    vals[7 * d + 2] = 5e40;
    let data: Dataset = VectorSet::from_f64(n, d, vals).unwrap().into();
    let knn_op = Op::Knn;
    assert!(voisin_cuda::supports(&data, &Metric::Euclidean, knn_op));
    assert!(voisin_cuda::supports(&data, &Metric::Cosine, knn_op));
    assert!(!voisin_cuda::supports(
        &data,
        &Metric::Minkowski(3.0),
        knn_op
    ));
    let cpu_engine = CpuEngine::default();
    for m in metrics() {
        let cpu = cpu_engine.graph(&data, 5, &m).unwrap();
        same_knn(
            &cpu,
            &reference::graph(&data, 5, &m).unwrap(),
            &format!("cpu {m}"),
        );
        if e.supports(&data, &m, knn_op) {
            same_knn(&e.graph(&data, 5, &m).unwrap(), &cpu, &format!("graph {m}"));
            let want = cpu_engine.knn(&data, &data, 5, &m).unwrap();
            same_knn(
                &e.knn(&data, &data, 5, &m).unwrap(),
                &want,
                &format!("knn {m}"),
            );
            let r = f64::from(want.row(1).1[3]);
            same_range_bytes(
                &e.range(&data, &data, r, &m).unwrap(),
                &cpu_engine.range(&data, &data, r, &m).unwrap(),
                &format!("range {m}"),
            );
            continue;
        }
        let err = e.graph(&data, 5, &m).unwrap_err();
        assert!(err.is_user_error(), "{m}: {err}");
        assert!(err.to_string().contains("vector 7"), "{m}: {err}");
        assert!(err.to_string().contains("--device cpu"), "{m}: {err}");
        assert!(e.knn(&data, &data, 5, &m).is_err());
        assert!(e.range(&data, &data, 0.5, &m).is_err());
    }
}
