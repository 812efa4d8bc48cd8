//! `voisin index build` and `voisin index query`: metric-space indexes kept in files.
//!
//! This module owns the command flow only: checks first (parameters, output path, inputs), then
//! the build or the search, then the write. Structures, search and the file layout belong to the
//! voisin-index crate; reading data and writing results to voisin-io (through `load` and
//! `output`). Errors follow the CLI's rule: one line naming the file, exit 2 for bad input.

use std::io::Write;
use std::time::Instant;

use serde_json::json;
use voisin::engine::check_k;
use voisin::Error;
use voisin_engines::EngineConfig;
use voisin_index::{file, DatasetIndex, Kind, Params};
use voisin_io::{Given, Input, Role, RunFiles, Written};

use crate::args::{
    DeviceChoice, GlobalOpts, IndexBuildArgs, IndexCommand, IndexKindArg, IndexQueryArgs,
};
use crate::device::thread_pool;
use crate::error::CliError;
use crate::load;
use crate::output::{Answer, Target};
use crate::progress::Progress;
use crate::stats::{secs, RunStats, Times};

pub fn run(command: IndexCommand, global: &GlobalOpts) -> Result<(), CliError> {
    let pool = thread_pool(global.threads)?;
    pool.install(|| match command {
        IndexCommand::Build(a) => build(&a, global),
        IndexCommand::Query(a) => query(&a, global),
    })
}

fn kind(arg: IndexKindArg) -> Kind {
    match arg {
        IndexKindArg::Lc => Kind::Lc,
        IndexKindArg::Sss => Kind::Sss,
        IndexKindArg::Cover => Kind::Cover,
        IndexKindArg::Kd => Kind::Kd,
    }
}

fn build(a: &IndexBuildArgs, global: &GlobalOpts) -> Result<(), CliError> {
    let start = Instant::now();
    let input = Input::open(&a.input, global.format)?;
    let metric = voisin_io::choose_metric(a.metric.as_ref().map(Given::Flag), &[&input])?;
    voisin_index::space::check_metric(&metric).map_err(|e| CliError::core(e, None))?;
    let params = Params {
        cluster_size: a.cluster_size,
        alpha: a.alpha,
        max_pivots: a.max_pivots,
        base: a.radius_base,
    };
    params.check().map_err(|e| CliError::core(e, None))?;
    RunFiles {
        inputs: vec![("--input", &a.input)],
        output: Some(Written::File(&a.out)),
        checkpoint: None,
    }
    .check()?;
    let data = load::load(&input, Role::Base, &metric, global)?;
    let load_time = start.elapsed();

    let t = Instant::now();
    let kind = kind(a.kind);
    let progress = Progress::on_stderr();
    let bar = progress.callback();
    let n = data.len() as u64;
    let placed = |done: usize| {
        if let Some(bar) = &bar {
            bar(done as u64, n)
        }
    };
    let on_cpu = || {
        DatasetIndex::build_with_progress(&data, metric.clone(), kind, &params, &placed)
            .map(|i| (i, "cpu".to_string()))
    };
    let on_gpu = |engines: &[voisin_cuda::CudaEngine]| {
        let engine = &engines[0];
        voisin_cuda::index::build_with_progress(
            engine,
            &data,
            metric.clone(),
            kind,
            &params,
            &placed,
        )
        .map(|i| (i, engine.device_name()))
    };
    // Under auto, what the GPU does not build (k-d trees, SSS over strings, other metrics) or
    // would build no sooner than the CPU goes to the CPU.
    let gpu_builds = || voisin_cuda::index::builds(&data, &metric, kind, &params);
    let one_gpu = Gpus::default();
    let built = on_device(a.device, global, &one_gpu, gpu_builds, on_cpu, on_gpu);
    progress.finish();
    let (index, device) = built.map_err(|e| CliError::core(e, Some(&a.input)))?;
    let build_time = t.elapsed();
    // One line when a pilot of queries finds that the index scans most of the set.
    if let Ok(Some(share)) = voisin_index::pilot::evaluated_share(&index) {
        if let Some(w) = voisin_index::pilot::warning(share) {
            let _ = writeln!(std::io::stderr(), "voisin: {}: {w}", a.input.display());
        }
    }

    let t = Instant::now();
    let bytes = file::to_bytes(&index).map_err(|e| CliError::core(e, Some(&a.out)))?;
    voisin::commit::write_file(&a.out, &bytes).map_err(voisin_io::IoError::from)?;
    if global.stats {
        stats_line(json!({
            "command": "index build",
            "index": index.describe(),
            "n_items": index.len(),
            "time_s": {
                "load": load_time.as_secs_f64(),
                "build": build_time.as_secs_f64(),
                "write": t.elapsed().as_secs_f64(),
                "total": start.elapsed().as_secs_f64(),
            },
            "build_distance_evals": index.build_evals(),
            "device": device,
        }));
    }
    Ok(())
}

fn query(a: &IndexQueryArgs, global: &GlobalOpts) -> Result<(), CliError> {
    let start = Instant::now();
    if let Some(k) = a.k {
        check_k(k).map_err(|e| CliError::core(e, None))?;
    }
    if let Some(r) = a.radius.filter(|r| !(r.is_finite() && *r >= 0.0)) {
        let e = Error::invalid(format!("radius {r} must be a finite number >= 0"));
        return Err(CliError::core(e, None));
    }
    voisin_io::stdin_once(&[("--index", &a.index), ("--query", &a.query)])?;
    let target = Target::prepare(&RunFiles {
        inputs: vec![("--index", &a.index), ("--query", &a.query)],
        output: Target::written(a.out.as_deref(), a.radius.is_some(), false),
        checkpoint: None,
    })?;
    let index = file::load(&a.index).map_err(|e| {
        let msg = match e {
            Error::Io(io) => format!("cannot read the index: {io}"),
            other => other.to_string(),
        };
        CliError::file(&a.index, msg)
    })?;
    let input = Input::open(&a.query, global.format)?;
    voisin_io::choose_metric(Some(Given::Index(&a.index, index.metric())), &[&input])?;
    let queries = load::load(&input, Role::Query, index.metric(), global)?;
    let load_time = start.elapsed();

    let t = Instant::now();
    let on_cpu = || match (a.k, a.radius) {
        (Some(k), _) => index.knn(&queries, k).map(Answer::Knn),
        (None, Some(r)) => index.range(&queries, r).map(Answer::Range),
        (None, None) => unreachable!("clap requires -k or --radius"),
    };
    let on_gpu = |engines: &[voisin_cuda::CudaEngine]| match (a.k, a.radius) {
        (Some(k), _) => voisin_cuda::index::knn_on(engines, &index, &queries, k)
            .map(|(r, s)| (Answer::Knn(r), Some(s))),
        (None, Some(r)) => voisin_cuda::index::range_on(engines, &index, &queries, r)
            .map(|(r, s)| (Answer::Range(r), Some(s))),
        (None, None) => unreachable!("clap requires -k or --radius"),
    };
    // Under auto, what the GPU does not search (cover trees, strings, other metrics, sizes past
    // its limits) goes to the CPU. One engine per GPU listed in --gpus (1-Stage).
    let gpu_searches = || voisin_cuda::index::supports(&index, &queries);
    let gpus = Gpus {
        list: a.gpus.clone(),
        memory: a.gpu_memory,
    };
    let (answer, streamed) = on_device(
        a.device,
        global,
        &gpus,
        gpu_searches,
        || on_cpu().map(|r| (r, None)),
        on_gpu,
    )
    .map_err(|e| CliError::core(e, Some(&a.query)))?;
    let search_time = t.elapsed();

    let t = Instant::now();
    let opts = voisin_io::WriteOptions {
        columns: Some(index.len()),
        ..Default::default()
    };
    target.write(&answer, &opts)?;
    if global.stats {
        // The shared schema of knn, graph and range, then what only an index reports.
        let st = answer.stats();
        let evals = st.distance_evals;
        let per_query = evals as f64 / queries.len().max(1) as f64;
        let run = RunStats {
            command: "index query",
            metric: index.metric().name(),
            device: st.device.clone(),
            arithmetic: None,
            n_base: index.len(),
            n_queries: queries.len(),
            dim: queries.as_vectors().map(|v| v.dim()),
            k: a.k,
            radius: a.radius,
            time_s: Times {
                load: secs(load_time),
                compute: secs(search_time),
                write: secs(t.elapsed()),
                total: secs(start.elapsed()),
                ..Default::default()
            },
            distance_evals: evals,
            exact_evals: st.exact_evals,
            throughput_qps: queries.len() as f64 / search_time.as_secs_f64().max(1e-9),
            results: answer.len(),
        };
        let mut line: serde_json::Value = serde_json::from_str(&run.to_line()).unwrap_or_default();
        line["index"] = index.describe().into();
        line["evals_per_query"] = per_query.into();
        line["brute_force_evals_per_query"] = index.len().into();
        line["evals_fraction_of_brute_force"] = (per_query / index.len().max(1) as f64).into();
        if let Some(s) = streamed.filter(|s| s.superclusters > 0) {
            line["superclusters"] = s.superclusters.into();
            line["superclusters_copied"] = s.copied.into();
            line["copy_s"] = s.copy_s.into();
            line["copy_overlap_share"] = s.overlap_share().into();
            line["stage_s"] = s.stage_s.into();
            line["stage_hidden_s"] = s.stage_hidden_s.into();
            line["superclusters_shrinks"] = s.shrinks.into();
        }
        stats_line(line);
    }
    Ok(())
}

/// Runs the work where `--device` says, on the factory's GPU engine (so that --memory reaches
/// it). Under auto a GPU that does not start is no error and work the GPU does not take
/// (`gpu_takes`) runs on the CPU; errors of work the GPU takes are real and reported.
fn on_device<T>(
    device: DeviceChoice,
    global: &GlobalOpts,
    gpus: &Gpus,
    gpu_takes: impl FnOnce() -> bool,
    on_cpu: impl FnOnce() -> voisin::Result<T>,
    on_gpu: impl FnOnce(&[voisin_cuda::CudaEngine]) -> voisin::Result<T>,
) -> voisin::Result<T> {
    // The factory's GPU options, so that --memory reaches them.
    let config = EngineConfig {
        threads: global.threads,
        memory_budget: global.memory,
        gpus: gpus.list.clone(),
        ..EngineConfig::default()
    };
    let open_gpus = || -> voisin::Result<Vec<voisin_cuda::CudaEngine>> {
        let opts = voisin_cuda::CudaOptions {
            device_memory: gpus.memory,
            ..voisin_engines::cuda_options(&config)
        };
        voisin_engines::gpu_ordinals(config.gpus.as_ref())?
            .into_iter()
            .map(|o| voisin_cuda::CudaEngine::with_options(o, opts.clone()))
            .collect()
    };
    match device {
        DeviceChoice::Cpu => on_cpu(),
        DeviceChoice::Cuda => open_gpus().and_then(|e| on_gpu(&e)),
        // Under auto a GPU that does not start is no error; errors of work the GPU takes are
        // real and reported.
        DeviceChoice::Auto => match (voisin_cuda::gpu_available() && gpu_takes())
            .then(|| open_gpus().ok())
            .flatten()
        {
            Some(engines) => on_gpu(&engines),
            None => on_cpu(),
        },
    }
}

/// The GPUs a command uses: `--gpus` (none: GPU 0) and the device memory cap `--gpu-memory`.
#[derive(Default)]
struct Gpus {
    list: Option<voisin_engines::Gpus>,
    memory: Option<usize>,
}

/// One JSON line on standard error; a closed standard error must not fail a finished run.
fn stats_line(value: serde_json::Value) {
    let _ = writeln!(std::io::stderr(), "{value}");
}
