//! GPU List of Clusters (and SSS pivot table) against the GPU brute force, in one run on the same data (bench/RESULTS.md: LC
//! range search over 1M clustered 20-d vectors at 0.01 / 0.1 / 1 % selectivity, Barrientos'
//! setting), with results returned to the host and checked identical.
//!
//! Data (`clustered`): a mixture of `clusters` Gaussian clusters in `dim` dimensions. Cluster
//! centers are uniform in the unit cube; cluster c has its own spread σ_c = spread · u_c with
//! u_c uniform in [0.5, 1.5]; each point picks a cluster uniformly at random and adds σ_c·N(0, I)
//! to its center. Defaults: 1,000 clusters, spread 0.05, seed 42, base 1,000,000 points and
//! 23,831 queries from the same mixture (the next points of the same stream). With 1,000
//! uniform centers in 20 dimensions the nearest other center lies about 0.85 away, while a
//! cluster's points lie about 4.5·σ_c ≈ 0.22 from their center: the clusters are well separated.
//!
//! Radii: for each selectivity s the radius is the s-quantile of the pooled distances between
//! 256 sample queries and 200,000 random base points, so a query retrieves about s·n items on
//! average; the measured selectivity (results / (queries · n)) is printed next to it. At the
//! defaults the radii are 0.1790, 0.7698 and 1.2441 for 0.01 / 0.1 / 1 % (measured 0.0093 %,
//! 0.1007 %, 1.027 %): 100 answers lie inside a query's own cluster, 1,000 are about a whole
//! cluster, so the 0.1 % ball already reaches past it.
//!
//! Builds: on the CPU (`voisin-index`) and, with a GPU, on the GPU (`voisin_cuda::index::GpuIndexes`,
//! docs/design/gpu-index-build.md), each timed, the two compared part for part (`--no-cpu-build`
//! skips the CPU build, 168 s at 1M on 16 cores; the GPU-built index is searched then). The
//! JSON lines carry `build_gpu_s` and `end_to_end_s` (GPU build + upload + the queries) beside
//! brute force's time for the same queries.
//!
//! Prints a table and one JSON line per case: build seconds (CPU List of Clusters, then upload),
//! queries/s of the GPU LC and of `CudaEngine::range` (median of `reps` runs, host arrays in,
//! host results out), distance evaluations per query, and whether both answers are identical.
//!
//! Indexes (`--indexes`): `lc:M` a List of Clusters with clusters of M items (the seed's best
//! on the GPU for vectors: 64), `sss:P` an SSS table with α = 0.5 and at most P pivots (the
//! seed's best on the GPU for vectors: 1).
//!
//! `--cover` times instead the cover tree built on the GPU (`GpuIndexes` with `Kind::Cover`,
//! base 2; with `VOISIN_CUDA_TRACE` set its device and host times go to stderr) over the base under euclidean and, with `--words PATH`, over a word list under
//! levenshtein; the CPU build runs beside it on sets of at most `--cpu-max` items (default
//! 200,000: the CPU build of 1M clustered vectors takes minutes), and both index files are
//! compared byte for byte. One JSON line per set.
//!
//! Modes of a List of Clusters beside the resident one (docs/design/lc-multi-gpu-superclusters.md),
//! each checked identical to the resident LC's answers: `--gpus 0,0` spreads it over the GPUs
//! listed (1-Stage; a GPU listed twice gets two parts), `--lsc` streams it in superclusters
//! through GPU 0 with the device memory capped at a quarter of the index (List of
//! Superclusters; prints the superclusters copied, the share of copy time overlapped with
//! the searches, and the host's staging seconds with the part hidden behind the searches).
//! `--no-bf` skips the brute-force runs (the resident LC is then its own
//! reference).
//!
//! usage: lc_bench [--base 1000000] [--queries 23831] [--dim 20] [--clusters 1000]
//!                 [--spread 0.05] [--seed 42] [--indexes lc:64,sss:1] [--knn 10]
//!                 [--sels 0.0001,0.001,0.01] [--reps 3] [--no-gpu] [--no-cpu-build] [--no-bf]
//!                 [--gpus 0,0] [--lsc] [--cover [--words data/words.txt] [--cpu-max 200000]]

use std::time::Instant;

use rand::prelude::*;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use voisin::metric::exact::vector_key;
use voisin::StringSet;
use voisin::{Dataset, Engine, Metric, VectorSet};
use voisin_cuda::index::{lc_device_bytes, GpuIndexes, GpuLc, GpuLcSpread, GpuSss, StreamStats};
use voisin_cuda::{CudaEngine, CudaOptions};
use voisin_index::{file, DatasetIndex, Index, IndexEngine, Kind, Params, VectorSpace};

struct Args {
    base: usize,
    queries: usize,
    dim: usize,
    clusters: usize,
    spread: f64,
    seed: u64,
    indexes: Vec<String>,
    sels: Vec<f64>,
    reps: usize,
    knn: usize,
    gpu: bool,
    cover: bool,
    words: Option<String>,
    cpu_max: usize,
    cpu_build: bool,
    bf: bool,
    /// GPUs of the 1-Stage mode (empty: not run).
    gpus: Vec<usize>,
    lsc: bool,
}

fn parse() -> Args {
    let mut a = Args {
        base: 1_000_000,
        queries: 23_831,
        dim: 20,
        clusters: 1000,
        spread: 0.05,
        seed: 42,
        indexes: vec!["lc:64".into()],
        sels: vec![0.0001, 0.001, 0.01],
        reps: 3,
        knn: 10,
        gpu: true,
        cover: false,
        words: None,
        cpu_max: 200_000,
        cpu_build: true,
        bf: true,
        gpus: Vec::new(),
        lsc: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).map(String::as_str).unwrap_or("");
        let num = || v.parse::<usize>().expect("a number");
        i += 2;
        match argv[i - 2].as_str() {
            "--base" => a.base = num(),
            "--queries" => a.queries = num(),
            "--dim" => a.dim = num(),
            "--clusters" => a.clusters = num(),
            "--spread" => a.spread = v.parse().expect("a number"),
            "--seed" => a.seed = v.parse().expect("a number"),
            "--indexes" => a.indexes = v.split(',').map(String::from).collect(),
            "--sels" => a.sels = v.split(',').map(|x| x.parse().expect("sel")).collect(),
            "--reps" => a.reps = num(),
            "--knn" => a.knn = num(),
            "--no-gpu" => {
                a.gpu = false;
                i -= 1;
            }
            "--cover" => {
                a.cover = true;
                i -= 1;
            }
            "--words" => a.words = Some(v.to_string()),
            "--cpu-max" => a.cpu_max = num(),
            "--no-cpu-build" => {
                a.cpu_build = false;
                i -= 1;
            }
            "--no-bf" => {
                a.bf = false;
                i -= 1;
            }
            "--lsc" => {
                a.lsc = true;
                i -= 1;
            }
            "--gpus" => a.gpus = v.split(',').map(|x| x.parse().expect("a GPU")).collect(),
            o => panic!("unknown option {o}"),
        }
    }
    a
}

/// `n` points of the Gaussian mixture described in the module doc, row-major.
fn clustered(n: usize, d: usize, clusters: usize, spread: f64, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let centers: Vec<f64> = (0..clusters * d).map(|_| rng.gen::<f64>()).collect();
    let sigma: Vec<f64> = (0..clusters)
        .map(|_| spread * rng.gen_range(0.5..1.5))
        .collect();
    let mut v = Vec::with_capacity(n * d);
    for _ in 0..n {
        let c = rng.gen_range(0..clusters);
        for i in 0..d {
            let z: f64 = rng.sample(StandardNormal);
            v.push((centers[c * d + i] + sigma[c] * z) as f32);
        }
    }
    v
}

/// The s-quantile of the pooled distances between sample queries and sample base points, per s.
fn radii(base: &[f32], queries: &[f32], d: usize, sels: &[f64], metric: &Metric) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(7);
    let (n, nq) = (base.len() / d, queries.len() / d);
    let qs: Vec<usize> = (0..256.min(nq)).map(|_| rng.gen_range(0..nq)).collect();
    let bs: Vec<usize> = (0..200_000.min(n)).map(|_| rng.gen_range(0..n)).collect();
    let mut all: Vec<f64> = qs
        .par_iter()
        .flat_map_iter(|&q| {
            let qr = &queries[q * d..(q + 1) * d];
            bs.iter().map(move |&b| {
                metric.key_to_distance(vector_key(metric, &base[b * d..(b + 1) * d], qr))
            })
        })
        .collect();
    sels.iter()
        .map(|&s| {
            let at = ((all.len() as f64 * s) as usize).min(all.len() - 1);
            *all.select_nth_unstable_by(at, f64::total_cmp).1
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `reps` runs of `f` and its last result.
fn timed<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed().as_secs_f64());
    }
    (median(times), last.expect("one run"))
}

fn main() {
    let a = parse();
    let (n, nq, d) = (a.base, a.queries, a.dim);
    let metric = Metric::Euclidean;
    let t = Instant::now();
    let all = clustered(n + nq, d, a.clusters, a.spread, a.seed);
    let (bv, qv) = all.split_at(n * d);
    let base = VectorSet::from_f32(n, d, bv.to_vec()).unwrap();
    let queries = VectorSet::from_f32(nq, d, qv.to_vec()).unwrap();
    if a.cover {
        return cover(&a, base.into());
    }
    let rs = radii(bv, qv, d, &a.sels, &metric);
    eprintln!(
        "data: {n} x {d} base, {nq} queries, {} clusters, spread {}; radii {rs:?} ({:.1} s)",
        a.clusters,
        a.spread,
        t.elapsed().as_secs_f64()
    );
    let engine = if a.gpu {
        let e = CudaEngine::new(0).expect("a CUDA GPU");
        eprintln!("device: {}", e.device_name());
        Some(e)
    } else {
        None
    };
    let (bd, qd): (Dataset, Dataset) = (base.clone().into(), queries.clone().into());
    let mut bf_cache: Vec<Option<(f64, voisin::RangeResult)>> = vec![None; rs.len()];
    let mut bf_knn: Option<(f64, voisin::KnnResult)> = None;
    println!(
        "{:>8} {:>9} {:>10} {:>10} {:>12} {:>12} {:>8} {:>12} {:>9}",
        "index",
        "sel",
        "radius",
        "measured",
        "index q/s",
        "bf q/s",
        "ratio",
        "evals/q",
        "identical"
    );
    for spec in &a.indexes {
        let (kind, param) = spec.split_once(':').expect("an index as lc:M or sss:P");
        let param: usize = param.parse().expect("a number");
        let params = Params {
            cluster_size: param,
            max_pivots: param,
            ..Params::default()
        };
        let kind: Kind = kind.parse().expect("lc or sss");
        let cpu_index = (a.cpu_build || engine.is_none()).then(|| {
            let t = Instant::now();
            let index = Index::build(
                VectorSpace::new(&base, metric.clone()).unwrap(),
                kind,
                &params,
            );
            let secs = t.elapsed().as_secs_f64();
            eprintln!(
                "{spec}: CPU build {secs:.1} s, {} distance evaluations",
                index.build_evals()
            );
            (secs, index)
        });
        let build_cpu = cpu_index.as_ref().map_or(f64::NAN, |c| c.0);
        let gpu_index = engine.as_ref().map(|e| {
            let t = Instant::now();
            let built = GpuIndexes::one(e)
                .build(&bd, metric.clone(), kind, &params, &|_| {})
                .unwrap();
            let secs = t.elapsed().as_secs_f64();
            let DatasetIndex::Vectors(index) = built else {
                unreachable!("vectors in, vectors out")
            };
            let same = cpu_index.as_ref().map(|(_, c)| same_parts(c, &index));
            eprintln!(
                "{spec}: GPU build {secs:.2} s, {} distance evaluations, identical to the CPU \
                 build: {same:?}",
                index.build_evals()
            );
            println!(
                "{{\"case\":\"index_build\",\"index\":\"{spec}\",\"device\":\"{}\",\"n\":{n},\
                 \"dim\":{d},\"build_cpu_s\":{},\"build_gpu_s\":{secs},\"evals\":{},\
                 \"identical_to_cpu\":{}}}",
                e.device_name(),
                if build_cpu.is_nan() {
                    "null".to_string()
                } else {
                    build_cpu.to_string()
                },
                index.build_evals(),
                same.map_or("null".to_string(), |s| s.to_string())
            );
            (secs, index)
        });
        let build_gpu = gpu_index.as_ref().map_or(f64::NAN, |g| g.0);
        let index = match (gpu_index, cpu_index) {
            (Some((_, g)), _) => g,
            (None, Some((_, c))) => c,
            (None, None) => unreachable!("the CPU builds without a GPU"),
        };
        let Some(e) = engine.as_ref() else {
            let sample: Vec<&[f32]> = qv.chunks(d).take(200).collect();
            for (&s, &r) in a.sels.iter().zip(&rs) {
                let t = Instant::now();
                let res = voisin_index::search::range(&index, &sample, r).unwrap();
                let secs = t.elapsed().as_secs_f64();
                println!(
                    "cpu {spec} sel={s} r={r:.4} measured={:.5} evals/q={:.0} q/s={:.0}",
                    res.indices.len() as f64 / (sample.len() * n) as f64,
                    res.stats.distance_evals as f64 / sample.len() as f64,
                    sample.len() as f64 / secs
                );
            }
            continue;
        };
        let t = Instant::now();
        let g = match &index {
            Index::Lc(lc) => Gpu::Lc(GpuLc::new(e, lc).unwrap()),
            Index::Sss(sss) => Gpu::Sss(GpuSss::new(e, sss).unwrap()),
            Index::Cover(_) | Index::Kd(_) => panic!("the cover and k-d trees have no GPU search"),
        };
        let upload = t.elapsed().as_secs_f64();
        let mut resident_range = Vec::new();
        for (i, (&s, &r)) in a.sels.iter().zip(&rs).enumerate() {
            let (ix_s, got) = timed(a.reps, || g.range(&queries, r));
            if bf_cache[i].is_none() {
                bf_cache[i] = Some(if a.bf {
                    timed(a.reps, || e.range(&bd, &qd, r, &metric).unwrap())
                } else {
                    (f64::NAN, got.clone())
                });
            }
            let (bf_s, want) = bf_cache[i].as_ref().expect("filled above");
            let same = got.offsets == want.offsets
                && got.indices == want.indices
                && got.distances == want.distances;
            let measured = got.indices.len() as f64 / (nq as f64 * n as f64);
            let evals = got.stats.distance_evals as f64 / nq as f64;
            println!(
                "{spec:>8} {s:>9} {r:>10.4} {measured:>10.5} {:>12.0} {:>12.0} {:>8.2} {evals:>12.0} {same:>9}",
                nq as f64 / ix_s,
                nq as f64 / bf_s,
                bf_s / ix_s
            );
            println!(
                "{{\"case\":\"index_range\",\"index\":\"{spec}\",\"device\":\"{}\",\"n\":{n},\
                 \"dim\":{d},\"queries\":{nq},\"selectivity\":{s},\"radius\":{r},\
                 \"measured\":{measured},\"index_s\":{ix_s},\"bf_s\":{bf_s},\"index_qps\":{},\
                 \"bf_qps\":{},\"evals_per_query\":{evals},\"results\":{},\
                 \"build_cpu_s\":{},\"build_gpu_s\":{build_gpu},\"upload_s\":{upload},\
                 \"end_to_end_s\":{},\"identical\":{same}}}",
                e.device_name(),
                nq as f64 / ix_s,
                nq as f64 / bf_s,
                got.indices.len(),
                if build_cpu.is_nan() {
                    "null".to_string()
                } else {
                    build_cpu.to_string()
                },
                build_gpu + upload + ix_s
            );
            resident_range.push(got);
        }
        let mut resident_knn = None;
        if a.knn > 0 {
            let k = a.knn;
            let (ix_s, got) = timed(a.reps, || g.knn(&queries, k));
            if bf_knn.is_none() {
                bf_knn = Some(if a.bf {
                    timed(a.reps, || e.knn(&bd, &qd, k, &metric).unwrap())
                } else {
                    (f64::NAN, got.clone())
                });
            }
            let (bf_s, want) = bf_knn.as_ref().expect("filled above");
            let same = got.indices == want.indices && got.distances == want.distances;
            let evals = got.stats.distance_evals as f64 / nq as f64;
            println!(
                "{{\"case\":\"index_knn\",\"index\":\"{spec}\",\"device\":\"{}\",\"n\":{n},\
                 \"dim\":{d},\"queries\":{nq},\"k\":{k},\"index_s\":{ix_s},\"bf_s\":{bf_s},\
                 \"index_qps\":{},\"bf_qps\":{},\"evals_per_query\":{evals},\"identical\":{same}}}",
                e.device_name(),
                nq as f64 / ix_s,
                nq as f64 / bf_s
            );
            resident_knn = Some(got);
        }
        if let Index::Lc(lc) = &index {
            let want = (resident_range.as_slice(), resident_knn.as_ref());
            let case = Case {
                a: &a,
                spec,
                queries: &queries,
                radii: &rs,
            };
            if !a.gpus.is_empty() {
                let engines: Vec<CudaEngine> = a
                    .gpus
                    .iter()
                    .map(|&o| CudaEngine::new(o).expect("a CUDA GPU"))
                    .collect();
                let t = Instant::now();
                let spread = GpuLcSpread::new(&engines, lc).unwrap();
                let mode = format!("1-stage on {:?}", a.gpus);
                case.run(&mode, t.elapsed().as_secs_f64(), &spread, want);
            }
            if a.lsc {
                let cap = lc_device_bytes(lc) / 4;
                let opts = CudaOptions {
                    device_memory: Some(cap),
                    ..Default::default()
                };
                let capped = [CudaEngine::with_options(0, opts).expect("a CUDA GPU")];
                let t = Instant::now();
                let lsc = GpuLcSpread::new(&capped, lc).unwrap();
                let mode = format!("lsc cap {cap} of {}", lc_device_bytes(lc));
                case.run(&mode, t.elapsed().as_secs_f64(), &lsc, want);
            }
        }
    }
}

/// One index's runs in a mode other than the resident one.
struct Case<'a> {
    a: &'a Args,
    spec: &'a str,
    queries: &'a VectorSet,
    radii: &'a [f64],
}

impl Case<'_> {
    /// Times `g`'s range searches and k-NN and checks them against the resident LC's answers.
    fn run(
        &self,
        mode: &str,
        setup_s: f64,
        g: &GpuLcSpread<'_>,
        (range, knn): (&[voisin::RangeResult], Option<&voisin::KnnResult>),
    ) {
        let (spec, nq) = (self.spec, self.queries.len());
        let line = |what: String, secs: f64, same: bool, st: &StreamStats| {
            println!(
                "{{\"case\":\"index_mode\",\"mode\":\"{mode}\",\"index\":\"{spec}\",{what},\
                 \"queries\":{nq},\"setup_s\":{setup_s},\"index_s\":{secs},\"index_qps\":{},\
                 \"superclusters\":{},\"copied\":{},\"copy_s\":{},\"overlap_share\":{},\
                 \"stage_s\":{},\"stage_hidden_s\":{},\"shrinks\":{},\"identical\":{same}}}",
                nq as f64 / secs,
                st.superclusters,
                st.copied,
                st.copy_s,
                st.overlap_share(),
                st.stage_s,
                st.stage_hidden_s,
                st.shrinks
            );
        };
        for ((&s, &r), want) in self.a.sels.iter().zip(self.radii).zip(range) {
            let (secs, (got, st)) = timed(self.a.reps, || g.range(self.queries, r).unwrap());
            let same = got.offsets == want.offsets
                && got.indices == want.indices
                && got.distances == want.distances;
            line(
                format!("\"selectivity\":{s},\"radius\":{r}"),
                secs,
                same,
                &st,
            );
        }
        if let Some(want) = knn {
            let k = self.a.knn;
            let (secs, (got, st)) = timed(self.a.reps, || g.knn(self.queries, k).unwrap());
            let same = got.indices == want.indices && got.distances == want.distances;
            line(format!("\"k\":{k}"), secs, same, &st);
        }
    }
}

/// Whether two builds of one index are equal part for part.
fn same_parts(a: &Index<VectorSpace>, b: &Index<VectorSpace>) -> bool {
    match (a, b) {
        (Index::Lc(a), Index::Lc(b)) => a.parts() == b.parts(),
        (Index::Sss(a), Index::Sss(b)) => a.parts() == b.parts(),
        _ => false,
    }
}

/// The GPU index under test.
enum Gpu<'e> {
    Lc(GpuLc<'e>),
    Sss(GpuSss<'e>),
}

impl Gpu<'_> {
    fn range(&self, q: &VectorSet, r: f64) -> voisin::RangeResult {
        match self {
            Gpu::Lc(g) => g.range(q, r).unwrap(),
            Gpu::Sss(g) => g.range(q, r).unwrap(),
        }
    }

    fn knn(&self, q: &VectorSet, k: usize) -> voisin::KnnResult {
        match self {
            Gpu::Lc(g) => g.knn(q, k).unwrap(),
            Gpu::Sss(g) => g.knn(q, k).unwrap(),
        }
    }
}

/// `--cover` (see the module doc).
fn cover(a: &Args, base: Dataset) {
    let engine = CudaEngine::new(0).expect("a CUDA GPU");
    eprintln!("device: {}", engine.device_name());
    // The build's device and host times, as scripts/gpu-check asks with VOISIN_CUDA_TRACE.
    if std::env::var_os("VOISIN_CUDA_TRACE").is_some() {
        let probe = std::sync::Arc::new(voisin_cuda::probe::StderrProbe);
        engine.set_probe(probe).expect("the GPU");
    }
    let build_cover = |data: &Dataset, metric: Metric| {
        GpuIndexes::one(&engine).build(data, metric, Kind::Cover, &Params::default(), &|_| {})
    };
    let mut sets = vec![("clustered".to_string(), base, Metric::Euclidean)];
    if let Some(path) = &a.words {
        let text = std::fs::read_to_string(path).expect("a readable word list");
        let words = StringSet::from_strings(text.lines()).expect("a word list");
        sets.push((path.clone(), words.into(), Metric::Levenshtein));
    }
    // The first build loads the kernels (NVRTC): a small one, untimed.
    let warm: Dataset = VectorSet::from_f32(3, 1, vec![0.0, 1.0, 2.0])
        .unwrap()
        .into();
    build_cover(&warm, Metric::Euclidean).expect("the GPU build");
    for (name, data, metric) in sets {
        let t = Instant::now();
        let gpu = build_cover(&data, metric.clone()).expect("the GPU build");
        let gpu_s = t.elapsed().as_secs_f64();
        let (mut cpu_s, mut identical) = ("null".to_string(), "null".to_string());
        if data.len() <= a.cpu_max {
            let t = Instant::now();
            let cpu = DatasetIndex::build(&data, metric.clone(), Kind::Cover, &Params::default())
                .expect("the CPU build");
            cpu_s = format!("{:.3}", t.elapsed().as_secs_f64());
            let same = file::to_bytes(&gpu).unwrap() == file::to_bytes(&cpu).unwrap();
            identical = same.to_string();
        }
        println!(
            "{{\"bench\":\"cover_build\",\"set\":\"{name}\",\"n\":{},\"metric\":\"{metric}\",\
             \"gpu_s\":{gpu_s:.3},\"build_evals\":{},\"cpu_s\":{cpu_s},\"identical\":{identical}}}",
            data.len(),
            gpu.build_evals()
        );
    }
}
