//! The pilots that shape a k-NN search or graph before it runs: the arithmetic under
//! `--precision auto` ([`AutoChoice`]: TF32 or fp32 tiles, from a few queries' proof lengths)
//! and the first list's size where the bound needs more room than `list_size` gives
//! ([`pilot_list`]). Both look at up to 32 evenly spaced queries: on the device against a base
//! that is up, or, for the arithmetic of a base still to go up, on the host against a strided
//! sample of it (so that the upload stays behind the search's first tiles).
//!
//! Owns the pilots' sampling and measurements. The rule that weighs them
//! ([`tf32_proves_cheaply`]) and the bounds belong to numerics/plan.rs.

use std::sync::OnceLock;

use voisin::Result;

use crate::numerics::plan::{tf32_proves_cheaply, PilotNeed, Plan};
use crate::ops::device_set::DeviceSet;
use crate::ops::select::{self, Select};
use crate::ops::Budget;
use crate::options::Precision;
use crate::search::knn::{candidates, first_list, pass_list};
use crate::search::Ctx;

/// Whether a k-NN pass of list `kp` under `sel` keeps sorted lists whose whole width (what the
/// device proof reads) holds half the list again or more (k = 1000: 2048 entries for 1125
/// wanted): the room the TF32 pilot would look for, so the pilot (~5 ms at 1M × 128, k = 1000,
/// a list pass over the whole base for 32 queries) is skipped there.
fn proof_has_room(plan: &Plan, kp: usize, sel: Select) -> bool {
    let kp = pass_list(plan, kp, sel);
    matches!(
        sel.resolve(kp),
        Ok(m @ (Select::Block | Select::Heap)) if 2 * m.width(kp) >= 3 * kp
    )
}

/// Queries a pilot looks at.
const PILOT_QUERIES: usize = 32;
/// Dimension from which the fp32 bound (which grows with it) gets a pilot.
const PILOT_DIM: usize = 1024;
/// Longest list the pilot looks along.
const PILOT_MAX: usize = 16384;

/// The list a pilot first looks along for a first list of `kp`.
fn pilot_probe(kp: usize) -> usize {
    (4 * kp).max(256)
}

/// The queries of a pilot on the device: up to [`PILOT_QUERIES`] evenly spaced rows of a
/// search's queries, and how many nearest their proofs must settle (`kk`: k, plus the query
/// itself where the queries are the base).
struct Pilot {
    sub: DeviceSet<'static>,
    kk: usize,
}

impl Pilot {
    fn new(
        ctx: &Ctx<'_>,
        queries: &voisin::VectorSet,
        k: usize,
        self_pairs: bool,
    ) -> Result<Pilot> {
        let m = queries.len().min(PILOT_QUERIES);
        let ids: Vec<usize> = (0..m).map(|i| i * queries.len() / m).collect();
        let mut tr = ctx.gpu.phases();
        let sub = DeviceSet::gather(ctx.gpu, ctx.plan, queries, &ids)?;
        tr.mark("pilot: gather");
        Ok(Pilot {
            sub,
            kk: k + usize::from(self_pairs),
        })
    }

    /// The approximate keys of each pilot query's list of `seen` under `ctx`'s plan, sorted;
    /// `None` for a list with nothing to prove (complete, or shorter than `kk`). One pass over
    /// the base.
    fn lists(
        &self,
        ctx: &Ctx<'_>,
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
    /// against a base of largest norm `base_norm` ([`Plan::proof_length`]).
    fn need(&self, plan: &Plan, j: usize, keys: &[f32], base_norm: f64) -> Option<usize> {
        let abs = plan.abs_bound(self.sub.norm()[j], base_norm);
        plan.proof_length(keys, self.kk, abs)
    }
}

/// Whether the searches of one base run TF32 tiles where `--precision auto` left fp32 GEMM
/// tiles on f32 rows ([`Plan::auto_tf32`]): decided by a pilot at the first search that asks
/// ([`AutoChoice::plan`]) and kept for the later ones (a prepared base decides once).
#[derive(Default)]
pub(crate) struct AutoChoice(OnceLock<bool>);

impl AutoChoice {
    /// The plan a search of `base` (on the device, whole or going up) for `queries` runs
    /// under: `ctx`'s own, or its TF32 form where auto may take TF32 and the pilot (now, or at
    /// this base's first search) took it. `self_pairs`: the queries are the base (a graph).
    ///
    /// The pilot: up to 32 evenly spaced queries, TF32 lists of the usual pilot length
    /// (4 × `first_list(k)`, at least 256) in one pass over the base, and for each the length
    /// of list that proves it under TF32's bound and under fp32's (the same keys);
    /// [`tf32_proves_cheaply`] decides. It needs the whole base: a base going up behind the
    /// first tiles is up once the pilot has run.
    pub fn plan(
        &self,
        ctx: &Ctx<'_>,
        base: &DeviceSet,
        queries: &voisin::VectorSet,
        k: usize,
        self_pairs: bool,
        budget: &Budget,
    ) -> Result<Plan> {
        let Some(tf32) = ctx.plan.auto_tf32(ctx.opts.precision) else {
            return Ok(ctx.plan.clone());
        };
        let take = match self.0.get() {
            Some(&take) => take,
            None => {
                let take = tf32_pilot(ctx, &tf32, base, (queries, k, self_pairs), budget)?;
                let _ = self.0.set(take);
                take
            }
        };
        Ok(if take { tf32 } else { ctx.plan.clone() })
    }
}

/// Whether `tf32` (the TF32 form of `ctx`'s fp32 plan) proves the pilot queries of `queries`
/// cheaply enough to replace it (see [`AutoChoice::plan`]).
fn tf32_pilot(
    ctx: &Ctx<'_>,
    tf32: &Plan,
    base: &DeviceSet,
    (queries, k, self_pairs): (&voisin::VectorSet, usize, bool),
    budget: &Budget,
) -> Result<bool> {
    let first = first_list(k);
    let seen = pilot_probe(first).min(base.n);
    if queries.is_empty() || seen <= first {
        return Ok(false);
    }
    let pilot = Pilot::new(ctx, queries, k, self_pairs)?;
    let on_tf32 = Ctx { plan: tf32, ..*ctx };
    let lists = pilot.lists(&on_tf32, base, seen, budget)?;
    // The candidate pass brought every base row up; its largest norm is known now.
    base.complete(ctx.gpu)?;
    let base_norm = base.max_norm();
    let needs: Vec<PilotNeed> = lists
        .iter()
        .enumerate()
        .filter_map(|(j, keys)| {
            let keys = keys.as_ref()?;
            Some(PilotNeed {
                fp32: pilot.need(ctx.plan, j, keys, base_norm),
                tf32: pilot.need(tf32, j, keys, base_norm),
            })
        })
        .collect();
    // The lists hold what the TF32 pass keeps for `seen` (`pass_list` may double it).
    let listed = lists.iter().flatten().map(Vec::len).min().unwrap_or(seen);
    // Tile pairs per query: the base, or half the set for a graph's symmetric tiles.
    let pairs = if self_pairs { base.n / 2 } else { base.n };
    // The list the search keeps (the device re-ranks inside it): the selection's width of
    // TF32's pass list, small graph lists padded to the column kernel's; wide data gets a list
    // pilot that sizes its lists to the proofs.
    let kept = if ctx.plan.dim >= PILOT_DIM {
        listed
    } else {
        let kp = pass_list(tf32, first, ctx.select());
        let width = ctx.select().resolve(kp).map_or(kp, |m| m.width(kp));
        if self_pairs {
            width.max(select::COLS_KP)
        } else {
            width
        }
    };
    let shape = (pairs, ctx.plan.dim);
    let take = tf32_proves_cheaply(&needs, (first, kept, listed), shape);
    let sum = |f: fn(&PilotNeed) -> Option<usize>| -> String {
        let known: Vec<usize> = needs.iter().filter_map(f).collect();
        format!(
            "{} in sight, mean {:.1}",
            known.len(),
            known.iter().sum::<usize>() as f64 / known.len().max(1) as f64
        )
    };
    ctx.gpu.phases().note(format_args!(
        "auto arithmetic: {} ({} pilot queries; proof lengths fp32 {}, tf32 {}; first list {first})",
        if take { "tf32" } else { "fp32" },
        needs.len(),
        sum(|n| n.fp32),
        sum(|n| n.tf32),
    ));
    Ok(take)
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
    ctx: &Ctx<'_>,
    base: &DeviceSet,
    queries: &voisin::VectorSet,
    k: usize,
    self_pairs: bool,
    budget: &Budget,
) -> Result<usize> {
    let (gpu, plan, sel) = (ctx.gpu, ctx.plan, ctx.select());
    let kp = first_list(k);
    let wanted = plan.dim >= PILOT_DIM
        || (plan.precision == Precision::Tf32
            && k >= 64
            && (self_pairs || !proof_has_room(plan, kp, sel)));
    if !wanted || queries.is_empty() {
        return Ok(kp);
    }
    // The pilot reads the whole base and its largest norm at once.
    base.complete(gpu)?;
    let pilot = Pilot::new(ctx, queries, k, self_pairs)?;
    // A scan of every base norm: once, not per pilot query (32 scans of 1M norms were 28 ms).
    let base_norm = base.max_norm();
    let mut probe = pilot_probe(kp);
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
            None if seen >= base.n || probe >= PILOT_MAX => break 2 * seen,
            None => probe *= 4,
        }
    };
    let cap = sel
        .max_list()
        .unwrap_or(usize::MAX)
        .min(base.n.next_power_of_two());
    Ok(if need > kp {
        (need + need / 4).min(cap).max(kp)
    } else {
        kp
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{Metric, VectorSet};

    #[test]
    fn tf32_pilot_is_skipped_only_where_sorted_lists_leave_room() {
        let set = VectorSet::from_f32(2, 4, vec![0.5; 8]).unwrap();
        let plan = Plan::new(&Metric::Euclidean, &set).with_precision(Precision::Tf32);
        let room = |k: usize, sel| proof_has_room(&plan, first_list(k), sel);
        // 1125 → 2048, 562 → 1024: room; 1012 → 1024, 2 × 112 → 256: none.
        assert!(room(1000, Select::Auto) && room(500, Select::Block));
        assert!(!room(900, Select::Auto) && !room(100, Select::Auto));
        // Unsorted lists are proved on the host over what it downloads: the pilot stays.
        assert!(!room(1000, Select::Quick) && !room(1000, Select::Radix));
        assert!(!room(3000, Select::Auto));
    }
}
