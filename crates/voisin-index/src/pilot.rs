//! Whether a built index prunes: a pilot of a few k-NN queries (items of the indexed set, spread
//! over it) against the index, and the share of the set each evaluated on average. Near 1 the
//! index scans everything (intrinsic dimension too high) and brute force is as fast or faster;
//! `voisin index build` warns then (issue 13: a 100k × 128 index answered by scanning everything,
//! 71× slower than `knn`, without a word).

use voisin::{Dataset, Result, StringSet, VectorSet};

use crate::{DatasetIndex, MetricIndex, Space};

/// Queries of the pilot.
pub const PILOT_QUERIES: usize = 50;
/// Neighbours per pilot query.
pub const PILOT_K: usize = 10;
/// Sets smaller than this are not piloted: any index scans most of a small set.
pub const PILOT_MIN_ITEMS: usize = 1000;
/// Above this share of the set per query, the index is reported as not pruning.
pub const NO_PRUNING_SHARE: f64 = 0.5;

/// The average share of the set (0 to 1) that a pilot of [`PILOT_QUERIES`] k-NN queries
/// (k = [`PILOT_K`]), items of the index's own copy of the set, evaluated against `index`. `None`
/// below [`PILOT_MIN_ITEMS`] items. (It reads the index's items, not the input the index was
/// built from, which may have changed since.)
pub fn evaluated_share(index: &DatasetIndex) -> Result<Option<f64>> {
    let n = index.len();
    if n < PILOT_MIN_ITEMS {
        return Ok(None);
    }
    let q = PILOT_QUERIES.min(n);
    let ids: Vec<usize> = (0..q).map(|i| i * n / q + (n / q) / 2).collect();
    let queries: Dataset = match index {
        DatasetIndex::Vectors(i) => {
            let space = i.space();
            let vals: Vec<f32> = ids
                .iter()
                .flat_map(|&x| space.item(x).iter().copied())
                .collect();
            VectorSet::from_f32(q, space.dim(), vals)?.into()
        }
        DatasetIndex::Strings(i) => {
            let set = i.space().strings();
            StringSet::from_strings(ids.iter().map(|&x| set.get_string(x)))?.into()
        }
    };
    let res = index.knn(&queries, PILOT_K)?;
    Ok(Some(
        res.stats.distance_evals as f64 / (q as f64 * n as f64),
    ))
}

/// The one-line warning for an index whose pilot evaluated `share` of the set per query, or
/// `None` when it prunes.
pub fn warning(share: f64) -> Option<String> {
    (share > NO_PRUNING_SHARE).then(|| {
        format!(
            "warning: this index cannot prune this data: a pilot of {PILOT_QUERIES} queries \
             evaluated {:.0}% of the set per query (the intrinsic dimension is too high); \
             brute force (voisin knn / range / graph) will be as fast or faster",
            share * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, Params};
    use rand::prelude::*;
    use voisin::Metric;

    fn normal(n: usize, d: usize, seed: u64) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..n * d)
            .map(|_| {
                // Sum of uniforms: close enough to normal for a concentration test.
                (0..6).map(|_| rng.gen::<f32>()).sum::<f32>() - 3.0
            })
            .collect();
        VectorSet::from_f32(n, d, v).unwrap().into()
    }

    #[test]
    fn high_dimension_is_reported_low_dimension_is_not() {
        let high = normal(2000, 64, 1);
        let index =
            DatasetIndex::build(&high, Metric::Euclidean, Kind::Lc, &Params::default()).unwrap();
        let share = evaluated_share(&index).unwrap().unwrap();
        assert!(warning(share).is_some(), "share {share}");
        let low = normal(2000, 2, 2);
        let index =
            DatasetIndex::build(&low, Metric::Euclidean, Kind::Lc, &Params::default()).unwrap();
        let share = evaluated_share(&index).unwrap().unwrap();
        assert!(warning(share).is_none(), "share {share}");
        let small = normal(100, 64, 3);
        let index =
            DatasetIndex::build(&small, Metric::Euclidean, Kind::Lc, &Params::default()).unwrap();
        assert_eq!(evaluated_share(&index).unwrap(), None);
    }
}
