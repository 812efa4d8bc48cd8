//! Reading the inputs of a command and holding them to the CLI's rules before any work starts:
//! a set is not empty, the metric applies to it, NaN and infinite values are rejected with their
//! position (or replaced under `--allow-nan`), and base and queries agree in kind and dimension.
//!
//! Parsing files is voisin-io's job; this module only judges what it returns, naming the file.

use std::path::Path;

use half::{bf16, f16};
use voisin::cpu::DEFAULT_MEMORY_BUDGET;
use voisin::data::{Buffer, VectorData};
use voisin::{Dataset, Metric, VectorSet};
use voisin_io::{Input, ReadOptions, Role};

use crate::args::{GlobalOpts, NanPolicy};
use crate::error::CliError;

/// Reads one input and checks it on its own.
pub fn load(
    input: &Input,
    role: Role,
    metric: &Metric,
    opts: &GlobalOpts,
) -> Result<Dataset, CliError> {
    let read = ReadOptions {
        role,
        mmap: !opts.no_mmap,
        header: opts.header.into(),
        memory: Some(opts.memory.unwrap_or(DEFAULT_MEMORY_BUDGET)),
    };
    let path = input.path();
    if read.mmap && !input.is_stdin() {
        name_mapped_input(path);
    }
    let data = voisin_io::check_loaded(path, input.read(&read)?, metric)?;
    non_finite(data, opts.allow_nan, path)
}

/// Reads the queries and checks them on their own and against the base set read from
/// `base_path`.
pub fn queries(
    input: &Input,
    base: &Dataset,
    base_path: &Path,
    metric: &Metric,
    opts: &GlobalOpts,
) -> Result<Dataset, CliError> {
    let q = load(input, Role::Query, metric, opts)?;
    check_pair(base, base_path, &q, input.path())?;
    Ok(q)
}

/// A mapped input that shrinks during the run raises SIGBUS; voisin::commit's handler then prints
/// this line (exit 2) instead of the process dying without a word.
fn name_mapped_input(path: &Path) {
    static MAPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut mapped = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
    mapped.push(path.display().to_string());
    voisin::commit::set_bus_message(&format!(
        "{}: a memory-mapped input shrank or became unreadable during the run; inputs must not \
         change while voisin reads them (--no-mmap reads them into memory first)",
        mapped.join(" or ")
    ));
}

/// Checks that queries can be compared with the base set; the error names the query file.
pub fn check_pair(
    base: &Dataset,
    base_path: &Path,
    queries: &Dataset,
    query_path: &Path,
) -> Result<(), CliError> {
    let problem = match (base, queries) {
        (Dataset::Vectors(b), Dataset::Vectors(q)) if b.dim() != q.dim() => format!(
            "queries have dimension {} but the base set {} has dimension {}",
            q.dim(),
            base_path.display(),
            b.dim()
        ),
        (Dataset::Vectors(_), Dataset::Strings(_)) | (Dataset::Strings(_), Dataset::Vectors(_)) => {
            format!(
                "queries are {} but the base set {} holds {}",
                kind(queries),
                base_path.display(),
                kind(base)
            )
        }
        _ => return Ok(()),
    };
    Err(CliError::file(query_path, problem))
}

fn kind(data: &Dataset) -> &'static str {
    match data {
        Dataset::Vectors(_) => "vectors",
        Dataset::Strings(_) => "strings",
    }
}

/// Rejects or repairs NaN and infinite values.
fn non_finite(data: Dataset, policy: Option<NanPolicy>, path: &Path) -> Result<Dataset, CliError> {
    let Dataset::Vectors(vectors) = &data else {
        return Ok(data);
    };
    let Some((row, col)) = vectors.find_non_finite() else {
        return Ok(data);
    };
    match policy {
        None => Err(CliError::file(
            path,
            format!(
                "{}; pass --allow-nan zero to read NaN and infinite values as 0",
                vectors.non_finite_line(row, col)
            ),
        )),
        Some(NanPolicy::Zero) => Ok(Dataset::Vectors(zero_non_finite(vectors)?)),
    }
}

/// A copy of the set with every NaN and infinite value replaced by 0. Copies because the input
/// may be a read-only memory map.
fn zero_non_finite(v: &VectorSet) -> Result<VectorSet, CliError> {
    let data = match v.data() {
        VectorData::F32(b) => VectorData::F32(replace(b, |x| if x.is_finite() { x } else { 0.0 })),
        VectorData::F16(b) => {
            VectorData::F16(replace(b, |x| if x.is_finite() { x } else { f16::ZERO }))
        }
        VectorData::Bf16(b) => {
            VectorData::Bf16(replace(b, |x| if x.is_finite() { x } else { bf16::ZERO }))
        }
        VectorData::U8(b) => VectorData::U8(b.clone()),
        VectorData::F64(b) => VectorData::F64(replace(b, |x| if x.is_finite() { x } else { 0.0 })),
    };
    VectorSet::new(v.len(), v.dim(), data).map_err(|e| CliError::core(e, None))
}

fn replace<T: bytemuck::Pod>(values: &Buffer<T>, fix: impl Fn(T) -> T) -> Buffer<T> {
    Buffer::Owned(values.as_slice().iter().map(|&x| fix(x)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroing_replaces_only_non_finite_values() {
        let v = VectorSet::from_f32(2, 2, vec![1.0, f32::NAN, f32::NEG_INFINITY, -2.5]).unwrap();
        let fixed = zero_non_finite(&v).unwrap();
        assert_eq!(fixed.as_f32().unwrap(), &[1.0, 0.0, 0.0, -2.5]);
        let h = VectorSet::new(
            1,
            3,
            VectorData::F16(Buffer::Owned(vec![
                f16::INFINITY,
                f16::from_f32(3.0),
                f16::NAN,
            ])),
        )
        .unwrap();
        assert_eq!(
            zero_non_finite(&h).unwrap().row_f32(0).as_ref(),
            &[0.0, 3.0, 0.0]
        );
    }

    #[test]
    fn a_non_finite_value_is_reported_with_its_position() {
        let v = VectorSet::from_f32(3, 2, vec![0.0, 1.0, 2.0, 3.0, 4.0, f32::INFINITY]).unwrap();
        let err = non_finite(v.into(), None, Path::new("x.fvecs"))
            .err()
            .unwrap();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string()
                .starts_with("x.fvecs: row 2, column 1 holds inf"),
            "{err}"
        );
    }
}
