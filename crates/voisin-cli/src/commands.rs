//! knn, graph and range: the common flow from arguments to written results. Each step that can
//! fail on user input runs before the expensive ones: parameters, output path, device, inputs,
//! then the engine, then the write. The engine is brute force through the `Engine` trait or, by
//! `--engine` (the engine factory decides for `auto`), a metric index built for the run through
//! the index face (`IndexEngine`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use voisin::cpu::checkpoint::CheckpointOptions;
use voisin::engine::check_k;
use voisin::{Dataset, Engine, Metric};
use voisin_engines::RunShape;
use voisin_index::auto::{self, Decision};
use voisin_index::Params;
use voisin_io::{Given, Input, Role, RunFiles};

use crate::args::{DistanceType, GlobalOpts, GraphArgs, KnnArgs, RangeArgs, RunOpts, Ties};
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
        ties: a.ties == Ties::All,
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
        ties: a.ties == Ties::All,
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

/// What answers a task over its base: k-NN lists for any queries, the base's own graph, and
/// the range search of the task's queries.
struct Source<'a> {
    knn: &'a voisin::ties::KnnLists<'a>,
    graph: &'a voisin::ties::GraphLists<'a>,
    range: &'a dyn Fn(f64) -> voisin::Result<voisin::RangeResult>,
}

enum Task {
    Knn {
        base: PathBuf,
        query: PathBuf,
        k: usize,
        /// Every item at the k-th distance too (`--ties all`): a range-style answer.
        ties: bool,
    },
    Graph {
        input: PathBuf,
        /// Entries per row as asked; with `include_self` the engine finds `k - 1` others.
        k: usize,
        include_self: bool,
        pairs: bool,
        ties: bool,
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
                self.range_style(),
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

    /// Whether the answer is range-style: a range search, or k-NN lists with every tie.
    fn range_style(&self) -> bool {
        matches!(
            self,
            Task::Range { .. } | Task::Knn { ties: true, .. } | Task::Graph { ties: true, .. }
        )
    }

    /// The task's answer from `source`, the engine's or an index's answers over the base:
    /// k-NN lists of exactly k, or with `--ties all` every item tied at the k-th distance too
    /// (`voisin::ties`, from the same source's lists).
    fn answer(
        &self,
        base: &Dataset,
        queries: &Dataset,
        metric: &Metric,
        source: Source<'_>,
    ) -> voisin::Result<Answer> {
        match self {
            Task::Knn { k, ties: true, .. } => {
                voisin::ties::knn(base, queries, *k, metric, source.knn).map(Answer::Range)
            }
            Task::Knn { k, .. } => (source.knn)(queries, *k).map(Answer::Knn),
            Task::Graph { ties: true, .. } => {
                let k = self.engine_k();
                voisin::ties::graph(base, k, metric, source.graph, source.knn).map(Answer::Range)
            }
            Task::Graph { .. } => (source.graph)(self.engine_k()).map(Answer::Knn),
            Task::Range { radius, .. } => (source.range)(*radius).map(Answer::Range),
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
        ..EngineConfig::default()
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
    let inputs = Run {
        task: &task,
        base: &base,
        queries,
        metric: &metric,
    };
    let answer = match decision.engine {
        auto::Engine::Index(kind) => inputs.indexed(kind, &config).map(|(answer, built)| {
            build_time = Some(built);
            answer
        }),
        auto::Engine::Brute => inputs.brute(engine),
    };
    progress.finish();
    let answer = answer.map_err(|e| CliError::core(e, None))?;
    let answer = match answer {
        a if matches!(
            task,
            Task::Graph {
                include_self: true,
                ..
            }
        ) =>
        {
            a.include_self(&base, &metric)
        }
        a if task.pairs() => Answer::Range(a.pairs()),
        a => a,
    };
    let engine_time = t.elapsed();

    let t = Instant::now();
    let with_self = matches!(
        task,
        Task::Graph {
            include_self: true,
            ..
        }
    );
    let exact = (run.distances == DistanceType::F64)
        .then(|| answer.exact((&base, queries), &metric, with_self));
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

/// One run's task and inputs, as the engines take them.
struct Run<'a> {
    task: &'a Task,
    base: &'a Dataset,
    queries: &'a Dataset,
    metric: &'a Metric,
}

impl Run<'_> {
    /// The answer of brute force on `engine`.
    fn brute(&self, engine: &dyn Engine) -> voisin::Result<Answer> {
        let (base, queries, metric) = (self.base, self.queries, self.metric);
        let source = Source {
            knn: &|q, k| engine.knn(base, q, k, metric),
            graph: &|k| match self.task.checkpoint() {
                Some(c) => engine.graph_checkpointed(base, k, metric, c),
                None => engine.graph(base, k, metric),
            },
            range: &|r| engine.range(base, queries, r, metric),
        };
        self.task.answer(base, queries, metric, source)
    }

    /// The answer of a metric index of `kind` built for this run through the factory's index
    /// engine ([`voisin_engines::run_indexes`]), with the build's time and distance evaluations.
    fn indexed(
        &self,
        kind: voisin_index::Kind,
        config: &EngineConfig,
    ) -> voisin::Result<(Answer, (Duration, u64))> {
        let indexes = voisin_engines::run_indexes(config)?;
        let t = Instant::now();
        let index = indexes.build(
            self.base,
            self.metric.clone(),
            kind,
            &Params::default(),
            &|_| {},
        )?;
        let built = (t.elapsed(), index.build_evals());
        let source = Source {
            knn: &|q, k| indexes.knn(&index, q, k).map(|s| s.result),
            graph: &|k| indexes.graph(&index, self.base, k),
            range: &|r| indexes.range(&index, self.queries, r).map(|s| s.result),
        };
        let answer = self
            .task
            .answer(self.base, self.queries, self.metric, source)?;
        Ok((answer, built))
    }
}

/// A fixed index runs on the CPU, without checkpoints, under a true metric: checked (by the
/// engine factory) before any input is read.
fn check_engine(run: &RunOpts, task: &Task, metric: &Metric) -> Result<(), CliError> {
    voisin_engines::check_engine(run.device, run.engine, metric, task.checkpoint().is_some())
        .map_err(|e| CliError::core(e, None))
}

/// Brute force or an index (`--engine`), as the engine factory decides for the device.
fn choose_engine(
    run: &RunOpts,
    task: &Task,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Result<Decision, CliError> {
    let shape = RunShape {
        queries: queries.len(),
        range: matches!(task, Task::Range { .. }),
        checkpointed: task.checkpoint().is_some(),
    };
    voisin_engines::choose_engine(run.device, run.engine, base, metric, shape)
        .map_err(|e| CliError::core(e, None))
}
