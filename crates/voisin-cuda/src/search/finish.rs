//! The one prove-widen-re-rank step every k-NN search ends with, over a [`CandidateSource`].
//!
//! The device returns, per query, some `K ≥ k` smallest approximate keys. Every item left out
//! has an approximate key at least the largest one kept (the *barrier*), so when
//! `lower(barrier) > upper(k-th kept)` no left-out item can be among the k nearest, whatever the
//! tie-break; otherwise that query is redone with a wider list. Survivors are re-ranked on exact
//! f64 keys with ties broken by index, which makes the result identical to the CPU engine's.
//!
//! Searches differ only in where a wider list is recomputed and where exact keys come from:
//! a resident base (`knn::Resident`), a streamed one (`stream::Streamed`), shards on several
//! GPUs (`multi::Sharded`) and the rows of a graph (`graph::RowsOfGraph`) each implement
//! [`CandidateSource`].

use std::time::Instant;

use rayon::prelude::*;
use voisin::{Result, Stats};

use crate::numerics::plan::Numerics;
use crate::options::BLOCK_MAX_K;
use crate::runtime::probe::Phases;

/// What the device selected for one query: the candidates a finish proves.
pub(crate) struct Raw {
    /// (approximate key, index), any order; no empty slots.
    pub cands: Vec<(f32, u32)>,
    /// Every eligible item is among `cands`: nothing to prove.
    pub complete: bool,
}

/// Where a search's candidates come from, for the finish: its queries are numbered `0..` in the
/// order of the lists handed to [`finish`].
pub(crate) trait CandidateSource {
    /// How many items the queries are compared with (the base, or the graph's set).
    fn base_len(&self) -> usize;

    /// The prepared norms of the queries (in the finish's numbering) and the base's largest:
    /// what the error bound of each query depends on.
    fn norms(&self) -> (&[f64], f64);

    /// For the rows of a graph, which item each query is (its self pair is dropped from its
    /// list); `None` for a search of other queries.
    fn self_items(&self) -> Option<RowItems> {
        None
    }

    /// Candidates of the listed queries again, with lists of `kp`.
    fn redo(&mut self, queries: &[usize], kp: usize) -> Result<Vec<Raw>>;

    /// Exact keys of [query, base index] pairs, in order.
    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>>;

    /// Times the finish's phases for the probe of the GPU that runs it.
    fn phases(&self) -> Phases;
}

/// The items of a graph's rows, in the finish's numbering of its queries.
#[derive(Clone, Debug)]
pub(crate) enum RowItems {
    /// Query `q` is item `first + q`.
    From(usize),
    /// Query `q` is item `items[q]`.
    Of(Vec<u32>),
}

impl RowItems {
    pub fn item(&self, q: usize) -> usize {
        match self {
            RowItems::From(first) => first + q,
            RowItems::Of(items) => items[q] as usize,
        }
    }
}

/// Proves, widens and re-ranks.
///
/// `raws[q]` are the device's candidates for query `q`, from lists of `kp`; `src` recomputes
/// wider lists and gives exact keys. Returns per query its `k` nearest as (exact key, index),
/// sorted.
pub(crate) fn finish(
    plan: &Numerics,
    src: &mut dyn CandidateSource,
    k: usize,
    mut kp: usize,
    mut raws: Vec<Raw>,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let nq = raws.len();
    let (qnorm, base_max_norm) = src.norms();
    let abs: Vec<f64> = (0..nq)
        .map(|q| plan.abs_bound(qnorm[q], base_max_norm))
        .collect();
    let selves = src.self_items();
    // Sort each query's candidates, drop its self pair, and see whether the bound proves them.
    let check = |q: usize, raw: &mut Raw| -> bool {
        // Only the order of approximate keys matters here (ties are settled on exact keys);
        // block-select lists arrive sorted, radix output does not.
        if !raw.cands.windows(2).all(|w| w[0].0 <= w[1].0) {
            raw.cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        }
        let barrier = raw.cands.last().map(|c| c.0);
        if let Some(selves) = &selves {
            let s = selves.item(q) as u32;
            raw.cands.retain(|c| c.1 != s);
        }
        if raw.complete {
            return true;
        }
        match barrier {
            Some(b) if raw.cands.len() >= k => {
                plan.lower(b, abs[q]) > plan.upper(raw.cands[k - 1].0, abs[q])
            }
            _ => false,
        }
    };
    let mut tr = src.phases();
    let mut failing: Vec<usize> = raws
        .par_iter_mut()
        .enumerate()
        .filter_map(|(q, r)| (!check(q, r)).then_some(q))
        .collect();
    tr.note(format_args!(
        "{} of {nq} queries need a wider list",
        failing.len()
    ));
    tr.mark("finish: sort and prove");
    let n_pow = src.base_len().next_power_of_two().max(1);
    while !failing.is_empty() {
        // Widen fourfold, to at least the block selection's widest list (or to everything):
        // each retry costs a pass over the base for those queries only, about the same for any
        // list the block selection keeps (the 152 queries clustered data left open at k = 10
        // took 2.3 ms at 512 entries, then 2.4 ms again at 2048), and ties wide enough to need
        // more are rare outside adversarial data.
        kp = (kp * 4).max(BLOCK_MAX_K).min(n_pow);
        let mut again = src.redo(&failing, kp)?;
        // In parallel: each widened list (kp entries, radix lists unsorted) is sorted
        // here; one at a time, the 149 widened queries of the clustered 1M × 128 k-NN at
        // k = 1000 took ~25 ms of the host.
        let proved: Vec<bool> = failing
            .par_iter()
            .zip(again.par_iter_mut())
            .map(|(&q, raw)| check(q, raw))
            .collect();
        let mut still = Vec::new();
        for ((q, raw), ok) in failing.iter().copied().zip(again).zip(proved) {
            if !ok {
                still.push(q);
            }
            raws[q] = raw;
        }
        if !still.is_empty() && kp >= n_pow {
            return Err(voisin::Error::device(
                "cuda: candidate widening did not converge (internal error)",
            ));
        }
        failing = still;
    }
    let t = Instant::now();
    // Only candidates whose interval reaches the k-th upper bound can be among the k nearest.
    let keep: Vec<usize> = raws
        .par_iter()
        .enumerate()
        .map(|(q, raw)| {
            let kk = k.min(raw.cands.len());
            if kk == 0 {
                return 0;
            }
            let thr = plan.upper(raw.cands[kk - 1].0, abs[q]);
            raw.cands
                .iter()
                .take_while(|c| plan.lower(c.0, abs[q]) <= thr)
                .count()
        })
        .collect();
    let mut pairs = vec![[0u32; 2]; keep.iter().sum()];
    {
        // Disjoint per-query slices, filled in parallel.
        let mut rest = &mut pairs[..];
        let mut parts = Vec::with_capacity(nq);
        for &n in &keep {
            let (a, b) = rest.split_at_mut(n);
            parts.push(a);
            rest = b;
        }
        parts
            .into_par_iter()
            .zip(raws.par_iter())
            .enumerate()
            .for_each(|(q, (part, raw))| {
                for (p, c) in part.iter_mut().zip(&raw.cands) {
                    *p = [q as u32, c.1];
                }
            });
    }
    tr.mark("finish: widen, filter, list pairs");
    let keys = src.exact_keys(&pairs)?;
    tr.mark("finish: exact keys");
    stats.exact_evals += keys.len() as u64;
    let mut rows: Vec<&[f64]> = Vec::with_capacity(nq);
    let mut at = 0;
    for &n in &keep {
        rows.push(&keys[at..at + n]);
        at += n;
    }
    let out = rows
        .into_par_iter()
        .zip(raws.par_iter())
        .map(|(ks, raw)| {
            let mut row: Vec<(f64, u32)> =
                ks.iter().zip(&raw.cands).map(|(&k, c)| (k, c.1)).collect();
            row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            row.truncate(k);
            row
        })
        .collect();
    tr.mark("finish: final sort");
    // One list per item of a graph: freed in parallel (serially ~0.1 s at 2M items).
    raws.into_par_iter().for_each(drop);
    stats.select += t.elapsed();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::prelude::*;
    use voisin::cpu::CpuEngine;
    use voisin::{Engine, KnnResult, Metric, VectorSet};

    use super::*;
    use crate::numerics::plan::Arithmetic;
    use crate::numerics::plan::{Conv, HostTiles};
    use crate::ops::exact::host_keys;
    use crate::runtime::probe::NoProbe;

    /// Candidates as the device selects them, from the GPU's approximate keys computed on the
    /// host ([`HostTiles`]); ties at a list's end are cut against the lower indices, the order
    /// least favourable to the final tie-break by index.
    struct HostSource<'a> {
        tiles: HostTiles,
        metric: &'a Metric,
        base: &'a VectorSet,
        queries: &'a VectorSet,
        graph: bool,
        /// The query of each of the finish's rows (a graph's scattered items); all, in order,
        /// when `None`.
        rows: Option<(Vec<u32>, Vec<f64>)>,
    }

    impl HostSource<'_> {
        fn query(&self, q: usize) -> usize {
            self.rows.as_ref().map_or(q, |(r, _)| r[q] as usize)
        }

        fn lists(&self, queries: &[usize], kp: usize) -> Vec<Raw> {
            queries
                .iter()
                .map(|&q| {
                    let j = self.query(q);
                    let mut cands: Vec<(f32, u32)> = self.tiles.keys[j]
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| (v, i as u32))
                        .collect();
                    cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
                    cands.truncate(kp);
                    Raw {
                        complete: cands.len() >= self.base.len(),
                        cands,
                    }
                })
                .collect()
        }
    }

    impl CandidateSource for HostSource<'_> {
        fn base_len(&self) -> usize {
            self.base.len()
        }

        fn norms(&self) -> (&[f64], f64) {
            match &self.rows {
                Some((_, norms)) => (norms, self.tiles.bmax),
                None => (&self.tiles.qnorm, self.tiles.bmax),
            }
        }

        fn self_items(&self) -> Option<RowItems> {
            match &self.rows {
                _ if !self.graph => None,
                Some((rows, _)) => Some(RowItems::Of(rows.clone())),
                None => Some(RowItems::From(0)),
            }
        }

        fn redo(&mut self, queries: &[usize], kp: usize) -> Result<Vec<Raw>> {
            Ok(self.lists(queries, kp))
        }

        fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>> {
            let pairs: Vec<[u32; 2]> = pairs
                .iter()
                .map(|&[q, b]| [self.query(q as usize) as u32, b])
                .collect();
            Ok(host_keys(self.metric, self.base, self.queries, &pairs))
        }

        fn phases(&self) -> Phases {
            Phases::start(Arc::new(NoProbe))
        }
    }

    /// The GPU's k-NN (or graph, when `queries` is `base`) of f64 rows with the device's
    /// arithmetic done on the host: the widened plan, the proof and widening of [`finish`] and
    /// exact keys on the f64 values.
    fn host_gpu_knn(
        precision: Arithmetic,
        metric: &Metric,
        base: &VectorSet,
        queries: &VectorSet,
        graph: bool,
        k: usize,
    ) -> KnnResult {
        let plan = Numerics::new(metric, base)
            .with_inputs(metric, base, queries)
            .in_arithmetic(precision);
        let conv = match precision {
            Arithmetic::Fp32 => Conv::Each(|x: f32| x),
            // TF32 at its worst: the 13 low mantissa bits cut off.
            Arithmetic::Tf32 => Conv::Each(|x: f32| f32::from_bits(x.to_bits() & !0x1fff)),
            p => unreachable!("f64 rows tile in fp32 or tf32, not {p}"),
        };
        let mut src = HostSource {
            tiles: HostTiles::new(&plan, metric, base, queries, conv),
            metric,
            base,
            queries,
            graph,
            rows: None,
        };
        // A short first list (self pair included for a graph), so that ties make it widen.
        let kp = k + 1 + usize::from(graph);
        let all: Vec<usize> = (0..queries.len()).collect();
        let raws = src.lists(&all, kp);
        let mut stats = Stats::default();
        let rows = finish(&plan, &mut src, k, kp, raws, &mut stats).unwrap();
        KnnResult::from_rows(rows, k, metric)
    }

    fn f64_rows(n: usize, d: usize, value: impl FnMut(usize) -> f64) -> VectorSet {
        VectorSet::from_f64(n, d, (0..n * d).map(value).collect()).unwrap()
    }

    /// The host side of the GPU's f64 path equals the CPU engine byte for byte, on random f64
    /// values near and far from the origin, int64-like integers far out and values that
    /// collide once rounded to f32 (1e8 + 0..16: f32 holds every eighth), values that f32
    /// holds only as subnormals or zeros, for k-NN and graphs,
    /// k = 1, 10, n − 1, fp32 and TF32 tiles.
    #[test]
    fn f64_finish_equals_the_cpu_engine() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let cpu = CpuEngine::default();
        let metrics: Vec<Metric> = Metric::builtins()
            .into_iter()
            .filter(|m| *m != Metric::Levenshtein)
            .collect();
        for d in [1usize, 3, 17] {
            let n = 60;
            let mut gauss = |centre: f64| {
                let v: f64 = rng.sample(rand_distr::StandardNormal);
                centre + v
            };
            let random = f64_rows(n, d, |_| gauss(0.0));
            let far = f64_rows(n, d, |_| gauss(1e6));
            let random_q = f64_rows(9, d, |_| gauss(0.0));
            let far_q = f64_rows(9, d, |_| gauss(1e6));
            // Subnormal in f32 (1e-41) or below it (1e-47, rounded to zero): rows that vanish.
            let tiny = f64_rows(n, d, |i| {
                gauss(0.0) * if i % 3 == 0 { 1e-47 } else { 1e-41 }
            });
            let tiny_q = f64_rows(9, d, |_| gauss(0.0) * 1e-41);
            let colliding = f64_rows(n, d, |_| 1e8 + rng.gen_range(0..16) as f64);
            let colliding_q = f64_rows(9, d, |_| 1e8 + rng.gen_range(0..16) as f64);
            let ints = f64_rows(n, d, |_| 1e12 + rng.gen_range(-40..40) as f64);
            let ints_q = f64_rows(9, d, |_| 1e12 + rng.gen_range(-40..40) as f64);
            let narrow_q = VectorSet::from_f32(
                9,
                d,
                (0..9 * d).map(|_| rng.gen_range(-2.0f32..2.0)).collect(),
            )
            .unwrap();
            let cases = [
                ("random", &random, &random_q),
                ("far", &far, &far_q),
                ("colliding", &colliding, &colliding_q),
                ("ints", &ints, &ints_q),
                ("tiny", &tiny, &tiny_q),
                ("f32 queries", &random, &narrow_q),
            ];
            for (what, base, queries) in cases {
                let (b, q) = (base.clone().into(), queries.clone().into());
                for m in &metrics {
                    for precision in [Arithmetic::Fp32, Arithmetic::Tf32] {
                        for k in [1, 10, n - 1] {
                            let got = host_gpu_knn(precision, m, base, queries, false, k);
                            let want = cpu.knn(&b, &q, k, m).unwrap();
                            let say = format!("{what} d={d} {m} {precision:?} k={k}");
                            assert_eq!(got.indices, want.indices, "{say}: ids");
                            assert_eq!(got.distances, want.distances, "{say}: distances");
                            let got = host_gpu_knn(precision, m, base, base, true, k);
                            let want = cpu.graph(&b, k, m).unwrap();
                            assert_eq!(got.indices, want.indices, "graph {say}: ids");
                            assert_eq!(got.distances, want.distances, "graph {say}");
                        }
                    }
                }
            }
        }
    }

    /// A graph's rows finished for scattered items (`RowItems::Of`: the rows the device finish
    /// leaves open, numbered 0.. in the finish) equal the CPU engine's rows of those items: each
    /// row drops its own item, widens and re-ranks on the right query. Random and colliding
    /// values (equal keys around the k-th), every vector metric, fp32 and TF32 tiles.
    #[test]
    fn graph_rows_of_scattered_items_equal_the_cpu_engine() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let cpu = CpuEngine::default();
        let n = 60;
        let d = 3;
        let random = f64_rows(n, d, |_| rng.sample::<f64, _>(rand_distr::StandardNormal));
        let colliding = f64_rows(n, d, |_| 1e8 + rng.gen_range(0..4) as f64);
        let rows: Vec<u32> = (0..n as u32)
            .filter(|i| i % 3 == 1 || *i == 0)
            .rev()
            .collect();
        for (what, set) in [("random", &random), ("colliding", &colliding)] {
            let data = set.clone().into();
            for m in Metric::builtins()
                .into_iter()
                .filter(|m| *m != Metric::Levenshtein)
            {
                for precision in [Arithmetic::Fp32, Arithmetic::Tf32] {
                    let plan = Numerics::new(&m, set)
                        .with_inputs(&m, set, set)
                        .in_arithmetic(precision);
                    let conv = match precision {
                        Arithmetic::Fp32 => Conv::Each(|x: f32| x),
                        _ => Conv::Each(|x: f32| f32::from_bits(x.to_bits() & !0x1fff)),
                    };
                    let tiles = HostTiles::new(&plan, &m, set, set, conv);
                    let norms = rows.iter().map(|&r| tiles.qnorm[r as usize]).collect();
                    let mut src = HostSource {
                        tiles,
                        metric: &m,
                        base: set,
                        queries: set,
                        graph: true,
                        rows: Some((rows.clone(), norms)),
                    };
                    for k in [1, 10, n - 1] {
                        let kp = k + 2;
                        let all: Vec<usize> = (0..rows.len()).collect();
                        let raws = src.lists(&all, kp);
                        let mut stats = Stats::default();
                        let got = finish(&plan, &mut src, k, kp, raws, &mut stats).unwrap();
                        let got = KnnResult::from_rows(got, k, &m);
                        let want = cpu.graph(&data, k, &m).unwrap();
                        for (q, &r) in rows.iter().enumerate() {
                            let say = format!("{what} {m} {precision:?} k={k} item {r}");
                            assert_eq!(got.row(q).0, want.row(r as usize).0, "{say}: ids");
                            assert_eq!(got.row(q).1, want.row(r as usize).1, "{say}");
                        }
                    }
                }
            }
        }
    }
}
