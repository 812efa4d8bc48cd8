//! Contiguous item ranges of a data set as data sets of their own, for running an engine on
//! one shard ([`split`] cuts them).
//!
//! Copies the rows: the core has no borrowed sub-set view. A block is a small part of the input,
//! so the copy costs far less than the distances computed on it.

use std::ops::Range;

use voisin::{Dataset, StringSet, VectorSet};

/// Items `range` of `data`, renumbered from 0.
pub fn slice(data: &Dataset, range: Range<usize>) -> Dataset {
    match data {
        Dataset::Vectors(v) => {
            let rows = v.rows_f32(range.start, range.end).into_owned();
            VectorSet::from_f32(range.len(), v.dim(), rows)
                .expect("a slice of a valid vector set is valid")
                .into()
        }
        Dataset::Strings(s) => StringSet::from_strings(range.map(|i| s.get_string(i)))
            .expect("a slice of a valid string set is valid")
            .into(),
    }
}

/// `n` items cut into `parts` contiguous ranges whose lengths differ by at most one: the graph
/// schedule's one split (earlier ranges the longer ones).
pub use voisin::graph::split;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_keeps_rows() {
        let v = VectorSet::from_f32(4, 2, (0..8).map(|x| x as f32).collect()).unwrap();
        let s = slice(&v.into(), 1..3);
        assert_eq!(
            s.as_vectors().unwrap().as_f32().unwrap(),
            &[2.0, 3.0, 4.0, 5.0]
        );
        let t = StringSet::from_strings(["a", "bc", "d"]).unwrap();
        let s = slice(&t.into(), 1..3);
        assert_eq!(s.as_strings().unwrap().get_string(0), "bc");
        assert_eq!(s.len(), 2);
    }
}
