//! The pilots that shape a k-NN search or graph before it runs: the arithmetic under
//! `--precision auto` ([`AutoChoice`]: TF32 or fp32 tiles, from a few queries' proof lengths)
//! and the first list's size where the bound needs more room than `list_size` gives
//! ([`pilot_list`]). Both look at up to 32 evenly spaced queries: on the device against a base
//! that is up, or, for the arithmetic of a base still to go up, on the host against a strided
//! sample of it (so that the upload stays behind the search's first tiles).
//!
//! Owns the pilots' sampling and measurements. The rule that weighs them
//! ([`tf32_list`]) and the bounds belong to numerics/plan.rs.

use std::sync::OnceLock;

use rayon::prelude::*;
use voisin::Result;

use crate::numerics::plan::{Arithmetic, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::ops::select::Select;
use crate::ops::Budget;
use crate::search::knn::candidates;
use crate::search::route::{self, AutoMeasured, AutoShape, AutoTaken, PilotNeed};
use crate::search::SearchCtx;

/// Queries a pilot looks at.
const PILOT_QUERIES: usize = 32;

/// What a pilot is asked about a search: its queries, the neighbours each wants, and whether
/// the queries are the base (a graph: each row's own item sits among its lists).
#[derive(Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub queries: &'a voisin::VectorSet,
    pub k: usize,
    pub self_pairs: bool,
}

/// The base a pilot measures against: its host rows and the device set they are (or are going
/// up) in.
#[derive(Clone, Copy)]
pub(crate) struct Base<'a, 'd> {
    pub rows: &'a voisin::VectorSet,
    pub dev: &'a DeviceSet<'d>,
}

/// The plan a search runs under after `--precision auto`'s pilot, and the wider first list
/// TF32 starts from where the pilot sized one ([`AutoChoice::plan`]).
pub(crate) struct Piloted {
    pub plan: Numerics,
    pub first_list: Option<usize>,
}

/// The queries of a pilot on the device: up to [`PILOT_QUERIES`] evenly spaced rows of a
/// search's queries, and how many nearest their proofs must settle (`kk`: k, plus the query
/// itself where the queries are the base).
struct Pilot {
    sub: DeviceSet<'static>,
    kk: usize,
}

impl Pilot {
    fn new(ctx: &SearchCtx<'_>, asked: Asked<'_>) -> Result<Pilot> {
        let mut tr = ctx.gpu.phases();
        let queries = asked.queries;
        let sub = DeviceSet::gather(ctx.gpu, ctx.plan, queries, &pilot_ids(queries.len()))?;
        tr.mark("pilot: gather");
        Ok(Pilot {
            sub,
            kk: asked.k + usize::from(asked.self_pairs),
        })
    }

    /// The approximate keys of each pilot query's list of `seen` under `ctx`'s plan, sorted;
    /// `None` for a list with nothing to prove (complete, or shorter than `kk`). One pass over
    /// the base.
    fn lists(
        &self,
        ctx: &SearchCtx<'_>,
        base: &DeviceSet,
        seen: usize,
        budget: &Budget,
    ) -> Result<Vec<Option<Vec<f32>>>> {
        let mut tr = ctx.gpu.phases();
        let raws = candidates(ctx, base, &self.sub, seen, Select::Auto, budget)?;
        tr.mark("pilot: candidates");
        Ok(raws
            .into_iter()
            .map(|raw| {
                if raw.complete || raw.cands.len() < self.kk {
                    return None;
                }
                let mut keys: Vec<f32> = raw.cands.iter().map(|c| c.0).collect();
                keys.sort_unstable_by(f32::total_cmp);
                Some(keys)
            })
            .collect())
    }

    /// How long a list proves pilot query `j`, whose list holds `keys` (sorted), under `plan`
    /// against a base of largest norm `base_norm` ([`Numerics::proof_length`]).
    fn need(&self, plan: &Numerics, j: usize, keys: &[f32], base_norm: f64) -> Option<usize> {
        let abs = plan.abs_bound(self.sub.norm()[j], base_norm);
        plan.proof_length(keys, self.kk, abs)
    }
}

/// Which arithmetic the searches of one base run where `--precision auto` left fp32 GEMM tiles
/// on f32 rows ([`route::auto_tf32`]): fp32, TF32, or for a graph fp16x3: decided by a pilot at
/// the first search that asks ([`AutoChoice::plan`]) and kept for the later ones (a prepared
/// base decides once).
#[derive(Default)]
pub(crate) struct AutoChoice(OnceLock<Arithmetic>);

impl AutoChoice {
    /// The plan a search of `base` (its host rows, and the device set they are or are going up
    /// to) for what is `asked` runs under: `ctx`'s own, or its TF32 (or, for a graph, fp16x3)
    /// form where auto may take it and the pilot (now, or at this base's first search) took it.
    ///
    /// The pilot: up to 32 evenly spaced queries, their lists of the usual pilot length
    /// (4 × `first_list(k)`, at least 256), and for each the length of list that proves it
    /// under TF32's bound and under fp32's (the same keys); [`tf32_list`] decides, and for a
    /// k-NN search (d < 1024) also whether TF32 should start from a wider first list, which
    /// comes back with the plan (only from the search whose pilot ran: it is sized for its k).
    /// Against a base that is up (a prepared base, a graph) the lists come from one TF32 pass
    /// over it on the device. A k-NN base still to go up behind the first tiles is sampled on
    /// the host instead ([`Sample`]), unless it is wide (d ≥ 1024: its list pilot needs the
    /// whole base up before the search anyway).
    pub fn plan(
        &self,
        ctx: &SearchCtx<'_>,
        base: Base<'_, '_>,
        asked: Asked<'_>,
        budget: &Budget,
    ) -> Result<Piloted> {
        let Some(tf32) = route::auto_tf32(ctx.plan, ctx.opts.precision) else {
            return Ok(Piloted {
                plan: ctx.plan.clone(),
                first_list: None,
            });
        };
        let (take, list) = match self.0.get() {
            Some(&take) => (take, None),
            None => {
                let taken = arithmetic_pilot(ctx, &tf32, base, asked, budget)?;
                let _ = self.0.set(taken.arithmetic);
                (taken.arithmetic, taken.list)
            }
        };
        let (plan, first_list) = match take {
            Arithmetic::Tf32 => (tf32, list),
            Arithmetic::Fp16x3 => (ctx.plan.clone().in_arithmetic(take), None),
            _ => (ctx.plan.clone(), None),
        };
        Ok(Piloted { plan, first_list })
    }
}

/// Whether `tf32` (the TF32 form of `ctx`'s fp32 plan) proves the pilot queries of `queries`
/// cheaply enough to replace it, and the wider first list it should start from, if any (see
/// [`AutoChoice::plan`]); where it does not and the search is a graph whose fused tile pairs
/// can run split rows, whether fp16x3 does, by the same rule with its own bound on the same
/// lists and its own saving ([`SPLIT_SAVING_SHARE`] times TF32's price). Returns the
/// precision taken (`Fp32`, `Tf32` or `Fp16x3`).
fn arithmetic_pilot(
    ctx: &SearchCtx<'_>,
    tf32: &Numerics,
    on: Base<'_, '_>,
    asked: Asked<'_>,
    budget: &Budget,
) -> Result<AutoTaken> {
    let (bset, base, queries) = (on.rows, on.dev, asked.queries);
    let shape = AutoShape {
        k: asked.k,
        self_pairs: asked.self_pairs,
        nq: queries.len(),
        n: base.n,
        up: base.is_up(),
    };
    let Some(pilot) = route::auto_pilot(ctx.plan, shape, ctx.opts) else {
        return Ok(AutoTaken {
            arithmetic: Arithmetic::Fp32,
            list: None,
            options: Vec::new(),
            entry_ns: 0.0,
        });
    };
    let (first, seen, kk) = (pilot.first, pilot.seen, pilot.kk);
    let mut split_needs = Vec::new();
    // The lists hold what the TF32 pass keeps for `seen` (`pass_list` may double it).
    let (needs, listed, whence) = if pilot.on_host {
        let mut tr = ctx.gpu.phases();
        let sample = Sample::new(ctx.plan, bset);
        let listed = route::pass_list(tf32, seen, Select::Auto).min(base.n);
        let needs = sample.needs((ctx.plan, tf32), queries, (kk, listed), &mut |w| tr.mark(w));
        let whence = format!("on the host, 1 base row in {}", sample.step);
        (needs, listed, whence)
    } else {
        let on_device = Pilot::new(ctx, asked)?;
        let on_tf32 = SearchCtx { plan: tf32, ..*ctx };
        let lists = on_device.lists(&on_tf32, base, seen, budget)?;
        // The candidate pass brought every base row up; its largest norm is known now.
        base.complete(ctx.gpu)?;
        let base_norm = base.max_norm();
        let needs: Vec<PilotNeed> = lists
            .iter()
            .enumerate()
            .filter_map(|(j, keys)| {
                let keys = keys.as_ref()?;
                let fp32 = on_device.need(ctx.plan, j, keys, base_norm);
                if let Some(split) = &pilot.split {
                    // Its proof on TF32's keys, as fp32's: an estimate.
                    let tf32 = on_device.need(split, j, keys, base_norm);
                    split_needs.push(PilotNeed { fp32, tf32 });
                }
                Some(PilotNeed {
                    fp32,
                    tf32: on_device.need(tf32, j, keys, base_norm),
                })
            })
            .collect();
        let listed = lists.iter().flatten().map(Vec::len).min().unwrap_or(seen);
        (needs, listed, "on the device".to_string())
    };
    let measured = AutoMeasured {
        needs: &needs,
        split_needs: &split_needs,
        listed,
    };
    let taken = route::auto_arithmetic(tf32, shape, ctx.opts, &pilot, &measured);
    let (take, list) = (taken.arithmetic, taken.list);
    let sum = |needs: &[PilotNeed], f: fn(&PilotNeed) -> Option<usize>| -> String {
        let known: Vec<usize> = needs.iter().filter_map(f).collect();
        format!(
            "{} in sight, mean {:.1}",
            known.len(),
            known.iter().sum::<usize>() as f64 / known.len().max(1) as f64
        )
    };
    let split_sum = if split_needs.is_empty() {
        String::new()
    } else {
        format!(", fp16x3 {}", sum(&split_needs, |n| n.tf32))
    };
    ctx.gpu.phases().note(format_args!(
        "auto arithmetic: {take}{} ({} pilot queries {whence}; proof lengths fp32 {}, tf32 {}\
         {split_sum}; first list {first}, pilot lists {listed}, kk {kk})",
        list.map_or(String::new(), |l| format!(", first list {l}")),
        needs.len(),
        sum(&needs, |n| n.fp32),
        sum(&needs, |n| n.tf32),
    ));
    Ok(taken)
}

/// Base values the host pilot reads at most: 2²² (16 MB of f32), 32,768 rows at d = 128 (a
/// thirty-second of 1M rows, which took the whole base's decision on every data kind of the
/// host experiment; an eighth took 5–9 ms of the H100 machine's 16 cores; docs/design/tensor-core-inputs.md).
const SAMPLE_VALUES: usize = 1 << 22;

/// Rows drawn evenly over a base (at most [`SAMPLE_VALUES`] values), for the arithmetic pilot
/// of a base that is not on the device yet: the pilot queries' keys against
/// the sample are computed on the host (rows prepared as the device prepares them, the keys
/// from one GEMM per block of rows, [`Numerics::gemm_key`]), in f32 and without the tiles'
/// conversion (the pilot's TF32 keys differ from them by far less than TF32's bound).
///
/// A sample of a fraction f of the base stands for it as follows: the `kk` nearest of the
/// base are about the ks = round(kk·f) nearest of the sample (at least the nearest), and each
/// further entry of the sample about 1/f entries of the base. So each query's proof is found in
/// the sample's sorted keys for its ks nearest, and a proof there of ks + e + 1 entries (e
/// entries that the bound does not clear, then the one it clears) stands for kk + e/f + 1 in
/// the base. Every row is in the sample with the same chance f, so the counts scale without
/// bias. Scaling the whole length instead counts the nearest alone as 1/f entries: on 400k
/// normal rows (a seventh sampled) k = 1 then looked longer than its kept list of 16 under TF32
/// and kept fp32 (the GPU test tensor_cores). On the host, for
/// 200k-row bases of normal, far, clustered and duplicated data (the rule priced for 1M rows of
/// the same density), a quarter, an eighth, a sixteenth and a thirty-second of the base took
/// the whole base's decision at k = 1, 10, 100 and 1000, with mean proof lengths near the whole
/// base's (docs/design/tensor-core-inputs.md). The base's largest norm (in the bounds) is the
/// sample's.
///
/// The sample is one row from every `step`, at an offset drawn by a fixed hash of the step's
/// number: spread over the whole base like a stride (a file sorted by cluster is sampled in
/// every cluster), without a stride's aliasing with data that repeats with a period dividing
/// it (rows dealt to clusters in turn), and the same every time. Single rows, each drawn on its
/// own: runs of a page of consecutive rows read faster but sample neighbouring rows together,
/// and on data whose copies sit together (ten in a row) a sixteenth of the base read as runs
/// of 8 made the proofs look 7× longer than the whole base's, a thirty-second took fp32 where
/// TF32 is twice as fast.
pub(crate) struct Sample<'a> {
    set: &'a voisin::VectorSet,
    /// One row in every `step`.
    pub step: usize,
}

impl<'a> Sample<'a> {
    pub fn new(plan: &Numerics, set: &'a voisin::VectorSet) -> Self {
        Self::of_values(plan, set, SAMPLE_VALUES)
    }

    /// A sample of at most about `values` values (at least one row in every `step`).
    fn of_values(plan: &Numerics, set: &'a voisin::VectorSet, values: usize) -> Self {
        let all = set.len() * plan.dim.max(1);
        Sample {
            set,
            step: all.div_ceil(values.max(1)).max(1),
        }
    }

    /// The sampled rows, ascending.
    fn rows(&self) -> Vec<usize> {
        let n = self.set.len();
        (0..n.div_ceil(self.step))
            .map(|r| {
                let at = r * self.step;
                at + (splitmix64(r as u64) % self.step.min(n - at) as u64) as usize
            })
            .collect()
    }

    /// The proof lengths of the pilot queries of `queries` under both plans (fp32 and TF32,
    /// the same keys), for their `kk` nearest, as lists of the whole base would show them:
    /// `None` where that is beyond `listed` entries (the device pilot's lists).
    pub fn needs(
        &self,
        (fp32, tf32): (&Numerics, &Numerics),
        queries: &voisin::VectorSet,
        (kk, listed): (usize, usize),
        mark: &mut dyn FnMut(&str),
    ) -> Vec<PilotNeed> {
        let (n, d) = (self.set.len(), fp32.dim);
        let rows = self.rows();
        let (m, f) = (rows.len(), rows.len() as f64 / n as f64);
        // The pilot queries' prepared rows (nq × d) and squared norms.
        let ids = pilot_ids(queries.len());
        let nq = ids.len();
        let mut qrows = vec![0f32; nq * d];
        let qsq: Vec<f64> = ids
            .iter()
            .zip(qrows.chunks_mut(d.max(1)))
            .map(|(&j, out)| fp32.prepare_row(&queries.row_f32(j), out))
            .collect();
        // The sample's nearest that stand for the base's `kk` nearest, and the sample entries
        // that stand for a list of `listed` (see `scaled`), one more to see past it.
        let ks = ((kk as f64 * f).round() as usize).clamp(1, m);
        let look = (ks + (listed.saturating_sub(kk) as f64 * f).ceil() as usize + 1).clamp(ks, m);
        // Per block of BLOCK sample rows, prepared and multiplied by the queries in one GEMM,
        // and of each query's keys only the `look` smallest kept, at j·kept..(j + 1)·kept;
        // with the block's largest squared norm. Four parts of the sample per worker thread, each
        // allocating its buffers once (fresh ones per block cost more in page faults than the
        // GEMM).
        const BLOCK: usize = 1024;
        let per = m.div_ceil(4 * rayon::current_num_threads().max(1)).max(1);
        let runs: Vec<(Vec<f32>, f64)> = rows
            .par_chunks(per)
            .flat_map_iter(|part| {
                let rows = BLOCK.min(part.len());
                let (mut raw, mut block) = (vec![0f32; rows * d], vec![0f32; rows * d]);
                let mut keys = vec![0f32; rows * nq];
                let mut bsq = vec![0f64; rows];
                let mut out = Vec::with_capacity(part.len().div_ceil(BLOCK));
                for ids in part.chunks(BLOCK) {
                    let len = ids.len();
                    // The scattered rows copied first, then prepared: copies of independent
                    // rows keep many reads from memory in flight, where preparing each row as
                    // it arrives waited for one row at a time (2.5× slower on the host).
                    for (&i, to) in ids.iter().zip(raw.chunks_mut(d.max(1))) {
                        to.copy_from_slice(&self.set.row_f32(i));
                    }
                    let rows = raw.chunks(d.max(1)).zip(block.chunks_mut(d.max(1)));
                    for ((from, to), sq) in rows.zip(&mut bsq[..len]) {
                        *sq = fp32.prepare_row(from, to);
                    }
                    dots(&qrows, &block, (nq, len, d), &mut keys);
                    let kept = look.min(len);
                    let mut smallest = Vec::with_capacity(nq * kept);
                    for (j, row) in keys.chunks_mut(len).take(nq).enumerate() {
                        for (v, &b) in row.iter_mut().zip(&bsq[..len]) {
                            *v = fp32
                                .gemm_key(*v, qsq[j] as f32, b as f32)
                                .unwrap_or(f32::INFINITY);
                        }
                        if kept < len {
                            row.select_nth_unstable_by(kept - 1, f32::total_cmp);
                        }
                        smallest.extend_from_slice(&row[..kept]);
                    }
                    out.push((smallest, bsq[..len].iter().cloned().fold(0.0, f64::max)));
                }
                out
            })
            .collect();
        let base_norm = runs.iter().map(|r| r.1).fold(0.0, f64::max).sqrt();
        mark("pilot: sample keys on the host");
        // A proof length in the sample is its `ks` nearest, the entries after them that the
        // bound does not clear (each standing for 1/f of the base's) and the first it clears:
        // in the base, the `kk` nearest, 1/f times those entries, and the one that clears.
        let scaled = |len: Option<usize>| {
            let extra = (len? - ks - 1) as f64 / f;
            let len = kk + extra.round() as usize + 1;
            (len <= listed).then_some(len)
        };
        let needs = (0..nq)
            .into_par_iter()
            .map(|j| {
                let mut mine: Vec<f32> = Vec::new();
                for (smallest, _) in &runs {
                    let kept = smallest.len() / nq;
                    mine.extend_from_slice(&smallest[j * kept..(j + 1) * kept]);
                }
                if look < mine.len() {
                    mine.select_nth_unstable_by(look - 1, f32::total_cmp);
                    mine.truncate(look);
                }
                mine.sort_unstable_by(f32::total_cmp);
                let need = |p: &Numerics| {
                    let abs = p.abs_bound(qsq[j].sqrt(), base_norm);
                    scaled(p.proof_length(&mine, ks, abs))
                };
                PilotNeed {
                    fp32: need(fp32),
                    tf32: need(tf32),
                }
            })
            .collect();
        mark("pilot: proof lengths on the host");
        needs
    }
}

/// `out[i·n + j] = a_i · b_j` for row-major `a` (m × d) and `b` (n × d), on this thread.
fn dots(a: &[f32], b: &[f32], (m, n, d): (usize, usize, usize), out: &mut [f32]) {
    assert!(a.len() >= m * d && b.len() >= n * d && out.len() >= m * n);
    // SAFETY: the asserted lengths cover the m × d, n × d and m × n extents at these strides.
    unsafe {
        gemm::gemm(
            m,
            n,
            d,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            d as isize,
            b.as_ptr(),
            d as isize,
            1,
            0.0f32,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// A fixed mixing of `x` (splitmix64's finaliser): the sample's draw.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Up to [`PILOT_QUERIES`] evenly spaced rows of `n`: the pilot's queries.
fn pilot_ids(n: usize) -> Vec<usize> {
    let m = n.min(PILOT_QUERIES);
    (0..m).map(|i| i * n / m).collect()
}

/// The first list size for k, raised where a pilot shows the error bound needs more room.
///
/// The bound grows with the dimension (and fourfold under TF32) while the gap between the k-th
/// and the following keys does not: at 100k × 15876 the 18-entry list of k = 10 never proved,
/// and every query went through two full widening passes. For wide data (d ≥ 1024, where the
/// GEMM dwarfs a pilot) and for TF32 lists of k ≥ 64 (graphs and unsorted selections only: see
/// below) the pilot takes up to 32 evenly spaced
/// queries (`self_pairs`: the queries are the base, as in a graph), lists 4× the usual entries
/// for them (16× more while some query's proof is still out of sight), and finds how long a
/// list would have proved each; the pass then starts with that length plus a quarter. It only
/// ever raises the list, and never past what the forced selection `sel` keeps.
pub(crate) fn pilot_list(
    ctx: &SearchCtx<'_>,
    base: &DeviceSet,
    asked: Asked<'_>,
    budget: &Budget,
) -> Result<usize> {
    let (gpu, plan, sel) = (ctx.gpu, ctx.plan, ctx.select());
    let (queries, k, self_pairs) = (asked.queries, asked.k, asked.self_pairs);
    let kp = route::first_list(k);
    if !route::list_pilot(plan, k, self_pairs, sel) || queries.is_empty() {
        return Ok(kp);
    }
    // The pilot reads the whole base and its largest norm at once.
    base.complete(gpu)?;
    let pilot = Pilot::new(ctx, asked)?;
    // A scan of every base norm: once, not per pilot query (32 scans of 1M norms were 28 ms).
    let base_norm = base.max_norm();
    let mut probe = route::pilot_probe(kp);
    let need = loop {
        let seen = probe.min(base.n);
        if seen <= kp {
            return Ok(kp);
        }
        let lists = pilot.lists(ctx, base, seen, budget)?;
        // The longest proof, or `None` while some query's is out of sight.
        let need = lists
            .iter()
            .enumerate()
            .filter_map(|(j, keys)| Some(pilot.need(plan, j, keys.as_ref()?, base_norm)))
            .try_fold(kp, |n, r| Some(n.max(r?)));
        match need {
            Some(n) => break n,
            None if seen >= base.n || probe >= route::PILOT_MAX => break 2 * seen,
            None => probe *= 4,
        }
    };
    Ok(route::piloted_list(kp, need, sel, base.n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::subspaces;
    use crate::search::route::{first_list, pass_list, pilot_probe, tf32_list, LIST_ENTRY_NS};
    use rand::prelude::*;
    use voisin::data::ElemType;
    use voisin::{Metric, VectorSet};

    #[test]
    fn the_sample_takes_one_row_from_every_step() {
        for (n, d, values) in [
            (1, 4, 1),
            (10, 4, 40),
            (10, 4, 8),
            (1000, 4, 400),
            (1001, 256, 4000),
            (97, 1000, 7),
            (5000, 3, 1 << 24),
        ] {
            let base = VectorSet::from_f32(n, d, vec![0.0; n * d]).unwrap();
            let plan = Numerics::new(&Metric::Euclidean, &base);
            let s = Sample::of_values(&plan, &base, values);
            let rows = s.rows();
            assert_eq!(s.step, (n * d).div_ceil(values).max(1), "n {n} d {d}");
            // One row in every step, so at most about `values` values, and all of a base
            // that fits.
            assert_eq!(rows.len(), n.div_ceil(s.step), "n {n} d {d}");
            for (r, &i) in rows.iter().enumerate() {
                assert!(
                    i >= r * s.step && i < ((r + 1) * s.step).min(n),
                    "n {n}: {i}"
                );
            }
        }
        // Not a stride: data dealt to 8 clusters in turn is sampled in all of them.
        let (n, d) = (80_000, 128);
        let base = VectorSet::from_f32(n, d, vec![0.0; n * d]).unwrap();
        let plan = Numerics::new(&Metric::Euclidean, &base);
        let s = Sample::of_values(&plan, &base, n * d / 16);
        assert_eq!(s.step % 8, 0, "a step the clusters' period divides");
        let mut seen = [0usize; 8];
        s.rows().iter().for_each(|&i| seen[i % 8] += 1);
        assert!(seen.iter().all(|&c| c > 400), "{seen:?}");
    }

    /// The fp32 plan `auto` resolves to for `set` (f32 rows), and its TF32 form.
    fn auto_plans(m: &Metric, set: &VectorSet) -> (Numerics, Numerics) {
        let fp32 = Numerics::new(m, set).on_storage(ElemType::F32, ElemType::F32);
        assert!(fp32.fp32_gemm());
        let tf32 = fp32.clone().in_arithmetic(Arithmetic::Tf32);
        (fp32, tf32)
    }

    /// The host pilot's decision for a k-NN search of `queries` in `base` from a sample of
    /// about `values` values, with the rule's shape of a base of `stands_for` items (the size
    /// whose density the data has), as `arithmetic_pilot` decides it.
    fn decide(
        m: &Metric,
        (base, queries): (&VectorSet, &VectorSet),
        k: usize,
        values: usize,
        stands_for: usize,
    ) -> (bool, Vec<PilotNeed>) {
        let t0 = std::time::Instant::now();
        let (fp32, tf32) = auto_plans(m, base);
        eprint!("[plans {:.1}ms]", t0.elapsed().as_secs_f64() * 1e3);
        let first = first_list(k);
        let listed = pass_list(&tf32, pilot_probe(first), Select::Auto).min(base.len());
        let needs = Sample::of_values(&fp32, base, values).needs(
            (&fp32, &tf32),
            queries,
            (k, listed),
            &mut |_| {},
        );
        let kp = pass_list(&tf32, first, Select::Auto);
        let kept = Select::Auto.resolve(kp).map_or(kp, |s| s.width(kp));
        let shape = (stands_for, fp32.dim);
        let take = tf32_list(&needs, (first, listed), &[kept], shape, LIST_ENTRY_NS).is_some();
        (take, needs)
    }

    /// On the host pilot, a quarter or a sixteenth of the base takes the decision the whole base
    /// takes: TF32 for normal data (near the origin and far from it), fp32 for clustered data
    /// (as dense on each 8-d subspace as gpu_bench's 1M rows on 1,000), k = 1, 10 and 100,
    /// d = 128.
    #[test]
    fn a_sampled_pilot_tells_normal_from_clustered_data() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let (n, d) = (8000, 128);
        let normal = |rng: &mut StdRng, n: usize, offset: f32| {
            let v = (0..n * d)
                .map(|_| offset + rng.sample::<f32, _>(rand_distr::StandardNormal))
                .collect();
            VectorSet::from_f32(n, d, v).unwrap()
        };
        let spaces = subspaces::subspaces(&mut rng, 8, d);
        let on_spaces = |rng: &mut StdRng, n: usize| {
            VectorSet::from_f32(n, d, subspaces::rows_on(rng, &spaces, n, d)).unwrap()
        };
        let cases = [
            (
                "normal",
                normal(&mut rng, n, 0.0),
                normal(&mut rng, 64, 0.0),
                true,
            ),
            (
                "normal + 100",
                normal(&mut rng, n, 100.0),
                normal(&mut rng, 64, 100.0),
                true,
            ),
            (
                "clustered",
                on_spaces(&mut rng, n),
                on_spaces(&mut rng, 64),
                false,
            ),
        ];
        for (what, base, queries, tf32) in &cases {
            for k in [1, 10, 100] {
                for values in [n * d, n * d / 4, n * d / 16] {
                    let shape = (base, queries);
                    let (got, needs) = decide(&Metric::Euclidean, shape, k, values, 1_000_000);
                    let show: Vec<_> = needs.iter().map(|n| (n.fp32, n.tf32)).collect();
                    assert_eq!(got, *tf32, "{what} k={k}, {values} values: {show:?}");
                }
            }
        }
    }
}
