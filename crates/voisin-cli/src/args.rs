//! The command line, declared with clap: subcommands, their options and the options every
//! subcommand takes. Parsing only; `commands` decides what the values mean together.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use voisin::Metric;
use voisin_engines::Device;
use voisin_index::auto::EngineChoice;

use crate::size::parse_size;

#[derive(Debug, Parser)]
#[command(
    name = "voisin",
    version,
    about = "Exact nearest-neighbour search, k-NN graphs and range search over vectors and strings",
    after_help = "Inputs by extension (any case): .fvecs .ivecs .bvecs .fbin .u8bin .npy .npz \
                  (FILE.npz:NAME picks an array) .hdf5/.h5 .txt .csv .tsv .parquet (FILE.parquet:COLUMN); \
                  - reads standard input \
                  (with --format)\n\
                  Outputs by extension: .tsv .npz .csr.npz .npy .ivecs (TSV on standard output \
                  without --out)\n\
                  Each subcommand's --help has examples; --stats prints one JSON line whose \
                  fields the README lists."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    #[command(flatten)]
    pub global: GlobalOpts,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// For each query, its k nearest items of the base set.
    #[command(after_help = KNN_EXAMPLES)]
    Knn(KnnArgs),
    /// For every item of a set, its k nearest other items (the k-NN graph).
    #[command(after_help = GRAPH_EXAMPLES)]
    Graph(GraphArgs),
    /// For each query, every base item within a radius.
    #[command(after_help = RANGE_EXAMPLES)]
    Range(RangeArgs),
    /// Builds the k-NN graph of a small real data set shipped with voisin and summarises it.
    #[command(after_help = "Example:\n  voisin demo --stats")]
    Demo,
    /// Says what voisin finds of CUDA here: the driver, cuBLAS and NVRTC (which file, which
    /// version, from where), the GPUs, the kernels built in, and why a GPU is not used.
    #[command(after_help = DOCTOR_HELP)]
    Doctor,
    /// Metric-space indexes (List of Clusters, SSS pivots, cover tree): build one into a file,
    /// then answer range or k-NN queries from it.
    #[command(subcommand)]
    Index(IndexCommand),
}

const KNN_EXAMPLES: &str = "Examples:
  voisin knn --base base.fvecs --query queries.fvecs -k 10 --out res.npz
  voisin knn --base emb.npz:train --query emb.npz:test -k 5 --metric cosine
  voisin knn --base glove-100-angular.hdf5 --query glove-100-angular.hdf5 -k 10 --stats
  voisin knn --base codes.u8bin --query q.u8bin -k 10 --ties all --out nn.npz   # offsets too
  cat q.npy | voisin knn --base base.npy --query - --format npy -k 3";

const GRAPH_EXAMPLES: &str = "Examples:
  voisin graph --input X.npz --out g.npz --include-self -k 15      # UMAP precomputed_knn
  voisin graph --input X.npy -k 10 --out g.csr.npz                  # scipy.sparse.load_npz
  voisin graph --input X.csv -k 5 --pairs --out edges.tsv           # each edge once
  voisin graph --input X.npy -k 10 --ties all --out g.csr.npz        # every tie at the 10th
  voisin graph --input big.fbin -k 100 --checkpoint ckpt/ --out g.npz";

const RANGE_EXAMPLES: &str = "Examples:
  voisin range --base base.fvecs --query queries.fvecs --radius 0.5 --out hits.npz
  voisin range --base X.npy --query X.npy --radius 0.01 --pairs    # near-duplicate pairs
  voisin range --base words.txt --query typos.txt --radius 2 --distances f64";

const DOCTOR_HELP: &str = "cuBLAS and NVRTC are searched in VOISIN_CUDA_LIBS (folders, when set, \
  the only place), else the nvidia-* wheels of the Python environment ($VIRTUAL_ENV, \
  $CONDA_PREFIX), then the system (the loader's path, $CUDA_HOME/lib64, /usr/local/cuda/lib64); \
  the driver (libcuda.so.1) comes from the system. Kernels compiled at run time are kept in \
  VOISIN_CACHE_DIR (default ~/.cache/voisin/kernels; off: none).";

const INDEX_BUILD_EXAMPLES: &str = "Examples:
  voisin index build --input words.txt --kind lc --out words.vidx
  voisin index build --input X.npy --kind cover --radius-base 1.3 --out x.vidx";

const INDEX_QUERY_EXAMPLES: &str = "Examples:
  voisin index query --index words.vidx --query typos.txt --radius 2
  voisin index query --index x.vidx --query q.npy -k 10 --out res.npz --stats";

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Builds an index over a set and writes it, items included, to one file.
    #[command(after_help = INDEX_BUILD_EXAMPLES)]
    Build(IndexBuildArgs),
    /// Answers k-NN (-k) or range (--radius) queries from an index file.
    #[command(after_help = INDEX_QUERY_EXAMPLES)]
    Query(IndexQueryArgs),
}

/// Which index structure to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IndexKindArg {
    /// List of Clusters: fixed-size clusters with covering radii.
    Lc,
    /// SSS: a pivot table with pivots chosen by alpha.
    Sss,
    /// Cover tree.
    Cover,
    /// k-d tree: vectors under euclidean, cityblock, chebyshev or minkowski:P (the file keeps
    /// the items; the tree is rebuilt when it is read).
    Kd,
}

#[derive(Debug, Args)]
pub struct IndexBuildArgs {
    /// Set to index.
    #[arg(long, value_name = "X")]
    pub input: PathBuf,
    /// Index structure.
    #[arg(long, value_enum)]
    pub kind: IndexKindArg,
    /// A true metric: euclidean, cityblock, chebyshev, minkowski:P (P >= 1), levenshtein
    /// (default: levenshtein for .txt, else euclidean).
    #[arg(long, value_name = "M", value_parser = parse_metric)]
    pub metric: Option<Metric>,
    /// Index file to write.
    #[arg(long, value_name = "IDX")]
    pub out: PathBuf,
    /// List of Clusters: items per cluster, center included.
    #[arg(long, value_name = "M", default_value_t = 32)]
    pub cluster_size: usize,
    /// SSS: a new pivot is at least alpha times the largest distance from every pivot.
    #[arg(long, value_name = "A", default_value_t = 0.5)]
    pub alpha: f64,
    /// SSS: at most this many pivots.
    #[arg(long, value_name = "P", default_value_t = 64)]
    pub max_pivots: usize,
    /// Cover tree: base of the level radii (> 1; 2 or 1.3 are usual). Formerly --base.
    #[arg(
        long = "radius-base",
        alias = "base",
        value_name = "B",
        default_value_t = 2.0
    )]
    pub radius_base: f64,
    /// Where the build runs: cpu; cuda for List of Clusters, SSS and cover tree indexes over
    /// vectors (euclidean, cityblock, chebyshev, minkowski:P) or strings (levenshtein); auto:
    /// cuda for List of Clusters and SSS over vectors, List of Clusters over strings and cover
    /// trees when the CPU build would take more than about a second, else cpu.
    #[arg(long, default_value = "auto", value_parser = device_arg())]
    pub device: Device,
}

#[derive(Debug, Args)]
pub struct IndexQueryArgs {
    /// Index file written by `voisin index build`.
    #[arg(long, value_name = "IDX")]
    pub index: PathBuf,
    /// Queries (of the same kind and dimension as the indexed items).
    #[arg(long, value_name = "Q")]
    pub query: PathBuf,
    /// Neighbours per query.
    #[arg(
        short = 'k',
        value_name = "K",
        allow_negative_numbers = true,
        required_unless_present = "radius",
        conflicts_with = "radius"
    )]
    pub k: Option<usize>,
    /// Radius, in the metric's own unit.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    pub radius: Option<f64>,
    /// Where the search runs: cpu; cuda for List of Clusters and SSS indexes over vectors
    /// (euclidean, cityblock, chebyshev); auto: cuda where it can answer, else cpu.
    #[arg(long, default_value = "auto", value_parser = device_arg())]
    pub device: Device,
    /// GPUs to search on: all, a count N (the first N), or ordinals such as 0,2 (default: GPU
    /// 0). A List of Clusters is cut into one run of clusters per GPU listed (1-Stage); SSS
    /// runs on the first.
    #[arg(long, value_name = "G", value_parser = parse_gpus, help_heading = "GPU options")]
    pub gpus: Option<GpuList>,
    /// Device memory the search may use on each GPU, e.g. 512M or 2G (default: what is free).
    /// A List of Clusters that does not fit is streamed through it in superclusters.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "GPU options")]
    pub gpu_memory: Option<usize>,
    /// Output file (.tsv, .npz, .csr.npz, .npy or .ivecs); TSV on standard output without it
    /// or with "-".
    #[arg(long, value_name = "F")]
    pub out: Option<PathBuf>,
}

/// Options that every subcommand takes, before or after its name.
#[derive(Debug, Args)]
pub struct GlobalOpts {
    /// Worker threads, 1 to 1024 (default: every core).
    #[arg(long, global = true, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,

    /// Memory budget for working buffers, e.g. 512M or 2G (default 1G); a compressed .npz
    /// member, inflated into memory to be read, may not be larger.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<usize>,

    /// Print one JSON line of statistics on standard error.
    #[arg(long, global = true)]
    pub stats: bool,

    /// Accept NaN and infinite values in vectors, treated as said (default: reject them).
    #[arg(long, global = true, value_name = "HOW", value_enum)]
    pub allow_nan: Option<NanPolicy>,

    /// Read inputs into memory instead of memory-mapping them.
    #[arg(long, global = true)]
    pub no_mmap: bool,

    /// Format of an input given as - (standard input, which stands for one input only): fvecs,
    /// ivecs, bvecs, fbin, u8bin, npy, npz, hdf5, txt, csv, tsv or parquet.
    #[arg(long, global = true, value_name = "FMT", value_parser = parse_format)]
    pub format: Option<voisin_io::Format>,

    /// Whether the first line of a .csv or .tsv input is a header. auto: when a field of it is
    /// not a number, or when it is the column numbers 0,1,...,d-1 (as pandas writes) above
    /// values written with a decimal point or an exponent (above whole numbers only it is
    /// refused as ambiguous); otherwise it is data.
    #[arg(long, global = true, value_name = "H", value_enum, default_value_t = HeaderChoice::Auto)]
    pub header: HeaderChoice,
}

/// `--header`: how the first line of delimited text is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum HeaderChoice {
    /// A header when it is not numbers (or is pandas' column numbers above decimal data).
    #[default]
    Auto,
    /// Always a header.
    Yes,
    /// Always data.
    No,
}

impl From<HeaderChoice> for voisin_io::Header {
    fn from(h: HeaderChoice) -> Self {
        match h {
            HeaderChoice::Auto => voisin_io::Header::Auto,
            HeaderChoice::Yes => voisin_io::Header::Yes,
            HeaderChoice::No => voisin_io::Header::No,
        }
    }
}

/// How distances are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DistanceType {
    /// float32, the values the engines report (rounded from the exact ones).
    #[default]
    F32,
    /// float64: the exact distances, recomputed for the results (.npz, .csr.npz, .npy, .tsv).
    F64,
}

/// Which items at the k-th distance a row holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Ties {
    /// Exactly k per row: of the items tied at the k-th distance, those of smaller index.
    #[default]
    First,
    /// Every item at the k-th distance as well: rows of their own length (at least k), written
    /// as a range result is (.npz and .npy with offsets, .csr.npz, .tsv, .ivecs rows of their
    /// own length).
    All,
}

/// What `--allow-nan` does with NaN and infinite values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NanPolicy {
    /// Replace them by 0.
    Zero,
}

/// `--device`: auto, cpu or cuda, parsed into the engine factory's one device type.
fn device_arg() -> impl TypedValueParser<Value = Device> {
    PossibleValuesParser::new([
        PossibleValue::new("auto").help("A GPU when one is usable, else the CPU"),
        PossibleValue::new("cpu"),
        PossibleValue::new("cuda"),
    ])
    .map(|text| text.parse::<Device>().unwrap_or_default())
}

/// Options shared by knn, graph and range.
#[derive(Debug, Args)]
pub struct RunOpts {
    /// Distance: euclidean, sqeuclidean, cosine, correlation, inner_product, cityblock,
    /// chebyshev, minkowski:P, levenshtein (default: what an HDF5 input declares in its
    /// 'distance' attribute, else levenshtein for .txt, else euclidean).
    #[arg(long, value_name = "M", value_parser = parse_metric)]
    pub metric: Option<Metric>,

    /// Where the work runs.
    #[arg(long, default_value = "auto", value_parser = device_arg())]
    pub device: Device,

    /// GPU selection kernel: auto, block or radix (heap and quick: benchmark builds only; the CPU
    /// ignores it).
    #[arg(long, value_name = "S", default_value = "auto", value_parser = parse_select, help_heading = "GPU options")]
    pub select: voisin_cuda::Select,

    /// GPU distance arithmetic: auto (the fastest whose error bound proves the answer for the
    /// data: fp16/bf16 tensor cores on f16/bf16 data, int8 tensor cores on u8 data under
    /// euclidean and sqeuclidean; on other data tf32 where a pilot finds its bound proves
    /// cheaply, for a graph fp16x3 where tf32 does not and it does, fp32 otherwise), fp32,
    /// tf32, fp16x3 (each f32 value as two f16 halves, three f16 products: near fp32's bound on
    /// the graph's fused tile pairs), fp16 or bf16 (f16/bf16 data only), int8 (u8 data only).
    /// Results stay exact in every mode (a wider error bound and exact re-ranking); --stats
    /// says which ran. The CPU ignores it.
    #[arg(long, value_name = "P", default_value = "auto", value_parser = parse_precision, help_heading = "GPU options")]
    pub precision: voisin_cuda::Precision,
    /// GPUs to use: all, a count N (the first N), or ordinals such as 0,2 (default: GPU 0).
    #[arg(long, value_name = "G", value_parser = parse_gpus, help_heading = "GPU options")]
    pub gpus: Option<GpuList>,

    /// Output file (.tsv, .npz, .csr.npz, .npy or .ivecs; the README describes each); TSV on
    /// standard output without it or with "-".
    #[arg(long, value_name = "F")]
    pub out: Option<PathBuf>,

    /// Distances written as f32 or as exact f64 values.
    #[arg(long, value_enum, value_name = "T", default_value_t = DistanceType::F32)]
    pub distances: DistanceType,

    /// Engine: auto, brute, or an index built for this run on the CPU (lc, sss, cover, or kd for
    /// vectors under euclidean/cityblock/chebyshev/minkowski); auto indexes strings and
    /// low-dimensional vectors (--stats says what it chose and why).
    #[arg(long, value_name = "E", default_value = "auto", value_parser = parse_engine)]
    pub engine: EngineChoice,
}

/// Which GPUs `--gpus` names (the factory's own list).
pub use voisin_engines::Gpus as GpuList;

fn parse_gpus(text: &str) -> Result<GpuList, String> {
    text.parse()
}

/// The two sets that knn and range compare.
#[derive(Debug, Args)]
pub struct BaseAndQueries {
    /// Base set to search.
    #[arg(long, value_name = "B")]
    pub base: PathBuf,
    /// Queries.
    #[arg(long, value_name = "Q")]
    pub query: PathBuf,
}

#[derive(Debug, Args)]
pub struct KnnArgs {
    #[command(flatten)]
    pub sets: BaseAndQueries,
    /// Neighbours per query.
    #[arg(short = 'k', value_name = "K", allow_negative_numbers = true)]
    pub k: usize,
    /// Items tied at the k-th distance: first (exactly k, the smaller indices) or all.
    #[arg(long, value_enum, value_name = "T", default_value_t = Ties::First)]
    pub ties: Ties,
    #[command(flatten)]
    pub run: RunOpts,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    /// Set whose k-NN graph to build.
    #[arg(long, value_name = "X")]
    pub input: PathBuf,
    /// Neighbours per item (the item itself excluded, unless --include-self).
    #[arg(short = 'k', value_name = "K", allow_negative_numbers = true)]
    pub k: usize,
    /// Each row starts with the item itself at distance 0 and holds k entries in all (UMAP's
    /// precomputed_knn and scikit-learn's KNeighborsTransformer convention).
    #[arg(long, conflicts_with = "pairs")]
    pub include_self: bool,
    /// Each unordered pair {i, j} of the graph once (row min(i, j)), as a range-style result.
    #[arg(long)]
    pub pairs: bool,
    /// Items tied at the k-th distance: first (exactly k, the smaller indices) or all.
    #[arg(long, value_enum, value_name = "T", default_value_t = Ties::First)]
    pub ties: Ties,
    #[command(flatten)]
    pub run: RunOpts,
    /// Keep finished rows in DIR as the build goes (CPU or GPU engine), so that a killed build
    /// can be continued with --resume, on any device. DIR must be new or empty unless --resume
    /// is given.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// Continue the build saved in --checkpoint DIR (starts afresh when DIR is empty).
    #[arg(long, requires = "checkpoint")]
    pub resume: bool,
    /// Rows per checkpointed pass (default: 1/16 of the rows); for tests.
    #[arg(long, value_name = "N", requires = "checkpoint", hide = true)]
    pub checkpoint_rows: Option<usize>,
    /// Stop with an error after saving N passes, as a kill would; for tests of --resume.
    #[arg(long, value_name = "N", requires = "checkpoint", hide = true)]
    pub stop_after_passes: Option<usize>,
}

#[derive(Debug, Args)]
pub struct RangeArgs {
    #[command(flatten)]
    pub sets: BaseAndQueries,
    /// Radius, in the metric's own unit (a minimum dot product for inner_product).
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    pub radius: f64,
    /// Self-join (--query the same set as --base: the same file and array; the train and test
    /// of one .hdf5 or .npz file are two sets): each unordered pair {i, j}, i != j, once.
    #[arg(long)]
    pub pairs: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

fn parse_metric(text: &str) -> Result<Metric, String> {
    text.parse::<Metric>().map_err(|e| e.to_string())
}

fn parse_format(text: &str) -> Result<voisin_io::Format, String> {
    voisin_io::Format::from_name(text).ok_or_else(|| {
        format!("unknown format '{text}' (fvecs ivecs bvecs fbin u8bin npy npz hdf5 txt csv tsv parquet)")
    })
}

fn parse_engine(text: &str) -> Result<EngineChoice, String> {
    text.parse().map_err(|e: voisin::Error| e.to_string())
}

fn parse_select(text: &str) -> Result<voisin_cuda::Select, String> {
    let s: voisin_cuda::Select = text.parse().map_err(|e: voisin::Error| e.to_string())?;
    if s.built() {
        Ok(s)
    } else {
        Err(s.not_built().to_string())
    }
}

fn parse_precision(text: &str) -> Result<voisin_cuda::Precision, String> {
    text.parse().map_err(|e: voisin::Error| e.to_string())
}

/// Most worker threads `--threads` takes: far more than any machine has cores, few enough that
/// starting them never stalls a run (100 000 threads on 2 cores never finished).
pub const MAX_THREADS: usize = 1024;

fn parse_threads(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("--threads takes a whole number, not '{text}'"))?;
    match n {
        0 => Err("--threads must be at least 1".into()),
        n if n > MAX_THREADS => Err(format!("--threads {n} is more than {MAX_THREADS}")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn gpu_lists_parse() {
        assert_eq!(parse_gpus("all"), Ok(GpuList::All));
        assert_eq!(parse_gpus("2"), Ok(GpuList::Count(2)));
        assert_eq!(parse_gpus("0,2"), Ok(GpuList::Ordinals(vec![0, 2])));
        assert_eq!(parse_gpus("1,1"), Ok(GpuList::Ordinals(vec![1, 1])));
        for bad in ["0", "", "two", "0,,1", "-1", "1,x"] {
            assert!(parse_gpus(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn declaration_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        let a = Cli::try_parse_from([
            "voisin", "--stats", "graph", "--input", "x.fvecs", "-k", "3",
        ])
        .unwrap();
        let b = Cli::try_parse_from([
            "voisin", "graph", "--input", "x.fvecs", "-k", "3", "--stats",
        ])
        .unwrap();
        assert!(a.global.stats && b.global.stats);
    }

    #[test]
    fn index_query_takes_k_or_radius_not_both() {
        let base = [
            "voisin", "index", "query", "--index", "i.vidx", "--query", "q.txt",
        ];
        let with = |extra: &[&'static str]| {
            Cli::try_parse_from(base.iter().chain(extra).copied().collect::<Vec<_>>())
        };
        assert!(with(&[]).is_err());
        assert!(with(&["-k", "3", "--radius", "1"]).is_err());
        match with(&["--radius", "1.5"]).unwrap().command {
            Command::Index(IndexCommand::Query(q)) => {
                assert_eq!((q.k, q.radius), (None, Some(1.5)))
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn negative_radius_reaches_the_checks() {
        let cli = Cli::try_parse_from([
            "voisin", "range", "--base", "b.fvecs", "--query", "q.fvecs", "--radius", "-1",
        ])
        .unwrap();
        match cli.command {
            Command::Range(r) => {
                assert_eq!(r.radius, -1.0);
                assert_eq!(r.sets.query, PathBuf::from("q.fvecs"));
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
