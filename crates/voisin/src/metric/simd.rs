//! f32 distance kernels for the CPU engine's candidate pass, with their error bounds.
//!
//! Each kernel returns a value `v` with `|v − exact| ≤ bound` for the f64 value that
//! [`super::exact`] computes, where `bound` is [`Kernel::error_bound`] (the per-kernel rules are
//! listed there). The engine keeps every candidate whose interval `[v − bound, v + bound]` may
//! reach the k-th best and re-ranks candidates exactly, so a bound that is too small is a
//! correctness bug, while one that is too large only costs re-ranking work.
//!
//! A non-finite `v` (an f32 overflow, or NaN from `inf − inf` in a dot product) carries no
//! information: its bound is +∞ and the engine must treat the pair as unknown.
//!
//! Kernels run with AVX2+FMA when the CPU has it (detected once, see [`Isa::current`]) and with
//! portable code otherwise. Each kernel is one generic body over eight-lane values with several
//! independent accumulators; the lanes are a plain `[f32; 8]` in the portable path (LLVM
//! vectorises it for the compile-time target) and an `__m256` inside `#[target_feature(enable =
//! "avx2,fma")]` entry points, reached only after run-time detection. Summation order differs
//! between the paths and between the pair, batched and blocked forms, and FMA rounds once where
//! the portable path rounds twice; the bounds allow for all of it (they hold for any summation
//! order, with or without fusion).
//!
//! Forms:
//! - pair: [`l1`], [`linf`], [`sq_l2`], [`dot`], [`minkowski_pow`];
//! - one query against consecutive rows: [`l1_many`], [`linf_many`], [`minkowski_pow_many`],
//!   [`Isa::many`];
//! - a tile of queries against a tile of rows, register-blocked four queries at a time:
//!   [`l1_block`], [`linf_block`], [`minkowski_pow_block`], [`Isa::block`].
//!
//! This module must not allocate or know about the engine's tiles or selection; it measures the
//! pairs it is handed.

use std::sync::OnceLock;

/// Unit roundoff of f32.
pub const U32: f64 = f32::EPSILON as f64 / 2.0;

/// Smallest positive subnormal f32 (2⁻¹⁴⁹): an underflowing rounding errs by at most half of it.
const SUBNORMAL: f64 = 1.401_298_464_324_817e-45;

/// Independent accumulators of a pair kernel: four AVX2 registers, enough to hide the latency
/// of the add (or max) behind two loads per cycle.
const LANES: usize = 32;
/// Accumulators per query in the blocked kernel (two AVX2 registers each, eight in all).
const BLOCK_LANES: usize = 16;
/// Queries that share one pass over a base row in the blocked kernel.
const BLOCK_QUERIES: usize = 4;

/// A distance kernel the module provides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kernel {
    /// Σ |a_i − b_i| (cityblock).
    L1,
    /// max |a_i − b_i| (chebyshev).
    Linf,
    /// Σ (a_i − b_i)² (the euclidean key, sqeuclidean).
    SqL2,
    /// Σ a_i b_i (inner product; cosine and correlation are built on it).
    Dot,
    /// Σ |a_i − b_i|^p (the minkowski key), p > 0 (tails are padded with zero coordinates,
    /// whose term 0^p is 0 only then). p = 1, 2, 3, 4 run in f32 with multiplications; any
    /// other p computes each term in f64 (`powf`) and rounds it once to f32.
    MinkowskiPow(f64),
}

impl Kernel {
    /// Bound on `|v − exact|` for a value `v` this kernel returned over `dim` coordinates
    /// (exact = the f64 key of [`super::exact`]; for [`Kernel::Dot`] exact = Σ a_i b_i).
    ///
    /// `dot_scale` is used by [`Kernel::Dot`] only (pass anything, e.g. 0, for the others): it
    /// must be at least Σ |a_i b_i|, for example ‖a‖·‖b‖ (Cauchy–Schwarz) rounded up.
    ///
    /// The rules, with u = 2⁻²⁴ and [`nonneg_sum_error`]`(v, n, r)` for a sum of `n`
    /// non-negative terms that each carry a relative error of at most `r` u:
    /// - `L1`: terms |fl(a − b)|, one rounding each: `nonneg_sum_error(v, dim, 1)`.
    /// - `Linf`: the maximum itself is exact, only the subtraction rounds:
    ///   `nonneg_sum_error(v, 1, 1)`.
    /// - `SqL2`: fl(a − b)² is the subtraction's error twice plus the product's rounding:
    ///   `nonneg_sum_error(v, dim, 3)`.
    /// - `MinkowskiPow(p)`, integer p ≤ 4: p factors of fl(a − b) and p − 1 products:
    ///   `nonneg_sum_error(v, dim, 2p − 1)`; other p: the term is computed in f64 and rounded
    ///   once, `nonneg_sum_error(v, dim, 2)` (covers f64's `powf` error for any p < 2²⁵).
    /// - `Dot`: Higham's bound γ_dim · Σ|a_i b_i| for any summation order, doubled as a safety
    ///   margin, plus the underflow allowance described at [`nonneg_sum_error`].
    ///
    /// Returns +∞ when `v` is not finite.
    pub fn error_bound(self, v: f32, dim: usize, dot_scale: f64) -> f64 {
        if !v.is_finite() {
            return f64::INFINITY;
        }
        match self {
            Kernel::L1 => nonneg_sum_error(v, dim, 1.0),
            Kernel::Linf => nonneg_sum_error(v, 1, 1.0),
            Kernel::SqL2 => nonneg_sum_error(v, dim, 3.0),
            Kernel::MinkowskiPow(p) => match int_power(p) {
                Some(k) => nonneg_sum_error(v, dim, (2 * k - 1) as f64),
                None => nonneg_sum_error(v, dim, 2.0),
            },
            Kernel::Dot => {
                let nu = (dim as f64 + 2.0) * U32;
                if nu >= 0.5 {
                    return f64::INFINITY;
                }
                2.0 * nu / (1.0 - nu) * dot_scale + underflow_allowance(dim)
            }
        }
    }
}

/// Bound on the absolute error of a sum of `n` non-negative f32 terms, each itself carrying a
/// relative error of at most `term_rel` units of roundoff, when the computed sum is `value`.
///
/// Recursive summation (in any order or blocking) of n terms has relative error at most
/// γ_{n−1} = (n−1)u/(1−(n−1)u); we add the terms' own error and a safety factor of 2 so the
/// bound also covers the partial sums of SIMD lanes and the small error of the f64 reference.
/// That analysis assumes no underflow; a term or product that underflows errs by at most half a
/// subnormal step (a few for the products of an integer power), which the absolute allowance
/// `f32::MIN_POSITIVE + n · 2⁻¹⁴⁵` covers. Returns +∞ when `value` is not finite or the relative
/// factor would not be meaningful (n u ≥ 1/2).
pub fn nonneg_sum_error(value: f32, n: usize, term_rel: f64) -> f64 {
    let nu = (n as f64 + term_rel + 2.0) * U32;
    if !value.is_finite() || nu >= 0.5 {
        return f64::INFINITY;
    }
    2.0 * nu / (1.0 - nu) * value.abs() as f64 + underflow_allowance(n)
}

fn underflow_allowance(n: usize) -> f64 {
    f64::from(f32::MIN_POSITIVE) + n as f64 * 16.0 * SUBNORMAL
}

/// The small integer orders that get a multiplication-only Minkowski term.
fn int_power(p: f64) -> Option<u32> {
    [1.0, 2.0, 3.0, 4.0]
        .iter()
        .position(|&q| q == p)
        .map(|i| i as u32 + 1)
}

/// The instruction set kernels run with. Only obtainable for sets the CPU has, so running a
/// kernel through any `Isa` value is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Isa(IsaKind);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IsaKind {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Sse2,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
}

impl Isa {
    /// Plain Rust over `[f32; 8]` lanes, vectorised by LLVM for the compile-time target: the
    /// fallback on other architectures, and kept testable on x86-64.
    pub const PORTABLE: Isa = Isa(IsaKind::Portable);

    /// SSE2 intrinsics: part of every x86-64 CPU, so the fallback there when AVX2 is missing
    /// (LLVM's vectoriser leaves the portable form partly scalar for some kernels).
    pub fn sse2() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        return Some(Isa(IsaKind::Sse2));
        #[allow(unreachable_code)]
        None
    }

    /// AVX2 with FMA, if this CPU has both.
    pub fn avx2_fma() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Some(Isa(IsaKind::Avx2Fma));
        }
        None
    }

    /// The fastest set this CPU has.
    pub fn best() -> Isa {
        Isa::avx2_fma().or_else(Isa::sse2).unwrap_or(Isa::PORTABLE)
    }

    /// Every set this CPU can run, portable first (tests run each kernel with each).
    pub fn available() -> Vec<Isa> {
        std::iter::once(Isa::PORTABLE)
            .chain(Isa::sse2())
            .chain(Isa::avx2_fma())
            .collect()
    }

    /// The set the free functions of this module use: [`Isa::best`], unless the environment
    /// variable `VOISIN_SIMD` names another available one (`portable`, `sse2`), for
    /// measurements and for checking a fallback inside a whole engine run. Read once per
    /// process.
    pub fn current() -> Isa {
        static CURRENT: OnceLock<Isa> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let wanted = std::env::var("VOISIN_SIMD").unwrap_or_default();
            Isa::available()
                .into_iter()
                .find(|isa| isa.name() == wanted)
                .unwrap_or_else(Isa::best)
        })
    }

    /// The set's name as `VOISIN_SIMD` spells it: `portable`, `sse2` or `avx2+fma`.
    pub fn name(self) -> &'static str {
        match self.0 {
            IsaKind::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            IsaKind::Sse2 => "sse2",
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx2Fma => "avx2+fma",
        }
    }

    /// `kernel(a, b)`. Panics if the lengths differ (a caller bug, never a data error).
    pub fn pair(self, kernel: Kernel, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "kernel operands differ in length");
        let mut out = [0.0f32];
        self.run(kernel, Shape::Many, a, b, a.len(), &mut out);
        out[0]
    }

    /// `out[j] = kernel(q, base[j·dim .. (j+1)·dim])` for every `j < out.len()`.
    /// Panics unless `q.len() == dim` and `base.len() == dim · out.len()`.
    pub fn many(self, kernel: Kernel, q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
        assert_eq!(q.len(), dim, "query length is not dim");
        assert_eq!(
            base.len(),
            dim * out.len(),
            "base is not out.len() rows of dim"
        );
        self.run(kernel, Shape::Many, q, base, dim, out);
    }

    /// A tile: with `nq = queries.len() / dim` query rows and `nb = base.len() / dim` base
    /// rows, `out[i·nb + j] = kernel(query i, base row j)` (row-major, queries by rows).
    /// Four queries share each pass over a base row, so each base row is loaded once per four
    /// queries. Panics unless `dim > 0`, both inputs are whole rows and `out.len() == nq · nb`.
    pub fn block(self, kernel: Kernel, queries: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
        assert!(dim > 0, "block kernel needs dim > 0");
        assert_eq!(queries.len() % dim, 0, "queries are not whole rows");
        assert_eq!(base.len() % dim, 0, "base is not whole rows");
        assert_eq!(
            out.len(),
            queries.len() / dim * (base.len() / dim),
            "out is not queries × base"
        );
        self.run(kernel, Shape::Block, queries, base, dim, out);
    }

    fn run(
        self,
        kernel: Kernel,
        shape: Shape,
        q: &[f32],
        base: &[f32],
        dim: usize,
        out: &mut [f32],
    ) {
        match kernel {
            Kernel::L1 => self.dispatch(L1, shape, q, base, dim, out),
            Kernel::Linf => self.dispatch(Linf, shape, q, base, dim, out),
            Kernel::SqL2 => self.dispatch(SqL2, shape, q, base, dim, out),
            Kernel::Dot => self.dispatch(Dot, shape, q, base, dim, out),
            Kernel::MinkowskiPow(p) => match int_power(p) {
                Some(1) => self.dispatch(L1, shape, q, base, dim, out),
                Some(2) => self.dispatch(SqL2, shape, q, base, dim, out),
                Some(3) => self.dispatch(Cube, shape, q, base, dim, out),
                Some(_) => self.dispatch(Fourth, shape, q, base, dim, out),
                None => self.dispatch(PowF64(p), shape, q, base, dim, out),
            },
        }
    }

    fn dispatch<K: Op>(
        self,
        k: K,
        shape: Shape,
        q: &[f32],
        base: &[f32],
        dim: usize,
        out: &mut [f32],
    ) {
        match self.0 {
            IsaKind::Portable => match shape {
                Shape::Many => many_body::<K, Portable>(k, q, base, dim, out),
                Shape::Block => block_body::<K, Portable>(k, q, base, dim, out),
            },
            #[cfg(target_arch = "x86_64")]
            IsaKind::Sse2 => match shape {
                Shape::Many => many_body::<K, sse2::Lanes2>(k, q, base, dim, out),
                Shape::Block => block_body::<K, sse2::Lanes2>(k, q, base, dim, out),
            },
            // SAFETY: an `Isa` holding `Avx2Fma` is only built by `avx2_fma()` after run-time
            // detection of both features.
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx2Fma => unsafe {
                match shape {
                    Shape::Many => avx2::many(k, q, base, dim, out),
                    Shape::Block => avx2::block(k, q, base, dim, out),
                }
            },
        }
    }
}

#[derive(Clone, Copy)]
enum Shape {
    Many,
    Block,
}

/// Sum of |a_i − b_i|. Error bound: [`Kernel::error_bound`] with [`Kernel::L1`].
pub fn l1(a: &[f32], b: &[f32]) -> f32 {
    Isa::current().pair(Kernel::L1, a, b)
}

/// max |a_i − b_i|. Error bound: [`Kernel::error_bound`] with [`Kernel::Linf`].
pub fn linf(a: &[f32], b: &[f32]) -> f32 {
    Isa::current().pair(Kernel::Linf, a, b)
}

/// Σ |a_i − b_i|^p. Error bound: [`Kernel::error_bound`] with [`Kernel::MinkowskiPow`]`(p)`,
/// against the exact key for order `p as f64`: a caller whose order is not exactly an f32
/// should use [`minkowski_pow_many`], which takes the order as f64 (a perturbed order changes
/// |d|^p by a factor |d|^Δp, which no rounding bound covers).
pub fn minkowski_pow(a: &[f32], b: &[f32], p: f32) -> f32 {
    Isa::current().pair(Kernel::MinkowskiPow(p as f64), a, b)
}

/// Σ (a_i − b_i)². Error bound: [`Kernel::error_bound`] with [`Kernel::SqL2`].
pub fn sq_l2(a: &[f32], b: &[f32]) -> f32 {
    Isa::current().pair(Kernel::SqL2, a, b)
}

/// Σ a_i b_i. Error bound: [`Kernel::error_bound`] with [`Kernel::Dot`] and a scale ≥ Σ|a_i b_i|.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    Isa::current().pair(Kernel::Dot, a, b)
}

/// [`l1`] from `q` to each of the `out.len()` consecutive rows of `base` (see [`Isa::many`]).
pub fn l1_many(q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    Isa::current().many(Kernel::L1, q, base, dim, out)
}

/// [`linf`] from `q` to each of the `out.len()` consecutive rows of `base` (see [`Isa::many`]).
pub fn linf_many(q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    Isa::current().many(Kernel::Linf, q, base, dim, out)
}

/// The Minkowski p-power sum from `q` to each of the `out.len()` consecutive rows of `base`
/// (see [`Isa::many`]); the order is the metric's f64 `p`.
pub fn minkowski_pow_many(q: &[f32], base: &[f32], dim: usize, p: f64, out: &mut [f32]) {
    Isa::current().many(Kernel::MinkowskiPow(p), q, base, dim, out)
}

/// [`l1`] over a tile: `out[i·nb + j]` = query row i to base row j (see [`Isa::block`]).
pub fn l1_block(queries: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    Isa::current().block(Kernel::L1, queries, base, dim, out)
}

/// [`linf`] over a tile: `out[i·nb + j]` = query row i to base row j (see [`Isa::block`]).
pub fn linf_block(queries: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    Isa::current().block(Kernel::Linf, queries, base, dim, out)
}

/// The Minkowski p-power sum over a tile: `out[i·nb + j]` = query row i to base row j (see
/// [`Isa::block`]).
pub fn minkowski_pow_block(queries: &[f32], base: &[f32], dim: usize, p: f64, out: &mut [f32]) {
    Isa::current().block(Kernel::MinkowskiPow(p), queries, base, dim, out)
}

/// Eight f32 lanes: the unit every kernel body computes with. The portable form is a plain
/// array (LLVM turns it into two SSE registers); the AVX2 form is one `__m256`. Only the AVX2
/// entry points, after run-time detection, ever hold an `__m256`.
trait Lanes: Copy {
    fn zero() -> Self;
    /// Eight values from the front of `s` (which has at least eight).
    fn load(s: &[f32]) -> Self;
    fn from_array(a: [f32; 8]) -> Self;
    fn to_array(self) -> [f32; 8];
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self · o + acc`, fused where the ISA has it (one rounding instead of two).
    fn mul_add(self, o: Self, acc: Self) -> Self;
    fn abs(self) -> Self;
    fn max(self, o: Self) -> Self;
    /// Lane i takes lane i ^ `bit` (bit = 1, 2 or 4): the shuffles of a horizontal reduction.
    fn swap(self, bit: usize) -> Self;
    fn first(self) -> f32;
    /// The first (up to) eight values of `s`, zero-padded: every kernel's term is 0 for a
    /// (0, 0) pair, so padding changes no result.
    #[inline(always)]
    fn load_tail(s: &[f32]) -> Self {
        let mut a = [0.0f32; 8];
        let n = s.len().min(8);
        a[..n].copy_from_slice(&s[..n]);
        Self::from_array(a)
    }
}

type Portable = [f32; 8];

/// Lane-wise `f` over two portable values. A counted loop over fixed arrays, which LLVM's
/// vectorisers turn into whole-register operations more reliably than `array::from_fn`.
#[inline(always)]
fn lanewise(a: Portable, b: Portable, f: impl Fn(f32, f32) -> f32) -> Portable {
    let mut r = [0.0f32; 8];
    for i in 0..8 {
        r[i] = f(a[i], b[i]);
    }
    r
}

impl Lanes for Portable {
    #[inline(always)]
    fn zero() -> Self {
        [0.0; 8]
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        s[..8].try_into().expect("eight lanes")
    }
    #[inline(always)]
    fn from_array(a: [f32; 8]) -> Self {
        a
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 8] {
        self
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        lanewise(self, o, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        lanewise(self, o, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        lanewise(self, o, |x, y| x * y)
    }
    // Without FMA hardware `f32::mul_add` is a slow library call; two roundings are within
    // every bound of this module.
    #[inline(always)]
    fn mul_add(self, o: Self, acc: Self) -> Self {
        self.mul(o).add(acc)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        lanewise(self, self, |x, _| x.abs())
    }
    // A plain comparison maps to one `maxps`; no NaN reaches a kernel.
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        lanewise(self, o, |x, y| if y > x { y } else { x })
    }
    #[inline(always)]
    fn swap(self, bit: usize) -> Self {
        let mut r = [0.0f32; 8];
        for i in 0..8 {
            r[i] = self[i ^ bit];
        }
        r
    }
    #[inline(always)]
    fn first(self) -> f32 {
        self[0]
    }
}

/// How one coordinate pair enters a kernel's accumulator, eight lanes at a time.
trait Op: Copy {
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V;
    /// Combines two partial results (registers, then lanes).
    #[inline(always)]
    fn merge<V: Lanes>(x: V, y: V) -> V {
        x.add(y)
    }
}

#[derive(Clone, Copy)]
struct L1;
impl Op for L1 {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        acc.add(a.sub(b).abs())
    }
}

#[derive(Clone, Copy)]
struct Linf;
impl Op for Linf {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        acc.max(a.sub(b).abs())
    }
    #[inline(always)]
    fn merge<V: Lanes>(x: V, y: V) -> V {
        x.max(y)
    }
}

#[derive(Clone, Copy)]
struct SqL2;
impl Op for SqL2 {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        let d = a.sub(b);
        d.mul_add(d, acc)
    }
}

#[derive(Clone, Copy)]
struct Dot;
impl Op for Dot {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        a.mul_add(b, acc)
    }
}

#[derive(Clone, Copy)]
struct Cube;
impl Op for Cube {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        let d = a.sub(b).abs();
        d.mul(d).mul_add(d, acc)
    }
}

#[derive(Clone, Copy)]
struct Fourth;
impl Op for Fourth {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        let d = a.sub(b);
        let d2 = d.mul(d);
        d2.mul_add(d2, acc)
    }
}

/// A general order: the term in f64 (the difference of two f32 is then nearly exact and f64
/// `powf` far below f32 resolution), rounded once.
#[derive(Clone, Copy)]
struct PowF64(f64);
impl Op for PowF64 {
    #[inline(always)]
    fn step<V: Lanes>(self, acc: V, a: V, b: V) -> V {
        let (a, b) = (a.to_array(), b.to_array());
        let t = std::array::from_fn(|i| (a[i] as f64 - b[i] as f64).abs().powf(self.0) as f32);
        acc.add(V::from_array(t))
    }
}

/// Registers of independent accumulators in a pair kernel: enough to hide the latency of the
/// add (or max) behind two loads per cycle.
const REGS: usize = LANES / 8;
/// Registers per query in the blocked kernel.
const BLOCK_REGS: usize = BLOCK_LANES / 8;

#[inline(always)]
fn reduce<K: Op, V: Lanes, const N: usize>(acc: [V; N]) -> f32 {
    let mut v = acc[0];
    for &a in &acc[1..] {
        v = K::merge(v, a);
    }
    for bit in [4, 2, 1] {
        v = K::merge(v, v.swap(bit));
    }
    v.first()
}

/// One pair over `REGS` registers of independent accumulators.
#[inline(always)]
fn pair_body<K: Op, V: Lanes>(k: K, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [V::zero(); REGS];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for (r, acc) in acc.iter_mut().enumerate() {
            *acc = k.step(*acc, V::load(&x[8 * r..]), V::load(&y[8 * r..]));
        }
    }
    let (ta, tb) = (ra.chunks(8), rb.chunks(8));
    for ((x, y), acc) in ta.zip(tb).zip(acc.iter_mut()) {
        *acc = k.step(*acc, V::load_tail(x), V::load_tail(y));
    }
    reduce::<K, V, REGS>(acc)
}

#[inline(always)]
fn many_body<K: Op, V: Lanes>(k: K, q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    if dim == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(base.chunks_exact(dim)) {
        *o = pair_body::<K, V>(k, q, row);
    }
}

#[inline(always)]
fn block_body<K: Op, V: Lanes>(k: K, queries: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
    let nb = base.len() / dim;
    let mut qs = queries.chunks_exact(BLOCK_QUERIES * dim);
    let mut outs = out.chunks_exact_mut(BLOCK_QUERIES * nb.max(1));
    for (quad, o) in (&mut qs).zip(&mut outs) {
        let rows: [&[f32]; BLOCK_QUERIES] = std::array::from_fn(|i| &quad[i * dim..][..dim]);
        for (j, row) in base.chunks_exact(dim).enumerate() {
            let d = quad_body::<K, V>(k, rows, row);
            for (i, v) in d.into_iter().enumerate() {
                o[i * nb + j] = v;
            }
        }
    }
    let rest = outs.into_remainder();
    for (q, o) in qs
        .remainder()
        .chunks_exact(dim)
        .zip(rest.chunks_exact_mut(nb.max(1)))
    {
        many_body::<K, V>(k, q, base, dim, &mut o[..nb]);
    }
}

/// Four queries against one row: every row element is loaded once for the four sums.
#[inline(always)]
fn quad_body<K: Op, V: Lanes>(
    k: K,
    q: [&[f32]; BLOCK_QUERIES],
    row: &[f32],
) -> [f32; BLOCK_QUERIES] {
    let row = &row[..q[0].len()];
    let mut acc = [[V::zero(); BLOCK_REGS]; BLOCK_QUERIES];
    let whole = row.len() / BLOCK_LANES * BLOCK_LANES;
    let mut s = 0;
    while s < whole {
        for r in 0..BLOCK_REGS {
            let at = s + 8 * r;
            let y = V::load(&row[at..]);
            for (acc, q) in acc.iter_mut().zip(q) {
                acc[r] = k.step(acc[r], V::load(&q[at..]), y);
            }
        }
        s += BLOCK_LANES;
    }
    for (r, at) in (whole..row.len()).step_by(8).enumerate() {
        let y = V::load_tail(&row[at..]);
        for (acc, q) in acc.iter_mut().zip(q) {
            acc[r] = k.step(acc[r], V::load_tail(&q[at..]), y);
        }
    }
    // A loop, not `acc.map(..)`: a closure handed to a library function is compiled outside
    // the `target_feature` function, where the AVX2 intrinsics cannot be inlined.
    let mut out = [0.0f32; BLOCK_QUERIES];
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = reduce::<K, V, BLOCK_REGS>(acc);
    }
    out
}

/// SSE2 lanes: two `__m128`. SSE2 is part of the x86-64 baseline, so these need no run-time
/// detection and inline into ordinary functions.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::Lanes;
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    pub(super) struct Lanes2([__m128; 2]);

    /// Applies a two-operand intrinsic to both halves.
    #[inline(always)]
    fn halves(a: Lanes2, b: Lanes2, f: impl Fn(__m128, __m128) -> __m128) -> Lanes2 {
        Lanes2([f(a.0[0], b.0[0]), f(a.0[1], b.0[1])])
    }

    // SAFETY (every `unsafe` block): SSE and SSE2 are enabled on every x86-64 target, and the
    // loads read eight values only after checking the slice holds them.
    impl Lanes for Lanes2 {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Lanes2([_mm_setzero_ps(); 2]) }
        }
        #[inline(always)]
        fn load(s: &[f32]) -> Self {
            assert!(s.len() >= 8);
            unsafe { Lanes2([_mm_loadu_ps(s.as_ptr()), _mm_loadu_ps(s.as_ptr().add(4))]) }
        }
        #[inline(always)]
        fn from_array(a: [f32; 8]) -> Self {
            Self::load(&a)
        }
        #[inline(always)]
        fn to_array(self) -> [f32; 8] {
            let mut a = [0.0f32; 8];
            unsafe {
                _mm_storeu_ps(a.as_mut_ptr(), self.0[0]);
                _mm_storeu_ps(a.as_mut_ptr().add(4), self.0[1]);
            }
            a
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            halves(self, o, |x, y| unsafe { _mm_add_ps(x, y) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            halves(self, o, |x, y| unsafe { _mm_sub_ps(x, y) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            halves(self, o, |x, y| unsafe { _mm_mul_ps(x, y) })
        }
        #[inline(always)]
        fn mul_add(self, o: Self, acc: Self) -> Self {
            self.mul(o).add(acc)
        }
        #[inline(always)]
        fn abs(self) -> Self {
            halves(self, self, |x, _| unsafe {
                _mm_andnot_ps(_mm_set1_ps(-0.0), x)
            })
        }
        #[inline(always)]
        fn max(self, o: Self) -> Self {
            halves(self, o, |x, y| unsafe { _mm_max_ps(x, y) })
        }
        #[inline(always)]
        fn swap(self, bit: usize) -> Self {
            match bit {
                4 => Lanes2([self.0[1], self.0[0]]),
                2 => halves(self, self, |x, _| unsafe {
                    _mm_shuffle_ps(x, x, 0b01_00_11_10)
                }),
                _ => halves(self, self, |x, _| unsafe {
                    _mm_shuffle_ps(x, x, 0b10_11_00_01)
                }),
            }
        }
        #[inline(always)]
        fn first(self) -> f32 {
            unsafe { _mm_cvtss_f32(self.0[0]) }
        }
    }
}

/// The AVX2+FMA lanes and the entry points that instantiate the bodies with them.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{block_body, many_body, Lanes, Op};
    use std::arch::x86_64::*;

    // SAFETY (every method): these are only reached from the `target_feature` entry points
    // below, which callers may invoke only after detecting AVX2 and FMA; `#[inline(always)]`
    // puts them inside those functions.
    impl Lanes for __m256 {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        fn load(s: &[f32]) -> Self {
            assert!(s.len() >= 8);
            unsafe { _mm256_loadu_ps(s.as_ptr()) }
        }
        #[inline(always)]
        fn from_array(a: [f32; 8]) -> Self {
            unsafe { _mm256_loadu_ps(a.as_ptr()) }
        }
        #[inline(always)]
        fn to_array(self) -> [f32; 8] {
            let mut a = [0.0f32; 8];
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), self) };
            a
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            unsafe { _mm256_add_ps(self, o) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            unsafe { _mm256_sub_ps(self, o) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            unsafe { _mm256_mul_ps(self, o) }
        }
        #[inline(always)]
        fn mul_add(self, o: Self, acc: Self) -> Self {
            unsafe { _mm256_fmadd_ps(self, o, acc) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), self) }
        }
        #[inline(always)]
        fn max(self, o: Self) -> Self {
            unsafe { _mm256_max_ps(self, o) }
        }
        #[inline(always)]
        fn swap(self, bit: usize) -> Self {
            unsafe {
                match bit {
                    4 => _mm256_permute2f128_ps(self, self, 1),
                    2 => _mm256_permute_ps(self, 0b01_00_11_10),
                    _ => _mm256_permute_ps(self, 0b10_11_00_01),
                }
            }
        }
        #[inline(always)]
        fn first(self) -> f32 {
            unsafe { _mm256_cvtss_f32(self) }
        }
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn many<K: Op>(k: K, q: &[f32], base: &[f32], dim: usize, out: &mut [f32]) {
        many_body::<K, __m256>(k, q, base, dim, out)
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block<K: Op>(
        k: K,
        queries: &[f32],
        base: &[f32],
        dim: usize,
        out: &mut [f32],
    ) {
        block_body::<K, __m256>(k, queries, base, dim, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::{exact, Metric};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    const DIMS: [usize; 14] = [0, 1, 3, 7, 8, 9, 15, 16, 31, 33, 127, 128, 1025, 4096];

    fn kernels() -> Vec<Kernel> {
        vec![
            Kernel::L1,
            Kernel::Linf,
            Kernel::SqL2,
            Kernel::Dot,
            Kernel::MinkowskiPow(1.0),
            Kernel::MinkowskiPow(2.0),
            Kernel::MinkowskiPow(3.0),
            Kernel::MinkowskiPow(4.0),
            Kernel::MinkowskiPow(1.5),
            Kernel::MinkowskiPow(2.7),
        ]
    }

    /// The f64 value the kernel approximates, and the Σ|a_i b_i| scale for the dot bound.
    fn exact_value(k: Kernel, a: &[f32], b: &[f32]) -> (f64, f64) {
        let scale = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 * y as f64).abs())
            .sum();
        let v = match k {
            Kernel::L1 => exact::vector_key(&Metric::Cityblock, a, b),
            Kernel::Linf => exact::vector_key(&Metric::Chebyshev, a, b),
            Kernel::SqL2 => exact::vector_key(&Metric::SqEuclidean, a, b),
            Kernel::Dot => -exact::vector_key(&Metric::InnerProduct, a, b),
            Kernel::MinkowskiPow(p) => exact::vector_key(&Metric::Minkowski(p), a, b),
        };
        (v, scale)
    }

    fn assert_within(isa: Isa, k: Kernel, v: f32, a: &[f32], b: &[f32], what: &str) {
        let (e, scale) = exact_value(k, a, b);
        let bound = k.error_bound(v, a.len(), scale);
        assert!(
            (v as f64 - e).abs() <= bound || bound == f64::INFINITY,
            "{} {k:?} {what} dim {}: got {v}, exact {e}, bound {bound}",
            isa.name(),
            a.len()
        );
        // A bound that is infinite for representable results would make the engine useless.
        if e.abs() < 1e30 && scale < 1e30 {
            assert!(bound.is_finite(), "{k:?} bound infinite for exact {e}");
        }
    }

    /// Every form (pair, many, block with a partial quad) against exact values.
    fn check_all_forms(rows_a: &[Vec<f32>], rows_b: &[Vec<f32>], dim: usize) {
        let qa: Vec<f32> = rows_a.concat();
        let qb: Vec<f32> = rows_b.concat();
        let (nq, nb) = (rows_a.len(), rows_b.len());
        for isa in Isa::available() {
            for k in kernels() {
                for (a, b) in rows_a.iter().zip(rows_b) {
                    assert_within(isa, k, isa.pair(k, a, b), a, b, "pair");
                }
                let mut out = vec![f32::NAN; nb];
                isa.many(k, &rows_a[0], &qb, dim, &mut out);
                for (j, &v) in out.iter().enumerate() {
                    assert_within(isa, k, v, &rows_a[0], &rows_b[j], "many");
                }
                if dim > 0 {
                    let mut out = vec![f32::NAN; nq * nb];
                    isa.block(k, &qa, &qb, dim, &mut out);
                    for i in 0..nq {
                        for j in 0..nb {
                            let v = out[i * nb + j];
                            assert_within(isa, k, v, &rows_a[i], &rows_b[j], "block");
                        }
                    }
                }
            }
        }
    }

    fn rows(
        rng: &mut StdRng,
        n: usize,
        dim: usize,
        gen: &dyn Fn(&mut StdRng) -> f32,
    ) -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| (0..dim).map(|_| gen(rng)).collect())
            .collect()
    }

    fn log_uniform(rng: &mut StdRng, lo: i32, hi: i32) -> f32 {
        let m: f32 = rng.gen_range(1.0..2.0);
        let s = if rng.gen() { 1.0 } else { -1.0 };
        s * m * 2f32.powi(rng.gen_range(lo..hi))
    }

    #[test]
    fn random_normal_within_bounds() {
        let mut rng = StdRng::seed_from_u64(1);
        for dim in DIMS {
            let a = rows(&mut rng, 6, dim, &|r| r.sample(StandardNormal));
            let b = rows(&mut rng, 5, dim, &|r| r.sample(StandardNormal));
            check_all_forms(&a, &b, dim);
        }
    }

    #[test]
    fn mixed_magnitudes_within_bounds() {
        let mut rng = StdRng::seed_from_u64(2);
        for dim in DIMS {
            // Huge and tiny together: products underflow, sums absorb small terms, squares of
            // the largest overflow.
            let a = rows(&mut rng, 5, dim, &|r| log_uniform(r, -140, 66));
            let b = rows(&mut rng, 6, dim, &|r| log_uniform(r, -140, 66));
            check_all_forms(&a, &b, dim);
            // Only tiny values: every term may underflow.
            let a = rows(&mut rng, 5, dim, &|r| log_uniform(r, -149, -60));
            let b = rows(&mut rng, 4, dim, &|r| log_uniform(r, -149, -60));
            check_all_forms(&a, &b, dim);
        }
    }

    #[test]
    fn cancellation_within_bounds() {
        let mut rng = StdRng::seed_from_u64(3);
        for dim in DIMS {
            let a = rows(&mut rng, 5, dim, &|r| {
                1e4 * r.sample::<f32, _>(StandardNormal)
            });
            // Rows of b are rows of a nudged by a few ulps, and one exact copy.
            let mut b: Vec<Vec<f32>> = a
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|&x| x * (1.0 + rng.gen_range(-4.0..4.0) * f32::EPSILON))
                        .collect()
                })
                .collect();
            b[0] = a[0].clone();
            check_all_forms(&a, &b, dim);
            // Dot products that cancel: b orthogonal-ish to a with large entries.
            let alt: Vec<Vec<f32>> = a
                .iter()
                .map(|row| {
                    row.iter()
                        .enumerate()
                        .map(|(i, &x)| if i % 2 == 0 { x } else { -x })
                        .collect()
                })
                .collect();
            check_all_forms(&a, &alt, dim);
        }
    }

    #[test]
    fn identical_rows_are_zero() {
        let mut rng = StdRng::seed_from_u64(4);
        for isa in Isa::available() {
            for dim in DIMS {
                let a: Vec<f32> = (0..dim).map(|_| log_uniform(&mut rng, -20, 20)).collect();
                for k in kernels().into_iter().filter(|&k| k != Kernel::Dot) {
                    assert_eq!(isa.pair(k, &a, &a), 0.0, "{} {k:?} dim {dim}", isa.name());
                }
            }
        }
    }

    #[test]
    fn bounds_are_tight_enough_to_prune() {
        // Loose bounds cost re-ranking; this guards against one becoming useless.
        let mut rng = StdRng::seed_from_u64(5);
        let a: Vec<f32> = (0..128).map(|_| rng.sample(StandardNormal)).collect();
        let b: Vec<f32> = (0..128).map(|_| rng.sample(StandardNormal)).collect();
        for k in kernels() {
            let v = Isa::current().pair(k, &a, &b);
            let (_, scale) = exact_value(k, &a, &b);
            let bound = k.error_bound(v, 128, scale);
            let size = if k == Kernel::Dot { scale } else { v as f64 };
            assert!(bound < 1e-4 * size, "{k:?}: bound {bound} for value {v}");
        }
    }

    #[test]
    fn free_functions_match_current_isa() {
        let mut rng = StdRng::seed_from_u64(6);
        let dim = 37;
        let q: Vec<f32> = (0..dim).map(|_| rng.sample(StandardNormal)).collect();
        let base: Vec<f32> = (0..3 * dim).map(|_| rng.sample(StandardNormal)).collect();
        let isa = Isa::current();
        let row = &base[dim..2 * dim];
        assert_eq!(l1(&q, row), isa.pair(Kernel::L1, &q, row));
        assert_eq!(linf(&q, row), isa.pair(Kernel::Linf, &q, row));
        assert_eq!(sq_l2(&q, row), isa.pair(Kernel::SqL2, &q, row));
        assert_eq!(dot(&q, row), isa.pair(Kernel::Dot, &q, row));
        assert_eq!(
            minkowski_pow(&q, row, 3.0),
            isa.pair(Kernel::MinkowskiPow(3.0), &q, row)
        );
        let mut out = [0.0f32; 3];
        l1_many(&q, &base, dim, &mut out);
        assert_eq!(out[1], l1(&q, row));
        linf_many(&q, &base, dim, &mut out);
        assert_eq!(out[1], linf(&q, row));
        minkowski_pow_many(&q, &base, dim, 2.5, &mut out);
        assert_eq!(out[1], isa.pair(Kernel::MinkowskiPow(2.5), &q, row));
        // A 1-query tile takes the non-quad path: same order as `many`.
        let mut tile = [0.0f32; 3];
        l1_block(&q, &base, dim, &mut tile);
        l1_many(&q, &base, dim, &mut out);
        assert_eq!(tile, out);
        linf_block(&q, &base, dim, &mut tile);
        linf_many(&q, &base, dim, &mut out);
        assert_eq!(tile, out);
        minkowski_pow_block(&q, &base, dim, 2.5, &mut tile);
        minkowski_pow_many(&q, &base, dim, 2.5, &mut out);
        assert_eq!(tile, out);
    }

    #[test]
    fn non_finite_values_have_infinite_bounds() {
        for k in kernels() {
            assert_eq!(k.error_bound(f32::INFINITY, 4, 1.0), f64::INFINITY);
            assert_eq!(k.error_bound(f32::NAN, 4, 1.0), f64::INFINITY);
        }
        let big = [3e38f32, -3e38];
        let v = Isa::current().pair(Kernel::L1, &big, &[-3e38, 3e38]);
        assert!(v.is_infinite());
    }
}
