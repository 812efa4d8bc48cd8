//! The k-NN graph's fused tile pair (kernels/select/pair_filter.cu): the dot products of one
//! tile's rows against another's on tensor cores, filtered in registers against the rows' and
//! the columns' running lists; what passes goes to the same buffers as the tile filter's
//! ([`survivors::tile_filter`]), merged the same way. The distance tile is never written.
//!
//! TF32 plans run here on f16 tensor cores: each prepared row scaled by a power of two and
//! rounded to f16 (kernels/distance/scaled_half.cu), which TF32's bound covers
//! (`Numerics::in_arithmetic`). The f16 MMA runs at twice TF32's rate and the rows are half the
//! bytes; TF32 itself is the fallback where the scaled copy does not fit on the device.
//!
//! Owns the kinds of the kernel ([`PairKind`]: the tensor cores and the rows each reads, which
//! rows each takes), the rows it reads of a set ([`Operands`]) and the launch; which kind a
//! plan takes and on which pairs is the route's (search/route.rs).

use std::ops::Range;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Numerics, K_CHUNK};
use crate::ops::device_set::DeviceSet;
use crate::ops::locality::PairWork;
use crate::ops::scaled::ScaledRows;
use crate::ops::survivors::{push_into, FilterInto, IntoScalars};
use crate::ops::tile::Block;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// The tensor cores a fused tile pair runs on: the kernel, and how many values a 32-bit word
/// of its rows holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PairKind {
    /// Prepared f32 rows on TF32 tensor cores.
    Tf32,
    /// Prepared f32 rows scaled per row to f16, on f16 tensor cores (a TF32 plan).
    F16Scaled,
    /// Prepared f32 rows scaled per row and split into two f16 halves, three f16 products a
    /// value (an fp16x3 plan).
    F16Split,
    /// Stored f16 rows.
    F16,
    /// Stored bf16 rows.
    Bf16,
    /// Prepared int8 rows (u8 minus 128), exact int32 sums.
    S8,
}

impl PairKind {
    fn per_word(self) -> usize {
        match self {
            PairKind::Tf32 => 1,
            PairKind::F16 | PairKind::F16Scaled | PairKind::F16Split | PairKind::Bf16 => 2,
            PairKind::S8 => 4,
        }
    }

    /// The values from one of the kernel's rows to the next under `plan`: the tile rows', or
    /// the scaled copy's (16-byte rows, zero-padded).
    fn ld(self, plan: &Numerics) -> usize {
        match self {
            PairKind::F16Scaled => ScaledRows::ld_for(plan.dim, false),
            PairKind::F16Split => ScaledRows::ld_for(plan.dim, true),
            _ => plan.tile_rows().stride(plan.storage, plan.dim),
        }
    }

    /// The words from one of the kernel's rows to the next and the words it sums of each (TF32:
    /// one value a word, the row's d values; f16/bf16: two, int8: four, the whole zero-padded
    /// row).
    fn words(self, plan: &Numerics) -> (usize, usize) {
        let ldw = self.ld(plan) / self.per_word();
        (
            ldw,
            if self == PairKind::Tf32 {
                plan.dim
            } else {
                ldw
            },
        )
    }

    /// Bytes from one of the kernel's rows to the next under `plan`.
    pub fn row_bytes(self, plan: &Numerics) -> usize {
        self.words(plan).0 * 4
    }

    /// Whether the kernel takes `plan`'s rows in this kind: rows of whole 16-byte groups, and at
    /// most one accumulation chunk summed (split rows: any length, their bound counts every
    /// product's additions, `Numerics::in_arithmetic`).
    pub(crate) fn fits(self, plan: &Numerics) -> bool {
        let (ldw, kw) = self.words(plan);
        ldw.is_multiple_of(4) && (self == PairKind::F16Split || kw * self.per_word() <= K_CHUNK)
    }

    /// Whether the kernel reads scaled rows and their factors back (ops/scaled.rs's copy).
    pub fn scaled(self) -> bool {
        matches!(self, PairKind::F16Scaled | PairKind::F16Split)
    }

    /// The kernel on `gpu`: for both sides, or (`rows_only`) the one that never tests the
    /// columns' thresholds.
    pub fn kernel(self, gpu: &Gpu, rows_only: bool) -> Result<&CudaFunction> {
        let k = &gpu.k;
        Ok(match (self, rows_only) {
            (PairKind::Tf32, false) => k.pair_filter_tf32()?,
            (PairKind::F16, false) => k.pair_filter_f16()?,
            (PairKind::F16Scaled, false) => k.pair_filter_f16_scaled()?,
            (PairKind::F16Split, false) => k.pair_filter_f16_split()?,
            (PairKind::Bf16, false) => k.pair_filter_bf16()?,
            (PairKind::S8, false) => k.pair_filter_s8()?,
            (PairKind::Tf32, true) => k.pair_filter_tf32_rows()?,
            (PairKind::F16, true) => k.pair_filter_f16_rows()?,
            (PairKind::F16Scaled, true) => k.pair_filter_f16_scaled_rows()?,
            (PairKind::F16Split, true) => k.pair_filter_f16_split_rows()?,
            (PairKind::Bf16, true) => k.pair_filter_bf16_rows()?,
            (PairKind::S8, true) => k.pair_filter_s8_rows()?,
        })
    }
}

/// The rows a fused kind reads of a set on the device: the tiles' own, or for
/// [`PairKind::F16Scaled`] the scaled f16 copy of them (ops/scaled.rs).
pub(crate) struct Operands<'d, 's> {
    data: &'d DeviceSet<'s>,
    kind: PairKind,
    scaled: Option<&'d ScaledRows>,
}

impl<'d, 's> Operands<'d, 's> {
    /// The operands of `kind` (the route's) over the whole of `data`: for
    /// [`PairKind::F16Scaled`] and [`PairKind::F16Split`] its copy `scaled`, which the route
    /// made for them (search/route.rs).
    pub fn new(data: &'d DeviceSet<'s>, kind: PairKind, scaled: Option<&'d ScaledRows>) -> Self {
        let scaled = scaled.filter(|_| kind.scaled());
        debug_assert_eq!(scaled.is_some(), kind.scaled());
        Operands { data, kind, scaled }
    }

    /// Rows `a..b`.
    fn side(&self, a: usize, b: usize) -> Block<'_> {
        match self.scaled {
            None => self.data.block(a, b),
            Some(s) => s.block(self.data, a, b),
        }
    }
}

/// Which pair of tiles, as [`survivors::tile_filter`]'s `TileAt` says: the first items of the
/// row and column blocks, and whether an item's pair with itself is skipped.
#[derive(Clone, Copy)]
pub(crate) struct PairAt {
    pub row_off: u32,
    pub col_off: u32,
    pub exclude_self: bool,
}

/// Appends every pair of `rows` × `cols` (rows of operands of one kind: a set's against its
/// own for the graph, queries' against the base's for k-NN) whose key is at most its row's
/// list's largest to the row's buffer and, with `into.cols`, at most its column's largest to
/// the column's buffer, as [`survivors::tile_filter`] does on a written tile. With `work`, only
/// the kernel's tiles it lists run (ops/locality.rs proved that the others pass nothing).
pub(crate) fn filter(
    gpu: &Gpu,
    plan: &Numerics,
    rows: (&Operands<'_, '_>, Range<usize>),
    cols: (&Operands<'_, '_>, Range<usize>),
    at: PairAt,
    into: FilterInto<'_, '_>,
    work: Option<&PairWork<'_>>,
) -> Result<()> {
    let kind = rows.0.kind;
    debug_assert_eq!(kind, cols.0.kind);
    let (ra, rb) = (rows.1, cols.1);
    let (a, b) = (rows.0.side(ra.start, ra.end), cols.0.side(rb.start, rb.end));
    debug_assert_eq!(a.ld, b.ld);
    debug_assert_eq!(a.back.is_some(), kind.scaled());
    debug_assert!(into.row_out.floor.is_some() && into.row_out.count.len() >= a.n);
    if a.n == 0 || b.n == 0 {
        return Ok(());
    }
    let (ldw, kw) = kind.words(plan);
    debug_assert_eq!(a.ld, ldw * kind.per_word());
    let (ldw, kw) = (ldw as i32, kw as i32);
    // Persistent blocks, two per multiprocessor (the kernel's launch bounds and shared memory),
    // each taking tiles in turn.
    let tiles = a.n.div_ceil(abi::PF_BM) * b.n.div_ceil(abi::PF_BN);
    let cfg = LaunchConfig {
        grid_dim: ((2 * gpu.sms).min(tiles) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: abi::PF_SHARED_BYTES as u32,
    };
    let (na, nb, key) = (a.n as i32, b.n as i32, plan.key as i32);
    let scalars = IntoScalars::of(&into, (at.row_off, at.col_off), at.exclude_self);
    let mut l = gpu
        .stream
        .launch_builder(kind.kernel(gpu, into.cols.is_none())?);
    a.rows.arg(&mut l);
    l.arg(&na);
    b.rows.arg(&mut l);
    l.arg(&nb)
        .arg(&ldw)
        .arg(&kw)
        .arg(&key)
        .arg(&a.sqnorm)
        .arg(&b.sqnorm);
    // Unscaled kinds never read the factors: the norms stand in as valid pointers.
    l.arg(a.back.as_ref().unwrap_or(&a.sqnorm))
        .arg(b.back.as_ref().unwrap_or(&b.sqnorm));
    push_into(&mut l, &scalars, into)?;
    let null: u64 = 0;
    match work {
        Some(w) => l.arg(&w.list).arg(&w.len),
        None => l.arg(&null).arg(&null),
    };
    // SAFETY: matches pair_filter_* in kernels/select/pair_filter.cu: a and b hold n rows of
    // ld values (ldw words, the first kw summed), 16-byte aligned (kind_for); the norms and
    // the factors n each; the lists rows × kp and cols × kp; the buffers (count, floor: a.n
    // or b.n; val, idx: × cap). The kernel was given PF_SHARED_BYTES of dynamic shared memory at
    // load (kernels.rs). A work list holds at most `tiles` entries, each below `tiles`, with
    // its length on the device (locality::plan_pair, for these very rows and columns).
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("pair_filter"))
}
