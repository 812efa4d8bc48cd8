//! The progress bar: drawn on standard error only when it is a terminal and only once the work
//! has run for a while, so short runs and redirected output stay clean.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use voisin::engine::ProgressFn;

/// Work shorter than this never shows a bar.
const SHOW_AFTER: Duration = Duration::from_millis(800);

pub struct Progress {
    bar: Option<Arc<Bar>>,
}

struct Bar {
    bar: ProgressBar,
    start: Instant,
    shown: AtomicBool,
}

impl Progress {
    /// A bar on standard error when it is a terminal, else nothing.
    pub fn on_stderr() -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {percent:>3}% eta {eta}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress {
            bar: Some(Arc::new(Bar {
                bar,
                start: Instant::now(),
                shown: AtomicBool::new(false),
            })),
        }
    }

    /// The callback engines report to, if a bar may be drawn.
    pub fn callback(&self) -> Option<ProgressFn> {
        let bar = self.bar.clone()?;
        Some(Arc::new(move |done: u64, total: u64| {
            bar.update(done, total)
        }))
    }

    /// Removes the bar before results or statistics are printed.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.bar.finish_and_clear();
        }
    }
}

impl Bar {
    fn update(&self, done: u64, total: u64) {
        if !self.shown.load(Ordering::Relaxed)
            && self.start.elapsed() >= SHOW_AFTER
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.bar.set_length(total);
        self.bar.set_position(done.min(total));
    }
}
