//! The CUDA engine over the whole finite range of each input type (issue 40,
//! docs/design/exact-scaling.md): data of every stored type scaled by 2^e for e across its
//! exponent range (subnormals, the largest binades, rows of many magnitudes in one set, zero
//! rows and duplicates), under every arithmetic the data can take and every built-in vector
//! metric. k-NN, graphs, range searches and prepared k-NN equal the CPU engine byte for byte
//! (the CPU engine is held to the big-integer reference over the same magnitudes by
//! crates/voisin/tests/magnitudes.rs). A request the engine cannot tile is refused in one line
//! that names the CPU engine, and only then (`supports` says so first, so `auto` routes it).
//!
//! Every case runs and the failures are listed together, so one device run shows them all:
//! `cargo test -p voisin-cuda --release --test magnitudes_gpu -- --ignored`.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use rand::prelude::*;
use voisin::cpu::CpuEngine;
use voisin::data::{ElemType, VectorData};
use voisin::engine::Op;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Precision};

/// One scaled set: `n` rows of `d` values, uniform in (−1, 1) times 2^e(row), every seventh row
/// a copy of the one before and every eleventh row zero, stored as `elem`.
fn scaled(
    rng: &mut StdRng,
    elem: ElemType,
    n: usize,
    d: usize,
    e: impl Fn(usize) -> i32,
) -> Dataset {
    let mut v: Vec<f64> = (0..n * d)
        .map(|i| rng.gen_range(-1.0f64..1.0) * 2f64.powi(e(i / d)))
        .collect();
    for r in 0..n {
        if r % 11 == 5 {
            v[r * d..(r + 1) * d].fill(0.0);
        } else if r % 7 == 3 {
            v.copy_within((r - 1) * d..r * d, r * d);
        }
    }
    let data = match elem {
        ElemType::U8 => unreachable!("u8 has one magnitude"),
        t => VectorData::rounded(v, t),
    };
    VectorSet::new(n, d, data).unwrap().into()
}

/// The exponents each stored type is tried at: both ends of its normal range, its subnormals,
/// and the binades where squares and products leave f32 (2^±64) and f64 (2^±512).
fn exponents(elem: ElemType) -> Vec<i32> {
    match elem {
        ElemType::F32 => vec![
            -148, -135, -126, -110, -75, -64, -40, 0, 40, 63, 64, 90, 110, 126,
        ],
        ElemType::F16 => vec![-23, -16, -14, -8, 0, 8, 14, 15],
        ElemType::Bf16 => vec![-130, -120, -64, 64, 100, 126],
        ElemType::F64 => vec![-1070, -1030, -600, -200, 100, 200, 500, 600, 1000, 1020],
        ElemType::U8 => vec![],
    }
}

fn metrics() -> Vec<Metric> {
    let mut m = common::metrics();
    m.push(Metric::SqEuclidean);
    m
}

/// One problem: a base, its queries and a metric, answered by `gpu` and the CPU engine.
struct Case<'a> {
    base: &'a Arc<Dataset>,
    queries: &'a Dataset,
    metric: &'a Metric,
    what: String,
}

/// What the GPU did with one case.
enum Outcome {
    Same,
    Refused,
}

/// Runs one case through every operation; `Err` names the first difference.
fn run(gpu: &Arc<CudaEngine>, cpu: &CpuEngine, c: &Case<'_>) -> Result<Outcome, String> {
    let (base, q, m, k) = (c.base.as_ref(), c.queries, c.metric, 5);
    let supported = gpu.supports(base, m, Op::Knn) && gpu.supports(q, m, Op::Knn);
    let want = cpu.knn(base, q, k, m).map_err(|e| format!("cpu: {e}"))?;
    let got = match gpu.knn(base, q, k, m) {
        Err(e) if !supported && e.is_user_error() && e.to_string().contains("--device cpu") => {
            return Ok(Outcome::Refused)
        }
        Err(e) => return Err(format!("knn: {e} (supports: {supported})")),
        Ok(_) if !supported => return Err("knn answered what supports refuses".into()),
        Ok(r) => r,
    };
    same(&got.indices, &want.indices, "knn ids")?;
    same(&got.distances, &want.distances, "knn distances")?;
    let (gg, cg) = (gpu.graph(base, k, m), cpu.graph(base, k, m));
    let (gg, cg) = (gg.map_err(|e| format!("graph: {e}"))?, cg.unwrap());
    same(&gg.indices, &cg.indices, "graph ids")?;
    same(&gg.distances, &cg.distances, "graph distances")?;
    // A radius holding a few items of the first query's row.
    let radius = f64::from(want.row(0).1[2.min(want.k.saturating_sub(1))]);
    if radius.is_finite() && radius < f64::from(f32::MAX) {
        let gr = gpu
            .range(base, q, radius, m)
            .map_err(|e| format!("range: {e}"))?;
        let cr = cpu.range(base, q, radius, m).unwrap();
        same(&gr.offsets, &cr.offsets, "range offsets")?;
        same(&gr.indices, &cr.indices, "range ids")?;
        same(&gr.distances, &cr.distances, "range distances")?;
    }
    let prepared = Arc::clone(gpu)
        .prepare(Arc::clone(c.base), m)
        .map_err(|e| format!("prepare: {e}"))?;
    let gp = prepared
        .knn(q, k)
        .map_err(|e| format!("prepared knn: {e}"))?;
    same(&gp.indices, &want.indices, "prepared knn ids")?;
    same(&gp.distances, &want.distances, "prepared knn distances")?;
    Ok(Outcome::Same)
}

fn same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    Err(match at {
        Some(i) => format!(
            "{what} differ first at {i}: gpu {:?}, cpu {:?}",
            got[i], want[i]
        ),
        None => format!("{what}: {} values, cpu {}", got.len(), want.len()),
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_magnitude_of_every_input_type_matches_the_cpu() {
    let mut rng = StdRng::seed_from_u64(common::seed());
    let cpu = CpuEngine::default();
    let engines: Vec<(Precision, Arc<CudaEngine>)> = [
        Precision::Auto,
        Precision::Fp32,
        Precision::Tf32,
        Precision::Fp16x3,
        Precision::Fp16,
        Precision::Bf16,
    ]
    .into_iter()
    .map(|precision| {
        let opts = CudaOptions {
            precision,
            ..Default::default()
        };
        (
            precision,
            Arc::new(CudaEngine::with_options(0, opts).expect("a CUDA GPU")),
        )
    })
    .collect();
    let (mut failures, mut refused, mut cases) = (Vec::new(), Vec::new(), 0);
    for elem in [ElemType::F32, ElemType::F16, ElemType::Bf16, ElemType::F64] {
        for d in [3usize, 17, 130] {
            let n = 61;
            let mut sets: Vec<(String, Dataset, Dataset)> = exponents(elem)
                .into_iter()
                .map(|e| {
                    let (b, q) = (
                        scaled(&mut rng, elem, n, d, |_| e),
                        scaled(&mut rng, elem, 9, d, |_| e),
                    );
                    (format!("2^{e}"), b, q)
                })
                .collect();
            // Rows of many magnitudes in one set (cosine and correlation take each row alone).
            let span = exponents(elem);
            let pick = |r: usize| span[r * 5 % span.len()];
            sets.push((
                "rows of every exponent".into(),
                scaled(&mut rng, elem, n, d, pick),
                scaled(&mut rng, elem, 9, d, |r| pick(r + 2)),
            ));
            for (label, b, q) in sets {
                let base = Arc::new(b);
                for m in metrics() {
                    for p in common::precisions(elem)
                        .into_iter()
                        .filter(|&p| common::takes(p, elem, &m))
                    {
                        let gpu = &engines.iter().find(|(e, _)| *e == p).unwrap().1;
                        let what = format!("{elem:?} d={d} {label} {m} {p:?}");
                        let case = Case {
                            base: &base,
                            queries: &q,
                            metric: &m,
                            what,
                        };
                        cases += 1;
                        match catch_unwind(AssertUnwindSafe(|| run(gpu, &cpu, &case))) {
                            Ok(Ok(Outcome::Same)) => {}
                            Ok(Ok(Outcome::Refused)) => refused.push(case.what),
                            Ok(Err(e)) => failures.push(format!("{}: {e}", case.what)),
                            Err(_) => failures.push(format!("{}: panicked", case.what)),
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "{cases} cases, {} refused for the CPU engine:",
        refused.len()
    );
    for r in &refused {
        eprintln!("  refused: {r}");
    }
    for f in &failures {
        eprintln!("  FAILED: {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ from the CPU engine",
        failures.len()
    );
}
