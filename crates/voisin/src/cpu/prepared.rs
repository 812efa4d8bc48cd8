//! A base prepared for the CPU engine ([`CpuPrepared`]): the tile plan of its vectors (for the
//! euclidean metrics, the base's column means, a pass over every row) and, when they fit in half
//! the engine's memory budget, every base tile prepared (rows converted to f32 and scaled as the
//! base's values need, docs/design/exact-scaling.md; centred or normalised for the metric, with
//! their norms), made once instead of at every search. A small
//! batch then reads the prepared tiles and nothing else of the base: preparing them was most of
//! a single query's time. A base too large for that prepares its tiles at every search, as an
//! unprepared one does; results are the same either way, byte for byte.

use std::sync::Arc;

use super::{plan::BASE_TILE, tiles, tiles_apply, CpuEngine};
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
    /// None when the base is not searched by f32 tiles (exact keys throughout).
    plan: Option<tiles::BasePlan>,
}

impl CpuPrepared {
    /// Prepares `base` for searches under `metric` on `engine`: plans its vector tiles and keeps
    /// them prepared when they fit in half the memory budget. Errors with
    /// [`crate::Error::InvalidInput`] when the metric does not apply to the base.
    pub fn new(engine: Arc<CpuEngine>, base: Arc<Dataset>, metric: &Metric) -> Result<Self> {
        check_metric(&base, metric)?;
        let plan = match &*base {
            Dataset::Vectors(b) if tiles_apply(metric) => {
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
        self.engine.knn_planned(&req, self.plan.as_ref())
    }

    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        let req = RangeRequest::new(&self.base, queries, radius, &self.metric)?;
        self.engine.range_planned(&req, self.plan.as_ref())
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
    use crate::{Engine, VectorSet};

    fn engine(memory_budget: usize) -> Arc<CpuEngine> {
        let opts = CpuOptions {
            memory_budget,
            ..CpuOptions::default()
        };
        Arc::new(CpuEngine::new(opts).unwrap())
    }

    fn f64_set(n: usize, d: usize, scale: f64, seed: u64) -> Dataset {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let values = (0..n * d).map(|_| next() * scale).collect();
        VectorSet::from_f64(n, d, values).unwrap().into()
    }

    /// Tiles are kept when they take at most half the memory budget, and not otherwise.
    #[test]
    fn tiles_are_kept_within_half_the_budget() {
        let (n, d) = (2000, 7);
        let values = (0..n * d).map(|i| (i % 97) as f32).collect();
        let base = Arc::new(Dataset::from(VectorSet::from_f32(n, d, values).unwrap()));
        let kept = n * (d + 1) * 4;
        for (budget, keeps) in [(2 * kept, true), (2 * kept - 1, false)] {
            let p = CpuPrepared::new(engine(budget), base.clone(), &Metric::Cosine).unwrap();
            assert_eq!(p.plan.unwrap().keeps_tiles(), keeps, "budget {budget}");
        }
    }

    /// Kept tiles are made at the scale the base's tiles take (docs/design/exact-scaling.md):
    /// far from f32's range, and with queries larger still (which move the problem's scale
    /// away from the one the tiles were kept at), a prepared base answers byte for byte as one
    /// that keeps no tiles and as a one-shot search.
    #[test]
    fn kept_tiles_follow_the_scaling() {
        let (n, d) = (2500, 5);
        let base = Arc::new(f64_set(n, d, 1e200, 3));
        let batches = [f64_set(4, d, 1e200, 4), f64_set(4, d, 1e280, 5)];
        let metrics = [
            Metric::Euclidean,
            Metric::Cosine,
            Metric::InnerProduct,
            Metric::Cityblock,
        ];
        for metric in &metrics {
            let budget = 2 * tiles::BasePlan::kept_bytes(base.as_vectors().unwrap());
            let kept = CpuPrepared::new(engine(budget), base.clone(), metric).unwrap();
            let not = CpuPrepared::new(engine(budget - 1), base.clone(), metric).unwrap();
            assert!(kept.plan.as_ref().unwrap().keeps_tiles());
            assert!(!not.plan.as_ref().unwrap().keeps_tiles());
            for q in &batches {
                let one_shot = CpuEngine::default().knn(&base, q, 10, metric).unwrap();
                for p in [&kept, &not] {
                    let got = p.knn(q, 10).unwrap();
                    assert_eq!(got.indices, one_shot.indices, "{metric}");
                    let bits = |r: &KnnResult| r.distances.iter().map(|x| x.to_bits()).collect();
                    let want: Vec<u32> = bits(&one_shot);
                    assert_eq!(bits(&got), want, "{metric}");
                }
            }
        }
    }
}
