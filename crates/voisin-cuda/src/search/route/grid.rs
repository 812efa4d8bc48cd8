//! The route grid: every decision of how a candidate pass runs, over a grid of the cases the
//! decisions tell apart (metric, storage, precision and fusion options, k and list sizes,
//! selection, sizes, one build or a share of one, the scaled copies fitting or not, the
//! pilots' measurements), written as one line per case and pinned by a hash per section.
//!
//! The hashes were taken at `e4e7bc2` from the decision functions that were then spread over
//! numerics/plan.rs, search/pilot.rs, search/knn.rs, search/graph.rs and ops/ (commit `29111d6`
//! holds that version of this file). The lines are now read off the route ([`choose`] and the
//! pilots' rules) in the same words, so the grid proves that every case takes the route it took
//! there. On a mismatch the lines go to a file in the temporary directory, to compare with the
//! same lines at `29111d6`.

use voisin::data::ElemType;
use voisin::{Metric, VectorSet};

use super::*;
use crate::ops::Budget;
use crate::options::{CudaOptions, Fusion, Precision};

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
        return Ok(numerics(Numerics::new(m, &b), precision, be, qe)?.with_inputs(m, &b, &b));
    }
    let b = VectorSet::from_f32(1, d, vec![0.5; d]).unwrap();
    numerics(Numerics::new(m, &b), precision, be, qe)
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

/// The cuBLAS or SIMT call a written tile of `plan` makes, on the scaled f16 copy where
/// `on_copy`, in the grid's words.
fn gemm_path(plan: &Numerics, on_copy: bool) -> String {
    match product(plan, on_copy) {
        Product::Simt(kind, p) => format!("simt {kind} {p}"),
        Product::ScaledF16 => "f16 scaled".into(),
        Product::Int8 => "int8".into(),
        Product::Sgemm => "sgemm".into(),
        Product::Tf32 => "tf32".into(),
        Product::F16 | Product::Bf16 => format!("half {:?}", plan.storage),
    }
}

/// The fused_filter kernel a plan's k-NN passes take, where its rows are ones fused_filter
/// reads (prepared f32 rows).
fn filter_name(plan: &Numerics) -> &'static str {
    match plan.arithmetic {
        Arithmetic::Fp32 | Arithmetic::Tf32 | Arithmetic::Fp16x3 => match filter_kernel(plan) {
            FilterKernel::Fp32 => "fp32",
            FilterKernel::Tf32 => "tf32",
        },
        _ => "-",
    }
}

fn plan_line(plan: &Numerics, asked: Precision) -> String {
    let loc: Vec<bool> = [
        (1_000_000, 16384),
        (5000, 4096),
        (5000, 1000),
        (u32::MAX as usize, 16384),
    ]
    .iter()
    .map(|&(n, t)| locality(plan, n, t))
    .collect();
    let split = auto_form(plan, asked, Arithmetic::Fp16x3).map(|p| pair_kind(&p));
    format!(
        "{} {:?} rows {:?} key {:?} widened {} | pair {:?} | scaled {} split {} tiles {} | \
         auto tf32 {} fp16x3 {split:?} | gemm {} / {} | filter {} | locality {loc:?}",
        plan.arithmetic(),
        plan.storage,
        plan.tile_rows(),
        plan.key,
        plan.widened(),
        pair_kind(plan),
        scaled_rows(plan),
        split_rows(plan),
        written_on_copy(plan),
        auto_tf32(plan, asked).is_some(),
        gemm_path(plan, false),
        gemm_path(plan, written_on_copy(plan)),
        filter_name(plan),
    )
}

/// A fused method as the grid shows it: `FusedPlan { first, cap, kernel, rank }`, or `None`.
fn fused_text(route: &Route) -> String {
    let kernel = match route.method {
        Method::FusedFilter { .. } => "Filter".to_string(),
        Method::Pair { kind, .. } => format!("Pair({kind:?})"),
        _ => return "None".into(),
    };
    let Warm::Sample { first, rank, .. } = route.warm else {
        unreachable!("a fused method starts from a sample")
    };
    format!(
        "Some(FusedPlan {{ first: {first}, cap: {}, kernel: {kernel}, rank: {rank} }})",
        route.cap()
    )
}

/// The route of a pass where the scaled copies fit (`copies`) or not.
fn as_run(route: Route, plan: &Numerics, copies: bool) -> Route {
    match route.copy {
        RowCopy::None => route,
        _ if copies => route,
        _ => route.without_copy(plan),
    }
}

/// How one k-NN candidate pass runs for a wanted list of `kp`.
fn knn_line(
    plan: &Numerics,
    (kp, sel, fusion): (usize, Select, Fusion),
    (nq, nb): (usize, usize),
    budget: &Budget,
    copies: bool,
) -> String {
    let opts = CudaOptions {
        fusion,
        ..CudaOptions::default()
    };
    let shape = Shape::Knn {
        kp,
        sel,
        nq,
        nb,
        budget: budget.bytes,
    };
    let route = match choose(plan, shape, &opts) {
        Ok(r) => r,
        Err(e) => return format!("refused: {e}"),
    };
    let ListRoute {
        want,
        mode,
        kp,
        width,
    } = route.list;
    let kc = kp.min(nb);
    let (q_tile, b_tile) = route.tiles;
    let planned = fused_text(&route);
    let runs = as_run(route, plan, copies);
    let floors = matches!(runs.method, Method::Pair { .. });
    let short = match runs.warm {
        Warm::Sample { short, .. } => short,
        _ => None,
    };
    let chunks = match (runs.method, runs.warm) {
        (Method::Pair { kind, .. }, Warm::Sample { first, .. }) => {
            let warm = first.min(nb);
            let (mut seen, mut sizes) = (0, Vec::new());
            while seen < nb {
                let c = runs.chunk(warm + seen, kind.row_bytes(plan));
                seen = (seen + c).min(nb);
                sizes.push(c);
            }
            format!("{} chunks {:?}", sizes.len(), &sizes[..sizes.len().min(3)])
        }
        _ => String::new(),
    };
    format!(
        "{mode:?} want {want} width {width} kc {kc} tiles {q_tile}x{b_tile} | planned {planned} \
         runs {} floors {floors} short {short:?} {chunks}",
        fused_text(&runs)
    )
}

/// How one graph share runs on a set of `n` items for a first list of `kp` (the list pilot's)
/// in tiles of `t`.
fn graph_line(
    plan: &Numerics,
    (n, k, kp, t): (usize, usize, usize, usize),
    (sel, fusion): (Select, Fusion),
    whole: bool,
    copies: bool,
) -> String {
    let opts = CudaOptions {
        fusion,
        ..CudaOptions::default()
    };
    let shape = Shape::Graph {
        n,
        k,
        kp,
        tile: t,
        sel,
        whole,
    };
    let route = match choose(plan, shape, &opts) {
        Ok(r) => r,
        Err(e) => return format!("refused: {e}"),
    };
    if route.method == Method::Rows {
        let l = route.list;
        return format!("rows {:?} kp {} slots {}", l.mode, l.want, l.width);
    }
    let w = route.list.width;
    let cap = Some(route.cap()).filter(|&c| c > 0);
    // The kind its fused pairs take; where its lists are too long to filter (no warm method),
    // the kind its copy was made for.
    let fuse = pair_kind(plan).filter(|_| fusion != Fusion::Off && n > 0);
    let wide = written_on_copy(plan);
    let copy = route.copy != RowCopy::None;
    let runs = as_run(route, plan, copies);
    let fused = match runs.method {
        Method::Pair { kind, .. } => Some(kind),
        Method::Written => fuse.and_then(|kind| match copy && copies {
            true => Some(kind),
            false => without_copy(plan, kind),
        }),
        _ => None,
    };
    let sample = match route.warm {
        Warm::Seed { size } => Some(size),
        _ => None,
    };
    format!(
        "block width {w} provable {} cap {cap:?} fuse {fuse:?} wide {wide} seeding {} locality \
         {} copy {copy} fused {fused:?} written scaled {} sample {sample:?} cols in place {}",
        route.proves,
        sample.is_some(),
        route.order == Order::Locality,
        runs.written == Product::ScaledF16,
        w == select::COLS_KP
    )
}

/// The list pilot's rule: whether it runs, and the first list it gives for a longest proof of
/// `need`.
fn list_line(plan: &Numerics, k: usize, self_pairs: bool, sel: Select, nb: usize) -> String {
    let kp = first_list(k);
    let cap = sel
        .max_list()
        .unwrap_or(usize::MAX)
        .min(nb.next_power_of_two());
    let after: Vec<usize> = [kp, kp + 1, 3 * kp, 40 * kp, 100_000]
        .iter()
        .map(|&need| piloted_list(kp, need, sel, nb))
        .collect();
    format!(
        "room {} wanted {} probe {} cap {cap} lists {after:?}",
        proof_has_room(plan, kp, sel),
        list_pilot(plan, k, self_pairs, sel),
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

/// The arithmetic pilot's rule for a plan whose TF32 form is `tf32`, on measurements drawn
/// for a data kind.
#[allow(clippy::too_many_arguments)]
fn arithmetic_line(
    plan: &Numerics,
    tf32: &Numerics,
    (precision, fusion, select): (Precision, Fusion, Select),
    (k, self_pairs): (usize, bool),
    (nq, n, up): (usize, usize, bool),
    draws: &mut Draws,
    profile: usize,
) -> String {
    let opts = CudaOptions {
        precision,
        fusion,
        select,
        ..CudaOptions::default()
    };
    let shape = AutoShape {
        k,
        self_pairs,
        nq,
        n,
        up,
    };
    let Some(pilot) = auto_pilot(plan, shape, &opts) else {
        return "fp32 (nothing to measure)".into();
    };
    let (seen, kk) = (pilot.seen, pilot.kk);
    let listed = if pilot.on_host {
        pass_list(tf32, seen, Select::Auto).min(n)
    } else {
        seen - draws.next(seen / 8 + 1)
    };
    let needs = needs(draws, profile, kk, listed);
    let split_needs: Vec<PilotNeed> = match &pilot.split {
        Some(_) => needs
            .iter()
            .map(|n| PilotNeed {
                fp32: n.fp32,
                tf32: n.tf32.map(|t| (t + n.fp32.unwrap_or(t)) / 2),
            })
            .collect(),
        None => Vec::new(),
    };
    let measured = AutoMeasured {
        needs: &needs,
        split_needs: &split_needs,
        listed,
    };
    let taken = auto_arithmetic(tf32, shape, &opts, &pilot, &measured);
    let take = taken.arithmetic;
    let runs = match take {
        Arithmetic::Tf32 => tf32.arithmetic(),
        Arithmetic::Fp16x3 => plan.clone().in_arithmetic(take).arithmetic(),
        _ => plan.arithmetic(),
    };
    format!(
        "host {} split {} listed {listed} options {:?} entry {} -> {take} list {:?} runs {runs}",
        pilot.on_host,
        pilot.split.is_some(),
        taken.options,
        taken.entry_ns,
        taken.list
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
                    let edge = edge_for(n, k, budget.bytes);
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
        let Some(tf32) = auto_tf32(&plan, asked) else {
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
