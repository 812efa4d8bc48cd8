//! Brute force or a metric index for one knn, range or graph run
//! (`--engine auto|brute|lc|sss|cover|kd`): the choice, the reason given for it, and the
//! intrinsic-dimension estimate it rests on.
//!
//! This module only decides; it builds nothing and runs no search. It measures distances through
//! the core crate's public metric functions, as [`crate::space`] does.
//!
//! `auto` takes brute force for k-NN (and graphs) over words under levenshtein: on the word
//! list the List of Clusters' k-NN search, whose radius starts unbounded and shrinks, measured
//! more words than brute force (graph of 20k words, k=3: 234M evaluations against 200M, 2.3x
//! the time; k-NN k=10 of 2,000 edited words: 2.6x). Otherwise it takes brute force unless every
//! condition for an index holds:
//! - the metric has the triangle inequality (index pruning rests on it);
//! - no GPU takes the work (brute force on a GPU outruns a CPU index walk by far);
//! - at least [`MIN_ITEMS`] items (below that an index saves less than its overheads);
//! - a low intrinsic dimension. It is Chávez et al.'s ρ = μ²/2σ² ("Searching in metric spaces",
//!   2001) over [`SAMPLE_PAIRS`] sampled pairs: the more the distances concentrate around their
//!   mean, the less any triangle-inequality bound can exclude. ρ is about the dimension for
//!   Gaussian vectors (measured: 1.9 at d = 2, 7.5 at d = 8, 68 at d = 64, euclidean) and 7.9
//!   for the shipped English word list under levenshtein. Limits: [`VECTOR_RHO_MAX`] for vectors,
//!   whose brute force runs as a matrix product several times cheaper per distance than an index
//!   walk, and [`STRING_RHO_MAX`] for strings, whose distances cost the same either way;
//! - enough queries to pay for building the index in the run: the evaluations half of brute
//!   force would make (counted [`BOUNDED_STRING_DISCOUNT`] times cheaper for a range search over
//!   strings, whose brute force uses a bounded distance) must exceed the build's estimated
//!   evaluations: about n²/2m for the List of
//!   Clusters, and n·min(n, [`COVER_BUILD_PER_ITEM`]·e^(ρ/4)) for the cover tree, whose greedy
//!   passes grow with the dimension (measured on 100k uniform vectors, euclidean: 11.1
//!   evaluations per item in 2-d, ρ = 2.3; 26.3 in 4-d, ρ = 5.1; 114 in 8-d, ρ = 11.2; 376 in
//!   16-d, ρ = 22.2, where the fit overestimates and auto takes brute force anyway).
//!
//! The index is the List of Clusters for strings (range searches; the fastest on words in `bench/`), the k-d tree
//! for vectors of at most [`KD_MAX_DIM`] coordinates under a coordinate-wise metric (its build
//! measures no distance: about n·log₂n/4 evaluations' worth of coordinate comparisons), and the
//! cover tree for other vectors (logarithmic search in low intrinsic dimension).
//!
//! It also prices where an index is built under `--device auto` ([`gpu_build_pays`]): a GPU that
//! builds the structure (its index engine's `supports`) takes the build when the CPU's threads
//! would take longer than a process's GPU setup (docs/design/gpu-index-build.md, "auto").
//! Every cost constant of these choices lives in this module.

use std::fmt;
use std::str::FromStr;

use voisin::metric::exact;
use voisin::{Dataset, Error, Metric, Result};

use crate::{Kind, Params};

/// Fewer items than this always take brute force under `auto`.
pub const MIN_ITEMS: usize = 1024;
/// Largest ρ at which `auto` indexes vectors.
pub const VECTOR_RHO_MAX: f64 = 6.0;
/// Largest ρ at which `auto` indexes strings.
pub const STRING_RHO_MAX: f64 = 16.0;
/// How many times cheaper brute force's bounded levenshtein evaluations in a range search are
/// than the full ones an index build makes (measured on the word list at r = 1: 3.8 ns against
/// 146 ns per evaluation).
pub const BOUNDED_STRING_DISCOUNT: f64 = 32.0;
/// Vectors of at most this many coordinates get the k-d tree under `auto` (when ρ allows an
/// index at all).
pub const KD_MAX_DIM: usize = 16;
/// Pairs of items sampled to estimate ρ.
pub const SAMPLE_PAIRS: usize = 2000;
/// Cover-tree build evaluations per item are estimated as this times e^(ρ/4) (fitted to the
/// measurements in the module doc).
pub const COVER_BUILD_PER_ITEM: f64 = 7.0;

/// Distance evaluations a CPU thread makes per second in an index build (measured on 16 threads:
/// the List of Clusters over `data/words.txt`, 139.8M in 4.0–4.1 s, about 2.1M a thread; over
/// 100k clustered 20-d vectors, 78M in 1.4 s, about 3.5M; docs/design/gpu-index-build.md).
pub const CPU_EVALS_PER_THREAD_S: f64 = 2.5e6;

/// What a process's GPU index build costs beyond its distances: the context, NVRTC and the
/// uploads, about 1 s once the driver has cached the module (`voisin index build` over
/// words.txt: 1.17 s against 0.13 s in a process that already holds the GPU;
/// docs/design/gpu-index-build.md).
pub const GPU_SETUP_S: f64 = 1.0;

/// Whether a GPU that builds `kind` over `data` should (`--device auto`): when the CPU build,
/// on `threads` worker threads, would take longer than the GPU's setup alone (the GPU's own
/// time is a small part of it at these sizes).
pub fn gpu_build_pays(
    data: &Dataset,
    metric: &Metric,
    kind: Kind,
    params: &Params,
    threads: usize,
) -> bool {
    gpu_pays(cpu_build_evals(data, metric, kind, params), threads)
}

/// Whether a build of `evals` distance evaluations would take the CPU's `threads` longer than
/// the GPU's setup alone.
fn gpu_pays(evals: f64, threads: usize) -> bool {
    evals / (CPU_EVALS_PER_THREAD_S * threads.max(1) as f64) > GPU_SETUP_S
}

/// The distance evaluations of the CPU build of `kind` over `data`: the List of Clusters one
/// per item left per cluster (exact); the cover tree [`cover_build_evals`] from a sample's
/// intrinsic dimension; the SSS and the k-d tree their n × pivots table at most.
pub fn cpu_build_evals(data: &Dataset, metric: &Metric, kind: Kind, params: &Params) -> f64 {
    let n = data.len();
    match kind {
        Kind::Lc => {
            let mut left = n;
            let mut evals = 0f64;
            for cut in crate::lc::cluster_cuts(n, params.cluster_size) {
                left -= 1;
                evals += left as f64;
                left -= cut;
            }
            evals
        }
        Kind::Cover => {
            let rho = intrinsic_dimension(data, metric, SAMPLE_PAIRS);
            cover_build_evals(n, if rho.is_nan() { 0.0 } else { rho })
        }
        _ => n as f64 * params.max_pivots as f64,
    }
}

/// What runs the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Brute force: every query measured against every item.
    Brute,
    /// A metric index of this kind, built for the run and then searched.
    Index(Kind),
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Engine::Brute => f.write_str("brute"),
            Engine::Index(k) => write!(f, "{k}"),
        }
    }
}

/// The `--engine` value: a fixed engine or `auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// Let [`decide`] pick brute force or an index from the data, metric and workload.
    #[default]
    Auto,
    /// Use this engine as asked; an index still needs a metric with the triangle inequality.
    Fixed(Engine),
}

impl FromStr for EngineChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "brute" => Ok(EngineChoice::Fixed(Engine::Brute)),
            _ => s
                .parse::<Kind>()
                .map(|k| EngineChoice::Fixed(Engine::Index(k)))
                .map_err(|_| {
                    Error::invalid(format!(
                        "unknown engine '{s}' (known: auto, brute, lc, sss, cover, kd)"
                    ))
                }),
        }
    }
}

/// The engine for one run and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The engine chosen for the run.
    pub engine: Engine,
    /// A one-line, human-readable explanation of the choice ("asked for" for a fixed engine).
    pub reason: String,
    /// ρ when it was estimated.
    pub intrinsic_dim: Option<f64>,
}

/// What the run looks like, besides the data.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Queries to answer (the item count for a graph).
    pub queries: usize,
    /// Whether a GPU engine would run brute force.
    pub gpu: bool,
    /// A range search (brute force then measures strings with a bounded, much cheaper distance).
    pub range: bool,
}

/// Decides the engine. A fixed index on a metric without the triangle inequality is an error.
pub fn decide(
    choice: EngineChoice,
    data: &Dataset,
    metric: &Metric,
    work: Workload,
    params: &Params,
) -> Result<Decision> {
    let brute = |reason: String, rho| Decision {
        engine: Engine::Brute,
        reason,
        intrinsic_dim: rho,
    };
    match choice {
        EngineChoice::Fixed(Engine::Brute) => return Ok(brute("asked for".into(), None)),
        EngineChoice::Fixed(e @ Engine::Index(_)) => {
            crate::space::check_metric(metric)?;
            return Ok(Decision {
                engine: e,
                reason: "asked for".into(),
                intrinsic_dim: None,
            });
        }
        EngineChoice::Auto => {}
    }
    if crate::space::check_metric(metric).is_err() {
        return Ok(brute(
            format!("{metric} lacks the triangle inequality that index pruning needs"),
            None,
        ));
    }
    if work.gpu {
        return Ok(brute(
            "a GPU runs brute force faster than a CPU index".into(),
            None,
        ));
    }
    if *metric == Metric::Levenshtein && !work.range {
        return Ok(brute(
            "k-NN over strings: the index's search by a shrinking radius measures more words than \
             brute force's bounded distances (bench/RESULTS.md, auto on the CPU)"
                .into(),
            None,
        ));
    }
    let n = data.len();
    if n < MIN_ITEMS {
        return Ok(brute(
            format!("{n} items are too few for an index to pay (fewer than {MIN_ITEMS})"),
            None,
        ));
    }
    let rho = intrinsic_dimension(data, metric, SAMPLE_PAIRS);
    let kd = crate::check_kind(data, metric, Kind::Kd).is_ok()
        && data.as_vectors().is_some_and(|v| v.dim() <= KD_MAX_DIM);
    let (what, limit, kind) = match data {
        Dataset::Vectors(_) if kd => ("vectors", VECTOR_RHO_MAX, Kind::Kd),
        Dataset::Vectors(_) => ("vectors", VECTOR_RHO_MAX, Kind::Cover),
        Dataset::Strings(_) => ("strings", STRING_RHO_MAX, Kind::Lc),
    };
    if rho.is_nan() || rho > limit {
        return Ok(brute(
            format!("{what} of intrinsic dimension {rho:.1} (over {limit}): an index would scan most items"),
            Some(rho),
        ));
    }
    let nf = n as f64;
    let build = match kind {
        Kind::Lc => nf * nf / (2.0 * params.cluster_size.max(1) as f64),
        Kind::Cover => cover_build_evals(n, rho),
        Kind::Sss => nf * params.max_pivots as f64,
        Kind::Kd => nf * nf.log2().max(1.0) / 4.0,
    };
    let mut saving = 0.5 * work.queries as f64 * nf;
    if work.range && matches!(data, Dataset::Strings(_)) {
        saving /= BOUNDED_STRING_DISCOUNT;
    }
    if saving < build {
        return Ok(brute(
            format!(
                "{} queries are too few to pay for building an index (about {build:.0} distance evaluations)",
                work.queries
            ),
            Some(rho),
        ));
    }
    Ok(Decision {
        engine: Engine::Index(kind),
        reason: format!("{what} of intrinsic dimension {rho:.1} (at most {limit}) and {} queries to pay for the build", work.queries),
        intrinsic_dim: Some(rho),
    })
}

/// The estimated distance evaluations of a cover-tree build over `n` items of intrinsic
/// dimension `rho` (the module doc): n·min(n, [`COVER_BUILD_PER_ITEM`]·e^(ρ/4)).
pub fn cover_build_evals(n: usize, rho: f64) -> f64 {
    let nf = n as f64;
    nf * nf.min(COVER_BUILD_PER_ITEM * (rho / 4.0).exp())
}

/// Chávez's intrinsic dimension ρ = μ²/2σ² of the distances between `pairs` pairs of distinct
/// positions drawn with a fixed seed (the same data give the same estimate). Equal distances
/// everywhere give infinity (nothing can be pruned), all-zero distances 0, fewer than two items
/// NaN.
pub fn intrinsic_dimension(data: &Dataset, metric: &Metric, pairs: usize) -> f64 {
    let n = data.len();
    if n < 2 || pairs == 0 {
        return f64::NAN;
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
    let mut next = move || {
        // splitmix64: a few lines of well-mixed sampling without a dependency.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let dists: Vec<f64> = (0..pairs)
        .map(|_| {
            let i = (next() % n as u64) as usize;
            let j = (i + 1 + (next() % (n as u64 - 1)) as usize) % n;
            pair_distance(data, metric, i, j)
        })
        .collect();
    let m = pairs as f64;
    let mean = dists.iter().sum::<f64>() / m;
    let var = dists.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / m;
    if var == 0.0 {
        return if mean == 0.0 { 0.0 } else { f64::INFINITY };
    }
    mean * mean / (2.0 * var)
}

fn pair_distance(data: &Dataset, metric: &Metric, i: usize, j: usize) -> f64 {
    let key = match (data, metric) {
        (Dataset::Vectors(v), Metric::Custom(c)) => match &c.vectors {
            Some(d) => d.distance(&v.row_f32(i), &v.row_f32(j)),
            None => f64::NAN,
        },
        (Dataset::Vectors(v), m) => exact::vector_key(m, &v.row_f32(i), &v.row_f32(j)),
        (Dataset::Strings(s), Metric::Custom(c)) => match &c.strings {
            Some(d) => d.distance(s.get(i), s.get(j)),
            None => f64::NAN,
        },
        (Dataset::Strings(s), _) => exact::string_key(s.get(i), s.get(j)),
    };
    metric.key_to_distance(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{StringSet, VectorSet};

    /// splitmix64 numbers in [0, 1).
    fn uniform(seed: u64, count: usize) -> Vec<f64> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    /// n points uniform in the unit cube of dimension `dim`.
    fn spread(n: usize, dim: usize) -> Dataset {
        let values = uniform(dim as u64, n * dim)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        VectorSet::from_f32(n, dim, values).unwrap().into()
    }

    fn work(queries: usize) -> Workload {
        Workload {
            queries,
            gpu: false,
            range: false,
        }
    }

    #[test]
    fn parses_every_engine_and_refuses_others() {
        assert_eq!("auto".parse::<EngineChoice>().unwrap(), EngineChoice::Auto);
        assert_eq!(
            "brute".parse::<EngineChoice>().unwrap(),
            EngineChoice::Fixed(Engine::Brute)
        );
        for k in Kind::EVERY {
            assert_eq!(
                k.name().parse::<EngineChoice>().unwrap(),
                EngineChoice::Fixed(Engine::Index(k))
            );
        }
        let err = "balltree".parse::<EngineChoice>().unwrap_err().to_string();
        assert!(err.contains("unknown engine 'balltree'"), "{err}");
    }

    #[test]
    fn rho_grows_with_the_dimension() {
        let low = intrinsic_dimension(&spread(4000, 2), &Metric::Euclidean, SAMPLE_PAIRS);
        let high = intrinsic_dimension(&spread(4000, 64), &Metric::Euclidean, SAMPLE_PAIRS);
        assert!(low < 4.0, "{low}");
        assert!(high > 20.0, "{high}");
        let same = VectorSet::from_f32(3, 2, vec![1.0; 6]).unwrap().into();
        assert_eq!(intrinsic_dimension(&same, &Metric::Euclidean, 10), 0.0);
        let one = VectorSet::from_f32(1, 2, vec![1.0; 2]).unwrap().into();
        assert!(intrinsic_dimension(&one, &Metric::Euclidean, 10).is_nan());
    }

    #[test]
    fn auto_indexes_low_dimensional_vectors_and_strings() {
        let p = Params::default();
        let d = decide(
            EngineChoice::Auto,
            &spread(5000, 2),
            &Metric::Euclidean,
            work(5000),
            &p,
        )
        .unwrap();
        assert_eq!(d.engine, Engine::Index(Kind::Kd), "{}", d.reason);
        assert!(d.reason.contains("intrinsic dimension"), "{}", d.reason);
        // The same points with 18 more coordinates, all zero: past the k-d tree's dimensions,
        // the same intrinsic dimension, the cover tree.
        let flat = spread(5000, 2)
            .as_vectors()
            .unwrap()
            .rows_f32(0, 5000)
            .into_owned();
        let wide: Vec<f32> = flat
            .chunks(2)
            .flat_map(|p| p.iter().copied().chain([0.0; 18]))
            .collect();
        let wide = VectorSet::from_f32(5000, 20, wide).unwrap().into();
        let d = decide(
            EngineChoice::Auto,
            &wide,
            &Metric::Euclidean,
            work(5000),
            &p,
        )
        .unwrap();
        assert_eq!(d.engine, Engine::Index(Kind::Cover), "{}", d.reason);
        // Random words of 1 to 20 letters over "abc": ρ about 3.
        let u = uniform(7, 3000 * 21);
        let words: Vec<String> = u
            .chunks(21)
            .map(|c| {
                let len = 1 + (c[0] * 20.0) as usize;
                c[1..=len]
                    .iter()
                    .map(|&x| ['a', 'b', 'c'][(x * 3.0) as usize])
                    .collect()
            })
            .collect();
        let strings: Dataset = StringSet::from_strings(&words).unwrap().into();
        let range = |queries| Workload {
            range: true,
            ..work(queries)
        };
        let d = decide(
            EngineChoice::Auto,
            &strings,
            &Metric::Levenshtein,
            range(20_000),
            &p,
        )
        .unwrap();
        assert_eq!(d.engine, Engine::Index(Kind::Lc), "{}", d.reason);
        // k-NN over words: brute force, whatever the number of queries (measured on the word
        // list: the List of Clusters' k-NN search measured more words than brute force).
        let knn = decide(
            EngineChoice::Auto,
            &strings,
            &Metric::Levenshtein,
            work(100_000),
            &p,
        )
        .unwrap();
        assert_eq!(knn.engine, Engine::Brute, "{}", knn.reason);
        assert!(knn.reason.contains("k-NN over strings"), "{}", knn.reason);
        // A range search's brute force is cheaper per string: 1,000 queries do not pay for
        // the build.
        let range = Workload {
            range: true,
            ..work(1000)
        };
        let d = decide(
            EngineChoice::Auto,
            &strings,
            &Metric::Levenshtein,
            range,
            &p,
        )
        .unwrap();
        assert_eq!(d.engine, Engine::Brute, "{}", d.reason);
    }

    #[test]
    fn auto_takes_brute_force_when_an_index_cannot_pay() {
        let p = Params::default();
        let low = spread(5000, 2);
        let cases = [
            (
                spread(5000, 64),
                Metric::Euclidean,
                work(5000),
                "intrinsic dimension",
            ),
            (
                low.clone(),
                Metric::Cosine,
                work(5000),
                "triangle inequality",
            ),
            (low.clone(), Metric::Euclidean, work(3), "too few to pay"),
            (
                spread(100, 2),
                Metric::Euclidean,
                work(100),
                "too few for an index",
            ),
            (
                low,
                Metric::Euclidean,
                Workload {
                    gpu: true,
                    ..work(5000)
                },
                "GPU",
            ),
        ];
        for (data, metric, w, why) in cases {
            let d = decide(EngineChoice::Auto, &data, &metric, w, &p).unwrap();
            assert_eq!(d.engine, Engine::Brute, "{why}: {}", d.reason);
            assert!(d.reason.contains(why), "{why}: {}", d.reason);
        }
    }

    #[test]
    fn fixed_choices_are_kept_and_checked() {
        let p = Params::default();
        let data = spread(10, 3);
        let sss = EngineChoice::Fixed(Engine::Index(Kind::Sss));
        let d = decide(sss, &data, &Metric::Euclidean, work(1), &p).unwrap();
        assert_eq!(d.engine, Engine::Index(Kind::Sss));
        let err = decide(sss, &data, &Metric::Cosine, work(1), &p).unwrap_err();
        assert!(err.to_string().contains("triangle inequality"), "{err}");
        let brute = EngineChoice::Fixed(Engine::Brute);
        let d = decide(brute, &data, &Metric::Cosine, work(1), &p).unwrap();
        assert_eq!(d.engine, Engine::Brute);
    }

    fn words(list: &[String]) -> Dataset {
        StringSet::from_strings(list).unwrap().into()
    }

    /// `n` empty strings: a set of that size (the List of Clusters' and SSS's counts depend on
    /// nothing else).
    fn sized(n: usize) -> Dataset {
        words(&vec![String::new(); n])
    }

    /// Auto takes the GPU only where the CPU build would outlast the GPU's setup: the word
    /// list's lc:32 (139.8M evaluations; 4.1 s on 16 threads), not lc:128 (35M; 1.2 s, as
    /// fast as the GPU's process) nor small sets; the cover tree over 1M clustered 20-d vectors
    /// (4.76 s on 16 threads, 1.08 s on the GPU), not over the word list (0.59 s on 16 threads).
    #[test]
    fn auto_takes_the_gpu_when_the_cpu_build_would_outlast_its_setup() {
        let lc = |m| Params {
            cluster_size: m,
            ..Params::default()
        };
        let lev = Metric::Levenshtein;
        let evals = |n, kind, p: &Params| cpu_build_evals(&sized(n), &lev, kind, p);
        let lc32 = evals(94_577, Kind::Lc, &lc(32));
        assert!((lc32 - 139_806_976.0).abs() < 1.0, "{lc32}");
        assert!(gpu_pays(lc32, 16));
        assert!(!gpu_pays(evals(94_577, Kind::Lc, &lc(128)), 16));
        assert!(!gpu_pays(evals(5_000, Kind::Lc, &lc(32)), 2));
        assert!(gpu_pays(evals(1_000_000, Kind::Lc, &lc(64)), 16));
        assert_eq!(evals(0, Kind::Lc, &lc(32)), 0.0);
        assert_eq!(evals(5, Kind::Lc, &lc(1)), 10.0);
        assert_eq!(evals(10, Kind::Sss, &Params::default()), 640.0);
        let tiny: Dataset = VectorSet::from_f32(3, 2, vec![0.0; 6]).unwrap().into();
        let builds = |d: &Dataset, m: &Metric, kind, p: &Params| {
            gpu_build_pays(d, m, kind, p, rayon::current_num_threads())
        };
        assert!(!builds(&tiny, &Metric::Euclidean, Kind::Lc, &lc(2)));

        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/words.txt");
        let text = std::fs::read_to_string(path).expect("data/words.txt is shipped");
        let list = words(&text.lines().map(String::from).collect::<Vec<_>>());
        let cover = Params::default();
        assert!(!gpu_pays(
            cpu_build_evals(&list, &lev, Kind::Cover, &cover),
            16
        ));
        // lc_bench's clustered set: 1,000 centres in the unit cube, spreads 0.025 to 0.075.
        let (n, d) = (1_000_000, 20);
        let mut state = 7u64;
        let mut unit = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let centres: Vec<f64> = (0..1000 * d).map(|_| unit()).collect();
        let mut rows = Vec::with_capacity(n * d);
        for _ in 0..n {
            let c = (unit() * 1000.0) as usize;
            let spread = 0.05 * (0.5 + unit());
            // A sum of uniforms for a normal-like offset.
            rows.extend((0..d).map(|k| {
                let z = (0..4).map(|_| unit()).sum::<f64>() - 2.0;
                (centres[c * d + k] + spread * z * 1.7) as f32
            }));
        }
        let clustered: Dataset = VectorSet::from_f32(n, d, rows).unwrap().into();
        let euclid = cpu_build_evals(&clustered, &Metric::Euclidean, Kind::Cover, &cover);
        assert!(gpu_pays(euclid, 16), "{euclid}");
    }
}
