//! GPU benchmark of the CUDA engine on the standard workloads (bench/RESULTS.md): search 1M×128 base,
//! 10k queries, k=10 and k=1000; graph 1M×128, k=10. Random normal f32 from a fixed seed,
//! written once as .fbin under the data directory so that bench/gpu/torch_peer.py measures the
//! same data in the same run. Prints one JSON line per case (end-to-end seconds, host arrays in,
//! host results out) and appends them to `<dir>/voisin_bench.jsonl`.
//!
//! Each engine variant (`--variants`, default fp32,fp32-fused,tf32,tf32-fused: GEMM arithmetic
//! and whether small-k passes fuse distance and selection) runs every case; the plain fp32 one
//! keeps the bare case names that bench/gpu/torch_peer.py tabulates, the others get the variant
//! as a suffix ("knn k=10 tf32-fused"). A bare variant name runs with fusion off; for the
//! graph, fusion (`-auto`, `-fused`) means its warm tile pairs on the fused tile pair.
//!
//! `--batches 100,1000` adds a prepared base (uploaded once, [`Engine::prepare`]) answering
//! batches of that many of the queries (k=10, the median of 20 batches): the fitted-estimator
//! case of bench/py_bench.py without Python.
//!
//! `--data KIND` picks the data (base, queries and graph alike): `normal` (the default, cached
//! as .fbin for the peer), `far` (normal + 100 in every coordinate), `clustered` (points on
//! 1,000 random 8-d affine subspaces), `dups` (every row repeated 10 times), `u8` (SIFT-like
//! skewed integers 0..=255 stored as u8), `f16` (normal stored as f16); all but `normal` are
//! generated in memory, in parallel, in their stored type (an f16 set never exists as f32).
//! `file:PATH` reads a real set instead (any vector file voisin reads, kept in its stored
//! type, f32, f16 or u8; `--dim` is the file's): the base and the graph are `--base` and
//! `--n` evenly spaced rows of it (all of them when it holds fewer), the queries `--queries` evenly
//! spaced rows of it (bench/gpu/embed_words.py writes one: the word list's sentence embeddings).
//!
//! `--graph-only` runs only the graph (`--n` items, `-k` neighbours) and with `--check N`
//! compares the graph's rows of N evenly spaced items with the CPU engine's (ids and distances
//! exactly): the headline run of issue 12, under the CLI's defaults (auto arithmetic, auto
//! fusion; a bare `auto` would leave fusion off), is
//! `gpu_bench --graph-only --n 2000000 --dim 15876 --elem f16 -k 20 --check 1000 --variants auto-auto`.
//! With `--save-rows F` the checked items' rows go to F instead, and a later
//! `gpu_bench --graph-only … --check 1000 --check-saved F` (same data options) regenerates the
//! data and checks them without a GPU graph: the check on 16 CPU cores outlasts one device call.
//!
//! usage: gpu_bench [--dir /tmp/vbench] [--base 1000000] [--queries 10000] [--dim 128]
//!                  [--graph 1000000] [--reps 3] [--ks 10,1000] [--variants fp32,tf32-fused]
//!                  [--batches 100,1000] [--data normal|far|clustered|dups|u8|f16|file:PATH]
//!                  [--graph-only] [--n N] [-k K] [--elem f16] [--check N]
//!                  [--save-rows F | --check-saved F]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use half::f16;
use rand::prelude::*;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use voisin::data::VectorData;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::probe::StderrProbe;

/// The expected rows of checked graph items, as the GPU tests compute them.
#[path = "../../../voisin-cuda/tests/common/graph_rows.rs"]
mod graph_rows;
/// The clustered kind's subspaces, the generator the GPU tests use.
#[allow(dead_code)]
#[path = "../../../voisin-cuda/tests/common/subspaces.rs"]
mod subspaces;
use voisin_cuda::{CudaEngine, CudaOptions, Fusion, Precision};

/// The allocator of the `voisin` binary (crates/voisin-cli/src/main.rs says why), so the
/// benchmark times what the command line runs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    dir: PathBuf,
    base: usize,
    queries: usize,
    dim: usize,
    graph: usize,
    reps: usize,
    ks: Vec<usize>,
    variants: Vec<String>,
    batches: Vec<usize>,
    /// The data kind (`--data`, `--elem f16`).
    kind: String,
    /// Only the graph, with `graph_k` neighbours and `check` items checked on the CPU.
    graph_only: bool,
    graph_k: usize,
    check: usize,
    /// `--save-rows F`: the graph's rows of the `check` items written to F (their check then
    /// runs later, from `--check-saved F`, in a process of its own).
    save_rows: Option<PathBuf>,
    /// `--check-saved F`: no GPU graph; the rows saved in F checked against the CPU engine.
    check_saved: Option<PathBuf>,
}

fn parse() -> Args {
    let mut a = Args {
        dir: "/tmp/vbench".into(),
        base: 1_000_000,
        queries: 10_000,
        dim: 128,
        graph: 1_000_000,
        reps: 3,
        ks: vec![10, 1000],
        variants: ["fp32", "fp32-fused", "tf32", "tf32-fused"]
            .map(String::from)
            .to_vec(),
        batches: Vec::new(),
        kind: "normal".into(),
        graph_only: false,
        graph_k: 10,
        check: 0,
        save_rows: None,
        check_saved: None,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(opt) = argv.next() {
        if opt == "--graph-only" {
            a.graph_only = true;
            continue;
        }
        let v = argv.next().unwrap_or_default();
        let v = v.as_str();
        let num = || v.parse::<usize>().expect("a number");
        match opt.as_str() {
            "--data" | "--elem" => a.kind = v.into(),
            "--n" => a.graph = num(),
            "-k" => a.graph_k = num(),
            "--check" => a.check = num(),
            "--save-rows" => a.save_rows = Some(v.into()),
            "--check-saved" => a.check_saved = Some(v.into()),
            "--dir" => a.dir = v.into(),
            "--base" => a.base = num(),
            "--queries" => a.queries = num(),
            "--dim" => a.dim = num(),
            "--graph" => a.graph = num(),
            "--reps" => a.reps = num(),
            "--ks" => a.ks = v.split(',').map(|k| k.parse().expect("k")).collect(),
            "--variants" => a.variants = v.split(',').map(String::from).collect(),
            "--batches" => a.batches = v.split(',').map(|b| b.parse().expect("batch")).collect(),
            o => panic!("unknown option {o}"),
        }
    }
    a
}

/// Random normal rows from `seed`, cached as .fbin (u32 n, u32 d, row-major f32).
fn data(path: &Path, n: usize, d: usize, seed: u64) -> Dataset {
    // The file is reused only if `normal` wrote it: the other kinds write the same path for the
    // peer, and a normal run after a clustered one in the same folder read the clustered set.
    let ours = std::fs::read_to_string(kind_mark(path)).is_ok_and(|k| k == "normal");
    let values = match std::fs::read(path) {
        Ok(b) if ours && b.len() == 8 + n * d * 4 => bytemuck_f32(&b[8..]),
        _ => {
            let mut rng = StdRng::seed_from_u64(seed);
            let v: Vec<f32> = (0..n * d).map(|_| rng.sample(StandardNormal)).collect();
            let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
            f.write_all(&(n as u32).to_le_bytes()).unwrap();
            f.write_all(&(d as u32).to_le_bytes()).unwrap();
            for x in &v {
                f.write_all(&x.to_le_bytes()).unwrap();
            }
            std::fs::write(kind_mark(path), "normal").unwrap();
            v
        }
    };
    VectorSet::from_f32(n, d, values).unwrap().into()
}

/// The file beside a data file that names the kind it holds.
fn kind_mark(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".kind");
    p.into()
}

/// `n` rows of `d` values of data kind `kind` (see the module doc) from `seed`, generated in
/// parallel (65,536 rows per seeded chunk) in their stored type, or read from a file
/// (`file:PATH`, its own dimension); `normal` is [`data`]'s cached set at `path`. Written to
/// `path` as f32 .fbin for the peer.
fn make(kind: &str, path: &Path, n: usize, d: usize, seed: u64) -> Dataset {
    if kind == "normal" {
        return data(path, n, d, seed);
    }
    let set = match kind.strip_prefix("file:") {
        Some(file) => rows_of_file(file, n),
        None => generated(kind, n, d, seed),
    };
    let (n, d) = (set.len(), set.dim());
    // The peer (bench/gpu/torch_peer.py) reads f32 .fbin: the same values, written as f32 (each
    // stored type converts exactly); not for sets past 1 GiB (the headline graph).
    if n * d <= 1 << 28 {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
        f.write_all(&(n as u32).to_le_bytes()).unwrap();
        f.write_all(&(d as u32).to_le_bytes()).unwrap();
        for x in set.rows_f32(0, n).iter() {
            f.write_all(&x.to_le_bytes()).unwrap();
        }
    }
    // Whatever the file holds now (or held before, if not rewritten) is not `normal`'s.
    std::fs::write(kind_mark(path), kind).unwrap();
    set.into()
}

/// `n` evenly spaced rows of the vector file `file` (all of them where it holds no more), in
/// its stored type: the `file:` data kind.
fn rows_of_file(file: &str, n: usize) -> VectorSet {
    let opts = voisin_io::ReadOptions {
        mmap: false,
        ..Default::default()
    };
    let data =
        voisin_io::read_dataset(Path::new(file), &opts).unwrap_or_else(|e| panic!("{file}: {e}"));
    let Dataset::Vectors(set) = data else {
        panic!("{file}: strings, where the file kind takes vectors")
    };
    let (total, d) = (set.len(), set.dim());
    if n >= total {
        return set;
    }
    let picks: Vec<usize> = (0..n).map(|i| i * total / n).collect();
    fn gather<T: Copy>(v: &[T], d: usize, picks: &[usize]) -> Vec<T> {
        picks
            .iter()
            .flat_map(|&i| v[i * d..(i + 1) * d].iter().copied())
            .collect()
    }
    let values = match set.data() {
        VectorData::F32(v) => VectorData::F32(gather(v.as_slice(), d, &picks).into()),
        VectorData::F16(v) => VectorData::F16(gather(v.as_slice(), d, &picks).into()),
        VectorData::U8(v) => VectorData::U8(gather(v.as_slice(), d, &picks).into()),
        _ => panic!(
            "{file}: {} values (the file kind takes f32, f16 or u8)",
            set.elem_type().name()
        ),
    };
    VectorSet::new(n, d, values).unwrap()
}

/// `n` rows of `d` values of the generated data kind `kind` from `seed`.
fn generated(kind: &str, n: usize, d: usize, seed: u64) -> VectorSet {
    const CHUNK: usize = 65536;
    // Clustered: 1,000 subspaces, each a centre (spread 3) and 8 directions (norm about 1).
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let spaces: Vec<Vec<f32>> = if kind == "clustered" {
        subspaces::subspaces(&mut rng, 1000, d)
    } else {
        Vec::new()
    };
    // One row of f32 values (the u8 and f16 kinds round them to their type).
    let row = |rng: &mut StdRng, i: usize, out: &mut [f32]| match kind {
        "far" => out
            .iter_mut()
            .for_each(|x| *x = 100.0 + rng.sample::<f32, _>(StandardNormal)),
        "clustered" => {
            let s = &spaces[rng.gen_range(0..spaces.len())];
            subspaces::point_on(rng, s, out);
        }
        "dups" => {
            // Row i repeats row i − i % 10: the same values from the same seed.
            let mut r =
                StdRng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add((i / 10) as u64));
            out.iter_mut().for_each(|x| *x = r.sample(StandardNormal));
        }
        // SIFT-like: mostly small counts, a long tail up to 255.
        "u8" => out
            .iter_mut()
            .for_each(|x| *x = (rng.gen::<f32>().powi(3) * 255.0).round()),
        "f16" => out.iter_mut().for_each(|x| *x = rng.sample(StandardNormal)),
        k => panic!("unknown data kind {k} (normal, far, clustered, dups, u8, f16)"),
    };
    // Each chunk of rows from its own seed, converted to the stored type row by row.
    fn fill<T: Copy + Send + Sync>(
        n: usize,
        d: usize,
        seed: u64,
        zero: T,
        conv: impl Fn(f32) -> T + Sync,
        row: &(impl Fn(&mut StdRng, usize, &mut [f32]) + Sync),
    ) -> Vec<T> {
        let mut v = vec![zero; n * d];
        v.par_chunks_mut(CHUNK * d)
            .enumerate()
            .for_each(|(c, chunk)| {
                let mut rng =
                    StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(c as u64));
                let mut buf = vec![0f32; d];
                for (r, out) in chunk.chunks_mut(d).enumerate() {
                    row(&mut rng, c * CHUNK + r, &mut buf);
                    out.iter_mut().zip(&buf).for_each(|(o, &x)| *o = conv(x));
                }
            });
        v
    }
    let values = match kind {
        "u8" => VectorData::U8(fill(n, d, seed, 0u8, |x| x as u8, &row).into()),
        "f16" => VectorData::F16(fill(n, d, seed, f16::ZERO, f16::from_f32, &row).into()),
        _ => VectorData::F32(fill(n, d, seed, 0f32, |x| x, &row).into()),
    };
    VectorSet::new(n, d, values).unwrap()
}

/// The rows of the checked items of `r` as bytes: per item, k ids then k distances (LE).
fn rows_bytes(r: &voisin::KnnResult, picks: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for &i in picks {
        let (ids, dist) = r.row(i);
        ids.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        dist.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    out
}

/// Compares the graph's rows of the checked items (`row(j)` for the j-th of
/// `graph_rows::picks`) with the CPU engine's k-NN of those items (ids and distances exactly,
/// the item itself left out; voisin-cuda's tests/common/graph_rows.rs). Panics on a difference.
fn check_graph<'r>(
    g: &Dataset,
    row: impl Fn(usize) -> (&'r [u32], &'r [f32]),
    k: usize,
    check: usize,
) {
    let picks = graph_rows::picks(g.len(), check);
    let t = Instant::now();
    let want = graph_rows::expected(g, &picks, k, &Metric::Euclidean);
    for (j, (&i, (wi, wd))) in picks.iter().zip(&want).enumerate() {
        let (gi, gd) = row(j);
        assert!(
            gi == wi.as_slice() && gd == wd.as_slice(),
            "item {i}: graph row differs from the CPU engine"
        );
    }
    eprintln!(
        "checked {} rows against the CPU engine in {:.1}s: identical",
        picks.len(),
        t.elapsed().as_secs_f64()
    );
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The engine options of a variant name: a precision ("auto", "fp32", "tf32", "fp16", "bf16"), optionally "-fused" (fusion on
/// wherever it applies) or "-auto" (the engine's default choice).
fn options(variant: &str) -> CudaOptions {
    let (arith, fusion) = variant.split_once('-').unwrap_or((variant, "off"));
    CudaOptions {
        precision: arith
            .parse::<Precision>()
            .expect("a precision: auto, fp32, tf32, fp16, bf16"),
        fusion: match fusion {
            "fused" => Fusion::On,
            f => f.parse::<Fusion>().expect("fused, auto or off"),
        },
        ..Default::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut a = parse();
    std::fs::create_dir_all(&a.dir).unwrap();
    if a.graph_only {
        return graph_only(&a);
    }
    let t = Instant::now();
    let base = make(&a.kind, &a.dir.join("base.fbin"), a.base, a.dim, 1);
    let queries = make(&a.kind, &a.dir.join("queries.fbin"), a.queries, a.dim, 2);
    // A file's own shape stands for the one asked for.
    if let Some(v) = base.as_vectors() {
        (a.base, a.dim) = (v.len(), v.dim());
    }
    a.queries = queries.len();
    eprintln!("{} data ready in {:.1}s", a.kind, t.elapsed().as_secs_f64());
    let engines: Vec<(String, std::sync::Arc<CudaEngine>)> = a
        .variants
        .iter()
        .map(|v| {
            let e = CudaEngine::with_options(0, options(v)).expect("a CUDA GPU");
            // Phase timings on stderr, as scripts/gpu-check asks with VOISIN_CUDA_TRACE.
            if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
                e.set_probe(std::sync::Arc::new(StderrProbe))
                    .expect("the GPU");
            }
            (v.clone(), std::sync::Arc::new(e))
        })
        .collect();
    let device = engines[0].1.device_name();
    // Warm-up: NVRTC compilation, module load and cuBLAS initialisation stay out of the numbers.
    let small = data(&a.dir.join("warm.fbin"), 5000, a.dim, 3);
    for (_, engine) in &engines {
        engine.knn(&small, &small, 10, &Metric::Euclidean).unwrap();
        engine.graph(&small, 10, &Metric::Euclidean).unwrap();
    }

    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(a.dir.join("voisin_bench.jsonl"))
        .unwrap();
    // The median, and the first repetition alone: an engine's first large call maps the device
    // memory that later calls find in its pool (docs/design/device-memory-pool.md).
    let mut report = |case: &str, flops: f64, times: Vec<f64>, stats: &voisin::Stats| {
        let line = format!(
            "{{\"case\":\"{case}\",\"seconds\":{:.6},\"first_s\":{:.6},\"flops\":{flops:.6e},\
             \"device\":\"{device}\",\"compute_s\":{:.6},\"select_s\":{:.6},\"exact_evals\":{},\
             \"arithmetic\":\"{}\"}}",
            median(times.clone()),
            times.first().copied().unwrap_or(0.0),
            stats.compute.as_secs_f64(),
            stats.select.as_secs_f64(),
            stats.exact_evals,
            stats.arithmetic
        );
        println!("{line}");
        writeln!(log, "{line}").unwrap();
    };
    let name = |case: &str, v: &str| {
        let case = if a.kind == "normal" {
            case.to_string()
        } else {
            format!("{case} {}", a.kind)
        };
        if v == "fp32" {
            case
        } else {
            format!("{case} {v}")
        }
    };
    let (nb, nq, d) = (a.base as f64, a.queries as f64, a.dim as f64);
    let mut first_ids: Option<Vec<u32>> = None;
    for (v, engine) in &engines {
        for &k in &a.ks {
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..a.reps {
                let t = Instant::now();
                let r = engine.knn(&base, &queries, k, &Metric::Euclidean).unwrap();
                times.push(t.elapsed().as_secs_f64());
                last = Some(r);
            }
            let r = last.unwrap();
            if k == 10 {
                // Every variant is exact: their ids must agree with each other.
                match &first_ids {
                    None => {
                        // Ids of the first 1000 queries for the peer's agreement check.
                        let ids: Vec<u8> = r.indices[..1000.min(a.queries) * k]
                            .iter()
                            .flat_map(|i| i.to_le_bytes())
                            .collect();
                        std::fs::write(a.dir.join("voisin_knn10_ids.bin"), ids).unwrap();
                        first_ids = Some(r.indices.clone());
                    }
                    Some(ids) => assert!(ids == &r.indices, "variant {v}: ids differ"),
                }
            }
            report(
                &name(&format!("knn k={k}"), v),
                2.0 * nb * nq * d,
                times,
                &r.stats,
            );
        }
    }
    if !a.batches.is_empty() {
        let base = std::sync::Arc::new(base.clone());
        let prepared: Vec<_> = engines
            .iter()
            .map(|(_, e)| {
                std::sync::Arc::clone(e)
                    .prepare(std::sync::Arc::clone(&base), &Metric::Euclidean)
                    .unwrap()
            })
            .collect();
        let cpu = voisin::cpu::CpuEngine::default();
        let qs = queries.as_vectors().unwrap();
        for &b in &a.batches {
            let b = b.min(a.queries);
            let q: Dataset = VectorSet::from_f32(b, a.dim, qs.rows_f32(0, b).into_owned())
                .unwrap()
                .into();
            // What every variant must answer: the CPU engine's ids and distances.
            let want = cpu.knn(&base, &q, 10, &Metric::Euclidean).unwrap();
            for ((v, engine), prepared) in engines.iter().zip(&prepared) {
                prepared.knn(&q, 10).unwrap();
                let mut times = Vec::new();
                let mut last = None;
                for _ in 0..20 {
                    let t = Instant::now();
                    last = Some(prepared.knn(&q, 10).unwrap());
                    times.push(t.elapsed().as_secs_f64());
                }
                let r = last.unwrap();
                let plain = engine.knn(&base, &q, 10, &Metric::Euclidean).unwrap();
                assert!(
                    plain.indices == r.indices,
                    "variant {v}: prepared ids differ"
                );
                assert!(
                    want.indices == r.indices && want.distances == r.distances,
                    "variant {v}: batch {b} differs from the CPU engine"
                );
                let flops = 2.0 * nb * q.len() as f64 * d;
                report(
                    &name(&format!("prepared knn batch={b}"), v),
                    flops,
                    times,
                    &r.stats,
                );
            }
        }
    }
    if a.graph > 0 {
        let g = if a.graph == a.base {
            base
        } else {
            make(&a.kind, &a.dir.join("graph.fbin"), a.graph, a.dim, 4)
        };
        let mut first_graph: Option<Vec<u32>> = None;
        for (v, engine) in &engines {
            if v.contains('-') {
                continue;
            }
            let t = Instant::now();
            let r = engine.graph(&g, 10, &Metric::Euclidean).unwrap();
            let secs = t.elapsed().as_secs_f64();
            let n = g.len() as f64;
            // The floor counts the half matrix the symmetric schedule computes.
            report(&name("graph k=10", v), n * n * d, vec![secs], &r.stats);
            match &first_graph {
                None => {
                    let ids: Vec<u8> = r.indices[..1000.min(g.len()) * 10]
                        .iter()
                        .flat_map(|i| i.to_le_bytes())
                        .collect();
                    std::fs::write(a.dir.join("voisin_graph10_ids.bin"), ids).unwrap();
                    first_graph = Some(r.indices);
                }
                Some(ids) => assert!(ids == &r.indices, "variant {v}: graph ids differ"),
            }
        }
    }
}

/// `--graph-only`: the graph of `--n` items of the data kind (generated in memory in its stored
/// type: one host copy), `-k` neighbours, per variant; with `--check` its rows of that many items
/// checked against the CPU engine.
fn graph_only(a: &Args) {
    let t = Instant::now();
    let g = make(&a.kind, &a.dir.join("graph.fbin"), a.graph, a.dim, 4);
    let dim = g.as_vectors().map_or(0, VectorSet::dim);
    eprintln!(
        "{} data {}x{dim} ready in {:.1}s",
        a.kind,
        g.len(),
        t.elapsed().as_secs_f64()
    );
    if let Some(path) = &a.check_saved {
        let bytes = std::fs::read(path).expect("the saved rows");
        let k = a.graph_k;
        let rows: Vec<(Vec<u32>, Vec<f32>)> = bytes
            .chunks_exact(8 * k)
            .map(|r| {
                let word = |c: &[u8]| [c[0], c[1], c[2], c[3]];
                let ids = r[..4 * k]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(word(c)));
                let dist = r[4 * k..]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(word(c)));
                (ids.collect(), dist.collect())
            })
            .collect();
        assert_eq!(
            rows.len(),
            graph_rows::picks(g.len(), a.check).len(),
            "saved rows"
        );
        check_graph(&g, |j| (&rows[j].0, &rows[j].1), k, a.check);
        return;
    }
    // Warm-up data of the same kind and storage: NVRTC compilation (the storage type's element
    // kernels too), module load and cuBLAS initialisation stay out of the numbers, as in the
    // other cases.
    let warm = make(
        &a.kind,
        &a.dir.join("warm.fbin"),
        5000.min(a.graph),
        a.dim,
        3,
    );
    for v in &a.variants {
        let engine = CudaEngine::with_options(0, options(v)).expect("a CUDA GPU");
        engine
            .graph(&warm, a.graph_k.min(10), &Metric::Euclidean)
            .unwrap();
        if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
            engine
                .set_probe(std::sync::Arc::new(StderrProbe))
                .expect("the GPU");
        }
        let t = Instant::now();
        let r = engine.graph(&g, a.graph_k, &Metric::Euclidean).unwrap();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{{\"case\":\"graph k={} {}x{} {} {v}\",\"seconds\":{secs:.3},\"device\":\"{}\",\"arithmetic\":\"{}\",\"exact_evals\":{},\"widened_on_device\":{},\"host_finished\":{}}}",
            a.graph_k,
            g.len(),
            dim,
            a.kind,
            engine.device_name(),
            r.stats.arithmetic,
            r.stats.exact_evals,
            engine.widened_on_device(),
            engine.host_finished()
        );
        if let Some(path) = &a.save_rows {
            let picks = graph_rows::picks(g.len(), a.check);
            std::fs::write(path, rows_bytes(&r, &picks)).expect("writing the rows");
            eprintln!(
                "saved the rows of {} items to {}",
                picks.len(),
                path.display()
            );
        } else if a.check > 0 {
            let picks = graph_rows::picks(g.len(), a.check);
            check_graph(&g, |j| r.row(picks[j]), a.graph_k, a.check);
        }
    }
}
