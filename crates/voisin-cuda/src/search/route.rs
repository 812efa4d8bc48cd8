//! How a candidate pass runs, decided in one place: the arithmetic a precision option resolves
//! to for the data ([`numerics`]), the forms `--precision auto` may switch to once its pilot
//! has measured ([`auto_form`]), and the cost rule that weighs the pilot's measurements
//! ([`tf32_list`], [`tensor_list`]) with the measured costs it prices them by.
//!
//! Reads `numerics` (the plan and its bound), `ops` (what the kernels take) and `options`
//! (what the caller asked); the searches (`knn`, `graph`, `pilot`) ask it and run what it says.

use voisin::data::ElemType;
use voisin::{Error, Result};

use crate::numerics::plan::{int8_exact, Arithmetic, Numerics};
use crate::options::Precision;

/// `plan` with the arithmetic `precision` resolves to for a base stored as `base` and
/// queries stored as `queries` (the same for a graph), on the pair's [`Storage`]; an
/// explicit choice the data cannot take is refused in one line.
/// docs/design/tensor-core-inputs.md:
/// - f16/bf16 storage, GEMM metric without unit rows (euclidean, sqeuclidean, inner
///   product): `Auto`, `Fp16`/`Bf16` tile the stored values on their tensor cores;
/// - u8 storage under euclidean or sqeuclidean: `Auto`, `Int8` tile the values minus 128 on
///   the int8 tensor cores, whose int32 dot products are exact;
/// - `Auto` otherwise: fp32 tiles here. Where those are GEMM tiles on f32 rows (f32, u8
///   and f64 storage, mixed pairs, cosine and correlation included; not the SIMT metrics),
///   the search of a resident base (k-NN, graph) runs a pilot on the device once the base
///   is up and switches to TF32 ([`auto_form`]) when TF32's bound proves the pilot
///   queries cheaply ([`tf32_list`]). TF32 was about 2× faster than fp32 at
///   1M×128 on normal, far-from-origin and duplicate-heavy data, but 5.8× slower on a
///   clustered graph, where its interval kept 48× more candidates
///   (docs/design/tensor-core-inputs.md): the pilot tells such data apart;
/// - `Fp32`, `Tf32`: as asked, on f32 rows prepared on the device from the stored ones.
///
/// Call it once, on a fresh plan ([`Numerics::new`]).
pub(crate) fn numerics(
    plan: Numerics,
    precision: Precision,
    base: ElemType,
    queries: ElemType,
) -> Result<Numerics> {
    let plan = plan.on_storage(base, queries);
    let own = plan.own_cores();
    let explicit = |p: Precision| match p {
        Precision::Fp16 => Some(Arithmetic::Fp16),
        Precision::Bf16 => Some(Arithmetic::Bf16),
        Precision::Int8 => Some(Arithmetic::Int8),
        _ => None,
    };
    match (precision, own) {
        (Precision::Auto, Some(_)) => Ok(plan.on_own_cores()),
        (Precision::Auto, None) => Ok(plan.in_arithmetic(Arithmetic::Fp32)),
        (Precision::Fp32, _) => Ok(plan.in_arithmetic(Arithmetic::Fp32)),
        (Precision::Tf32, _) => Ok(plan.in_arithmetic(Arithmetic::Tf32)),
        (Precision::Fp16x3, _) => Ok(plan.in_arithmetic(Arithmetic::Fp16x3)),
        (Precision::Fp16 | Precision::Bf16 | Precision::Int8, Some(own))
            if Some(Arithmetic::own(own)) == explicit(precision) =>
        {
            Ok(plan.on_own_cores())
        }
        (Precision::Fp16 | Precision::Bf16 | Precision::Int8, _) => {
            let (want, metrics) = match precision {
                Precision::Fp16 => ("f16", "euclidean, sqeuclidean and inner product"),
                Precision::Bf16 => ("bf16", "euclidean, sqeuclidean and inner product"),
                _ => ("u8", "euclidean and sqeuclidean"),
            };
            let why = if base != queries {
                format!("a {} base with {} queries", base.name(), queries.name())
            } else if base.name() != want {
                format!("{} data", base.name())
            } else if precision == Precision::Int8 && !int8_exact(plan.dim) {
                format!("{} dimensions (int32 sums hold up to 131071)", plan.dim)
            } else {
                format!("this metric (it takes {metrics})")
            };
            Err(Error::invalid(format!(
                "--precision {precision} runs on {want} storage only and cannot take {why}; \
                 use --precision auto"
            )))
        }
    }
}

/// Under `--precision auto` (`asked`), `plan`'s form in `arithmetic` (TF32, or fp16x3) when a
/// pilot may switch to it: the plan resolved to fp32 GEMM tiles on f32 rows ([`numerics`]'s
/// `Auto` without half storage). `None` for an explicit precision, tiles on half storage and
/// SIMT metrics. The prepared rows are the same for both, so a search may switch after its
/// base went up.
pub(crate) fn auto_form(
    plan: &Numerics,
    asked: Precision,
    arithmetic: Arithmetic,
) -> Option<Numerics> {
    (asked == Precision::Auto && plan.fp32_gemm()).then(|| plan.clone().in_arithmetic(arithmetic))
}

/// [`auto_form`] in TF32.
pub(crate) fn auto_tf32(plan: &Numerics, asked: Precision) -> Option<Numerics> {
    auto_form(plan, asked, Arithmetic::Tf32)
}

/// What the `--precision auto` pilot measured for one of its queries: how long a list proves it
/// ([`Numerics::proof_length`]) under fp32's bound and under TF32's, both on the same TF32 list
/// (fp32's is an estimate: its keys would differ from TF32's by far less than TF32's bound).
/// `None`: longer than the pilot's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PilotNeed {
    pub fp32: Option<usize>,
    pub tf32: Option<usize>,
}

/// What an exact evaluation costs a search, in ns: per dimension where the list the search
/// keeps holds it (the device re-ranks it: the exact-key kernel took 88 ns a pair at d = 15876
/// on the H100, run d2), and a fixed part more beyond that list, where the query is widened
/// (run d3 on the H100: the clustered 1M × 128 k-NN's extra evaluations under TF32 cost ~100 ns
/// each, the clustered graph's ~53 ns).
const EVAL_NS_PER_DIM: f64 = 0.006;
const WIDENED_EVAL_NS: f64 = 100.0;

/// What a widening pass is charged per query, per pair and dimension, in ns: its candidates are
/// looked for again over the whole base, at about fp32 tile speed (2 flops at 36 TFLOP/s).
///
/// It undercharges on purpose. A widened query's whole cost is larger: at k = 1000 its list of
/// 4500 is selected, downloaded, sorted and re-ranked, ~120 µs a query against this charge's
/// 7 µs (run e3 on the H100: the 149 of 10k queries TF32 left unproved in the clustered
/// 1M × 128 k-NN took 17.7 ms of host finish). But 32 pilot queries resolve widening rates only
/// in steps of 3 %: there at least one pilot query widened against 1.5 % of the search's, and
/// the full charge took fp32 (0.172 s with the pilot) where TF32 ran in 0.135 s and fp32 alone
/// in 0.149 s. Where many queries widen, the evaluations beyond the list
/// ([`WIDENED_EVAL_NS`]) decide.
const REPASS_NS: f64 = 2.0 / 36e3;

/// What TF32 tiles save per pair and dimension, in ns, measured end to end on the H100 (run
/// d3): 1M × 128 k-NN of 10k queries 0.111 s → 0.077 s (2.7e-5), and the 100k × 15876 graph
/// 4.48 s → 2.20 s over 5·10⁹ pairs (4.5e-5; wide tiles run TF32 at ~300 TFLOP/s).
fn tf32_saving_ns(dim: usize) -> f64 {
    if dim >= 1024 {
        4.3e-5
    } else {
        2.66e-5
    }
}

/// What a search pays per query for each entry its lists keep beyond the narrowest, in ns:
/// a wider selection, a longer list to download and prove. Measured end to end on the H100
/// (run f3): TF32 k-NN of 1M × 128 for 10k queries took 0.055 s with lists 32 wide (k = 10)
/// and 0.098 s with lists 2048 wide (k = 1000), 2.1 ns per entry and query.
pub(crate) const LIST_ENTRY_NS: f64 = 2.0;

/// [`LIST_ENTRY_NS`] for searches whose passes filter the base with fused tile pairs
/// (ops/fused.rs `FusedKernel::Pair`): a wider list lets more survivors through every chunk,
/// each appended and merged. Measured end to end on the H200: TF32 k-NN of 1M × 128 for 10k
/// queries, k = 10, with lists 128 wide (the pilot's choice) against 32 wide (which proved
/// every query): 0.038 / 0.0325 s in one call (far data 0.036 / 0.031 s), 0.035 / 0.032 s in
/// another; 3 to 6 ns per entry and query.
pub(crate) const FUSED_LIST_ENTRY_NS: f64 = 4.5;

/// Whether `--precision auto` runs TF32 tiles, and with which list, from the pilot's proof
/// lengths `needs` (lists of `listed` entries) for k-NN lists whose first size is `first`
/// (`knn::first_list`), where each query meets `pairs` tile pairs (the base; half the set for
/// a graph's symmetric tiles) of `dim` dimensions. `kept` holds the widths a search under TF32
/// may keep its lists at, its usual width first; returns the index of the cheapest, or `None`
/// where fp32 is cheaper than all (or nothing was measured: every pilot list complete, a base
/// no longer than the pilot's lists).
///
/// The rule is a cost comparison per query: TF32 saves `pairs · dim ·` [`tf32_saving_ns`] of
/// tile time and costs the exact evaluations its wider bound adds, the pilot queries' mean
/// excess of TF32's proof length over fp32's (each of fp32's counted at least `first`: a proof
/// inside the list a search keeps anyway costs nothing more): up to the kept width at
/// [`EVAL_NS_PER_DIM`] each (the device re-ranks them), beyond it [`WIDENED_EVAL_NS`] more, and
/// a query TF32 leaves unproved in its list where fp32 proves it pays a widening pass,
/// `pairs · dim ·` [`REPASS_NS`]. A length beyond the pilot's list counts as twice the list (as
/// `pilot::pilot_list` assumes), and at the usual width whatever the width (no list the pilot
/// measured proves it). A width beyond the usual costs `entry_ns` per extra entry and query
/// ([`LIST_ENTRY_NS`], or [`FUSED_LIST_ENTRY_NS`] where the passes are fused tile pairs).
///
/// Wider lists matter where TF32's bound is wide next to the gaps between near neighbours
/// (clustered data, k = 10: proofs of ~110 entries against fp32's 11): the usual 32-wide list
/// sends most queries to the host's widening, a list of 128 or 256 proves them on the device
/// for far less than TF32's tiles save.
pub(crate) fn tf32_list(
    needs: &[PilotNeed],
    lists: (usize, usize),
    kept: &[usize],
    shape: (usize, usize),
    entry_ns: f64,
) -> Option<usize> {
    tensor_list(needs, lists, kept, shape, (entry_ns, 1.0))
}

/// What the graph's fp16x3 tile pairs save against fp32 tiles per row, as a multiple of what
/// [`tf32_saving_ns`] prices (that price is the k-NN's, measured on the H100; a graph's fused
/// pairs save more). Measured end to end on the H200 (session 24, 1M × 128 clustered, k = 10):
/// device candidates 4.32 s on fp32 tiles, 1.63–1.66 s on split pairs, 2.7 µs a row against
/// the 1.7 µs that `tf32_saving_ns` prices; 1.5 keeps a margin under the measured 1.57.
pub(crate) const SPLIT_SAVING_SHARE: f64 = 1.5;

/// [`tf32_list`] for another arithmetic whose tiles save `share` of TF32's time, its proof
/// lengths given as `PilotNeed::tf32` (the fp16x3 rule of a graph whose TF32 rule kept fp32).
pub(crate) fn tensor_list(
    needs: &[PilotNeed],
    (first, listed): (usize, usize),
    kept: &[usize],
    (pairs, dim): (usize, usize),
    (entry_ns, share): (f64, f64),
) -> Option<usize> {
    if needs.is_empty() || kept.is_empty() {
        return None;
    }
    let count = |n: Option<usize>| n.unwrap_or(2 * listed) as f64;
    let d = dim as f64;
    let kept_usual = kept[0];
    let cost = |kept: usize| {
        needs
            .iter()
            .map(|n| {
                // A proof beyond the pilot's lists is widened whatever the width: priced at the
                // usual one.
                let kept = if n.tf32.is_some() { kept } else { kept_usual } as f64;
                let (t, f) = (count(n.tf32), count(n.fp32).max(first as f64));
                let inside = (t.min(kept) - f).max(0.0);
                let beyond = (t - f).max(0.0) - inside;
                // A query that fp32 proves in its list and TF32 does not is widened: a pass more.
                let repass = if t > kept && f <= kept {
                    pairs as f64 * d * REPASS_NS
                } else {
                    0.0
                };
                inside * EVAL_NS_PER_DIM * d
                    + beyond * (WIDENED_EVAL_NS + EVAL_NS_PER_DIM * d)
                    + repass
            })
            .sum::<f64>()
            / needs.len() as f64
    };
    let (at, best) = kept
        .iter()
        .map(|&w| cost(w) + w.saturating_sub(kept_usual) as f64 * entry_ns)
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    (best < share * pairs as f64 * d * tf32_saving_ns(dim)).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::tests::{clustered, f64_set, set, tf32_truncate};
    use crate::numerics::plan::{Conv, HostTiles, InputRounding, Storage, TileKey, TileRows};
    use rand::prelude::*;
    use voisin::{Metric, VectorSet};

    /// The route's choices of arithmetic as methods of a plan, as the tests below ask them.
    trait Options: Sized {
        fn with_arithmetic(self, p: Precision, base: ElemType, queries: ElemType) -> Result<Self>;
        fn with_precision(self, p: Precision) -> Self;
        fn auto_tf32(&self, asked: Precision) -> Option<Self>;
        fn auto_form(&self, asked: Precision, p: Precision) -> Option<Self>;
    }

    /// The arithmetic an explicit fp32, tf32 or fp16x3 asks for.
    fn explicit(p: Precision) -> Arithmetic {
        match p {
            Precision::Tf32 => Arithmetic::Tf32,
            Precision::Fp16x3 => Arithmetic::Fp16x3,
            _ => Arithmetic::Fp32,
        }
    }

    impl Options for Numerics {
        fn with_arithmetic(self, p: Precision, base: ElemType, queries: ElemType) -> Result<Self> {
            numerics(self, p, base, queries)
        }

        fn with_precision(self, p: Precision) -> Self {
            self.in_arithmetic(explicit(p))
        }

        fn auto_tf32(&self, asked: Precision) -> Option<Self> {
            auto_tf32(self, asked)
        }

        fn auto_form(&self, asked: Precision, p: Precision) -> Option<Self> {
            auto_form(self, asked, explicit(p))
        }
    }

    #[test]
    fn precision_names() {
        assert_eq!("TF32".parse::<Precision>().unwrap(), Precision::Tf32);
        assert_eq!("fp32".parse::<Precision>().unwrap(), Precision::Fp32);
        assert!("int4".parse::<Precision>().is_err());
        assert_eq!("BF16".parse::<Precision>().unwrap(), Precision::Bf16);
        assert_eq!("auto".parse::<Precision>().unwrap(), Precision::Auto);
    }

    /// What `auto` and the explicit precisions resolve to per storage and metric, and the
    /// one-line refusals.
    #[test]
    fn arithmetic_per_storage() {
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let resolve = |m: &Metric, p: Precision, be: ElemType, qe: ElemType| {
            Numerics::new(m, &b).with_arithmetic(p, be, qe)
        };
        use ElemType::*;
        let (e, ip, cos, cb) = (
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Cityblock,
        );
        let auto = |m: &Metric, be, qe| resolve(m, Precision::Auto, be, qe).unwrap();
        assert_eq!(auto(&e, F16, F16).arithmetic, Arithmetic::Fp16);
        assert_eq!(auto(&e, F16, F16).storage, Storage::F16);
        assert_eq!(auto(&ip, Bf16, Bf16).storage, Storage::Bf16);
        assert_eq!(auto(&e, F16, F32).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&e, F16, F32).storage, Storage::F32);
        assert_eq!(auto(&cos, F16, F16).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&e, F32, F32).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&e, U8, U8).arithmetic, Arithmetic::Int8);
        assert_eq!(auto(&e, U8, U8).key, TileKey::L2Int);
        assert_eq!(auto(&e, U8, U8).tile_rows(), TileRows::I8);
        assert_eq!(auto(&ip, U8, U8).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&ip, U8, U8).storage, Storage::U8);
        assert_eq!(auto(&cb, U8, U8).tile_rows(), TileRows::F32);
        assert_eq!(auto(&e, U8, F32).storage, Storage::F32);
        assert_eq!(auto(&e, F64, F32).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&cb, F16, F16).arithmetic, Arithmetic::Fp32);
        assert_eq!(auto(&cb, F32, F32).storage, Storage::F32);
        let fp16 = resolve(&e, Precision::Fp16, F16, F16).unwrap();
        assert_eq!(fp16.storage, Storage::F16);
        assert_eq!(fp16.tile_rows(), TileRows::Stored);
        // Other arithmetic on half rows: the stored rows stay as they are, the tiles read f32
        // rows prepared from them on the device.
        let tf32 = resolve(&e, Precision::Tf32, F16, F16).unwrap();
        assert_eq!(
            (tf32.storage, tf32.arithmetic, tf32.tile_rows()),
            (Storage::F16, Arithmetic::Tf32, TileRows::F32)
        );
        let int8 = resolve(&Metric::SqEuclidean, Precision::Int8, U8, U8).unwrap();
        assert_eq!(int8.arithmetic, Arithmetic::Int8);
        for (m, p, be, qe, why) in [
            (&e, Precision::Fp16, F32, F32, "f32 data"),
            (&e, Precision::Fp16, Bf16, Bf16, "bf16 data"),
            (&e, Precision::Bf16, F16, F16, "f16 data"),
            (&e, Precision::Fp16, F16, F32, "a f16 base with f32 queries"),
            (&cos, Precision::Fp16, F16, F16, "this metric"),
            (&cb, Precision::Bf16, Bf16, Bf16, "this metric"),
            (&e, Precision::Int8, F32, F32, "f32 data"),
            (&e, Precision::Int8, U8, F32, "a u8 base with f32 queries"),
            (&ip, Precision::Int8, U8, U8, "this metric"),
            (&cos, Precision::Int8, U8, U8, "this metric"),
        ] {
            let err = resolve(m, p, be, qe).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("--precision auto") && !err.contains('\n'),
                "{err}"
            );
        }
    }

    /// `auto`'s switch to TF32 after the fact gives the plan an explicit `tf32` makes, term for
    /// term (γ doubled once, the input and flush terms), with or without f64 inputs and for a
    /// prepared base's per-batch widening; a second switch changes nothing. Only fp32 GEMM
    /// tiles on f32 rows under `auto` may switch.
    #[test]
    fn auto_tf32_is_a_fresh_tf32_plan() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let narrow = set(&mut rng, 40, 9, 5.0);
        let wide = f64_set(&mut rng, 40, 9, 5.0, 1.0);
        let queries = f64_set(&mut rng, 6, 9, 5.0, 1.0);
        let gemm = [
            Metric::Euclidean,
            Metric::SqEuclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Correlation,
        ];
        for m in &gemm {
            for (b, q) in [(&narrow, &narrow), (&wide, &queries), (&narrow, &queries)] {
                let resolve = |p: Precision| {
                    Numerics::new(m, b)
                        .with_arithmetic(p, b.elem_type(), q.elem_type())
                        .unwrap()
                        .with_inputs(m, b, q)
                };
                let auto = resolve(Precision::Auto);
                assert_eq!(auto.arithmetic, Arithmetic::Fp32, "{m}");
                let switched = auto.auto_tf32(Precision::Auto).expect("fp32 GEMM tiles");
                let fresh = resolve(Precision::Tf32);
                assert_eq!(format!("{switched:?}"), format!("{fresh:?}"), "{m}");
                assert_eq!(switched.abs_bound(2.0, 3.0), fresh.abs_bound(2.0, 3.0));
                assert!(
                    switched.abs_bound(2.0, 3.0) > auto.abs_bound(2.0, 3.0),
                    "{m}"
                );
                assert_eq!(switched.arithmetic(), "tf32");
                let twice = switched.clone().with_precision(Precision::Tf32);
                assert_eq!(format!("{twice:?}"), format!("{fresh:?}"), "{m}");
                assert!(switched.auto_tf32(Precision::Auto).is_none());
                assert!(fresh.auto_tf32(Precision::Auto).is_none());
                for asked in [Precision::Fp32, Precision::Tf32] {
                    assert!(resolve(asked).auto_tf32(asked).is_none(), "{m} {asked}");
                }
            }
            // A prepared base keeps the plan before queries and widens a copy per batch.
            let (rb, rq) = (InputRounding::of(m, &wide), InputRounding::of(m, &queries));
            let base = |p: Precision| {
                Numerics::new(m, &wide)
                    .with_arithmetic(p, ElemType::F64, ElemType::F64)
                    .unwrap()
            };
            let switched = base(Precision::Auto)
                .auto_tf32(Precision::Auto)
                .unwrap()
                .with_roundings(m, &rb, &rq);
            let per_batch = base(Precision::Auto)
                .with_roundings(m, &rb, &rq)
                .auto_tf32(Precision::Auto)
                .unwrap();
            let fresh = base(Precision::Tf32).with_roundings(m, &rb, &rq);
            assert_eq!(format!("{switched:?}"), format!("{fresh:?}"), "{m}");
            assert_eq!(format!("{per_batch:?}"), format!("{fresh:?}"), "{m}");
        }
        // SIMT metrics and tiles on the storage's own cores have no TF32 form.
        let b = VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap();
        let auto = |m: &Metric, e: ElemType| {
            Numerics::new(m, &b)
                .with_arithmetic(Precision::Auto, e, e)
                .unwrap()
                .auto_tf32(Precision::Auto)
        };
        assert!(auto(&Metric::Cityblock, ElemType::F32).is_none());
        assert!(auto(&Metric::Minkowski(3.0), ElemType::F32).is_none());
        assert!(auto(&Metric::Euclidean, ElemType::F16).is_none());
        // u8 under euclidean runs on int8 tiles; under inner product on f32 rows.
        assert!(auto(&Metric::Euclidean, ElemType::U8).is_none());
        assert!(auto(&Metric::InnerProduct, ElemType::U8).is_some());
        // Cosine on f16 storage runs on f32 copies: TF32 may take it.
        assert!(auto(&Metric::Cosine, ElemType::F16).is_some());
    }

    /// The rule on pilot measurements: TF32 where the evaluations it adds cost less than the
    /// tile time it saves; the cases of bench/RESULTS.md's session 8.
    /// The rule with one kept width.
    fn tf32_proves_cheaply(
        needs: &[PilotNeed],
        (first, kept, listed): (usize, usize, usize),
        shape: (usize, usize),
    ) -> bool {
        tf32_list(needs, (first, listed), &[kept], shape, LIST_ENTRY_NS).is_some()
    }

    #[test]
    fn tf32_rule_on_pilot_measurements() {
        let need = |fp32, tf32| PilotNeed { fp32, tf32 };
        let graph_1m = (500_000, 128);
        let knn_1m = (1_000_000, 128);
        // k = 10: first list 18, kept 32 wide; pilot lists of 512.
        let rule = |needs: &[PilotNeed], shape| tf32_proves_cheaply(needs, (18, 32, 512), shape);
        // Normal data: both prove inside the list, TF32 a few entries later.
        let cheap = vec![need(Some(12), Some(22)); 32];
        assert!(rule(&cheap, graph_1m) && rule(&cheap, knn_1m));
        // A few queries longer under TF32 do not tip it.
        let mut some_longer = cheap.clone();
        some_longer[..2].fill(need(Some(12), Some(90)));
        assert!(rule(&some_longer, graph_1m));
        // Clustered data: TF32 needs 70–400 entries, or more than the pilot listed.
        assert!(!rule(&vec![need(Some(12), Some(110)); 32], graph_1m));
        assert!(!rule(&vec![need(Some(12), Some(74)); 32], knn_1m));
        assert!(!rule(&vec![need(Some(14), None); 32], knn_1m));
        // Extra evaluations inside the list: worth it against a large base, not a tiny one.
        assert!(rule(&vec![need(Some(12), Some(30)); 32], knn_1m));
        assert!(!rule(&vec![need(Some(12), Some(30)); 32], (100, 128)));
        // Duplicates: fp32 needs long lists too, TF32 little more: TF32.
        assert!(rule(&vec![need(Some(110), Some(120)); 32], graph_1m));
        assert!(rule(&vec![need(None, None); 32], graph_1m));
        // A small base saves too little for any widening.
        assert!(!rule(&vec![need(Some(12), Some(40)); 32], (8000, 128)));
        // k = 1000: lists 2048 wide re-ranked on the device; TF32's longer proofs fit.
        let wide_list =
            |needs: &[PilotNeed]| tf32_proves_cheaply(needs, (1125, 2048, 4500), knn_1m);
        assert!(wide_list(&vec![need(Some(1010), Some(1600)); 32]));
        assert!(!wide_list(&vec![need(Some(1010), Some(4000)); 32]));
        // A quarter of the queries beyond those lists: their widening passes cost more than
        // TF32 saves.
        let mut some_widened = vec![need(Some(1010), Some(1300)); 32];
        some_widened[..8].fill(need(Some(1010), Some(2500)));
        assert!(!wide_list(&some_widened));
        // The wide graph (100k × 15876): ~95 more per row, inside the list its pilot sized.
        let wide = tf32_proves_cheaply(
            &vec![need(Some(15), Some(110)); 32],
            (18, 140, 512),
            (50_000, 15876),
        );
        assert!(wide);
        // Nothing measured (every pilot list complete): fp32.
        assert!(!rule(&[], graph_1m));
    }

    #[test]
    fn tf32_widens_its_list_where_that_proves_on_the_device() {
        let need = |fp32, tf32| PilotNeed { fp32, tf32 };
        let knn_1m = (1_000_000, 128);
        // k = 10: first list 18, kept 32 wide; TF32 may keep 128, 256 or 512; pilot lists 512.
        let widths = [32, 128, 256, 512];
        let pick =
            |needs: &[PilotNeed], shape| tf32_list(needs, (18, 512), &widths, shape, LIST_ENTRY_NS);
        // Normal data proves in the usual list.
        assert_eq!(pick(&vec![need(Some(12), Some(22)); 32], knn_1m), Some(0));
        // Clustered data: ~110 entries under TF32 prove on the device in a list of 128, and
        // the wider list costs less than widening every query.
        assert_eq!(pick(&vec![need(Some(12), Some(110)); 32], knn_1m), Some(1));
        assert_eq!(pick(&vec![need(Some(12), Some(200)); 32], knn_1m), Some(2));
        // Without the wider widths the same proofs keep fp32 (the widening passes).
        assert!(tf32_list(
            &vec![need(Some(12), Some(110)); 32],
            (18, 512),
            &[32],
            knn_1m,
            LIST_ENTRY_NS
        )
        .is_none());
        // Proofs beyond the pilot's lists and a base too small to save: fp32.
        assert_eq!(pick(&vec![need(Some(12), None); 32], knn_1m), None);
        assert_eq!(
            pick(&vec![need(Some(12), Some(110)); 32], (8000, 128)),
            None
        );
        // A proof no list holds is not worth a wider list for every query; one a wider list
        // holds may be (a widened query costs ~120 µs).
        let mut few = vec![need(Some(12), Some(20)); 32];
        few[0] = need(Some(12), None);
        assert_eq!(pick(&few, knn_1m), Some(0));
        few[0] = need(Some(12), Some(300));
        assert_eq!(pick(&few, knn_1m), Some(2));
        // One query in 32 a little past the usual list: worth a wider list for every query
        // where entries are cheap (written tiles), not where each costs survivors in every
        // chunk of fused tile pairs.
        few[0] = need(Some(12), Some(40));
        assert_eq!(pick(&few, knn_1m), Some(1));
        let fused = tf32_list(&few, (18, 512), &widths, knn_1m, FUSED_LIST_ENTRY_NS);
        assert_eq!(fused, Some(0));
    }

    /// The pilot of a graph done on the host: TF32 keys ([`HostTiles`], truncating inputs) of 32
    /// evenly spaced items against the whole set, lists of `listed`, each list's proof length
    /// under the fp32 and the TF32 plan (self pair included: k + 1), and the rule; with the
    /// fp16x3 plan's proof lengths on the same keys (as `tf32`) and its rule, as
    /// search/pilot.rs weighs them for a graph.
    fn host_pilot(m: &Metric, set: &VectorSet, k: usize) -> (bool, Vec<PilotNeed>) {
        let (tf32, needs, _) = host_pilots(m, set, k);
        (tf32, needs)
    }

    fn host_pilots(m: &Metric, set: &VectorSet, k: usize) -> (bool, Vec<PilotNeed>, bool) {
        let fp32 = Numerics::new(m, set)
            .with_arithmetic(Precision::Auto, ElemType::F32, ElemType::F32)
            .unwrap();
        let tf32 = fp32.auto_tf32(Precision::Auto).unwrap();
        let split = fp32.auto_form(Precision::Auto, Precision::Fp16x3).unwrap();
        let (n, d) = (set.len(), set.dim());
        let ids: Vec<usize> = (0..32).map(|i| i * n / 32).collect();
        let rows = ids.iter().flat_map(|&i| set.row_f32(i).to_vec()).collect();
        let q = VectorSet::from_f32(ids.len(), d, rows).unwrap();
        let tiles = HostTiles::new(&tf32, m, set, &q, Conv::Each(tf32_truncate));
        let (kk, listed) = (k + 1, 512);
        let (needs, split_needs): (Vec<PilotNeed>, Vec<PilotNeed>) = (0..q.len())
            .map(|j| {
                let mut keys = tiles.keys[j].clone();
                keys.sort_unstable_by(f32::total_cmp);
                keys.truncate(listed);
                let need = |p: &Numerics| {
                    p.proof_length(&keys, kk, p.abs_bound(tiles.qnorm[j], tiles.bmax))
                };
                let fp32 = need(&fp32);
                (
                    PilotNeed {
                        fp32,
                        tf32: need(&tf32),
                    },
                    PilotNeed {
                        fp32,
                        tf32: need(&split),
                    },
                )
            })
            .unzip();
        let first = k + (k / 8).max(8);
        // Decided for the graph this sample stands for (1M items, as dense on each subspace as
        // gpu_bench's clustered kind): half of it per row, lists kept 32 wide.
        let kept = first.next_power_of_two().max(32);
        let shape = (500_000, d);
        let rule = (LIST_ENTRY_NS, SPLIT_SAVING_SHARE);
        let split = tensor_list(&split_needs, (first, listed), &[kept], shape, rule).is_some();
        (
            tf32_proves_cheaply(&needs, (first, kept, listed), shape),
            needs,
            split,
        )
    }

    /// Where TF32 loses on the clustered graph (euclidean, the benchmark's), the fp16x3 rule
    /// takes split rows: their proofs (on the pilot's TF32 keys) run ~17 entries against
    /// fp32's ~14 where TF32's run to hundreds. (Cosine on the same data keeps fp32: its keys
    /// sit so close that the split's γ, ~6× fp32's, doubles the proofs past the graph's kept
    /// list of 32, and widening costs more than the split saves.)
    #[test]
    fn host_pilot_takes_split_rows_for_clustered_graphs() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let set = clustered(&mut rng, 2000, 128, 2);
        let (tf32, needs, split) = host_pilots(&Metric::Euclidean, &set, 10);
        let show: Vec<_> = needs.iter().map(|n| (n.fp32, n.tf32)).collect();
        assert!(!tf32 && split, "(fp32, tf32) proof lengths {show:?}");
    }

    /// On the host's emulation of the tiles, the pilot takes TF32 for normal data (near the
    /// origin and far from it) and fp32 for clustered data (2,000 points on two 8-d subspaces,
    /// as dense on each as gpu_bench's 1M on 1,000), d = 128, euclidean and cosine.
    #[test]
    fn host_pilot_tells_normal_from_clustered_data() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let (n, d, k) = (2000, 128, 10);
        let normal = |rng: &mut StdRng, offset: f32| {
            let v = (0..n * d)
                .map(|_| offset + rng.sample::<f32, _>(rand_distr::StandardNormal))
                .collect();
            VectorSet::from_f32(n, d, v).unwrap()
        };
        let both = [Metric::Euclidean, Metric::Cosine];
        // (Cosine far from the origin is left out: its keys are closer together than even
        // fp32's bound, and no list of the pilot proves under either arithmetic.)
        let cases = [
            ("normal", normal(&mut rng, 0.0), &both[..], true),
            ("normal + 100", normal(&mut rng, 100.0), &both[..1], true),
            ("clustered", clustered(&mut rng, n, d, 2), &both[..], false),
        ];
        for (what, set, metrics, tf32) in &cases {
            for m in metrics.iter() {
                let (got, needs) = host_pilot(m, set, k);
                let show: Vec<_> = needs.iter().map(|n| (n.fp32, n.tf32)).collect();
                assert_eq!(
                    got, *tf32,
                    "{what} {m}: (fp32, tf32) proof lengths {show:?}"
                );
            }
        }
    }
}
