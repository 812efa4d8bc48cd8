//! What every front end (the `voisin` CLI, `voisin-mpi`, the Python bindings) does with an input
//! before any work: the metric a file implies, and the checks every set must pass on its own.

use std::path::Path;

use voisin::{Dataset, Metric};

use crate::{read_dataset, IoError, ReadOptions};

/// Levenshtein for text input (`.txt`), euclidean otherwise.
pub fn default_metric(path: &Path) -> Metric {
    let is_text = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("txt"));
    if is_text {
        Metric::Levenshtein
    } else {
        Metric::Euclidean
    }
}

/// Reads a data set and checks it on its own: it holds items, and `metric` applies to it.
/// NaN and infinite values are the caller's to judge (front ends differ in what they allow).
pub fn read_checked(path: &Path, opts: &ReadOptions, metric: &Metric) -> Result<Dataset, IoError> {
    check_loaded(path, read_dataset(path, opts)?, metric)
}

/// The checks of [`read_checked`] on a set read by other means (standard input): it holds items,
/// and `metric` applies to it.
pub fn check_loaded(path: &Path, data: Dataset, metric: &Metric) -> Result<Dataset, IoError> {
    if data.is_empty() {
        return Err(IoError::user(path, "holds no items"));
    }
    voisin::engine::check_metric(&data, metric).map_err(|e| IoError::user(path, e.to_string()))?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_files_default_to_levenshtein() {
        assert_eq!(
            default_metric(Path::new("a/words.TXT")),
            Metric::Levenshtein
        );
        assert_eq!(default_metric(Path::new("base.fvecs")), Metric::Euclidean);
        assert_eq!(default_metric(Path::new("txt")), Metric::Euclidean);
    }
}
