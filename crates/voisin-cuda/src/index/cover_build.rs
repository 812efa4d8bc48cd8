//! The cover tree built on the GPU (docs/design/gpu-cover-tree.md, after [SharmaJoshi]'s
//! breadth-first construction): voisin-index's level algorithm as the CPU build runs it
//! (`CoverTree::build_with`), with every distance evaluation of a level sent here in a few large
//! batches and measured by `kernels/index/cover_pairs.cu`, one thread a pair.
//!
//! The distances come from the device pair oracle (`oracle.rs`), exact under every metric it
//! takes, so the tree is the CPU build's, node for node.

use voisin::{Dataset, Error, Metric, Result};
use voisin_index::{CoverTree, DatasetIndex, Index, Params, StringSpace, VectorSpace};

use super::oracle::DeviceOracle;
use crate::engine::CudaEngine;

/// Builds a cover tree of base `base` over `data` under `metric` on the engine's GPU: the same
/// tree and the same index file as `DatasetIndex::build(data, metric, Kind::Cover, ..)` on the
/// CPU. Vectors take euclidean, cityblock, chebyshev or minkowski (p >= 1), strings
/// levenshtein; user metrics are refused (they run on the CPU).
pub fn build_cover(
    engine: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    base: f64,
) -> Result<DatasetIndex> {
    Params {
        base,
        ..Params::default()
    }
    .check()?;
    Ok(match data {
        Dataset::Vectors(v) => {
            if !matches!(
                metric,
                Metric::Euclidean | Metric::Cityblock | Metric::Chebyshev | Metric::Minkowski(_)
            ) {
                return Err(refused(&metric));
            }
            let space = VectorSpace::new(v, metric)?;
            let oracle = DeviceOracle::vectors(engine, &space)?;
            DatasetIndex::Vectors(Index::Cover(CoverTree::build_with(
                space.clone(),
                base,
                &oracle,
            )?))
        }
        Dataset::Strings(s) => {
            if metric != Metric::Levenshtein {
                return Err(refused(&metric));
            }
            let space = StringSpace::new(s.clone(), metric)?;
            let oracle = DeviceOracle::strings(engine, &space)?;
            DatasetIndex::Strings(Index::Cover(CoverTree::build_with(
                space.clone(),
                base,
                &oracle,
            )?))
        }
    })
}

fn refused(metric: &Metric) -> Error {
    Error::invalid(format!(
        "the GPU builds cover trees under euclidean, cityblock, chebyshev, minkowski and \
         levenshtein, not {metric} (build on the CPU)"
    ))
}
