//! A base prepared for the CPU engine ([`CpuPrepared`]): the tile plan of its vectors (for the
//! euclidean metrics, the base's column means, a pass over every row) made once instead of at
//! every search. Rows are prepared tile by tile as in any search (the tiles are the engine's
//! working set), so a prepared base costs no memory beyond the plan.

use std::sync::Arc;

use super::{tiles, tiles_apply, BaseTiles, CpuEngine};
use crate::data::Dataset;
use crate::engine::{check_metric, KnnRequest, KnnResult, Prepared, RangeRequest, RangeResult};
use crate::error::Result;
use crate::metric::Metric;

/// A base prepared by [`CpuEngine`] ([`crate::Engine::prepare`]); results are the engine's, byte
/// for byte (the plan is the one every search of this base makes).
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
            Dataset::Vectors(b) if tiles_apply(b, metric) => Some(tiles::BasePlan::new(metric, b)),
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
