//! `gpu_bench --kinds LIST`: the default arithmetic against `--precision fp32`, and against
//! normal data of the same shape, on every data kind of LIST (voisin_bench::kinds; `label=kind`
//! names a row, as in `words=file:PATH`), in one process. Per kind, the k-NN (`--base` rows,
//! `--queries` queries; a file kind's own rows) and the graph of the base, `-k` neighbours,
//! euclidean, under each variant of `--variants` (default `auto-auto,fp32-auto`: the CLI's
//! defaults, and the CLI's `--precision fp32`), the calls of the variants alternating, medians
//! of `--reps` (five times as many for calls under 50 ms). The normal data a kind is held to is
//! the generated kind of its stored type (kinds::reference: `normal` for f32, `f16`, `u8`) at
//! the kind's shape, measured once per shape.
//!
//! Every variant's answers must be identical (ids and distances), and the first variant's rows
//! of `--check` (default 100) evenly spaced queries and graph items must be the CPU engine's:
//! a difference is reported in the row and makes the exit code 1. Each call prints a JSON line
//! (also appended to `<dir>/voisin_kinds.jsonl`); the table comes last, each row flagged
//! against the targets of issue 43: the first variant never slower than the second, and at
//! most 1.3× its time on the normal data.

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, KnnResult, Metric, VectorSet};
use voisin_bench::kinds;
use voisin_cuda::CudaEngine;

use super::{fail, graph_rows, median, options, Args};

/// The most the first variant may take on a kind, as a multiple of its time on normal data.
const NORMAL_FACTOR: f64 = 1.3;
/// Calls faster than this get five times the repetitions.
const SHORT_CALL_S: f64 = 0.05;

/// One operation (k-NN or graph) measured under every variant.
#[derive(Clone)]
struct Measured {
    /// Per variant: the median seconds and what the engine ran (`Stats::arithmetic`).
    secs: Vec<f64>,
    arithmetic: Vec<String>,
    /// "identical", or what differs.
    exact: Result<String, String>,
}

/// A kind's shape: base rows, queries, dimension, stored type.
type Shape = (usize, usize, usize, &'static str);

/// What runs one operation on one engine.
type Op<'a> = &'a dyn Fn(&CudaEngine) -> KnnResult;

pub fn run(a: &Args) {
    let engines: Vec<CudaEngine> = a
        .variants
        .iter()
        .map(|v| CudaEngine::with_options(0, options(v)).expect("a CUDA GPU"))
        .collect();
    let device = engines[0].device_name();
    // Warm-up: NVRTC, module load and cuBLAS initialisation stay out of the numbers.
    let small: Dataset = kinds::set("normal", 5000, a.dim, 3).unwrap().into();
    for e in &engines {
        e.knn(&small, &small, 10, &Metric::Euclidean).unwrap();
        e.graph(&small, 10, &Metric::Euclidean).unwrap();
    }
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(a.dir.join("voisin_kinds.jsonl"))
        .unwrap();
    let mut print = |line: String| {
        println!("{line}");
        writeln!(log, "{line}").unwrap();
    };
    // Measured normal data, by shape.
    let mut normal: HashMap<Shape, [Measured; 2]> = HashMap::new();
    let mut rows = Vec::new();
    for item in &a.kinds {
        let (label, spec) = item.split_once('=').unwrap_or((item, item));
        let t = Instant::now();
        let (base, queries) = sets(spec, a, 1);
        let shape = shape_of(&base, &queries);
        eprintln!(
            "{label}: {}x{} {}, {} queries, ready in {:.1}s",
            shape.0,
            shape.2,
            shape.3,
            shape.1,
            t.elapsed().as_secs_f64()
        );
        let reference = kinds::reference(base.as_vectors().expect("vectors"))
            .unwrap_or_else(|| fail(&format!("{label}: no normal kind of its stored type")));
        if !normal.contains_key(&shape) {
            let measured = if spec == reference {
                measure(&engines, &base, &queries, a, &mut |l| print(l), label, &device)
            } else {
                let (nb, nq) = sized(reference, &shape);
                measure(&engines, &nb, &nq, a, &mut |l| print(l), reference, &device)
            };
            normal.insert(shape, measured);
        }
        let own = if spec == reference {
            normal[&shape].clone()
        } else {
            measure(&engines, &base, &queries, a, &mut |l| print(l), label, &device)
        };
        for (op, (m, n)) in ["knn", "graph"].iter().zip(own.iter().zip(&normal[&shape])) {
            rows.push(Row {
                kind: label.to_string(),
                op: format!("{op} k={}", a.graph_k),
                shape,
                reference,
                m: m.clone(),
                normal_s: n.secs[0],
            });
        }
    }
    let failed = table(&rows, &a.variants, &device);
    if failed {
        std::process::exit(1);
    }
}

/// The base and the queries of kind `spec` (`--base` and `--queries` rows, a file's own
/// dimension), from seeds `seed` and `seed + 1`.
fn sets(spec: &str, a: &Args, seed: u64) -> (Dataset, Dataset) {
    let make = |n, s| -> Dataset {
        kinds::set(spec, n, a.dim, s)
            .unwrap_or_else(|e| fail(&e))
            .into()
    };
    (make(a.base, seed), make(a.queries, seed + 1))
}

/// The sets of the generated kind `kind` of `shape`.
fn sized(kind: &str, shape: &Shape) -> (Dataset, Dataset) {
    let make = |n, s| -> Dataset { kinds::set(kind, n, shape.2, s).unwrap().into() };
    (make(shape.0, 1), make(shape.1, 2))
}

fn shape_of(base: &Dataset, queries: &Dataset) -> Shape {
    let b = base.as_vectors().expect("vectors");
    (b.len(), queries.len(), b.dim(), b.elem_type().name())
}

/// The k-NN and the graph of `base` (kind `label`) under every engine, checked.
fn measure(
    engines: &[CudaEngine],
    base: &Dataset,
    queries: &Dataset,
    a: &Args,
    print: &mut dyn FnMut(String),
    label: &str,
    device: &str,
) -> [Measured; 2] {
    let (k, metric) = (a.graph_k, Metric::Euclidean);
    let knn = |e: &CudaEngine| e.knn(base, queries, k, &metric).unwrap();
    let graph = |e: &CudaEngine| e.graph(base, k, &metric).unwrap();
    let mut out = Vec::new();
    for (op, run) in [("knn", &knn as Op), ("graph", &graph as Op)] {
        let (secs, first, results) = timed(engines, a.reps, run);
        let mut exact = agree(&results);
        if exact.is_ok() && a.check > 0 {
            exact = if op == "knn" {
                knn_rows(base, queries, &results[0], a.check)
            } else {
                graph_rows_match(base, &results[0], a.check)
            };
        }
        for (i, r) in results.iter().enumerate() {
            print(format!(
                "{{\"case\":\"{op} k={k} {label} {}\",\"seconds\":{:.6},\"first_s\":{:.6},\
                 \"shape\":\"{}x{} {}\",\"queries\":{},\"device\":\"{device}\",\
                 \"arithmetic\":\"{}\",\"exact_evals\":{},\"exact\":\"{}\"}}",
                a.variants[i],
                secs[i],
                first[i],
                base.len(),
                base.as_vectors().map_or(0, VectorSet::dim),
                base.as_vectors().map_or("", |v| v.elem_type().name()),
                if op == "knn" { queries.len() } else { base.len() },
                r.stats.arithmetic,
                r.stats.exact_evals,
                exact.as_ref().unwrap_or_else(|e| e)
            ));
        }
        out.push(Measured {
            secs,
            arithmetic: results.iter().map(|r| r.stats.arithmetic.clone()).collect(),
            exact,
        });
    }
    [out[0].clone(), out[1].clone()]
}

/// `run` on every engine, the engines alternating, `reps` rounds (five times as many when a
/// call takes under [`SHORT_CALL_S`]): per engine the median and the first seconds, and the
/// last result.
fn timed(engines: &[CudaEngine], reps: usize, run: Op) -> (Vec<f64>, Vec<f64>, Vec<KnnResult>) {
    let mut times = vec![Vec::new(); engines.len()];
    let mut results = Vec::new();
    let mut round = 0;
    loop {
        results.clear();
        for (e, t) in engines.iter().zip(&mut times) {
            let start = Instant::now();
            results.push(run(e));
            t.push(start.elapsed().as_secs_f64());
        }
        round += 1;
        let short = times.iter().all(|t| t[0] < SHORT_CALL_S);
        if round >= if short { 5 * reps } else { reps } {
            break;
        }
    }
    let first = times.iter().map(|t| t[0]).collect();
    (times.into_iter().map(median).collect(), first, results)
}

/// Whether every variant's answer is the first's, ids and distances.
fn agree(results: &[KnnResult]) -> Result<String, String> {
    for r in &results[1..] {
        if r.indices != results[0].indices || r.distances != results[0].distances {
            return Err("variants differ".into());
        }
    }
    Ok("identical".into())
}

/// The rows of `check` evenly spaced queries against the CPU engine's.
fn knn_rows(base: &Dataset, queries: &Dataset, r: &KnnResult, check: usize) -> Result<String, String> {
    let qs = queries.as_vectors().expect("vectors");
    let picks = graph_rows::picks(qs.len(), check);
    let rows = picks.iter().flat_map(|&i| qs.row_f32(i).into_owned()).collect();
    let q: Dataset = VectorSet::from_f32(picks.len(), qs.dim(), rows).unwrap().into();
    let want = CpuEngine::default()
        .knn(base, &q, r.k, &Metric::Euclidean)
        .unwrap();
    for (j, &i) in picks.iter().enumerate() {
        if want.row(j) != r.row(i) {
            return Err(format!("query {i} differs from the CPU engine"));
        }
    }
    Ok(format!("identical, {} rows as the CPU's", picks.len()))
}

/// The graph's rows of `check` evenly spaced items against the CPU engine's.
fn graph_rows_match(g: &Dataset, r: &KnnResult, check: usize) -> Result<String, String> {
    let picks = graph_rows::picks(g.len(), check);
    let want = graph_rows::expected(g, &picks, r.k, &Metric::Euclidean);
    for (&i, (ids, dist)) in picks.iter().zip(&want) {
        if r.row(i) != (ids.as_slice(), dist.as_slice()) {
            return Err(format!("item {i} differs from the CPU engine"));
        }
    }
    Ok(format!("identical, {} rows as the CPU's", picks.len()))
}

/// One row of the table: an operation on a kind.
struct Row {
    kind: String,
    op: String,
    shape: Shape,
    reference: &'static str,
    m: Measured,
    /// The first variant's seconds on the normal data of the shape.
    normal_s: f64,
}

/// Prints the table; true if an answer differed.
fn table(rows: &[Row], variants: &[String], device: &str) -> bool {
    let (v0, v1) = (&variants[0], variants.get(1).unwrap_or(&variants[0]));
    println!();
    println!(
        "| kind | op | shape | {v0} s | {v1} s | {v0}/{v1} | normal s | {v0}/normal | {v0} ran | exact | targets |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut met, mut failed) = (0, false);
    for r in rows {
        let (a, b) = (r.m.secs[0], *r.m.secs.get(1).unwrap_or(&r.m.secs[0]));
        let mut miss = Vec::new();
        if a > b {
            miss.push(format!("slower than {v1}"));
        }
        if a > NORMAL_FACTOR * r.normal_s {
            miss.push(format!("over {NORMAL_FACTOR}x normal"));
        }
        if miss.is_empty() {
            met += 1;
        }
        failed |= r.m.exact.is_err();
        let (nb, nq, d, elem) = r.shape;
        let shape = if r.op.starts_with("knn") {
            format!("{nb}x{d} {elem}, {nq} queries")
        } else {
            format!("{nb}x{d} {elem}")
        };
        println!(
            "| {} | {} | {shape} | {a:.4} | {b:.4} | {:.2} | {:.4} ({}) | {:.2} | {} | {} | {} |",
            r.kind,
            r.op,
            a / b,
            r.normal_s,
            r.reference,
            a / r.normal_s,
            r.m.arithmetic[0],
            match &r.m.exact {
                Ok(s) => s.clone(),
                Err(e) => format!("DIFFER: {e}"),
            },
            if miss.is_empty() { "met".to_string() } else { format!("MISS: {}", miss.join(", ")) }
        );
    }
    println!(
        "({device}; targets: {v0} <= {v1} and <= {NORMAL_FACTOR}x the normal data of the same shape and stored type; met on {met} of {} rows)",
        rows.len()
    );
    failed
}
