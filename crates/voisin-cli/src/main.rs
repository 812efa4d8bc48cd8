//! The `voisin` command line: knn, graph, range, demo, doctor and index.
//!
//! This binary owns argument parsing, device choice, input checks, output targets, `--stats` and
//! the progress bar. Reading and writing files is voisin-io's job; brute-force search is done by
//! the engines the factory (`voisin-engines`: CPU, CUDA, several GPUs, auto) opens, through the
//! `Engine` trait, and index search by voisin-index.
//!
//! Modules: `args` (the command line), this file (dispatch of every subcommand, `doctor`'s
//! report of what `voisin_cuda::cuda_info` found, error lines), `error` (the error and its exit
//! code), `commands` (knn, graph and range), `index_cmd` (index build and query), `demo`,
//! `device` (engines and worker threads), `load` (inputs, their checks and the metric), `output`
//! (where results go), `progress`, `stats` (`--stats`) and `size` (`--memory`).
//!
//! Exit codes: 0 success, 2 bad input or usage, 1 internal or device failure. Every error is one
//! line on standard error, `voisin: error: <file>: <problem>`.

mod args;
mod commands;
mod demo;
mod device;
mod error;
mod index_cmd;
mod load;
mod output;
mod progress;
mod size;
mod stats;

use std::io::Write;

use clap::Parser;

/// mimalloc instead of glibc's malloc: the engines' host phases allocate per row (a million
/// candidate lists and result rows in a 1M-item graph) from every thread at once, and glibc's
/// arenas made that the slowest host step: a 1M × 128 graph's prove and re-rank phase took about
/// three times as long under glibc (docs/design/device-finish.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    install_panic_hook();
    // Temporary files go on SIGINT/SIGTERM/SIGHUP (exit 128 + signal) and a shrinking mapped
    // input is one error line, not a crash (voisin::commit documents the policy).
    voisin::commit::exit_on_signals();
    let code = match args::Cli::try_parse() {
        Ok(cli) => match run(cli) {
            Ok(()) => 0,
            Err(e) => {
                report(&e.to_string());
                e.exit_code()
            }
        },
        Err(e) => clap_error(e),
    };
    std::process::exit(code);
}

/// Every subcommand.
fn run(cli: args::Cli) -> Result<(), error::CliError> {
    let global = &cli.global;
    match cli.command {
        args::Command::Knn(a) => commands::knn(a, global),
        args::Command::Graph(a) => commands::graph(a, global),
        args::Command::Range(a) => commands::range(a, global),
        args::Command::Demo => demo::run(global),
        args::Command::Doctor => {
            print!("{}", voisin_cuda::cuda_info());
            Ok(())
        }
        args::Command::Index(c) => index_cmd::run(c, global),
    }
}

fn report(message: &str) {
    let _ = writeln!(std::io::stderr(), "{}", error_line(message));
}

/// The error line; a message that spans lines (from a library or a panic) is folded into one.
fn error_line(message: &str) -> String {
    format!("voisin: error: {}", message.trim_end().replace('\n', " "))
}

/// Help and version go out as clap writes them; usage errors become one line, exit code 2.
fn clap_error(e: clap::Error) -> i32 {
    if !e.use_stderr() {
        let _ = e.print();
        return e.exit_code();
    }
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return 2;
    }
    report(&one_line(&e.render().to_string()));
    2
}

/// Folds clap's multi-line message (error, details, tip, usage) into one line without the usage.
fn one_line(text: &str) -> String {
    let mut line = String::new();
    // "Usage: voisin index build --input <X> ..." names the subcommand whose help to point to.
    let command = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage:"))
        .map(|u| {
            u.split_whitespace()
                .take_while(|w| !w.starts_with(['-', '<', '[']))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| c.starts_with("voisin"))
        .unwrap_or_else(|| "voisin".into());
    for part in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if part.starts_with("Usage:") || part.starts_with("For more information") {
            break;
        }
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if part.starts_with("tip:") { "; " } else { " " });
        }
        line.push_str(part);
    }
    line.push_str(&format!(" (see {command} --help)"));
    line
}

/// Last resort: a bug must still end in one line and exit code 1, never a backtrace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let place = info.location().map(|l| (l.file(), l.line()));
        report(&panic_line(info.payload(), place));
        std::process::exit(1);
    }));
}

fn panic_line(payload: &(dyn std::any::Any + Send), place: Option<(&str, u32)>) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let place = place
        .map(|(file, line)| format!(" at {file}:{line}"))
        .unwrap_or_default();
    format!("internal error: {what}{place} (please report this bug)")
}

#[cfg(test)]
mod tests {
    use super::{error_line, one_line, panic_line};

    #[test]
    fn panics_become_one_line() {
        let text = panic_line(&"index out of bounds", Some(("src/x.rs", 7)));
        assert_eq!(
            text,
            "internal error: index out of bounds at src/x.rs:7 (please report this bug)"
        );
        let owned = panic_line(&String::from("a\nb"), None);
        assert_eq!(
            error_line(&owned),
            "voisin: error: internal error: a b (please report this bug)"
        );
        assert_eq!(
            panic_line(&42u8, None),
            "internal error: unknown panic (please report this bug)"
        );
    }

    #[test]
    fn clap_messages_fold_into_one_line() {
        let text = "error: the following required arguments were not provided:\n  --base <B>\n\n\
                    Usage: voisin knn --base <B>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(text),
            "the following required arguments were not provided: --base <B> (see voisin knn --help)"
        );
        let tip = "error: unexpected argument '--bse' found\n\n  tip: a similar argument exists: '--base'\n\nUsage: x\n";
        assert_eq!(
            one_line(tip),
            "unexpected argument '--bse' found; tip: a similar argument exists: '--base' (see voisin --help)"
        );
    }
}
