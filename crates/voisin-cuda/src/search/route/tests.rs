//! The route's rules, case by case.

use super::*;
use crate::numerics::plan::tests::{clustered, f64_set, set, tf32_truncate};
use crate::numerics::plan::{plan_of, Conv, HostTiles, InputRounding, Storage, TileKey, TileRows};
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
/// tile time it saves; the cases measured for docs/design/tensor-core-inputs.md.
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
    let wide_list = |needs: &[PilotNeed]| tf32_proves_cheaply(needs, (1125, 2048, 4500), knn_1m);
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
            let need =
                |p: &Numerics| p.proof_length(&keys, kk, p.abs_bound(tiles.qnorm[j], tiles.bmax));
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

/// Tensor-core plans of dot-product keys are fused, in every storage and dimension, up to
/// one chunk (TF32 plans on scaled f16 rows); fp32 and SIMT metrics are not.
#[test]
fn which_plans_are_fused() {
    let kind =
        |m: &Metric, d: usize, p: Arithmetic, elem: ElemType| pair_kind(&plan_of(m, d, p, elem));
    use ElemType::*;
    let (e, ip, cos, cb) = (
        Metric::Euclidean,
        Metric::InnerProduct,
        Metric::Cosine,
        Metric::Cityblock,
    );
    for d in [1, 3, 64, 127, 128, 1025, 2048] {
        for m in [&e, &ip, &cos] {
            assert_eq!(
                kind(m, d, Arithmetic::Tf32, F32),
                Some(PairKind::F16Scaled),
                "{m} {d}"
            );
        }
    }
    // fp16x3: split rows at any dimension (the bound counts the whole row's sums).
    for d in [1, 3, 127, 128, 1025, 2049, 15876] {
        assert_eq!(
            kind(&e, d, Arithmetic::Fp16x3, F32),
            Some(PairKind::F16Split),
            "{d}"
        );
    }
    assert_eq!(kind(&e, 128, Arithmetic::Fp32, F32), None);
    assert_eq!(kind(&cb, 128, Arithmetic::Tf32, F32), None);
    assert_eq!(kind(&e, 2049, Arithmetic::Tf32, F32), None);
    for d in [1, 3, 127, 1025] {
        assert_eq!(
            kind(&e, d, Arithmetic::Fp16, F16),
            Some(PairKind::F16),
            "{d}"
        );
        assert_eq!(
            kind(&ip, d, Arithmetic::Bf16, Bf16),
            Some(PairKind::Bf16),
            "{d}"
        );
        assert_eq!(kind(&e, d, Arithmetic::Int8, U8), Some(PairKind::S8), "{d}");
    }
    assert_eq!(kind(&e, 2049, Arithmetic::Fp16, F16), None);
    assert_eq!(kind(&e, 4096, Arithmetic::Int8, U8), None);
    assert_eq!(kind(&e, 16, Arithmetic::Fp32, U8), None);
}

/// TF32 plans of dot-product keys take the copy at any dimension, their written tiles from
/// TILE_MIN_DIM on; fp32, SIMT metrics and the storages' own tensor cores never.
#[test]
fn which_plans_take_scaled_rows() {
    let plan = plan_of;
    let (e, ip, cos, cb) = (
        Metric::Euclidean,
        Metric::InnerProduct,
        Metric::Cosine,
        Metric::Cityblock,
    );
    for m in [&e, &ip, &cos] {
        for elem in [ElemType::F32, ElemType::U8, ElemType::F16] {
            for d in [1, 3, 128, TILE_MIN_DIM - 1, TILE_MIN_DIM, 15876] {
                let p = plan(m, d, Arithmetic::Tf32, elem);
                assert!(scaled_rows(&p), "{m} {elem:?} {d}");
                assert_eq!(written_on_copy(&p), d >= TILE_MIN_DIM, "{m} {elem:?} {d}");
            }
        }
        assert!(!scaled_rows(&plan(
            m,
            2048,
            Arithmetic::Fp32,
            ElemType::F32
        )));
    }
    assert!(!scaled_rows(&plan(
        &cb,
        2048,
        Arithmetic::Tf32,
        ElemType::F32
    )));
    assert!(!scaled_rows(&plan(
        &e,
        2048,
        Arithmetic::Fp16,
        ElemType::F16
    )));
    assert!(!scaled_rows(&plan(
        &e,
        2048,
        Arithmetic::Int8,
        ElemType::U8
    )));
    // fp16x3: split rows for the fused pairs at any dimension, never written tiles.
    for d in [1, 3, 128, TILE_MIN_DIM, 15876] {
        let p = plan(&e, d, Arithmetic::Fp16x3, ElemType::F32);
        assert!(
            scaled_rows(&p) && split_rows(&p) && !written_on_copy(&p),
            "{d}"
        );
    }
    assert!(!split_rows(&plan(&e, 128, Arithmetic::Tf32, ElemType::F32)));
}

/// A k-NN pass's fused method as the tests below look at it ([`fused_method`]): its sample,
/// buffer slots, kernel and rank.
#[derive(Clone, Copy, Debug)]
struct FusedPlan {
    first: usize,
    cap: usize,
    kernel: FusedKernel,
    rank: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FusedKernel {
    Filter,
    Pair(PairKind),
}

/// The fused method of a pass of `nq` queries with lists of `kp` over `nb` base items.
fn fused_plan(
    plan: &Numerics,
    fusion: Fusion,
    kp: usize,
    (nq, nb): (usize, usize),
) -> Option<FusedPlan> {
    let (method, warm) = fused_method(plan, fusion, kp, (nq, nb))?;
    let Warm::Sample { first, rank, .. } = warm else {
        unreachable!("a fused method starts from a sample")
    };
    let (kernel, cap) = match method {
        Method::FusedFilter { cap, .. } => (FusedKernel::Filter, cap),
        Method::Pair { kind, cap } => (FusedKernel::Pair(kind), cap),
        m => unreachable!("{m:?} is not fused"),
    };
    Some(FusedPlan {
        first,
        cap,
        kernel,
        rank,
    })
}

impl FusedPlan {
    /// [`Route::chunk`] of a pass with lists of `kp` under this method.
    fn chunk(&self, kp: usize, seen: usize, row_bytes: usize) -> usize {
        let FusedKernel::Pair(kind) = self.kernel else {
            unreachable!("fused_filter takes the base at once")
        };
        let route = Route {
            arithmetic: Arithmetic::Fp32,
            list: ListRoute {
                want: kp,
                mode: Select::Block,
                kp,
                width: kp,
            },
            tiles: (1, 1),
            method: Method::Pair {
                kind,
                cap: self.cap,
            },
            written: Product::Sgemm,
            copy: RowCopy::None,
            warm: Warm::Sample {
                first: self.first,
                rank: self.rank,
                short: None,
            },
            order: Order::Natural,
            proves: false,
        };
        route.chunk(seen, row_bytes)
    }
}

/// A plan with the engine's choices, as the engine hands them to a pass.
trait WithEngine {
    fn with_engine(self, precision: Arithmetic, fusion: Fusion) -> (Numerics, Fusion);
}

impl WithEngine for Numerics {
    fn with_engine(self, precision: Arithmetic, fusion: Fusion) -> (Numerics, Fusion) {
        (self.in_arithmetic(precision), fusion)
    }
}

/// [`fused_plan`] of such a plan, for a pass of 10,000 queries.
fn plan_for(p: &(Numerics, Fusion), kp: usize, nb: usize) -> Option<FusedPlan> {
    fused_plan(&p.0, p.1, kp, (10_000, nb))
}

#[test]
fn fusion_names() {
    assert_eq!("ON".parse::<Fusion>().unwrap(), Fusion::On);
    assert!("maybe".parse::<Fusion>().is_err());
}

/// Only GEMM metrics with small lists over a large base are fused, with a buffer that
/// expects at most half its capacity.
#[test]
fn fused_plans() {
    let b = VectorSet::from_f32(1, 4, vec![0.0; 4]).unwrap();
    let plan = |m: &Metric, p: Arithmetic, f: Fusion| Numerics::new(m, &b).with_engine(p, f);
    let tf = plan(&Metric::Euclidean, Arithmetic::Tf32, Fusion::On);
    let fp = plan(&Metric::Euclidean, Arithmetic::Fp32, Fusion::Auto);
    let on = plan(&Metric::Cosine, Arithmetic::Fp32, Fusion::On);
    let simt = plan(&Metric::Cityblock, Arithmetic::Tf32, Fusion::On);
    let nb = 1_000_000;
    for kp in [16, 32, 256] {
        let p = plan_for(&tf, kp, nb).unwrap();
        assert!(kp * nb / p.first <= p.cap / 2, "{p:?}");
        assert!(
            p.first <= nb / 4 && p.first.is_multiple_of(GRANULE),
            "{p:?}"
        );
    }
    assert!(plan_for(&fp, 32, nb).is_none());
    assert!(plan_for(&on, 32, nb).is_some());
    assert!(plan_for(&simt, 32, nb).is_none());
    // Longer lists go to the fused pairs (k = 1000's 2048), not beyond them.
    let long = plan_for(&tf, 2048, nb).unwrap();
    assert_eq!(
        (long.kernel, long.cap),
        (FusedKernel::Pair(PairKind::F16Scaled), 2048)
    );
    // Their thresholds are seeded at a rank that expects 1.5 kp items under it: 51 of
    // the 16,384 items of the sample, and chunks of 164k items (at most the L2's share).
    assert_eq!((long.first, long.rank), (PAIR_FIRST, 51));
    assert_eq!(long.chunk(2048, PAIR_FIRST, 32), 164_480);
    assert_eq!(long.chunk(2048, PAIR_FIRST, 256), PAIR_CHUNK_BYTES / 256);
    assert_eq!(plan_for(&tf, 256, nb).unwrap().rank, 256);
    assert_eq!(plan_for(&tf, 512, 10_000_000).unwrap().rank, SEED_RANK_MIN);
    assert!(plan_for(&tf, 4096, nb).is_none());
    // Small bases are fused too when asked (the tests rely on it), not when too small.
    assert!(plan_for(&on, 16, 1000).is_some());
    assert!(plan_for(&on, 16, 300).is_none());
    // Auto fuses small batches only.
    let at = |nq| fused_plan(&fp.0, fp.1, 32, (nq, nb));
    assert!(at(AUTO_FUSED_QUERIES).is_some() && at(1).is_some());
    assert!(at(AUTO_FUSED_QUERIES + 1).is_none());
}

/// Large batches on tensor cores, and any batch on the storages' own, take the fused tile
/// pair unless fusion is off; its chunks grow with what the lists have seen and expect a
/// quarter of the buffer.
#[test]
fn pair_plans() {
    use voisin::data::ElemType;
    let e = Metric::Euclidean;
    let tf = plan_of(&e, 128, Arithmetic::Tf32, ElemType::F32);
    let half = plan_of(&e, 127, Arithmetic::Fp16, ElemType::F16);
    let int8 = plan_of(&e, 128, Arithmetic::Int8, ElemType::U8);
    let fp = plan_of(&e, 128, Arithmetic::Fp32, ElemType::F32);
    let nb = 1_000_000;
    let pair =
        |p: &Numerics, f: Fusion, kp: usize, nq: usize, nb: usize| fused_plan(p, f, kp, (nq, nb));
    let p = pair(&tf, Fusion::Auto, 16, 10_000, nb).unwrap();
    assert_eq!(p.kernel, FusedKernel::Pair(PairKind::F16Scaled));
    assert_eq!((p.first, p.cap), (PAIR_FIRST, 256));
    assert_eq!(p.chunk(16, PAIR_FIRST, 256), 4 * PAIR_FIRST);
    // At most PAIR_CHUNK_BYTES of rows; whole kernel tiles, at least one.
    assert_eq!(p.chunk(16, 400_000, 256), PAIR_CHUNK_BYTES / 256);
    assert_eq!(p.chunk(16, 400_000, 1 << 20), abi::PF_BN);
    // Never below what the seeded threshold alone lets through.
    assert_eq!(p.chunk(16, 10, 256), 4 * PAIR_FIRST);
    assert_eq!(p.chunk(16, 1000, 256) % abi::PF_BN, 0);
    // Small TF32 batches keep fused_filter; so does TF32 when fusion is on.
    let small = pair(&tf, Fusion::Auto, 16, AUTO_FUSED_QUERIES, nb).unwrap();
    assert_eq!(small.kernel, FusedKernel::Filter);
    let on = pair(&tf, Fusion::On, 16, 10_000, nb).unwrap();
    assert_eq!(on.kernel, FusedKernel::Filter);
    for (plan, kind) in [(&half, PairKind::F16), (&int8, PairKind::S8)] {
        for nq in [1, 10_000] {
            let p = pair(plan, Fusion::Auto, 256, nq, nb).unwrap();
            assert_eq!(p.kernel, FusedKernel::Pair(kind));
            assert_eq!(p.cap, 1024);
            assert!(pair(plan, Fusion::Off, 16, nq, nb).is_none());
            // Longer lists: the merge's slots beside the list.
            let long = pair(plan, Fusion::Auto, 512, nq, nb).unwrap();
            assert_eq!((long.first, long.cap), (PAIR_FIRST, 3584));
            assert_eq!(pair(plan, Fusion::Auto, 2048, nq, nb).unwrap().cap, 2048);
            assert!(pair(plan, Fusion::Auto, 4096, nq, nb).is_none());
        }
        // Small bases: an eighth of them first, at least two lists' worth, and only where
        // three quarters are left to fuse.
        let p = pair(plan, Fusion::Auto, 16, 700, 20_000).unwrap();
        assert_eq!(p.first, 2432);
        assert_eq!(
            pair(plan, Fusion::Auto, 100, 700, 900).map(|p| p.first),
            None
        );
        assert_eq!(
            pair(plan, Fusion::Auto, 16, 700, 512).map(|p| p.first),
            Some(128)
        );
    }
    assert!(pair(&fp, Fusion::Auto, 16, 10_000, nb).is_none());
}

#[test]
fn tf32_pass_lists_double_only_where_the_selection_keeps_them() {
    let set = VectorSet::from_f32(2, 4, vec![0.5; 8]).unwrap();
    let fp32 = Numerics::new(&Metric::Euclidean, &set);
    let tf32 = fp32.clone().in_arithmetic(Arithmetic::Tf32);
    // k = 200: a list of 225, 450 under TF32 where the selection keeps it.
    assert_eq!(pass_list(&tf32, 225, Select::Auto), 450);
    assert_eq!(pass_list(&tf32, 225, Select::Block), 450);
    assert_eq!(pass_list(&fp32, 225, Select::Auto), 225);
    // Heap lists hold 256: doubling would make the selection refuse the search.
    assert_eq!(pass_list(&tf32, 225, Select::Heap), 225);
    assert_eq!(pass_list(&tf32, 72, Select::Heap), 144);
    assert_eq!(pass_list(&tf32, 1125, Select::Auto), 1125);
}

#[test]
fn tf32_pilot_is_skipped_only_where_sorted_lists_leave_room() {
    let set = VectorSet::from_f32(2, 4, vec![0.5; 8]).unwrap();
    let plan = Numerics::new(&Metric::Euclidean, &set).in_arithmetic(Arithmetic::Tf32);
    let room = |k: usize, sel| proof_has_room(&plan, first_list(k), sel);
    // 1125 → 2048, 562 → 1024: room; 1012 → 1024, 2 × 112 → 256: none.
    assert!(room(1000, Select::Auto) && room(500, Select::Block));
    assert!(!room(900, Select::Auto) && !room(100, Select::Auto));
    // Unsorted lists are proved on the host over what it downloads: the pilot stays.
    assert!(!room(1000, Select::Quick) && !room(1000, Select::Radix));
    assert!(!room(3000, Select::Auto));
}
