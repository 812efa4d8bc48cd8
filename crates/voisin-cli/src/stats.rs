//! The `--stats` line: one JSON object on standard error describing a finished run.

use std::time::Duration;

use serde::Serialize;

/// Phase times in seconds.
#[derive(Debug, Default, Serialize)]
pub struct Times {
    pub load: f64,
    pub transfer: f64,
    pub compute: f64,
    pub select: f64,
    pub write: f64,
    pub total: f64,
}

#[derive(Debug, Serialize)]
pub struct RunStats {
    pub command: &'static str,
    pub metric: String,
    pub device: String,
    /// Arithmetic of the GPU's distance tiles (`--precision auto` says here what it chose).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arithmetic: Option<String>,
    pub n_base: usize,
    pub n_queries: usize,
    /// Vector dimension; absent for strings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dim: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radius: Option<f64>,
    pub time_s: Times,
    pub distance_evals: u64,
    pub exact_evals: u64,
    /// Queries answered per second of engine time.
    pub throughput_qps: f64,
    /// (query, neighbour) pairs returned.
    pub results: usize,
}

impl RunStats {
    /// The JSON line; serialising plain numbers and strings cannot fail.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
