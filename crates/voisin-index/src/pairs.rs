//! The seam between an index construction and whatever measures its distances: a construction
//! asks a [`PairOracle`] for whole batches of "this item against these candidates, within this
//! radius" ([`PairBatch`]) instead of evaluating pairs one by one, so that a GPU can answer them
//! (voisin-cuda's device oracle). [`CpuOracle`] answers on CPU threads with the space's own
//! distance. The List of Clusters' and SSS's `build_with` ask through it (the cover tree has its
//! own seam, `cover::NetOracle`); with an oracle that returns the space's exact distances, each gives the CPU
//! build's structure.

use rayon::prelude::*;
use voisin::Result;

use crate::space::Space;

/// Queries for a [`PairOracle`]: query q is item `items()[q]` against the candidates
/// `cands()[starts()[q]..starts()[q + 1]]` with radius `radii()[q]`.
#[derive(Clone, Debug)]
pub struct PairBatch {
    items: Vec<u32>,
    radii: Vec<f64>,
    starts: Vec<usize>,
    cands: Vec<u32>,
}

impl Default for PairBatch {
    fn default() -> Self {
        PairBatch {
            items: Vec::new(),
            radii: Vec::new(),
            starts: vec![0],
            cands: Vec::new(),
        }
    }
}

impl PairBatch {
    /// Each query's item (a position in the space), one per query.
    pub fn items(&self) -> &[u32] {
        &self.items
    }

    /// Each query's radius: the oracle answers NaN for candidates farther than it (infinite:
    /// every distance is answered).
    pub fn radii(&self) -> &[f64] {
        &self.radii
    }

    /// `len() + 1` offsets into [`PairBatch::cands`].
    pub fn starts(&self) -> &[usize] {
        &self.starts
    }

    /// Every query's candidates (positions in the space), query after query.
    pub fn cands(&self) -> &[u32] {
        &self.cands
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch holds no query.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds a query.
    pub fn push(&mut self, item: u32, radius: f64, cands: impl IntoIterator<Item = u32>) {
        self.items.push(item);
        self.radii.push(radius);
        self.cands.extend(cands);
        self.starts.push(self.cands.len());
    }
}

/// Measures batches of pairs for the List of Clusters' and SSS's `build_with`.
pub trait PairOracle: Sync {
    /// For every candidate of every query of `batch`, in order, the distance from the query's
    /// item to it, exactly the space's `to_distance(key(item, candidate))`, when it is at most
    /// the query's radius, else NaN (a NaN distance is never within a radius either).
    fn within(&self, batch: &PairBatch) -> Result<Vec<f64>>;
}

/// The oracle on CPU threads, with the space's own (bounded) distance.
pub struct CpuOracle<'a, S: Space>(pub &'a S);

impl<S: Space> PairOracle for CpuOracle<'_, S> {
    fn within(&self, batch: &PairBatch) -> Result<Vec<f64>> {
        let space = self.0;
        Ok((0..batch.len())
            .into_par_iter()
            .flat_map_iter(|q| {
                let (x, r) = (batch.items[q], batch.radii[q]);
                batch.cands[batch.starts[q]..batch.starts[q + 1]]
                    .iter()
                    .map(move |&c| dist_within(space, x, c, r).unwrap_or(f64::NAN))
            })
            .collect())
    }
}

/// The distance from item `a` to item `b` when it is at most `max`.
pub(crate) fn dist_within<S: Space>(space: &S, a: u32, b: u32, max: f64) -> Option<f64> {
    let key = space.key_within(space.item(a as usize), space.item(b as usize), max)?;
    Some(space.to_distance(key)).filter(|&d| d <= max)
}

/// Every answer of `batch` from `oracle`, which must all be distances (the batch's radii are
/// infinite): an answer of the wrong length or a NaN is the oracle's error.
pub(crate) fn answers(oracle: &dyn PairOracle, batch: &PairBatch) -> Result<Vec<f64>> {
    let got = oracle.within(batch)?;
    if got.len() != batch.cands().len() || got.iter().any(|d| d.is_nan()) {
        return Err(voisin::Error::device(format!(
            "the distance oracle answered {} of {} pairs, or a NaN",
            got.len(),
            batch.cands().len()
        )));
    }
    Ok(got)
}

/// Distances from item `from` to each of `cands`, asked of `oracle` in one batch.
pub(crate) fn one_to_many(oracle: &dyn PairOracle, from: u32, cands: &[u32]) -> Result<Vec<f64>> {
    let mut b = PairBatch::default();
    b.push(from, f64::INFINITY, cands.iter().copied());
    answers(oracle, &b)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use voisin::{Metric, StringSet, VectorSet};

    use super::*;
    use crate::space::{StringSpace, VectorSpace};
    use crate::{ListOfClusters, Sss};

    /// Clustered vectors with exact duplicates (ties) and a zero row.
    fn vectors(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
        let mut v: Vec<f32> = (0..n * d)
            .map(|i| (i / d % 5) as f32 * 4.0 + rng.gen_range(-1.0f32..1.0))
            .collect();
        if n > 3 {
            let (a, b) = v.split_at_mut(2 * d);
            b[..d].copy_from_slice(&a[..d]);
            v[d..2 * d].fill(0.0);
        }
        VectorSet::from_f32(n, d, v).unwrap()
    }

    /// Words over a small alphabet (many at distance 1 of each other), duplicates and "".
    fn words(rng: &mut StdRng, n: usize) -> StringSet {
        let mut w: Vec<String> = (0..n)
            .map(|_| {
                let len = rng.gen_range(0..9);
                (0..len)
                    .map(|_| rng.gen_range(b'a'..b'e') as char)
                    .collect()
            })
            .collect();
        if n > 4 {
            w[3] = w[1].clone();
            w[4] = String::new();
        }
        StringSet::from_strings(w).unwrap()
    }

    /// Builds through the oracle equal the CPU builds part for part (the LC's evaluation count
    /// too) on `space`.
    fn same<S: Space + Clone>(space: S, what: &str) {
        let oracle = CpuOracle(&space);
        for m in [1, 2, 7, 64] {
            let cpu = ListOfClusters::build(space.clone(), m);
            let got = ListOfClusters::build_with(space.clone(), m, &|_| {}, &oracle).unwrap();
            assert_eq!(got.parts(), cpu.parts(), "{what} lc:{m}");
            assert_eq!(got.build_evals(), cpu.build_evals(), "{what} lc:{m}");
            assert_eq!(got.check(), Ok(()), "{what} lc:{m}");
        }
        for (alpha, p) in [(0.5, 64), (0.2, 3), (0.05, 1000)] {
            let cpu = Sss::build(space.clone(), alpha, p);
            let got = Sss::build_with(space.clone(), alpha, p, &|_| {}, &oracle).unwrap();
            assert_eq!(got.parts(), cpu.parts(), "{what} sss {alpha} {p}");
            assert_eq!(got.check(), Ok(()), "{what} sss {alpha} {p}");
        }
    }

    #[test]
    fn lc_and_sss_built_through_an_oracle_are_the_cpu_builds() {
        let mut rng = StdRng::seed_from_u64(11);
        for n in [0, 1, 2, 5, 97, 300] {
            let s = words(&mut rng, n);
            same(
                StringSpace::new(s, Metric::Levenshtein).unwrap(),
                &format!("{n} words"),
            );
            for d in [1, 3] {
                let v = vectors(&mut rng, n, d);
                for metric in [
                    Metric::Euclidean,
                    Metric::Cityblock,
                    Metric::Chebyshev,
                    Metric::Minkowski(3.0),
                ] {
                    let what = format!("{n} x {d} under {metric}");
                    same(VectorSpace::new(&v, metric).unwrap(), &what);
                }
            }
        }
    }

    /// More candidates than one pivot-scan batch: pivots found in a later batch are measured by
    /// the oracle, those found inside a batch on the host; the pivots and table are the CPU's.
    #[test]
    fn sss_pivot_scan_over_several_batches() {
        let mut rng = StdRng::seed_from_u64(12);
        let n = 2 * (1 << 16) + 123;
        // The first batch's items in a small square (one pivot), the rest over a large one.
        let v: Vec<f32> = (0..2 * n)
            .map(|i| rng.gen_range(-1.0f32..1.0) * if i < 140_000 { 0.01 } else { 1.0 })
            .collect();
        let set = VectorSet::from_f32(n, 2, v).unwrap();
        let space = VectorSpace::new(&set, Metric::Euclidean).unwrap();
        let cpu = Sss::build(space.clone(), 0.1, 500);
        let got = Sss::build_with(space.clone(), 0.1, 500, &|_| {}, &CpuOracle(&space)).unwrap();
        assert!(cpu.parts().0.len() > 10, "{} pivots", cpu.parts().0.len());
        assert!(cpu.parts().0.iter().any(|&p| p as usize > 1 << 16));
        assert_eq!(got.parts(), cpu.parts());
    }

    /// An oracle that loses answers or answers NaN is an error, not a panic or a wrong index.
    #[test]
    fn a_faulty_oracle_is_an_error() {
        struct Faulty(bool);
        impl PairOracle for Faulty {
            fn within(&self, batch: &PairBatch) -> Result<Vec<f64>> {
                let n = batch.cands().len();
                Ok(if self.0 {
                    vec![1.0; n.saturating_sub(1)]
                } else {
                    vec![f64::NAN; n]
                })
            }
        }
        let mut rng = StdRng::seed_from_u64(13);
        let space = StringSpace::new(words(&mut rng, 20), Metric::Levenshtein).unwrap();
        for short in [true, false] {
            let o = Faulty(short);
            let e = ListOfClusters::build_with(space.clone(), 4, &|_| {}, &o).err();
            assert!(e.unwrap().to_string().contains("oracle"));
            let e = Sss::build_with(space.clone(), 0.5, 4, &|_| {}, &o).err();
            assert!(e.unwrap().to_string().contains("oracle"));
        }
    }
}
