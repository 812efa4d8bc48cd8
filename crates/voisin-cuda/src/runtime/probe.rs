//! Phase timings: the algorithms report how long each phase took to a [`Probe`] that the caller
//! sets ([`crate::CudaEngine::set_probe`]); the default does nothing. Benchmarks install
//! [`StderrProbe`] to see the split between host preparation, transfer, device work and
//! re-rank, which decides what to speed up. A probe only observes: it never changes what the
//! engine does (no synchronisation is added for it), so a phase that queued device work without
//! waiting reports the host's time only.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receives the duration of each phase, named as "area: step".
pub trait Probe: Send + Sync {
    /// Phase `what` took `took`.
    fn phase(&self, what: &str, took: Duration);

    /// A fact about the work that explains a timing (e.g. how many queries needed a wider
    /// list); ignored by default.
    fn note(&self, _text: &str) {}
}

/// The default probe: ignores every phase.
pub struct NoProbe;

impl Probe for NoProbe {
    fn phase(&self, _: &str, _: Duration) {}
}

/// Prints each phase on stderr as `[voisin-cuda] what: 12.3 ms`.
pub struct StderrProbe;

impl Probe for StderrProbe {
    fn phase(&self, what: &str, took: Duration) {
        eprintln!("[voisin-cuda] {what}: {:.1} ms", took.as_secs_f64() * 1e3);
    }

    fn note(&self, text: &str) {
        eprintln!("[voisin-cuda] {text}");
    }
}

/// Times consecutive phases for a probe.
pub(crate) struct Phases {
    probe: Arc<dyn Probe>,
    since: Instant,
}

impl Phases {
    pub fn start(probe: Arc<dyn Probe>) -> Self {
        Phases {
            probe,
            since: Instant::now(),
        }
    }

    /// Reports the phase that ends now; the next starts now.
    pub fn mark(&mut self, what: &str) {
        self.probe.phase(what, self.since.elapsed());
        self.since = Instant::now();
    }

    /// Reports a phase measured elsewhere (e.g. before the GPU was at hand).
    pub fn report(&self, what: &str, took: Duration) {
        self.probe.phase(what, took);
    }

    /// Passes a note to the probe.
    pub fn note(&self, text: std::fmt::Arguments<'_>) {
        self.probe.note(&text.to_string());
    }
}
