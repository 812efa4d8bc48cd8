//! The route grid: every decision of how a candidate pass runs, over a grid of the cases the
//! decisions tell apart (metric, storage, precision and fusion options, k and list sizes,
//! selection, sizes, one build or a share of one, the pilot's measurements), written as one
//! line per case and pinned by a hash per section. The hashes were taken at `e4e7bc2`, before
//! the decisions moved into one place, so the grid proves that every case takes the route it
//! took there. On a mismatch the lines go to a file in the temporary directory, to compare with
//! the same test's lines at `e4e7bc2`.

use voisin::data::ElemType;
use voisin::{Metric, VectorSet};

use crate::numerics::plan::{Arithmetic, Numerics, TileKind, TileRows};
use crate::ops::fused::{self, FusedKernel, FusedPlan};
use crate::ops::pair::{self, PairKind};
use crate::ops::select::{self, Select};
use crate::ops::survivors;
use crate::ops::{locality, scaled, Budget};
use crate::options::{Fusion, Precision};
use crate::search::graph::{self, provable, SEED_TILES};
use crate::search::knn::{first_list, pass_list};
use crate::search::pilot::{pilot_probe, proof_has_room, PILOT_DIM, WIDER_LISTS};
use crate::search::route::{
    self, tensor_list, tf32_list, PilotNeed, FUSED_LIST_ENTRY_NS, LIST_ENTRY_NS, SPLIT_SAVING_SHARE,
};

/// A section's lines, hashed as they come (FNV-1a, each line ended by a newline) and kept to
/// be written out should the hash not be the pinned one.
struct Grid {
    hash: u64,
    lines: Vec<String>,
}

impl Grid {
    fn new() -> Self {
        Grid {
            hash: 0xcbf2_9ce4_8422_2325,
            lines: Vec::new(),
        }
    }

    fn push(&mut self, line: String) {
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.lines.push(line);
    }

    /// Compares the hash with the pinned one; on a mismatch writes the lines out and fails.
    fn pinned(self, section: &str, want: u64) {
        if self.hash != want {
            let path = std::env::temp_dir().join(format!("route_grid_{section}.txt"));
            std::fs::write(&path, self.lines.join("\n") + "\n").expect("writing the grid");
            panic!(
                "route grid '{section}': {} lines hash to {:#018x}, pinned {want:#018x}; lines \
                 in {}",
                self.lines.len(),
                self.hash,
                path.display()
            );
        }
    }
}

const PRECISIONS: [Precision; 7] = [
    Precision::Auto,
    Precision::Fp32,
    Precision::Tf32,
    Precision::Fp16x3,
    Precision::Fp16,
    Precision::Bf16,
    Precision::Int8,
];

const FUSIONS: [Fusion; 3] = [Fusion::Auto, Fusion::Off, Fusion::On];

fn metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| !matches!(m, Metric::Levenshtein | Metric::Custom(_)))
        .collect()
}

/// Storage of a base and of its queries.
const STORAGES: [(ElemType, ElemType); 7] = [
    (ElemType::F32, ElemType::F32),
    (ElemType::F16, ElemType::F16),
    (ElemType::Bf16, ElemType::Bf16),
    (ElemType::U8, ElemType::U8),
    (ElemType::F64, ElemType::F64),
    (ElemType::F32, ElemType::F16),
    (ElemType::U8, ElemType::F32),
];

/// The plan a search makes for a base of `d` values stored as `elem` under `precision`:
/// with f64 storage, on a set of values f32 does not hold (the bound widened for them).
fn plan_for(
    m: &Metric,
    (be, qe): (ElemType, ElemType),
    d: usize,
    precision: Precision,
) -> voisin::Result<Numerics> {
    if be == ElemType::F64 {
        let b = VectorSet::from_f64(1, d, vec![0.1; d]).unwrap();
        return Ok(route::numerics(Numerics::new(m, &b), precision, be, qe)?.with_inputs(m, &b, &b));
    }
    let b = VectorSet::from_f32(1, d, vec![0.5; d]).unwrap();
    route::numerics(Numerics::new(m, &b), precision, be, qe)
}

/// Every plan of the grid with its label.
fn plans(
    metrics: &[Metric],
    storages: &[(ElemType, ElemType)],
    dims: &[usize],
) -> Vec<(String, voisin::Result<Numerics>)> {
    let mut out = Vec::new();
    for m in metrics {
        for &st in storages {
            for &d in dims {
                for p in PRECISIONS {
                    let label = format!("{m} {:?}/{:?} d{d} {p}", st.0, st.1);
                    out.push((label, plan_for(m, st, d, p)));
                }
            }
        }
    }
    out
}

/// The plans of the grid that differ, each with the label of its first case.
fn distinct(plans: Vec<(String, voisin::Result<Numerics>)>) -> Vec<(String, Numerics)> {
    let mut seen = std::collections::HashSet::new();
    plans
        .into_iter()
        .filter_map(|(label, p)| p.ok().map(|p| (label, p)))
        .filter(|(_, p)| seen.insert(format!("{p:?}")))
        .collect()
}

/// The cuBLAS or SIMT call a written tile of `plan` makes (ops/tile.rs `compute`), on the
/// scaled f16 copy where `scaled`.
fn gemm_path(plan: &Numerics, scaled: bool) -> String {
    match plan.tile {
        TileKind::Simt(kind, p) => format!("simt {kind} {p}"),
        TileKind::Gemm if scaled => "f16 scaled".into(),
        TileKind::Gemm => match (plan.tile_rows(), plan.arithmetic) {
            (TileRows::I8, _) => "int8".into(),
            (TileRows::F32, Arithmetic::Fp32 | Arithmetic::Fp16x3) => "sgemm".into(),
            (TileRows::F32, Arithmetic::Tf32) => "tf32".into(),
            (TileRows::Stored, _) => format!("half {:?}", plan.storage),
            _ => "none".into(),
        },
    }
}

/// The fused_filter kernel a plan's k-NN passes take (ops/fused.rs `filter`).
fn filter_kernel(plan: &Numerics) -> &'static str {
    match plan.arithmetic {
        Arithmetic::Fp32 | Arithmetic::Fp16x3 => "fp32",
        Arithmetic::Tf32 => "tf32",
        _ => "-",
    }
}

/// The fused kind that runs where `kind` was chosen and the scaled copies fit (`copies`) or
/// not ([`pair::Operands::new`]).
fn operands_kind(plan: &Numerics, kind: PairKind, copies: bool) -> Option<PairKind> {
    let kind = match (kind, kind.scaled() && copies) {
        (PairKind::F16Scaled, false) => PairKind::Tf32,
        (PairKind::F16Split, false) => return None,
        (kind, _) => kind,
    };
    kind.fits(plan).then_some(kind)
}

fn plan_line(plan: &Numerics, asked: Precision) -> String {
    let loc: Vec<bool> = [
        (1_000_000, 16384),
        (5000, 4096),
        (5000, 1000),
        (u32::MAX as usize, 16384),
    ]
    .iter()
    .map(|&(n, t)| locality::applies(plan, n, t))
    .collect();
    let split = route::auto_form(plan, asked, Arithmetic::Fp16x3).map(|p| pair::kind_for(&p));
    format!(
        "{} {:?} rows {:?} key {:?} widened {} | pair {:?} | scaled {} split {} tiles {} | \
         auto tf32 {} fp16x3 {split:?} | gemm {} / {} | filter {} | locality {loc:?}",
        plan.arithmetic(),
        plan.storage,
        plan.tile_rows(),
        plan.key,
        plan.widened(),
        pair::kind_for(plan),
        scaled::applies(plan),
        scaled::split(plan),
        scaled::for_tiles(plan),
        route::auto_tf32(plan, asked).is_some(),
        gemm_path(plan, false),
        gemm_path(plan, scaled::for_tiles(plan)),
        filter_kernel(plan),
    )
}

/// How one k-NN candidate pass runs (search/knn.rs `passes`) for a wanted list of `kp`.
fn knn_line(
    plan: &Numerics,
    (kp, sel, fusion): (usize, Select, Fusion),
    (nq, nb): (usize, usize),
    budget: &Budget,
    copies: bool,
) -> String {
    let kp = pass_list(plan, kp, sel);
    let want = kp;
    let mode = match sel.resolve(kp) {
        Ok(m) => m,
        Err(e) => return format!("refused: {e}"),
    };
    let kp = mode.width(kp);
    let kc = kp.min(nb);
    let mut fusing = None;
    let (q_tile, b_tile) = if mode.whole_rows() {
        let per_query = nb * 4 + kc * 8;
        ((budget.bytes / per_query).clamp(1, nq), nb)
    } else {
        let (qmax, bmax) = (8192usize, 16384usize);
        let b_tile = nb.min(bmax);
        if mode == Select::Block {
            fusing = fused::plan_for(plan, fusion, kp, (nq, nb));
        }
        let qmax = match fusing {
            Some(FusedPlan {
                kernel: FusedKernel::Pair(_),
                ..
            }) => 2 * qmax,
            _ => qmax,
        };
        let buffers = fusing.map_or(0, |f| f.cap * 8 + 8);
        let per_query = b_tile * 4 + kp * 8 + buffers;
        ((budget.bytes / per_query).clamp(1, nq.min(qmax)), b_tile)
    };
    let width = if mode.whole_rows() { kc } else { kp };
    let planned = fusing;
    if let Some(
        f @ FusedPlan {
            kernel: FusedKernel::Pair(kind),
            ..
        },
    ) = fusing
    {
        fusing = operands_kind(plan, kind, copies).map(|k| FusedPlan {
            kernel: FusedKernel::Pair(k),
            ..f
        });
    }
    let floors = matches!(fusing, Some(f) if f.kernel != FusedKernel::Filter);
    let short = fusing
        .filter(|f| f.rank < kp)
        .map(|f| Select::Block.width(f.rank));
    let chunks = match fusing {
        Some(
            f @ FusedPlan {
                kernel: FusedKernel::Pair(kind),
                ..
            },
        ) => {
            let warm = f.first.min(nb);
            let (mut seen, mut sizes) = (0, Vec::new());
            while seen < nb {
                let c = f.chunk(kp, warm + seen, kind.row_bytes(plan));
                seen = (seen + c).min(nb);
                sizes.push(c);
            }
            format!("{} chunks {:?}", sizes.len(), &sizes[..sizes.len().min(3)])
        }
        _ => String::new(),
    };
    format!(
        "{mode:?} want {want} width {width} kc {kc} tiles {q_tile}x{b_tile} | planned {planned:?} \
         runs {fusing:?} floors {floors} short {short:?} {chunks}"
    )
}

/// How one graph share runs on a set of `n` items (search/graph.rs `lists` and
/// `symmetric_candidates`) for a first list of `kp` (the list pilot's) in tiles of `t`.
#[allow(clippy::too_many_arguments)]
fn graph_line(
    plan: &Numerics,
    (n, k, kp, t): (usize, usize, usize, usize),
    (sel, fusion): (Select, Fusion),
    whole: bool,
    copies: bool,
) -> String {
    let set = VectorSet::from_f32(1, plan.dim, vec![0.5; plan.dim]).unwrap();
    match sel.resolve(kp) {
        Err(e) => format!("refused: {e}"),
        Ok(Select::Block) => {
            let w = Select::Block.width(kp).max(select::COLS_KP);
            let proves = provable(plan, &set, k, w);
            let nt = n.div_ceil(t);
            let cap = survivors::filter_cap(w);
            let fuse_kind = pair::kind_for(plan).filter(|_| fusion != Fusion::Off && n > 0);
            let wide = scaled::for_tiles(plan);
            let seeding = cap.is_some() && nt >= SEED_TILES;
            let order =
                seeding && whole && !wide && fuse_kind.is_some() && locality::applies(plan, n, t);
            let copy = n > 0 && (wide || fuse_kind.is_some_and(PairKind::scaled));
            let have = copy && copies;
            let fused = fuse_kind.and_then(|kind| operands_kind(plan, kind, have));
            let written_scaled = have && wide;
            let sample = seeding.then(|| {
                let c = survivors::filter_cap(w).unwrap_or(4 * w);
                (t / 4).max(2 * w * t / c).min(t / 2).min(n)
            });
            let in_place = w == select::COLS_KP;
            format!(
                "block width {w} provable {proves} cap {cap:?} fuse {fuse_kind:?} wide {wide} \
                 seeding {seeding} locality {order} copy {copy} fused {fused:?} written scaled \
                 {written_scaled} sample {sample:?} cols in place {in_place}"
            )
        }
        Ok(sel) => {
            let kp = if sel.whole_rows() {
                (kp + 1).min(n)
            } else {
                kp
            };
            format!("rows {sel:?} kp {kp} slots {}", pass_list(plan, kp, sel))
        }
    }
}

/// The list pilot's rule (search/pilot.rs `pilot_list`): whether it runs, and the first list
/// it gives for a longest proof of `need` (`None`: out of sight, twice the list it saw).
fn list_line(plan: &Numerics, k: usize, self_pairs: bool, sel: Select, nb: usize) -> String {
    let kp = first_list(k);
    let wanted = plan.dim >= PILOT_DIM
        || (plan.arithmetic == Arithmetic::Tf32
            && k >= 64
            && (self_pairs || !proof_has_room(plan, kp, sel)));
    let cap = sel
        .max_list()
        .unwrap_or(usize::MAX)
        .min(nb.next_power_of_two());
    let after: Vec<usize> = [kp, kp + 1, 3 * kp, 40 * kp, 100_000]
        .iter()
        .map(|&need| {
            if need > kp {
                (need + need / 4).min(cap).max(kp)
            } else {
                kp
            }
        })
        .collect();
    format!(
        "room {} wanted {wanted} probe {} cap {cap} lists {after:?}",
        proof_has_room(plan, kp, sel),
        pilot_probe(kp)
    )
}

/// A fixed stream of numbers for the pilots' measurements.
struct Draws(u64);

impl Draws {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

/// Proof lengths of 32 pilot queries of a data kind (`profile`: 0 near, 1 clustered, 2 far)
/// for their `kk` nearest, lists of `listed`.
fn needs(draws: &mut Draws, profile: usize, kk: usize, listed: usize) -> Vec<PilotNeed> {
    (0..32)
        .map(|_| {
            let fp32 = Some(kk + draws.next(4)).filter(|&l| l <= listed);
            let tf32 = match profile {
                0 => Some(kk + draws.next(24)),
                1 => Some(kk + draws.next(8 * kk + 120)).filter(|_| draws.next(10) > 2),
                _ => Some(kk + draws.next(2 * listed)).filter(|_| draws.next(10) > 6),
            };
            PilotNeed {
                fp32,
                tf32: tf32.filter(|&l| l <= listed),
            }
        })
        .collect()
}

/// The arithmetic pilot's rule (search/pilot.rs `arithmetic_pilot`, what follows its
/// measurements) for a plan whose TF32 form is `tf32`.
#[allow(clippy::too_many_arguments)]
fn arithmetic_line(
    plan: &Numerics,
    tf32: &Numerics,
    (precision, fusion, sel): (Precision, Fusion, Select),
    (k, self_pairs): (usize, bool),
    (nq, n, up): (usize, usize, bool),
    draws: &mut Draws,
    profile: usize,
) -> String {
    let first = first_list(k);
    let seen = pilot_probe(first).min(n);
    if nq == 0 || seen <= first {
        return "fp32 (nothing to measure)".into();
    }
    let split = (self_pairs && fusion != Fusion::Off)
        .then(|| route::auto_form(plan, precision, Arithmetic::Fp16x3))
        .flatten()
        .filter(|p| pair::kind_for(p) == Some(PairKind::F16Split));
    let kk = k + usize::from(self_pairs);
    let on_host = !self_pairs && plan.dim < PILOT_DIM && !up;
    let listed = if on_host {
        pass_list(tf32, seen, Select::Auto).min(n)
    } else {
        seen - draws.next(seen / 8 + 1)
    };
    let needs = needs(draws, profile, kk, listed);
    let split_needs: Vec<PilotNeed> = match &split {
        Some(_) => needs
            .iter()
            .map(|n| PilotNeed {
                fp32: n.fp32,
                tf32: n.tf32.map(|t| (t + n.fp32.unwrap_or(t)) / 2),
            })
            .collect(),
        None => Vec::new(),
    };
    let pairs = if self_pairs { n / 2 } else { n };
    let kept = if plan.dim >= PILOT_DIM {
        listed
    } else {
        let kp = pass_list(tf32, first, sel);
        let width = sel.resolve(kp).map_or(kp, |m| m.width(kp));
        if self_pairs {
            width.max(select::COLS_KP)
        } else {
            width
        }
    };
    let width = |l: usize| {
        let kp = pass_list(tf32, l, sel);
        match sel.resolve(kp) {
            Ok(m @ (Select::Block | Select::Heap)) => Some(m.width(kp)),
            _ => None,
        }
    };
    let mut options = vec![(first, kept)];
    if !self_pairs && plan.dim < PILOT_DIM {
        for l in WIDER_LISTS.into_iter().filter(|&l| l > first) {
            match width(l) {
                Some(w) if w > options[options.len() - 1].1 && w <= listed => options.push((l, w)),
                _ => {}
            }
        }
    }
    let shape = (pairs, plan.dim);
    let kept_widths: Vec<usize> = options.iter().map(|o| o.1).collect();
    let fused_pairs = !self_pairs
        && matches!(
            fused::plan_for(tf32, fusion, kept, (nq, n)),
            Some(FusedPlan {
                kernel: FusedKernel::Pair(_),
                ..
            })
        );
    let entry_ns = if fused_pairs {
        FUSED_LIST_ENTRY_NS
    } else {
        LIST_ENTRY_NS
    };
    let pick = tf32_list(&needs, (first, listed), &kept_widths, shape, entry_ns);
    let list = pick.filter(|&i| i > 0).map(|i| options[i].0);
    let split_takes = pick.is_none()
        && !split_needs.is_empty()
        && tensor_list(
            &split_needs,
            (first, listed),
            &kept_widths[..1],
            shape,
            (entry_ns, SPLIT_SAVING_SHARE),
        )
        .is_some();
    let take = match (pick, split_takes) {
        (Some(_), _) => Arithmetic::Tf32,
        (None, true) => Arithmetic::Fp16x3,
        (None, false) => Arithmetic::Fp32,
    };
    let runs = match take {
        Arithmetic::Tf32 => tf32.arithmetic(),
        Arithmetic::Fp16x3 => plan.clone().in_arithmetic(take).arithmetic(),
        _ => plan.arithmetic(),
    };
    format!(
        "host {on_host} split {} listed {listed} options {options:?} entry {entry_ns} -> {take} \
         list {list:?} runs {runs}",
        split.is_some()
    )
}

const SELECTS: [Select; 5] = Select::ALL;

/// The precision option a label names.
fn asked(label: &str) -> Precision {
    PRECISIONS
        .into_iter()
        .find(|p| label.ends_with(&format!(" {p}")))
        .expect("a precision")
}

/// Plans, per metric, storage, dimension and precision option.
#[test]
fn plans_take_their_routes() {
    let dims = [
        1, 3, 8, 127, 128, 1024, 1025, 2048, 2049, 4096, 15876, 131071, 131072,
    ];
    let mut grid = Grid::new();
    for (label, plan) in plans(&metrics(), &STORAGES, &dims) {
        grid.push(match plan {
            Ok(plan) => format!("{label}: {}", plan_line(&plan, asked(&label))),
            Err(e) => format!("{label}: refused: {e}"),
        });
    }
    grid.pinned("plans", 0x55735611bf77f746);
}

/// The k-NN's candidate passes, per plan, list, selection, fusion, batch and base, with the
/// scaled copies fitting and not.
#[test]
fn knn_passes_take_their_routes() {
    let ms = [Metric::Euclidean, Metric::Cosine, Metric::Cityblock];
    let st = [
        (ElemType::F32, ElemType::F32),
        (ElemType::F16, ElemType::F16),
        (ElemType::U8, ElemType::U8),
        (ElemType::F64, ElemType::F64),
    ];
    let kps = [9, 18, 72, 128, 225, 450, 1125, 2048, 2025, 3375, 4608];
    let shapes = [
        (1, 1_000_000),
        (512, 1_000_000),
        (513, 1_000_000),
        (10_000, 1_000_000),
        (700, 20_000),
        (700, 512),
        (10_000, 300),
    ];
    let budgets = [Budget { bytes: 1 << 30 }, Budget { bytes: 1 << 22 }];
    let mut grid = Grid::new();
    for (label, plan) in distinct(plans(&ms, &st, &[128, 1025, 2049])) {
        for kp in kps {
            for sel in SELECTS {
                for fusion in FUSIONS {
                    for shape in shapes {
                        for (b, budget) in budgets.iter().enumerate() {
                            let run =
                                |copies| knn_line(&plan, (kp, sel, fusion), shape, budget, copies);
                            grid.push(format!(
                                "{label} kp {kp} {sel} {fusion:?} {shape:?} budget {b}: {} || {}",
                                run(true),
                                run(false)
                            ));
                        }
                    }
                }
            }
        }
    }
    grid.pinned("knn", 0x066cc5d36dbbcc79);
}

/// The graph's shares, per plan, set, k, tile, selection and fusion, for a whole build and a
/// share of one, with the scaled copy fitting and not.
#[test]
fn graph_shares_take_their_routes() {
    let ms = [
        Metric::Euclidean,
        Metric::InnerProduct,
        Metric::Cosine,
        Metric::Chebyshev,
    ];
    let st = [
        (ElemType::F32, ElemType::F32),
        (ElemType::F16, ElemType::F16),
        (ElemType::U8, ElemType::U8),
        (ElemType::F64, ElemType::F64),
    ];
    let budgets = [Budget { bytes: 1 << 30 }, Budget { bytes: 1 << 24 }];
    let mut grid = Grid::new();
    for (label, plan) in distinct(plans(&ms, &st, &[3, 128, 2049, 15876])) {
        for n in [0, 1, 300, 5000, 100_000, 1_000_000] {
            for k in [1, 10, 100, 250, 2000] {
                for (b, budget) in budgets.iter().enumerate() {
                    let edge = graph::edge_for(n, k, budget);
                    for kp in [first_list(k), 3 * first_list(k)] {
                        for t in [edge, 4096] {
                            for sel in [Select::Auto, Select::Block, Select::Radix] {
                                for fusion in FUSIONS {
                                    let run = |whole, copies| {
                                        let shape = (n, k, kp, t);
                                        graph_line(&plan, shape, (sel, fusion), whole, copies)
                                    };
                                    grid.push(format!(
                                        "{label} n {n} k {k} budget {b} edge {edge} kp {kp} t {t} \
                                         {sel} {fusion:?}: {} || {} || {} || {}",
                                        run(true, true),
                                        run(true, false),
                                        run(false, true),
                                        run(false, false)
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    grid.pinned("graph", 0x2f9fc3b7f5bd3701);
}

/// The pilots' rules: the list pilot per plan, k, selection and base; the arithmetic pilot per
/// plan, option, k, search, sizes and measurements.
#[test]
fn pilots_take_their_routes() {
    let ms = [
        Metric::Euclidean,
        Metric::Cosine,
        Metric::InnerProduct,
        Metric::Cityblock,
    ];
    let st = [
        (ElemType::F32, ElemType::F32),
        (ElemType::F16, ElemType::F16),
        (ElemType::U8, ElemType::U8),
        (ElemType::F64, ElemType::F64),
    ];
    let dims = [128, 1024, 2049];
    let mut grid = Grid::new();
    for (label, plan) in distinct(plans(&ms, &st, &dims)) {
        for k in [1, 10, 63, 64, 100, 500, 1000, 3000] {
            for sel in SELECTS {
                for self_pairs in [false, true] {
                    for nb in [100, 5000, 1_000_000] {
                        let line = list_line(&plan, k, self_pairs, sel, nb);
                        grid.push(format!(
                            "{label} list k {k} {sel} self {self_pairs} nb {nb}: {line}"
                        ));
                    }
                }
            }
        }
    }
    let mut draws = Draws(17);
    for (label, plan) in plans(&ms, &st, &dims) {
        let Ok(plan) = plan else { continue };
        let asked = asked(&label);
        let Some(tf32) = route::auto_tf32(&plan, asked) else {
            grid.push(format!("{label}: no arithmetic pilot"));
            continue;
        };
        for k in [1, 10, 100, 1000] {
            for sel in [Select::Auto, Select::Block, Select::Radix, Select::Heap] {
                for fusion in FUSIONS {
                    for self_pairs in [false, true] {
                        for (nq, n) in [
                            (0, 1000),
                            (10, 1000),
                            (10_000, 100_000),
                            (10_000, 1_000_000),
                        ] {
                            for up in [false, true] {
                                for profile in 0..3 {
                                    let opts = (asked, fusion, sel);
                                    let sizes = (nq, if self_pairs { nq.max(n) } else { n }, up);
                                    let line = arithmetic_line(
                                        &plan,
                                        &tf32,
                                        opts,
                                        (k, self_pairs),
                                        sizes,
                                        &mut draws,
                                        profile,
                                    );
                                    grid.push(format!(
                                        "{label} auto k {k} {sel} {fusion:?} self {self_pairs} \
                                         {sizes:?} profile {profile}: {line}"
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    grid.pinned("pilots", 0x1a092b2d4ce90633);
}
