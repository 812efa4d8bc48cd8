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
use crate::ops::device_set::SharedNorms;
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

    /// The prepared norm of every base item, where the host holds them: lets a query the bound
    /// at the base's largest norm leaves unproved be proved on each pair's own bound
    /// ([`Numerics::norm_aware`]). `None` (a streamed base) keeps the bound at the largest.
    fn base_norms(&self) -> Option<SharedNorms> {
        None
    }

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

/// How a query's list was proved, which also decides which of its candidates the exact re-rank
/// needs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Proof {
    /// Not proved: the list widens.
    Open,
    /// Proved (or complete) on the query's bound at the base's largest norm.
    Uniform,
    /// Proved on each pair's own bound: the k-th smallest upper bound of the kept pairs, which
    /// every left-out item's lower bound clears ([`Numerics::left_out_lower`]).
    Aware(f64),
}

/// The bounds a finish proves with: each query's at the base's largest norm, and for
/// [`Numerics::norm_aware`] plans whose source knows every base item's norm, each pair's own.
struct Bounds<'p> {
    plan: &'p Numerics,
    abs: Vec<f64>,
    bmax: f64,
    /// The queries' and the base items' prepared norms, for the pairs' own bounds.
    aware: Option<(Vec<f64>, SharedNorms)>,
}

impl<'p> Bounds<'p> {
    fn of(plan: &'p Numerics, src: &dyn CandidateSource) -> Self {
        let (qnorm, bmax) = src.norms();
        let abs = qnorm.iter().map(|&qn| plan.abs_bound(qn, bmax)).collect();
        let aware = match plan.norm_aware() {
            true => src.base_norms().map(|b| (qnorm.to_vec(), b)),
            false => None,
        };
        Bounds {
            plan,
            abs,
            bmax,
            aware,
        }
    }

    /// The bound of query `q` against base item `b`, at `b`'s own norm.
    fn pair_abs(&self, (qnorm, bnorm): &(Vec<f64>, SharedNorms), q: usize, b: u32) -> f64 {
        self.plan.abs_bound(qnorm[q], bnorm[b as usize])
    }

    /// Whether `cands` (ascending approximate keys, the self pair dropped) hold query `q`'s `k`
    /// nearest, whatever the tie-break. `barrier`: the largest approximate key of the list as
    /// selected, at most that of any item left out; `None` for a complete list (nothing left
    /// out).
    fn prove(&self, q: usize, cands: &[(f32, u32)], k: usize, barrier: Option<f32>) -> Proof {
        let plan = self.plan;
        let Some(b) = barrier else {
            return match &self.aware {
                Some(a) if !cands.is_empty() => Proof::Aware(self.kth_upper(a, q, cands, k)),
                _ => Proof::Uniform,
            };
        };
        if cands.len() < k {
            return Proof::Open;
        }
        let abs = self.abs[q];
        if plan.lower(b, abs) > plan.upper(cands[k - 1].0, abs) {
            return Proof::Uniform;
        }
        let Some(a) = &self.aware else {
            return Proof::Open;
        };
        // Any k kept pairs whose exact keys are all below every left-out item's prove it.
        let top = self.kth_upper(a, q, cands, k);
        match plan.left_out_lower(b, a.0[q], self.bmax) > top {
            true => Proof::Aware(top),
            false => Proof::Open,
        }
    }

    /// The `k`-th smallest (or, for fewer candidates, the largest) upper bound of the pairs.
    fn kth_upper(
        &self,
        a: &(Vec<f64>, SharedNorms),
        q: usize,
        cands: &[(f32, u32)],
        k: usize,
    ) -> f64 {
        let mut ups: Vec<f64> = cands
            .iter()
            .map(|c| self.plan.upper(c.0, self.pair_abs(a, q, c.1)))
            .collect();
        let kk = k.min(ups.len()) - 1;
        *ups.select_nth_unstable_by(kk, f64::total_cmp).1
    }

    /// Keeps of `cands` (a proved list, ascending) those whose lower bound reaches the `k`-th
    /// upper bound: only they can be among the `k` nearest. Returns how many are kept.
    fn keep(&self, q: usize, cands: &mut Vec<(f32, u32)>, k: usize, proof: Proof) -> usize {
        let plan = self.plan;
        let kk = k.min(cands.len());
        if kk == 0 {
            return 0;
        }
        match (proof, &self.aware) {
            (Proof::Aware(top), Some(a)) => {
                // A bound that is not a number keeps its pair.
                cands.retain(|c| {
                    let low = plan.lower(c.0, self.pair_abs(a, q, c.1));
                    low.partial_cmp(&top) != Some(std::cmp::Ordering::Greater)
                });
            }
            _ => {
                let abs = self.abs[q];
                let thr = plan.upper(cands[kk - 1].0, abs);
                let n = cands
                    .iter()
                    .take_while(|c| plan.lower(c.0, abs) <= thr)
                    .count();
                cands.truncate(n);
            }
        }
        cands.len()
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
    let bounds = Bounds::of(plan, &*src);
    let selves = src.self_items();
    // Sort each query's candidates, drop its self pair, and see whether the bound proves them.
    let check = |q: usize, raw: &mut Raw| -> Proof {
        // Only the order of approximate keys matters here (ties are settled on exact keys);
        // block-select lists arrive sorted, radix output does not.
        if !raw.cands.windows(2).all(|w| w[0].0 <= w[1].0) {
            raw.cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        }
        // An empty list that is not complete proves nothing.
        let barrier = match (raw.complete, raw.cands.last()) {
            (true, _) => None,
            (false, Some(c)) => Some(c.0),
            (false, None) => return Proof::Open,
        };
        if let Some(selves) = &selves {
            let s = selves.item(q) as u32;
            raw.cands.retain(|c| c.1 != s);
        }
        bounds.prove(q, &raw.cands, k, barrier)
    };
    let mut tr = src.phases();
    let mut proofs = vec![Proof::Open; nq];
    let mut failing: Vec<usize> = raws
        .par_iter_mut()
        .zip(proofs.par_iter_mut())
        .enumerate()
        .filter_map(|(q, (r, p))| {
            *p = check(q, r);
            (*p == Proof::Open).then_some(q)
        })
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
        let proved: Vec<Proof> = failing
            .par_iter()
            .zip(again.par_iter_mut())
            .map(|(&q, raw)| check(q, raw))
            .collect();
        let mut still = Vec::new();
        for ((q, raw), proof) in failing.iter().copied().zip(again).zip(proved) {
            if proof == Proof::Open {
                still.push(q);
            }
            raws[q] = raw;
            proofs[q] = proof;
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
        .par_iter_mut()
        .zip(&proofs)
        .enumerate()
        .map(|(q, (raw, &proof))| bounds.keep(q, &mut raw.cands, k, proof))
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
        /// Whether the base's norms are given to the finish ([`CandidateSource::base_norms`]).
        aware: bool,
        /// How many queries were redone, over all widenings.
        redone: usize,
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

        fn base_norms(&self) -> Option<SharedNorms> {
            self.aware.then(|| Arc::new(self.tiles.bnorm.clone()))
        }

        fn self_items(&self) -> Option<RowItems> {
            match &self.rows {
                _ if !self.graph => None,
                Some((rows, _)) => Some(RowItems::Of(rows.clone())),
                None => Some(RowItems::From(0)),
            }
        }

        fn redo(&mut self, queries: &[usize], kp: usize) -> Result<Vec<Raw>> {
            self.redone += queries.len();
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
    ///
    /// `aware`: whether the finish is given the base's norms; `lost`: queries whose first lists
    /// arrive empty (a list that proves nothing). Returns the result and how many queries were
    /// redone on wider lists.
    fn host_gpu_knn(
        precision: Arithmetic,
        metric: &Metric,
        (base, queries): (&VectorSet, &VectorSet),
        graph: bool,
        k: usize,
        (aware, lost): (bool, &[usize]),
    ) -> (KnnResult, usize) {
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
            aware,
            redone: 0,
        };
        // A short first list (self pair included for a graph), so that ties make it widen.
        let kp = k + 1 + usize::from(graph);
        let all: Vec<usize> = (0..queries.len()).collect();
        let mut raws = src.lists(&all, kp);
        for &q in lost {
            raws[q] = Raw {
                cands: vec![],
                complete: false,
            };
        }
        let mut stats = Stats::default();
        let rows = finish(&plan, &mut src, k, kp, raws, &mut stats).unwrap();
        (KnnResult::from_rows(rows, k, metric), src.redone)
    }

    fn f64_rows(n: usize, d: usize, value: impl FnMut(usize) -> f64) -> VectorSet {
        VectorSet::from_f64(n, d, (0..n * d).map(value).collect()).unwrap()
    }

    /// The host side of the GPU's f64 path equals the CPU engine byte for byte, on random f64
    /// values near and far from the origin, int64-like integers far out and values that
    /// collide once rounded to f32 (1e8 + 0..16: f32 holds every eighth), values that f32
    /// holds only as subnormals or zeros, for k-NN and graphs, k = 1, 10, n − 1, fp32 and TF32
    /// tiles, with and without each pair's own bound (and then with two first lists empty).
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
                        for (k, aware) in [(1, false), (10, true), (n - 1, false), (n - 1, true)] {
                            let pair = (base, queries);
                            let lost: &[usize] = if aware { &[0, 2] } else { &[] };
                            let (got, _) =
                                host_gpu_knn(precision, m, pair, false, k, (aware, lost));
                            let want = cpu.knn(&b, &q, k, m).unwrap();
                            let say = format!("{what} d={d} {m} {precision:?} k={k} {aware}");
                            assert_eq!(got.indices, want.indices, "{say}: ids");
                            assert_eq!(got.distances, want.distances, "{say}: distances");
                            let pair = (base, base);
                            let (got, _) = host_gpu_knn(precision, m, pair, true, k, (aware, lost));
                            let want = cpu.graph(&b, k, m).unwrap();
                            assert_eq!(got.indices, want.indices, "graph {say}: ids");
                            assert_eq!(got.distances, want.distances, "graph {say}");
                        }
                    }
                }
            }
        }
    }

    /// Norms with a heavy tail (two rows in 40 scaled 10⁴ times, as t-distributed or lognormal
    /// values put a few rows 10²–10⁴ times farther out than the median): the bound at the base's
    /// largest norm proves almost no short list, so nearly every query widens; each pair's own
    /// bound proves most at once (measured: about a quarter as many widenings, a thirtieth in
    /// fp32 at k = 1). Both equal the CPU engine, for k-NN and graphs, f32 and f64 rows.
    #[test]
    fn heavy_tailed_norms_prove_on_each_pairs_own_bound() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let cpu = CpuEngine::default();
        let (n, d) = (200, 16);
        let mut value = |i: usize| {
            let v: f64 = rng.sample(rand_distr::StandardNormal);
            if (i / d) % 40 == 7 {
                v * 1e4
            } else {
                v
            }
        };
        let mut values: Vec<f64> = (0..n * d).map(&mut value).collect();
        // Each far row followed by its mirror image, so that the base mean the rows are centred
        // on stays near the others (one-sided far rows would carry every row far out).
        for r in (0..n).filter(|r| r % 40 == 8) {
            for c in 0..d {
                values[r * d + c] = -values[(r - 1) * d + c];
            }
        }
        let f32s = VectorSet::from_f32(n, d, values.iter().map(|&v| v as f32).collect()).unwrap();
        let f64s = VectorSet::from_f64(n, d, values).unwrap();
        let (mut uniform, mut aware) = (0, 0);
        for set in [&f32s, &f64s] {
            let data = set.clone().into();
            for m in [Metric::Euclidean, Metric::SqEuclidean] {
                for precision in [Arithmetic::Fp32, Arithmetic::Tf32] {
                    for k in [1, 10] {
                        let want = cpu.graph(&data, k, &m).unwrap();
                        for (graph, by) in [(true, true), (true, false), (false, true)] {
                            let pair = (set, set);
                            let (got, redone) =
                                host_gpu_knn(precision, &m, pair, graph, k, (by, &[]));
                            let want = match graph {
                                true => want.clone(),
                                false => cpu.knn(&data, &data, k, &m).unwrap(),
                            };
                            let say = format!("{m} {precision:?} k={k} graph {graph} aware {by}");
                            assert_eq!(got.indices, want.indices, "{say}: ids");
                            assert_eq!(got.distances, want.distances, "{say}");
                            if graph {
                                *(if by { &mut aware } else { &mut uniform }) += redone;
                            }
                        }
                    }
                }
            }
        }
        assert!(
            aware * 3 < uniform,
            "{aware} queries widened on each pair's bound, {uniform} on the largest norm's"
        );
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
                        aware: true,
                        redone: 0,
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
