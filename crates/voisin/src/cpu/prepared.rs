//! A base prepared for the CPU engine ([`CpuPrepared`]): the tile plan of its vectors (for the
//! euclidean metrics, the base's column means, a pass over every row) and, when they fit in half
//! the engine's memory budget, every base tile prepared (rows converted to f32, centred or
//! normalised for the metric, with their norms), made once instead of at every search. A small
//! batch then reads the prepared tiles and nothing else of the base: preparing them was most of
//! a single query's time. A base too large for that prepares its tiles at every search, as an
//! unprepared one does; results are the same either way, byte for byte.

use std::sync::Arc;

use super::{plan::BASE_TILE, tiles, tiles_apply, BaseTiles, CpuEngine};
use crate::data::Dataset;
use crate::engine::{check_metric, KnnRequest, KnnResult, Prepared, RangeRequest, RangeResult};
use crate::error::Result;
use crate::metric::Metric;

/// A base prepared by [`CpuEngine`] ([`crate::Engine::prepare`]); results are the engine's, byte
/// for byte (the plan is the one every search of this base makes, the kept tiles the ones it
/// prepares).
pub struct CpuPrepared {
    engine: Arc<CpuEngine>,
    base: Arc<Dataset>,
    metric: Metric,
    /// None when the base is not searched by f32 tiles (exact keys throughout), decided here
    /// once: a search does not look at the base's values again.
    plan: Option<tiles::BasePlan>,
}

impl CpuPrepared {
    pub fn new(engine: Arc<CpuEngine>, base: Arc<Dataset>, metric: &Metric) -> Result<Self> {
        check_metric(&base, metric)?;
        let plan = match &*base {
            Dataset::Vectors(b) if tiles_apply(b, metric) => {
                let plan = tiles::BasePlan::new(metric, b);
                // The other half of the budget is the searches' candidates (search.rs).
                if tiles::BasePlan::kept_bytes(b) <= engine.opts.memory_budget / 2 {
                    Some(
                        engine
                            .pool
                            .install(|| plan.keeping_tiles(metric, b, BASE_TILE)),
                    )
                } else {
                    Some(plan)
                }
            }
            _ => None,
        };
        Ok(CpuPrepared {
            engine,
            base,
            metric: metric.clone(),
            plan,
        })
    }
}

impl Prepared for CpuPrepared {
    fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult> {
        let req = KnnRequest::new(&self.base, queries, k, &self.metric)?;
        self.engine
            .knn_planned(&req, BaseTiles::Prepared(self.plan.as_ref()))
    }

    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        let req = RangeRequest::new(&self.base, queries, radius, &self.metric)?;
        self.engine
            .range_planned(&req, BaseTiles::Prepared(self.plan.as_ref()))
    }

    fn len(&self) -> usize {
        self.base.len()
    }

    fn metric(&self) -> &Metric {
        &self.metric
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuOptions;
    use crate::VectorSet;

    /// Tiles are kept when they take at most half the memory budget, and not otherwise; a
    /// base the f32 tiles do not answer has no plan at all.
    #[test]
    fn tiles_are_kept_within_half_the_budget() {
        let (n, d) = (2000, 7);
        let values = (0..n * d).map(|i| (i % 97) as f32).collect();
        let base = Arc::new(Dataset::from(VectorSet::from_f32(n, d, values).unwrap()));
        let kept = n * (d + 1) * 4;
        for (budget, keeps) in [(2 * kept, true), (2 * kept - 1, false)] {
            let engine = CpuEngine::new(CpuOptions {
                memory_budget: budget,
                ..CpuOptions::default()
            })
            .unwrap();
            let p = CpuPrepared::new(Arc::new(engine), base.clone(), &Metric::Cosine).unwrap();
            assert_eq!(p.plan.unwrap().keeps_tiles(), keeps, "budget {budget}");
        }
        let far = VectorSet::from_f64(1, 1, vec![1e300]).unwrap();
        let p = CpuPrepared::new(Arc::default(), Arc::new(far.into()), &Metric::Cosine).unwrap();
        assert!(p.plan.is_none());
    }
}
