//! NumPy archives (`.npz`) as input: one array of the archive, parsed as a `.npy` file.
//!
//! Which array: the one named after the file (`--input data.npz:emb`); without a name, the
//! archive's only array, or else the one named for the role as in ann-benchmarks HDF5 files
//! (`train` for the base set, `test` for queries). Members may be stored (`numpy.savez`) or
//! deflated (`numpy.savez_compressed`); the ZIP container is read by `crate::zip`.
//!
//! An archive holding two members of one name is refused: NumPy reads the last of them, other
//! ZIP readers the first, so the archive does not say which array it holds. A stored member is
//! read where it lies (values aligned in a mapped file stay in the map; others are decoded
//! once); a deflated one is inflated once, into exactly its declared size, bounded by the memory
//! budget, and its values are read in place there: memory holds one copy of the array, not two.

use voisin::Dataset;

use super::{npy, Source};
use crate::error::{bail, Parsed};
use crate::zip::{entries, member, Entry, Member};
use crate::Role;

pub(crate) fn parse(
    src: Source<'_>,
    member_name: Option<&str>,
    role: Role,
    budget: Option<usize>,
) -> Parsed<Dataset> {
    let list = entries(src.bytes)?;
    let (wanted, entry) = choose(&list, member_name, role)?;
    let within = |p: crate::error::Problem| p.within(&format!("array '{wanted}'"));
    match member(src.bytes, entry, budget)? {
        Member::Stored(range) => npy::parse(src.window(range)).map_err(within),
        Member::Inflated(bytes) => npy::parse(Source::inflated(&bytes)).map_err(within),
    }
}

/// The array `member` or `role` picks, as [`parse`] reads it: its name and its entry.
pub(crate) fn chosen(bytes: &[u8], member: Option<&str>, role: Role) -> Parsed<String> {
    let list = entries(bytes)?;
    choose(&list, member, role).map(|(name, _)| name.to_string())
}

fn choose<'e>(
    list: &'e [Entry],
    member: Option<&'e str>,
    role: Role,
) -> Parsed<(&'e str, &'e Entry)> {
    if let Some((i, e)) = list
        .iter()
        .enumerate()
        .find(|(i, e)| list[..*i].iter().any(|f| f.name == e.name))
    {
        let first = list[..i].iter().position(|f| f.name == e.name).unwrap_or(0);
        bail!(
            "holds two members named {} (entries {} and {} of its directory); NumPy would read \
             the last, other tools the first, so voisin reads neither: rewrite the archive \
             with one array per name",
            e.name,
            first + 1,
            i + 1
        );
    }
    let arrays: Vec<&str> = list
        .iter()
        .filter_map(|e| e.name.strip_suffix(".npy"))
        .collect();
    let found = || {
        if arrays.is_empty() {
            "none".to_string()
        } else {
            arrays.join(", ")
        }
    };
    let wanted = match member {
        Some(m) => m,
        None if arrays.len() == 1 => arrays[0],
        None if arrays.contains(&role.hdf5_name()) => role.hdf5_name(),
        None => bail!(
            "holds {} arrays ({}); name one as FILE.npz:NAME",
            arrays.len(),
            found()
        ),
    };
    match list
        .iter()
        .find(|e| e.name.strip_suffix(".npy") == Some(wanted))
    {
        Some(entry) => Ok((wanted, entry)),
        None => bail!("no array '{wanted}' (found: {})", found()),
    }
}
