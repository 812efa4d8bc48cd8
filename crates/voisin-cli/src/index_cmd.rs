//! `voisin index build` and `voisin index query`: metric-space indexes kept in files.
//!
//! This module owns the command flow only: checks first (parameters, output path, inputs), then
//! the build or the search, then the write. The build and the search go through the index face
//! (`voisin_index::IndexEngine`) that the engine factory opens for `--device` (and routes under
//! auto); structures and the file layout belong to the voisin-index crate; reading data and
//! writing results to voisin-io (through `load` and `output`). Errors follow the CLI's rule: one
//! line naming the file, exit 2 for bad input.

use std::io::Write;
use std::time::Instant;

use serde_json::json;
use voisin::engine::check_k;
use voisin::Error;
use voisin_engines::EngineConfig;
use voisin_index::{file, IndexOp, Kind, Params};
use voisin_io::{Given, Input, Role, RunFiles, Written};

use crate::args::{GlobalOpts, IndexBuildArgs, IndexCommand, IndexKindArg, IndexQueryArgs};
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
    let config = EngineConfig {
        threads: global.threads,
        memory_budget: global.memory,
        ..EngineConfig::default()
    };
    let built = voisin_engines::open_indexes(a.device, &config).and_then(|indexes| {
        let index = indexes.build(&data, metric.clone(), kind, &params, &placed)?;
        let op = IndexOp::Build {
            data: &data,
            metric: &metric,
            kind,
            params: &params,
        };
        Ok((index, indexes.answering(&op)))
    });
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
    // Under auto, what the GPU does not search (cover trees, strings, other metrics, sizes past
    // its limits) goes to the CPU. One engine per GPU listed in --gpus (1-Stage).
    let config = EngineConfig {
        threads: global.threads,
        memory_budget: global.memory,
        gpus: a.gpus.clone(),
        device_memory: a.gpu_memory,
        ..EngineConfig::default()
    };
    let indexes =
        voisin_engines::open_indexes(a.device, &config).map_err(|e| CliError::core(e, None))?;
    let (answer, streamed) = match (a.k, a.radius) {
        (Some(k), _) => indexes
            .knn(&index, &queries, k)
            .map(|s| (Answer::Knn(s.result), s.streamed)),
        (None, Some(r)) => indexes
            .range(&index, &queries, r)
            .map(|s| (Answer::Range(s.result), s.streamed)),
        (None, None) => unreachable!("clap requires -k or --radius"),
    }
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
        if streamed.superclusters > 0 {
            let s = streamed;
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

/// One JSON line on standard error; a closed standard error must not fail a finished run.
fn stats_line(value: serde_json::Value) {
    let _ = writeln!(std::io::stderr(), "{value}");
}
