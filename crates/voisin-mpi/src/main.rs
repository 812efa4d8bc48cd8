//! The `voisin-mpi` command: `graph` and `knn` over the ranks of an MPI job, e.g.
//! `mpirun -np 8 voisin-mpi graph --input data.fbin -k 10 --out graph.ivecs`.
//!
//! Every rank parses the same arguments and reads the inputs from the same paths (a shared
//! filesystem on a cluster); rank 0 alone writes the result and prints errors (a rank whose own
//! step failed prints its own line, naming itself). Output files and
//! row order are those of `voisin graph` / `voisin knn`. Exit codes: 0 success, 2 bad input or
//! usage, 1 internal failure; every rank exits with the same code.
//!
//! Built without the `mpi` feature the command runs as a single process (rank 0 of 1).
//! `--device cuda` (feature `cuda`) gives each rank one GPU: rank r of a node takes GPU
//! r mod (GPUs of the node). `knn --engine lc|sss|cover|kd|auto` searches each rank's shard
//! through a metric index built over it by the engine factory's index engine (the seed's
//! 1-Stage scheme; on GPU ranks, the rank's GPU); `brute` (the default) is brute force.

use std::path::{Path, PathBuf};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use voisin::cpu::checkpoint::CheckpointOptions;
use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, KnnResult, Metric};
use voisin_engines::Device;
use voisin_index::auto::{self, EngineChoice};
use voisin_index::IndexEngine;
use voisin_io::{Input, ReadOptions, Role};
use voisin_mpi::comm::{Comm, Failed};
use voisin_mpi::knn::Searcher;

#[derive(Parser)]
#[command(
    name = "voisin-mpi",
    version,
    about = "Exact k-NN graphs and k-NN search over MPI ranks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The k nearest other items of every item of one set.
    Graph {
        /// Input set, read by every rank from this path.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// Keep finished row blocks in this directory (shared by every rank), so that a
        /// killed build can continue with --resume.
        #[arg(long, value_name = "DIR")]
        checkpoint: Option<PathBuf>,
        /// Continue the build saved in --checkpoint DIR (any rank count).
        #[arg(long, requires = "checkpoint")]
        resume: bool,
        /// Rows per checkpointed pass with --device cuda (CPU ranks choose their own blocks);
        /// for tests.
        #[arg(long, value_name = "N", requires = "checkpoint", hide = true)]
        checkpoint_rows: Option<usize>,
        /// Stop with an error once a rank has saved N passes, as a kill would; for tests.
        #[arg(long, value_name = "N", requires = "checkpoint", hide = true)]
        stop_after_passes: Option<usize>,
        #[command(flatten)]
        run: RunOpts,
    },
    /// The k nearest base items of every query.
    Knn {
        /// Base set, read by every rank from this path.
        #[arg(long, value_name = "FILE")]
        base: PathBuf,
        /// Query set, read by every rank from this path.
        #[arg(long, value_name = "FILE")]
        query: PathBuf,
        /// Engine of each rank's shard: brute force, or a metric index built over the shard
        /// (lc, sss, cover, or kd for vectors under euclidean/cityblock/chebyshev/minkowski);
        /// auto decides per shard.
        #[arg(long, value_name = "E", default_value = "brute", value_parser = parse_engine)]
        engine: EngineChoice,
        #[command(flatten)]
        run: RunOpts,
    },
}

#[derive(Args)]
struct RunOpts {
    /// Neighbours per item.
    #[arg(short, long)]
    k: usize,
    /// Metric (default: levenshtein for .txt inputs, euclidean otherwise).
    #[arg(long, value_name = "M", value_parser = parse_metric)]
    metric: Option<Metric>,
    /// Result file: .tsv, .ivecs (+ .fvecs distances) or .npy, written by rank 0.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Worker threads per rank (default: every core the rank sees).
    #[arg(long)]
    threads: Option<usize>,
    /// What each rank computes on: its cores, or one GPU (needs the `cuda` feature).
    #[arg(long, default_value = "cpu", value_parser = device_arg())]
    device: Device,
}

/// `--device`: cpu or cuda, parsed into the engine factory's one device type.
fn device_arg() -> impl TypedValueParser<Value = Device> {
    PossibleValuesParser::new(["cpu", "cuda"])
        .map(|text| text.parse::<Device>().unwrap_or_default())
}

fn parse_engine(text: &str) -> Result<EngineChoice, String> {
    text.parse::<EngineChoice>().map_err(|e| e.to_string())
}

/// The engine of this rank.
enum RankEngine {
    Cpu(CpuEngine),
    #[cfg(feature = "cuda")]
    Gpu(Box<voisin_cuda::CudaEngine>),
}

impl RankEngine {
    fn as_engine(&self) -> &dyn Engine {
        match self {
            RankEngine::Cpu(e) => e,
            #[cfg(feature = "cuda")]
            RankEngine::Gpu(e) => e.as_ref(),
        }
    }
}

fn parse_metric(text: &str) -> Result<Metric, String> {
    text.parse::<Metric>().map_err(|e| e.to_string())
}

/// A failure: its one-line message and exit code.
struct Failure(String, i32);

fn bad(msg: impl Into<String>) -> Failure {
    Failure(msg.into(), 2)
}

fn main() {
    #[cfg(feature = "mpi")]
    let code = {
        let Some(universe) = mpi::initialize() else {
            eprintln!("voisin-mpi: error: MPI could not be initialised");
            std::process::exit(1);
        };
        let comm = voisin_mpi::comm::Mpi {
            world: universe.world(),
        };
        let code = run(&comm);
        drop(comm);
        // MPI_Finalize runs here, before the process exits.
        drop(universe);
        code
    };
    #[cfg(not(feature = "mpi"))]
    let code = run(&voisin_mpi::comm::Single);
    std::process::exit(code);
}

fn run(comm: &dyn Comm) -> i32 {
    let root = comm.rank() == 0;
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if root {
                let _ = e.print();
            }
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match execute(comm, cli) {
        Ok(()) => 0,
        Err(Failure(msg, code)) => {
            if root {
                eprintln!("voisin-mpi: error: {msg}");
            }
            code
        }
    }
}

fn execute(comm: &dyn Comm, cli: Cli) -> Result<(), Failure> {
    let (run, named, checkpoint) = match &cli.command {
        Command::Graph {
            input,
            run,
            checkpoint,
            ..
        } => (
            run,
            vec![("--input", input.as_path())],
            checkpoint.as_deref(),
        ),
        Command::Knn {
            base, query, run, ..
        } => (
            run,
            vec![("--base", base.as_path()), ("--query", query.as_path())],
            None,
        ),
    };
    voisin::engine::check_k(run.k).map_err(|e| bad(e.to_string()))?;
    check_out(&run.out)?;
    // Every rank looks at the files for itself and all agree, as for reading the inputs below.
    let prelude = files_and_metric(run, &named, checkpoint);
    let ok = comm.all_ok(prelude.is_ok());
    let (inputs, metric) = match prelude {
        Ok(p) if ok => p,
        Ok(_) => return Err(bad("another rank could not use the files of this run")),
        Err(f) => return Err(f),
    };
    let device =
        voisin_engines::rank_device(run.device, &metric).map_err(|e| bad(e.to_string()))?;
    if let Command::Knn { engine, .. } = &cli.command {
        // A fixed index takes a true metric (GPU ranks build theirs on their GPU).
        voisin_engines::check_engine(Device::Cpu, *engine, &metric, false)
            .map_err(|e| bad(e.to_string()))?;
    }
    let engine = open_engine(comm, run, device)?;
    // Every rank reads for itself; agreeing afterwards keeps a rank that failed (say, a path
    // missing on its node) from leaving the others waiting.
    let loaded = load_all(&inputs, &metric);
    let ok = comm.all_ok(loaded.is_ok());
    let sets = match loaded {
        Ok(s) if ok => s,
        Ok(_) => return Err(bad("another rank could not read the inputs")),
        Err(f) => return Err(f),
    };
    let result = match &cli.command {
        Command::Graph {
            checkpoint,
            resume,
            checkpoint_rows,
            stop_after_passes,
            ..
        } => {
            let checkpoint = checkpoint.as_ref().map(|dir| CheckpointOptions {
                pass_rows: *checkpoint_rows,
                stop_after: *stop_after_passes,
                ..CheckpointOptions::new(dir.clone(), *resume)
            });
            match &engine {
                RankEngine::Cpu(cpu) => {
                    voisin_mpi::graph::run(comm, cpu, &sets[0], run.k, &metric, checkpoint.as_ref())
                }
                #[cfg(feature = "cuda")]
                RankEngine::Gpu(gpu) => {
                    voisin_mpi::gpu::graph(comm, gpu, &sets[0], run.k, &metric, checkpoint.as_ref())
                }
            }
        }
        Command::Knn { engine: choice, .. } => {
            knn(comm, &engine, *choice, device, run, &sets, &metric)
        }
    }
    .map_err(|f| failed(comm, f))?;
    match result {
        Some(res) => write(&run.out, &res),
        None => Ok(()),
    }
}

/// The distributed k-NN search: brute force on this rank's `engine`, or the metric index the
/// factory chooses for `choice` (auto: from the whole base, the same on every rank) built over
/// each rank's shard by the rank's index engine on `device`.
fn knn(
    comm: &dyn Comm,
    engine: &RankEngine,
    choice: EngineChoice,
    device: Device,
    run: &RunOpts,
    sets: &[Dataset],
    metric: &Metric,
) -> Result<Option<KnnResult>, Failed> {
    let (base, queries) = (&sets[0], &sets[1]);
    let shape = voisin_engines::RunShape {
        queries: queries.len(),
        range: false,
        checkpointed: false,
    };
    let indexes =
        voisin_engines::choose_engine(device, choice, base, metric, shape).and_then(|decision| {
            match decision.engine {
                auto::Engine::Index(kind) => {
                    rank_indexes(comm, run, device).map(|i| Some((i, kind)))
                }
                auto::Engine::Brute => Ok(None),
            }
        });
    let indexes = voisin_mpi::comm::agree(comm, indexes)?;
    let searcher = match &indexes {
        Some((i, kind)) => Searcher::Index(i.as_ref(), *kind),
        None => Searcher::Brute(engine.as_engine()),
    };
    voisin_mpi::knn::run(comm, searcher, base, queries, run.k, metric)
}

/// This rank's index engine: its cores, or its GPU (which opens at the first build).
fn rank_indexes(
    comm: &dyn Comm,
    run: &RunOpts,
    device: Device,
) -> voisin::Result<Box<dyn IndexEngine>> {
    let config = voisin_engines::EngineConfig {
        threads: run.threads,
        ..Default::default()
    };
    #[cfg(feature = "cuda")]
    let device = match device {
        Device::Cuda => Device::CudaAt(voisin_mpi::gpu::ordinal(comm.rank())?),
        other => other,
    };
    #[cfg(not(feature = "cuda"))]
    let _ = comm;
    voisin_engines::open_indexes(device, &config)
}

/// This rank's engine; every rank agrees, so a rank whose GPU does not open fails them all.
fn open_engine(comm: &dyn Comm, run: &RunOpts, device: Device) -> Result<RankEngine, Failure> {
    // The factory's engines, each rank's own: its cores, or one GPU.
    let config = voisin_engines::EngineConfig {
        threads: run.threads,
        ..Default::default()
    };
    let opened = match device {
        #[cfg(feature = "cuda")]
        Device::Cuda => {
            voisin_mpi::gpu::open(comm.rank(), &config).map(|e| RankEngine::Gpu(Box::new(e)))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda => Err(voisin::Error::device(
            "--device cuda: this voisin-mpi was built without the `cuda` feature",
        )),
        _ => voisin_engines::cpu(&config).map(RankEngine::Cpu),
    };
    voisin_mpi::comm::agree(comm, opened).map_err(|f| failed(comm, f))
}

/// A failure of a distributed phase: this rank's own error is printed here (rank 0 prints as
/// usual; another rank names itself, as rank 0 cannot see its error); a rank that only learnt
/// of another's failure leaves the message to it.
fn failed(comm: &dyn Comm, f: Failed) -> Failure {
    match f.error {
        Some(e) if comm.rank() == 0 => Failure(e.to_string(), f.code),
        Some(e) => {
            eprintln!("voisin-mpi: error (rank {}): {e}", comm.rank());
            Failure(String::new(), f.code)
        }
        None => Failure(
            "another rank failed; its error is on its standard error".into(),
            f.code,
        ),
    }
}

fn write(out: &Path, res: &KnnResult) -> Result<(), Failure> {
    voisin_io::write_knn(out, res).map_err(io_failure)
}

/// Refuses an output name whose layout is unknown before any work is done.
fn check_out(out: &Path) -> Result<(), Failure> {
    let ext = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("tsv" | "ivecs" | "npy") => Ok(()),
        _ => Err(bad(format!(
            "{}: unknown output format (use .tsv, .ivecs or .npy)",
            out.display()
        ))),
    }
}

/// The same checks as `voisin`'s, before any work: no output is an input or lies in the
/// checkpoint folder, the output can be written, standard input is read once; then the inputs
/// opened and the metric they and `--metric` give.
fn files_and_metric(
    run: &RunOpts,
    named: &[(&str, &Path)],
    checkpoint: Option<&Path>,
) -> Result<(Vec<Input>, Metric), Failure> {
    voisin_io::RunFiles {
        inputs: named.to_vec(),
        output: Some(voisin_io::Written::Result {
            path: &run.out,
            range: false,
            exact: false,
        }),
        checkpoint,
    }
    .check()
    .map_err(io_failure)?;
    let inputs = named
        .iter()
        .map(|&(_, p)| Input::open(p, None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_failure)?;
    let given = run.metric.as_ref().map(voisin_io::Given::Flag);
    let metric =
        voisin_io::choose_metric(given, &inputs.iter().collect::<Vec<_>>()).map_err(io_failure)?;
    Ok((inputs, metric))
}

/// A failure of voisin-io: its line, exit code 2 for the user's fault, 1 for the machine's.
fn io_failure(e: voisin_io::IoError) -> Failure {
    let code = if e.is_user_error() { 2 } else { 1 };
    Failure(e.to_string(), code)
}

/// Reads and checks the inputs: first the base (or graph input), then the queries.
fn load_all(inputs: &[Input], metric: &Metric) -> Result<Vec<Dataset>, Failure> {
    let mut sets = Vec::new();
    for (n, input) in inputs.iter().enumerate() {
        let role = if n == 0 { Role::Base } else { Role::Query };
        sets.push(load(input, role, metric)?);
    }
    if let [base, queries] = &sets[..] {
        voisin::engine::check_pair(base, queries, metric)
            .map_err(|e| bad(format!("{}: {e}", inputs[1].path().display())))?;
    }
    Ok(sets)
}

fn load(input: &Input, role: Role, metric: &Metric) -> Result<Dataset, Failure> {
    let opts = ReadOptions {
        role,
        ..ReadOptions::default()
    };
    let path = input.path();
    let data = input
        .read(&opts)
        .and_then(|d| voisin_io::check_loaded(path, d, metric))
        .map_err(io_failure)?;
    if let Some(v) = data.as_vectors() {
        if let Some((row, col)) = v.find_non_finite() {
            return Err(bad(format!(
                "{}: {}",
                path.display(),
                v.non_finite_line(row, col)
            )));
        }
    }
    Ok(data)
}
