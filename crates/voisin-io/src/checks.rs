//! What every front end (the `voisin` CLI, `voisin-mpi`, the Python bindings) does with an input
//! before any work: the metric the inputs imply, and the checks every set must pass on its own.
//!
//! The metric of a run ([`choose_metric`]): the one given (`--metric`, or an index's), else
//! the one the inputs declare (the `distance` attribute of an ann-benchmarks HDF5 file, base
//! and queries alike, standard input included), else the default for the base's kind. A
//! declaration that contradicts the given metric or another input's is an error; an attribute
//! that names no metric (an integer) is an error only when nothing else gives the metric.

use std::path::Path;

use voisin::{Dataset, Metric};

use crate::{read_dataset, Input, IoError, ReadOptions};

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

/// What an input declares of its metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declared {
    /// Nothing: another format, or no `distance` attribute.
    Nothing,
    /// A metric name as voisin spells it (`angular` is `cosine`); it may be one voisin does
    /// not offer (`hamming`).
    Name(String),
    /// An attribute that names no metric, described (`an integer (3)`).
    Unusable(String),
}

/// A metric fixed before the inputs are looked at, and by what.
#[derive(Clone, Copy, Debug)]
pub enum Given<'a> {
    /// `--metric`.
    Flag(&'a Metric),
    /// The metric of the index file at this path.
    Index(&'a Path, &'a Metric),
}

impl Given<'_> {
    fn metric(&self) -> &Metric {
        match self {
            Given::Flag(m) | Given::Index(_, m) => m,
        }
    }

    /// Why a declaration of `name` cannot stand beside it.
    fn clash(&self, name: &str) -> String {
        match self {
            Given::Flag(m) => format!(
                "declares distance '{name}' in its 'distance' attribute but --metric {} was \
                 given; drop --metric to use the file's",
                m.name()
            ),
            Given::Index(path, m) => format!(
                "declares distance '{name}' in its 'distance' attribute but the index {} \
                 answers {}; give queries made for that metric",
                path.display(),
                m.name()
            ),
        }
    }
}

/// The metric of a run over `inputs` (the base first), by the rule of the module
/// documentation. Errors name the input at fault.
pub fn choose_metric(given: Option<Given>, inputs: &[&Input]) -> Result<Metric, IoError> {
    let mut chosen: Option<(Metric, &Input)> = None;
    for &input in inputs {
        let name = match input.declared()? {
            Declared::Nothing => continue,
            Declared::Unusable(_) if given.is_some() => continue,
            Declared::Unusable(what) => {
                return Err(IoError::user(
                    input.path(),
                    format!(
                        "its 'distance' attribute is {what}, not a metric name; choose the \
                         metric with --metric"
                    ),
                ))
            }
            Declared::Name(name) => name,
        };
        let Ok(declared) = name.parse::<Metric>() else {
            if given.is_some() {
                continue;
            }
            return Err(IoError::user(
                input.path(),
                format!(
                    "declares distance '{name}', which voisin does not offer; choose one with \
                     --metric"
                ),
            ));
        };
        if let Some(g) = given.filter(|g| g.metric().name() != declared.name()) {
            return Err(IoError::user(input.path(), g.clash(&name)));
        }
        match &chosen {
            Some((m, first)) if m.name() != declared.name() => {
                return Err(IoError::user(
                    input.path(),
                    format!(
                        "declares distance '{name}' in its 'distance' attribute but {} declares \
                         '{}'; the sets were made for different metrics",
                        first.path().display(),
                        m.name()
                    ),
                ))
            }
            Some(_) => {}
            None => chosen = Some((declared, input)),
        }
    }
    Ok(match (given, chosen) {
        (Some(g), _) => g.metric().clone(),
        (None, Some((m, _))) => m,
        (None, None) => inputs
            .first()
            .map_or(Metric::Euclidean, |i| i.default_metric()),
    })
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
