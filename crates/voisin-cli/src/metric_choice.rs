//! Which metric a run uses: `--metric`, else the one an input file declares, else the default
//! for the input's kind (levenshtein for text, euclidean otherwise). Shared by knn, graph,
//! range and the index commands.

use std::path::Path;

use voisin::Metric;

use crate::error::CliError;

/// `--metric`, else what an ann-benchmarks HDF5 file declares in its `distance` attribute, else
/// the default for the input. A `--metric` that contradicts the file's attribute is an error.
pub fn choose_metric(
    given: Option<&Metric>,
    base: &Path,
    format: Option<voisin_io::Format>,
) -> Result<Metric, CliError> {
    let declared = if base == Path::new("-") {
        None
    } else {
        voisin_io::declared_metric(base)?
    };
    let Some(name) = declared else {
        return Ok(given
            .cloned()
            .unwrap_or_else(|| default_metric(base, format)));
    };
    let parsed = name.parse::<Metric>();
    match (given, parsed) {
        (Some(m), Ok(d)) if m.name() != d.name() => Err(CliError::file(
            base,
            format!(
                "declares distance '{name}' in its 'distance' attribute but --metric {} was \
                 given; drop --metric to use the file's",
                m.name()
            ),
        )),
        (Some(m), _) => Ok(m.clone()),
        (None, Ok(d)) => Ok(d),
        (None, Err(_)) => Err(CliError::file(
            base,
            format!(
                "declares distance '{name}', which voisin does not offer; choose one with --metric"
            ),
        )),
    }
}

/// Levenshtein for text input (a .txt file, or - with --format txt), euclidean otherwise.
fn default_metric(path: &Path, format: Option<voisin_io::Format>) -> Metric {
    if path == Path::new("-") {
        if format == Some(voisin_io::Format::Txt) {
            Metric::Levenshtein
        } else {
            Metric::Euclidean
        }
    } else {
        voisin_io::default_metric(path)
    }
}
