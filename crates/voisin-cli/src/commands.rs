//! knn, graph and range: the common flow from arguments to written results. Each step that can
//! fail on user input runs before the expensive ones: parameters, output path, device, inputs,
//! then the engine, then the write. The engine is brute force through the `Engine` trait or, by
//! `--engine` (voisin-index's `auto` decides for `auto`), a metric index built for the run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use voisin::cpu::checkpoint::CheckpointOptions;
use voisin::engine::check_k;
use voisin::{Dataset, Engine, Metric};
use voisin_index::auto::{self, Decision, EngineChoice, Workload};
use voisin_index::{DatasetIndex, Params};
use voisin_io::{Given, Input, Role, RunFiles};

use crate::args::{DeviceChoice, DistanceType, GlobalOpts, GraphArgs, KnnArgs, RangeArgs, RunOpts};
use crate::device::{self, EngineConfig};
use crate::error::CliError;
use crate::load;
use crate::output::{Answer, Target};
use crate::progress::Progress;
use crate::stats::{secs, RunStats, Times};

/// `voisin knn`.
pub fn knn(a: KnnArgs, global: &GlobalOpts) -> Result<(), CliError> {
    let task = Task::Knn {
        base: a.sets.base,
        query: a.sets.query,
        k: a.k,
    };
    execute(task, &a.run, global)
}

/// `voisin graph`.
pub fn graph(a: GraphArgs, global: &GlobalOpts) -> Result<(), CliError> {
    let task = Task::Graph {
        input: a.input,
        k: a.k,
        include_self: a.include_self,
        pairs: a.pairs,
        checkpoint: a.checkpoint.map(|dir| CheckpointOptions {
            dir,
            resume: a.resume,
            pass_rows: a.checkpoint_rows,
            stop_after: a.stop_after_passes,
        }),
    };
    execute(task, &a.run, global)
}

/// `voisin range`.
pub fn range(a: RangeArgs, global: &GlobalOpts) -> Result<(), CliError> {
    let task = Task::Range {
        base: a.sets.base,
        query: a.sets.query,
        radius: a.radius,
        pairs: a.pairs,
    };
    execute(task, &a.run, global)
}

enum Task {
    Knn {
        base: PathBuf,
        query: PathBuf,
        k: usize,
    },
    Graph {
        input: PathBuf,
        /// Entries per row as asked; with `include_self` the engine finds `k - 1` others.
        k: usize,
        include_self: bool,
        pairs: bool,
        checkpoint: Option<CheckpointOptions>,
    },
    Range {
        base: PathBuf,
        query: PathBuf,
        radius: f64,
        pairs: bool,
    },
}

impl Task {
    fn name(&self) -> &'static str {
        match self {
            Task::Knn { .. } => "knn",
            Task::Graph { .. } => "graph",
            Task::Range { .. } => "range",
        }
    }

    fn base(&self) -> &Path {
        match self {
            Task::Knn { base, .. } | Task::Range { base, .. } => base,
            Task::Graph { input, .. } => input,
        }
    }

    fn query(&self) -> Option<&Path> {
        match self {
            Task::Knn { query, .. } | Task::Range { query, .. } => Some(query),
            Task::Graph { .. } => None,
        }
    }

    fn checkpoint(&self) -> Option<&CheckpointOptions> {
        match self {
            Task::Graph { checkpoint, .. } => checkpoint.as_ref(),
            _ => None,
        }
    }

    fn check(&self, metric: &Metric) -> Result<(), CliError> {
        match self {
            Task::Graph {
                k,
                include_self: true,
                ..
            } if *k < 2 => Err(voisin::Error::invalid(
                "--include-self needs -k 2 or more (k counts the item itself)",
            )),
            Task::Knn { k, .. } | Task::Graph { k, .. } => check_k(*k),
            Task::Range { radius, .. } => metric.check_radius(*radius),
        }
        .map_err(|e| CliError::core(e, None))?;
        if let Task::Range {
            base,
            query,
            pairs: true,
            ..
        } = self
        {
            voisin_io::check_one_set(base, query)?;
        }
        Ok(())
    }

    /// The inputs as the user named them, with the option that named each.
    fn named_inputs(&self) -> Vec<(&'static str, &Path)> {
        match self {
            Task::Knn { base, query, .. } | Task::Range { base, query, .. } => {
                vec![("--base", base), ("--query", query)]
            }
            Task::Graph { input, .. } => vec![("--input", input)],
        }
    }

    /// Every file of the run, for the checks before any work.
    fn files<'a>(&'a self, run: &'a RunOpts) -> RunFiles<'a> {
        RunFiles {
            inputs: self.named_inputs(),
            output: Target::written(
                run.out.as_deref(),
                matches!(self, Task::Range { .. }),
                run.distances == DistanceType::F64,
            ),
            checkpoint: self.checkpoint().map(|c| c.dir.as_path()),
        }
    }

    /// The k the engine is asked for.
    fn engine_k(&self) -> usize {
        match self {
            Task::Graph {
                k,
                include_self: true,
                ..
            } => k - 1,
            Task::Knn { k, .. } | Task::Graph { k, .. } => *k,
            Task::Range { .. } => 0,
        }
    }

    fn pairs(&self) -> bool {
        matches!(
            self,
            Task::Graph { pairs: true, .. } | Task::Range { pairs: true, .. }
        )
    }
}

/// Creates the checkpoint folder if needed, checks that files can be written in it, and holds its
/// lock for the run: a second run on the same folder is refused at once (exit 2) instead of
/// racing the first. voisin-mpi's ranks share a folder and do not take this lock.
fn lock_checkpoint(dir: &Path) -> Result<std::fs::File, CliError> {
    let io =
        |what: &str, e: &std::io::Error| CliError::from(voisin_io::IoError::from_io(dir, what, e));
    std::fs::create_dir_all(dir).map_err(|e| io("cannot use as a checkpoint folder", &e))?;
    let lock = voisin::commit::try_lock_folder(dir)
        .map_err(voisin_io::IoError::from)?
        .ok_or_else(|| {
            CliError::file(
                dir,
                "checkpoint folder is in use by another voisin run; wait for it to end",
            )
        })?;
    voisin::commit::TempFile::create_in(dir, "probe.tmp")
        .map_err(|e| io("cannot write in the checkpoint folder", &e))?;
    Ok(lock)
}

/// The inputs (standard input named at most once, and read now) and the metric they and
/// `--metric` give.
fn open_inputs(
    task: &Task,
    run: &RunOpts,
    global: &GlobalOpts,
) -> Result<(Input, Option<Input>, Metric), CliError> {
    voisin_io::stdin_once(&task.named_inputs())?;
    let base = Input::open(task.base(), global.format)?;
    let query = match task.query() {
        Some(q) => Some(Input::open(q, global.format)?),
        None => None,
    };
    let inputs: Vec<&Input> = std::iter::once(&base).chain(query.as_ref()).collect();
    let metric = voisin_io::choose_metric(run.metric.as_ref().map(Given::Flag), &inputs)?;
    Ok((base, query, metric))
}

fn execute(task: Task, run: &RunOpts, global: &GlobalOpts) -> Result<(), CliError> {
    let start = Instant::now();
    let (base_input, query_input, metric) = open_inputs(&task, run, global)?;
    task.check(&metric)?;
    check_engine(run, &task, &metric)?;
    let target = Target::prepare(&task.files(run))?;
    let _checkpoint_lock = match task.checkpoint() {
        Some(c) => Some(lock_checkpoint(&c.dir)?),
        None => None,
    };
    let progress = Progress::on_stderr();
    let config = EngineConfig {
        threads: global.threads,
        memory_budget: global.memory,
        progress: progress.callback(),
        cancel: None,
        select: run.select,
        precision: run.precision,
        gpus: run.gpus.clone(),
    };
    let engine = device::select(run.device, &config)?;
    let engine: &dyn Engine = engine.as_ref();

    let base = load::load(&base_input, Role::Base, &metric, global)?;
    let queries = match &query_input {
        Some(input) => Some(load::queries(input, &base, task.base(), &metric, global)?),
        None => None,
    };
    let queries: &Dataset = queries.as_ref().unwrap_or(&base);
    let load_time = start.elapsed();
    let decision = choose_engine(run, &task, &base, queries, &metric)?;

    let t = Instant::now();
    let mut build_time = None;
    let answer = match decision.engine {
        auto::Engine::Index(kind) => {
            let pool = device::thread_pool(global.threads)?;
            pool.install(|| {
                let tb = Instant::now();
                let index = DatasetIndex::build(&base, metric.clone(), kind, &Params::default())?;
                build_time = Some((tb.elapsed(), index.build_evals()));
                match &task {
                    Task::Knn { k, .. } => index.knn(queries, *k).map(Answer::Knn),
                    Task::Graph { .. } => index.graph(&base, task.engine_k()).map(Answer::Knn),
                    Task::Range { radius, .. } => index.range(queries, *radius).map(Answer::Range),
                }
            })
        }
        auto::Engine::Brute => match &task {
            Task::Knn { k, .. } => engine.knn(&base, queries, *k, &metric).map(Answer::Knn),
            Task::Graph {
                checkpoint: Some(c),
                ..
            } => engine
                .graph_checkpointed(&base, task.engine_k(), &metric, c)
                .map(Answer::Knn),
            Task::Graph { .. } => engine
                .graph(&base, task.engine_k(), &metric)
                .map(Answer::Knn),
            Task::Range { radius, .. } => engine
                .range(&base, queries, *radius, &metric)
                .map(Answer::Range),
        },
    };
    progress.finish();
    let answer = answer.map_err(|e| CliError::core(e, None))?;
    let answer = match answer {
        Answer::Knn(g)
            if matches!(
                task,
                Task::Graph {
                    include_self: true,
                    ..
                }
            ) =>
        {
            Answer::Knn(voisin::shape::include_self(g))
        }
        a if task.pairs() => Answer::Range(a.pairs()),
        a => a,
    };
    let engine_time = t.elapsed();

    let t = Instant::now();
    let exact = (run.distances == DistanceType::F64).then(|| answer.exact(&base, queries, &metric));
    let opts = voisin_io::WriteOptions {
        exact_distances: exact.as_deref(),
        columns: Some(base.len()),
    };
    target.write(&answer, &opts)?;
    let write_time = t.elapsed();

    if global.stats {
        let s = answer.stats();
        // Engines that do not split their time report none; then all of it was compute.
        let compute = if s.compute.is_zero() {
            engine_time.saturating_sub(s.select + s.transfer)
        } else {
            s.compute
        };
        let stats = RunStats {
            command: task.name(),
            metric: metric.name(),
            device: if s.device.is_empty() {
                engine.name()
            } else {
                s.device.clone()
            },
            arithmetic: (!s.arithmetic.is_empty()).then(|| s.arithmetic.clone()),
            n_base: base.len(),
            n_queries: queries.len(),
            dim: base.as_vectors().map(|v| v.dim()),
            k: match task {
                Task::Knn { k, .. } | Task::Graph { k, .. } => Some(k),
                Task::Range { .. } => None,
            },
            radius: match task {
                Task::Range { radius, .. } => Some(radius),
                _ => None,
            },
            time_s: Times {
                load: secs(load_time),
                transfer: secs(s.transfer),
                compute: secs(compute),
                select: secs(s.select),
                write: secs(write_time),
                total: secs(start.elapsed()),
            },
            distance_evals: s.distance_evals,
            exact_evals: s.exact_evals,
            throughput_qps: queries.len() as f64 / secs(engine_time.max(Duration::from_nanos(1))),
            results: answer.len(),
        };
        let mut line: serde_json::Value =
            serde_json::from_str(&stats.to_line()).unwrap_or_default();
        line["engine"] = decision.engine.to_string().into();
        line["engine_reason"] = decision.reason.into();
        if let Some(rho) = decision.intrinsic_dim.filter(|r| r.is_finite()) {
            line["intrinsic_dim"] = rho.into();
        }
        if let Some((time, evals)) = build_time {
            line["index_build_s"] = secs(time).into();
            line["index_build_evals"] = evals.into();
        }
        // A closed standard error must not turn a finished run into a failure.
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    Ok(())
}

/// A fixed index runs on the CPU, without checkpoints, under a true metric: checked before any
/// input is read.
fn check_engine(run: &RunOpts, task: &Task, metric: &Metric) -> Result<(), CliError> {
    let EngineChoice::Fixed(auto::Engine::Index(kind)) = run.engine else {
        return Ok(());
    };
    let clash = if run.device == DeviceChoice::Cuda {
        Some("--device cuda")
    } else if task.checkpoint().is_some() {
        Some("--checkpoint")
    } else {
        None
    };
    let e = match clash {
        Some(flag) => voisin::Error::invalid(format!(
            "--engine {kind} runs on the CPU without checkpoints and cannot go with {flag} \
             (use --engine brute or auto)"
        )),
        None => match voisin_index::space::check_metric(metric) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        },
    };
    Err(CliError::core(e, None))
}

/// Brute force or an index (`--engine`); checkpointed graphs are brute force.
fn choose_engine(
    run: &RunOpts,
    task: &Task,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Result<Decision, CliError> {
    if task.checkpoint().is_some() {
        return Ok(Decision {
            engine: auto::Engine::Brute,
            reason: "checkpointed graphs run brute force".into(),
            intrinsic_dim: None,
        });
    }
    let gpu = match run.device {
        DeviceChoice::Cuda => true,
        DeviceChoice::Auto => voisin_cuda::gpu_available(),
        DeviceChoice::Cpu => false,
    };
    let work = Workload {
        queries: queries.len(),
        gpu,
        range: matches!(task, Task::Range { .. }),
    };
    auto::decide(run.engine, base, metric, work, &Params::default())
        .map_err(|e| CliError::core(e, None))
}
