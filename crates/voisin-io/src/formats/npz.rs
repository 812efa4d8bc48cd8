//! NumPy archives (`.npz`) as input: one array of the archive, parsed as a `.npy` file.
//!
//! Which array: the one named after the file (`--input data.npz:emb`); without a name, the
//! archive's only array, or else the one named for the role as in ann-benchmarks HDF5 files
//! (`train` for the base set, `test` for queries). Members may be stored (`numpy.savez`) or
//! deflated (`numpy.savez_compressed`); the ZIP container is read by `crate::zip`.

use voisin::Dataset;

use super::{npy, Source};
use crate::error::{bail, Parsed, Problem};
use crate::zip::{contents, entries};
use crate::Role;

pub(crate) fn parse(bytes: &[u8], member: Option<&str>, role: Role) -> Parsed<Dataset> {
    let list = entries(bytes)?;
    let arrays: Vec<&str> = list
        .iter()
        .filter_map(|e| e.name.strip_suffix(".npy"))
        .collect();
    let wanted = match member {
        Some(m) => m,
        None if arrays.len() == 1 => arrays[0],
        None if arrays.contains(&role.hdf5_name()) => role.hdf5_name(),
        None => bail!(
            "holds {} arrays ({}); name one as FILE.npz:NAME",
            arrays.len(),
            if arrays.is_empty() {
                "none".to_string()
            } else {
                arrays.join(", ")
            }
        ),
    };
    let Some(entry) = list
        .iter()
        .find(|e| e.name.strip_suffix(".npy") == Some(wanted))
    else {
        bail!(
            "no array '{wanted}' (found: {})",
            if arrays.is_empty() {
                "none".to_string()
            } else {
                arrays.join(", ")
            }
        );
    };
    let data = contents(bytes, entry)?;
    npy::parse(Source::unmapped(&data)).map_err(|p| Problem(format!("array '{wanted}': {}", p.0)))
}
