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
//! a difference is reported in the row. Each call prints a JSON line (also appended to
//! `<dir>/voisin_kinds.jsonl`); the table comes last, each row flagged against the targets of
//! issue 43 (the first variant never slower than the second, and at most 1.3× its time on the
//! normal data), then one line `kinds: PASS` or `kinds: FAIL (why)`; FAIL exits with 1.

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

/// The engines of the variants, their device and the log of every call.
struct Bench<'a> {
    a: &'a Args,
    engines: Vec<CudaEngine>,
    device: String,
    log: std::fs::File,
}

pub fn run(a: &Args) {
    let items: Vec<(&str, &str)> = a
        .kinds
        .iter()
        .map(|item| item.split_once('=').unwrap_or((item, item)))
        .collect();
    // An unknown kind or an unreadable file fails here, before any GPU work.
    for (_, spec) in &items {
        kinds::set(spec, 1, a.dim, 1).unwrap_or_else(|e| fail(&e));
    }
    let mut bench = Bench::new(a);
    // Measured normal data, by shape.
    let mut normal: HashMap<Shape, [Measured; 2]> = HashMap::new();
    let mut rows = Vec::new();
    for (label, spec) in items {
        rows.extend(bench.kind(label, spec, &mut normal));
    }
    let verdict = table(&rows, &a.variants, &bench.device);
    if verdict.is_err() {
        std::process::exit(1);
    }
}

impl<'a> Bench<'a> {
    /// One engine per variant, warmed up: NVRTC, module load and cuBLAS initialisation stay
    /// out of the numbers.
    fn new(a: &'a Args) -> Self {
        let engines: Vec<CudaEngine> = a
            .variants
            .iter()
            .map(|v| CudaEngine::with_options(0, options(v)).expect("a CUDA GPU"))
            .collect();
        let small: Dataset = kinds::set("normal", 5000, a.dim, 3).unwrap().into();
        for e in &engines {
            e.knn(&small, &small, 10, &Metric::Euclidean).unwrap();
            e.graph(&small, 10, &Metric::Euclidean).unwrap();
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(a.dir.join("voisin_kinds.jsonl"))
            .expect("the log of the kinds table");
        let device = engines[0].device_name();
        Bench {
            a,
            engines,
            device,
            log,
        }
    }

    /// The table's rows of kind `spec` (named `label`): its k-NN and graph, and the normal
    /// data of its shape (measured once per shape, kept in `normal`).
    fn kind(
        &mut self,
        label: &str,
        spec: &str,
        normal: &mut HashMap<Shape, [Measured; 2]>,
    ) -> Vec<Row> {
        let t = Instant::now();
        let (base, queries) = sets(spec, self.a.base, self.a.queries, self.a.dim);
        let shape = shape_of(&base, &queries);
        let (nb, nq, d, elem) = shape;
        eprintln!(
            "{label}: {nb}x{d} {elem}, {nq} queries, ready in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        let reference = kinds::reference(base.as_vectors().expect("vectors"))
            .unwrap_or_else(|| fail(&format!("{label}: no normal kind of its stored type")));
        let own = self.measure(&base, &queries, label);
        let normal = normal
            .entry(shape)
            .or_insert_with(|| match spec == reference {
                true => own.clone(),
                false => {
                    let (rb, rq) = sets(reference, nb, nq, d);
                    self.measure(&rb, &rq, reference)
                }
            });
        let ops = ["knn", "graph"]
            .iter()
            .zip(own.into_iter().zip(normal.iter()));
        ops.map(|(op, (m, n))| Row {
            kind: label.to_string(),
            op: format!("{op} k={}", self.a.graph_k),
            shape,
            reference,
            normal_s: n.secs[0],
            m,
        })
        .collect()
    }

    /// The k-NN and the graph of `base` (kind `label`) under every engine, checked.
    fn measure(&mut self, base: &Dataset, queries: &Dataset, label: &str) -> [Measured; 2] {
        let (k, metric) = (self.a.graph_k, Metric::Euclidean);
        let knn = |e: &CudaEngine| e.knn(base, queries, k, &metric).unwrap();
        let graph = |e: &CudaEngine| e.graph(base, k, &metric).unwrap();
        let ops: [(&str, Op); 2] = [("knn", &knn), ("graph", &graph)];
        ops.map(|(op, run)| {
            let (secs, first, results) = timed(&self.engines, self.a.reps, run);
            let mut exact = agree(&results);
            if exact.is_ok() && self.a.check > 0 {
                exact = if op == "knn" {
                    knn_rows(base, queries, &results[0], self.a.check)
                } else {
                    graph_rows_match(base, &results[0], self.a.check)
                };
            }
            let (nb, nq, d, elem) = shape_of(base, queries);
            let rows = if op == "knn" { nq } else { nb };
            let verdict = exact.as_ref().unwrap_or_else(|e| e);
            for (i, r) in results.iter().enumerate() {
                let line = format!(
                    "{{\"case\":\"{op} k={k} {label} {}\",\"seconds\":{:.6},\"first_s\":{:.6},\
                     \"shape\":\"{nb}x{d} {elem}\",\"queries\":{rows},\"device\":\"{}\",\
                     \"arithmetic\":\"{}\",\"exact_evals\":{},\"exact\":\"{verdict}\"}}",
                    self.a.variants[i],
                    secs[i],
                    first[i],
                    self.device,
                    r.stats.arithmetic,
                    r.stats.exact_evals,
                );
                println!("{line}");
                writeln!(self.log, "{line}").expect("the log of the kinds table");
            }
            Measured {
                secs,
                arithmetic: results.iter().map(|r| r.stats.arithmetic.clone()).collect(),
                exact,
            }
        })
    }
}

/// The base (`n` rows) and the queries (`q` rows) of kind `spec` (a file's own dimension), from
/// seeds 1 and 2.
fn sets(spec: &str, n: usize, q: usize, d: usize) -> (Dataset, Dataset) {
    let make = |rows, seed| -> Dataset {
        kinds::set(spec, rows, d, seed)
            .unwrap_or_else(|e| fail(&e))
            .into()
    };
    (make(n, 1), make(q, 2))
}

fn shape_of(base: &Dataset, queries: &Dataset) -> Shape {
    let b = base.as_vectors().expect("vectors");
    (b.len(), queries.len(), b.dim(), b.elem_type().name())
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
fn knn_rows(
    base: &Dataset,
    queries: &Dataset,
    r: &KnnResult,
    check: usize,
) -> Result<String, String> {
    let qs = queries.as_vectors().expect("vectors");
    let picks = graph_rows::picks(qs.len(), check);
    let rows = picks
        .iter()
        .flat_map(|&i| qs.row_f32(i).into_owned())
        .collect();
    let q: Dataset = VectorSet::from_f32(picks.len(), qs.dim(), rows)
        .unwrap()
        .into();
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

impl Row {
    /// The targets this row misses: the first variant slower than the second, or over
    /// [`NORMAL_FACTOR`] times its time on the normal data.
    fn misses(&self, second: &str) -> Vec<String> {
        let mut miss = Vec::new();
        if self.m.secs[0] > self.second_s() {
            miss.push(format!("slower than {second}"));
        }
        if self.m.secs[0] > NORMAL_FACTOR * self.normal_s {
            miss.push(format!("over {NORMAL_FACTOR}x normal"));
        }
        miss
    }

    fn second_s(&self) -> f64 {
        *self.m.secs.get(1).unwrap_or(&self.m.secs[0])
    }

    fn shape(&self) -> String {
        let (nb, nq, d, elem) = self.shape;
        match self.op.starts_with("knn") {
            true => format!("{nb}x{d} {elem}, {nq} queries"),
            false => format!("{nb}x{d} {elem}"),
        }
    }

    /// The row of the table.
    fn line(&self, second: &str) -> String {
        let (a, b, n) = (self.m.secs[0], self.second_s(), self.normal_s);
        let exact = match &self.m.exact {
            Ok(s) => s.clone(),
            Err(e) => format!("DIFFER: {e}"),
        };
        let miss = self.misses(second);
        let targets = match miss.is_empty() {
            true => "met".to_string(),
            false => format!("MISS: {}", miss.join(", ")),
        };
        format!(
            "| {} | {} | {} | {a:.4} | {b:.4} | {:.2} | {n:.4} ({}) | {:.2} | {} | {exact} | {targets} |",
            self.kind,
            self.op,
            self.shape(),
            a / b,
            self.reference,
            a / n,
            self.m.arithmetic[0],
        )
    }
}

/// Prints the table and the verdict line: `kinds: PASS` when every answer is exact and every
/// row meets the targets, else `kinds: FAIL` and why (also the Err).
fn table(rows: &[Row], variants: &[String], device: &str) -> Result<(), String> {
    let (v0, v1) = (&variants[0], variants.get(1).unwrap_or(&variants[0]));
    println!();
    println!(
        "| kind | op | shape | {v0} s | {v1} s | {v0}/{v1} | normal s | {v0}/normal | {v0} ran | exact | targets |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{}", r.line(v1));
    }
    let missed = rows.iter().filter(|r| !r.misses(v1).is_empty()).count();
    let wrong = rows.iter().filter(|r| r.m.exact.is_err()).count();
    let verdict = match (missed, wrong) {
        (0, 0) => Ok(()),
        _ => Err(format!(
            "{wrong} of {} rows not exact, {missed} miss the targets",
            rows.len()
        )),
    };
    println!(
        "({device}; targets: {v0} <= {v1}, and <= {NORMAL_FACTOR}x {v0} on the normal data of the same shape and stored type)"
    );
    match &verdict {
        Ok(()) => println!(
            "kinds: PASS ({} rows exact and within the targets)",
            rows.len()
        ),
        Err(e) => println!("kinds: FAIL ({e})"),
    }
    verdict
}
