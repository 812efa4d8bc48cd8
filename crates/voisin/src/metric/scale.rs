//! Exact power-of-two scaling: how every key of one problem stays inside the range of the
//! floating-point type that computes it, whatever the magnitude of the values.
//!
//! Squares and products of f32 values beyond about 2^64, or of f64 values beyond about 2^512,
//! overflow; those of values below about 2^-75 (f32) or 2^-537 (f64) underflow. Multiplying
//! values by a power of two is exact (short of leaving the type's range), and every key is
//! homogeneous in the values: key(s·a, s·b) = s^h·key(a, b), with h the key's degree
//! ([`key_degree`]: 2 for the squared euclidean key and the dot product, 1 for cityblock,
//! chebyshev and large minkowski orders, p for the minkowski power sum, 0 for cosine and
//! correlation). So a problem's keys can be computed on scaled values and compared as they are.
//!
//! - Scale-free metrics (cosine, correlation): each row may take its own power of two; the f64
//!   keys ([`super::exact`]) rescale a row only when its sums leave f64's safe range, so
//!   ordinary rows keep their keys bit for bit and data multiplied by 2^e gives the same keys.
//! - The others: one power of two for the whole problem (base and queries), [`KeyScale`],
//!   chosen from the problem's [`Extent`] and exactly 1 whenever the unscaled f64 keys neither
//!   overflow nor underflow, which covers every f32, f16, bf16 and u8 set under every metric
//!   but the largest minkowski power sums. Keys are then in units of that scale;
//!   [`KeyScale::distance`] turns them back into the metric's values.
//! - Reported values beyond an output type's range are written as its largest finite value
//!   ([`f32_value`], [`f64_value`]), never as infinity, and always in the keys' order.
//!
//! The f32 tiles of the CPU engine take their own powers of two (per problem or per block, see
//! `cpu/tiles.rs`) and convert their bounds into the exact keys' units. The derivation, the
//! limits (data spanning more than f64's range in one problem) and what other engines must do
//! to match are in docs/design/exact-scaling.md.

use rayon::prelude::*;

use super::{exact, Metric, MINKOWSKI_POWER_KEY_MAX};
use crate::data::{Dataset, ElemType, VectorData, VectorSet};

/// `x · 2^n`, rounded once (to a subnormal or zero when the result is that small; ±inf beyond
/// f64's range). Exact whenever the result is a normal f64.
pub fn ldexp(x: f64, n: i32) -> f64 {
    if x == 0.0 || !x.is_finite() || n == 0 {
        return x;
    }
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    // x = f · 2^e with f in [1, 2) (subnormal x normalised first).
    let (f, e) = if biased == 0 {
        let y = x * 2f64.powi(64);
        let b = ((y.to_bits() >> 52) & 0x7ff) as i32;
        (y, b - 1023 - 64)
    } else {
        (x, biased - 1023)
    };
    let fbits = f.to_bits() & !(0x7ffu64 << 52) | (1023u64 << 52);
    let f = f64::from_bits(fbits); // ±[1, 2)
    let t = e as i64 + n as i64;
    if t > 1023 {
        return f64::INFINITY.copysign(x);
    }
    if t >= -1022 {
        return f * pow2(t as i32);
    }
    // Subnormal result: f · 2^t = (f · 2^(t + 1074)) · 2^-1074, with f · 2^(t + 1074) < 2^52.
    if t < -1076 {
        return 0.0f64.copysign(x);
    }
    let m = (f * pow2((t + 1074) as i32)).round_ties_even();
    f64::from_bits(m.abs() as u64) * if x < 0.0 { -1.0 } else { 1.0 }
}

/// 2^n for n in [-1022, 1023], exactly.
fn pow2(n: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// The binary exponent of a positive finite x: ⌊log₂ x⌋ (subnormals included).
pub fn exponent(x: f64) -> i32 {
    let bits = x.abs().to_bits();
    let biased = (bits >> 52) as i32;
    if biased == 0 {
        // Subnormal: 2^-1074 times the mantissa.
        -1074 + 63 - (bits.leading_zeros() as i32)
    } else {
        biased - 1023
    }
}

/// The largest and the smallest non-zero magnitude among a set's values (`max` 0 and `min`
/// +∞ when every value is zero).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Extent {
    /// The largest magnitude |x| among the values; 0 when no value is non-zero.
    pub max: f64,
    /// The smallest non-zero magnitude |x| among the values; +∞ when no value is non-zero.
    pub min: f64,
}

impl Default for Extent {
    fn default() -> Self {
        Extent::EMPTY
    }
}

impl Extent {
    /// No non-zero value.
    pub const EMPTY: Extent = Extent {
        max: 0.0,
        min: f64::INFINITY,
    };

    /// The extent of both.
    pub fn union(self, o: Extent) -> Extent {
        Extent {
            max: self.max.max(o.max),
            min: self.min.min(o.min),
        }
    }

    /// The extent of f32 values, read as bit patterns (one vectorisable pass; NaN counts as
    /// a magnitude beyond every finite one).
    pub fn of_f32(values: &[f32]) -> Extent {
        Extent::of_bits(f32_bits(values))
    }

    /// The extent of f32 values when every one is finite, `None` otherwise: one parallel pass
    /// that serves both the check for NaN and infinities and [`Extent::of`] (whose union of
    /// chunks keeps no NaN, so it cannot tell).
    pub fn of_finite_f32(values: &[f32]) -> Option<Extent> {
        const CHUNK: usize = 1 << 16;
        let (hi, lo) = values
            .par_chunks(CHUNK)
            .map(f32_bits)
            .reduce(|| (0, u32::MAX), |a, b| (a.0.max(b.0), a.1.min(b.1)));
        // Infinities and NaN have every exponent bit set: above every finite magnitude.
        (hi < 0x7f80_0000).then(|| Extent::of_bits((hi, lo)))
    }

    /// The extent of [`f32_bits`]'s largest and (less one) smallest non-zero magnitudes.
    fn of_bits((hi, lo): (u32, u32)) -> Extent {
        Extent {
            max: f32::from_bits(hi) as f64,
            min: match lo {
                u32::MAX => f64::INFINITY,
                l => f32::from_bits(l + 1) as f64,
            },
        }
    }

    fn of_f64(values: &[f64]) -> Extent {
        values.iter().fold(Extent::EMPTY, |e, &x| {
            let a = x.abs();
            Extent {
                max: e.max.max(a),
                min: if a > 0.0 { e.min.min(a) } else { e.min },
            }
        })
    }

    /// The extent of a set's stored values: one parallel pass, the first time a set is asked.
    pub fn of(set: &VectorSet) -> Extent {
        *set.extent_cell().get_or_init(|| Extent::scan(set))
    }

    fn scan(set: &VectorSet) -> Extent {
        const CHUNK: usize = 1 << 16;
        let reduce = |a: Extent, b: Extent| a.union(b);
        match set.data() {
            VectorData::F32(v) => v
                .as_slice()
                .par_chunks(CHUNK)
                .map(Extent::of_f32)
                .reduce(|| Extent::EMPTY, reduce),
            VectorData::F64(v) => v
                .as_slice()
                .par_chunks(CHUNK)
                .map(Extent::of_f64)
                .reduce(|| Extent::EMPTY, reduce),
            _ => {
                let rows = (CHUNK / set.dim()).max(1);
                (0..set.len().div_ceil(rows))
                    .into_par_iter()
                    .map(|c| {
                        let end = ((c + 1) * rows).min(set.len());
                        Extent::of_f32(&set.rows_f32(c * rows, end))
                    })
                    .reduce(|| Extent::EMPTY, reduce)
            }
        }
    }
}

/// The largest magnitude of `values` and the smallest non-zero one less one, as f32 bit
/// patterns (`u32::MAX` for the second when every value is zero).
fn f32_bits(values: &[f32]) -> (u32, u32) {
    let (mut hi, mut lo) = (0u32, u32::MAX);
    for &x in values {
        let b = x.to_bits() & 0x7fff_ffff;
        hi = hi.max(b);
        // Zero wraps to the largest value and never wins the minimum.
        lo = lo.min(b.wrapping_sub(1));
    }
    (hi, lo)
}

/// The degree h of a metric's key in the values, key(s·a, s·b) = s^h·key(a, b); 0 for
/// scale-free metrics and for metrics over items other than numbers.
pub fn key_degree(metric: &Metric) -> f64 {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean | Metric::InnerProduct => 2.0,
        Metric::Cityblock | Metric::Chebyshev => 1.0,
        Metric::Minkowski(p) if *p <= MINKOWSKI_POWER_KEY_MAX => *p,
        Metric::Minkowski(_) => 1.0,
        _ => 0.0,
    }
}

/// The degree of a metric's reported value (euclidean's distance 1, sqeuclidean's square and
/// the dot product 2, minkowski's distance 1, scale-free metrics 0).
pub fn value_degree(metric: &Metric) -> i32 {
    match metric {
        Metric::SqEuclidean | Metric::InnerProduct => 2,
        Metric::Euclidean | Metric::Cityblock | Metric::Chebyshev | Metric::Minkowski(_) => 1,
        _ => 0,
    }
}

/// How far f64 keys may reach: |key| ≤ 2^KEY_LIMIT, and every non-zero term of a key of degree
/// h > 1 at least 2^-KEY_LIMIT (a normal f64 with room for its sums and the bounds around it).
const KEY_LIMIT: f64 = 1016.0;

/// Where a problem's largest key is put when it leaves f32's range (candidate bounds are f32).
const F32_KEY_TOP: f64 = 120.0;

/// Whether a metric's f64 key of values times 2^k is its key times 2^(h·k) bit for bit (no
/// rounding of the key depends on the exponent while every step stays a normal f64): sums of
/// differences, squares and products. The minkowski power sums go through `powf`, which does
/// not promise that.
pub fn scales_exactly(metric: &Metric) -> bool {
    matches!(
        metric,
        Metric::Euclidean
            | Metric::SqEuclidean
            | Metric::InnerProduct
            | Metric::Cityblock
            | Metric::Chebyshev
    )
}

/// The lowest bit a stored value of this type can have, below its leading one: the grid of a
/// set is at least 2^(exponent of its smallest value − grid_bits).
fn grid_bits(t: ElemType) -> f64 {
    match t {
        ElemType::F64 => 52.0,
        ElemType::F32 => 23.0,
        ElemType::F16 => 10.0,
        ElemType::Bf16 => 7.0,
        ElemType::U8 => 0.0,
    }
}

/// The widest extent a storage type can hold (f32 for f32, bf16; f16's and u8's own).
fn widest(t: ElemType) -> Option<Extent> {
    let (max, min) = match t {
        ElemType::F64 => return None,
        ElemType::F32 | ElemType::Bf16 => (f32::MAX as f64, 2f64.powi(-149)),
        ElemType::F16 => (65504.0, 2f64.powi(-24)),
        ElemType::U8 => (255.0, 1.0),
    };
    Some(Extent { max, min })
}

/// How far one problem's keys reach, in binary exponents: a key of degree `h` over values of
/// at most 2^`top` in `dim` dimensions (2^`l` terms) is below 2^(h·top + l), and each term of
/// a key of degree above 1 is at least 2^(h·`bottom`), `bottom` the lowest bit of the smallest
/// value. `top_at(e)`/`f64_fits(e)`: the same for the values times 2^-e.
struct Reach {
    h: f64,
    l: f64,
    top: f64,
    bottom: f64,
}

impl Reach {
    /// `None` where nothing can leave a range: scale-free metrics, all-zero or non-finite sets.
    fn of(metric: &Metric, dim: usize, grid_bits: f64, extent: Extent) -> Option<Reach> {
        let h = key_degree(metric);
        if h == 0.0 || extent.max == 0.0 || !extent.max.is_finite() {
            return None;
        }
        Some(Reach {
            h,
            l: (dim.max(1) as f64).log2().ceil(),
            top: exponent(extent.max) as f64 + 2.0,
            bottom: exponent(extent.min) as f64 - grid_bits,
        })
    }

    fn top_at(&self, e: f64) -> f64 {
        self.h * (self.top - e) + self.l
    }

    fn f64_fits(&self, e: f64) -> bool {
        self.top_at(e) <= KEY_LIMIT && (self.h <= 1.0 || self.h * (self.bottom - e) >= -KEY_LIMIT)
    }
}

/// The power of two the exact keys of one problem are computed at: keys are those of the
/// values times 2^-exp. `exp` is 0 (keys exactly as unscaled) whenever the unscaled f64 keys
/// neither overflow nor lose precision to underflow; otherwise it puts the largest value as
/// high as the largest key allows, which keeps every smaller value as far from underflow as
/// f64 can (module doc). A plain value: engines that compute the same keys elsewhere (a GPU's
/// host finish) take it as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyScale {
    exp: i32,
}

impl KeyScale {
    /// Keys as unscaled.
    pub const ONE: KeyScale = KeyScale { exp: 0 };

    /// Keys of the values times 2^-exp.
    pub fn from_exp(exp: i32) -> KeyScale {
        KeyScale { exp }
    }

    /// The power of two: keys are those of the values times 2^-exp (0 for [`KeyScale::ONE`]).
    pub fn exp(self) -> i32 {
        self.exp
    }

    /// The rule: the scale of `metric`'s keys over values of `extent` (base and queries
    /// together) in `dim` dimensions, stored with `grid_bits` bits below their leading one.
    ///
    /// 1 while the unscaled f64 keys neither overflow nor lose precision to underflow, and, for
    /// the metrics whose keys scale exactly ([`scales_exactly`]), while the largest key also
    /// lies inside f32's range, where the engines' candidate bounds are kept. Otherwise the
    /// largest key goes to about 2^120 (inside f32's range), or higher when f64's underflow
    /// needs the room, never past 2^1016. For the exactly scaling metrics a scale ≠ 1 changes
    /// no distance: the keys are the unscaled ones times a power of two, bit for bit, wherever
    /// the unscaled ones were in range.
    pub fn choose(metric: &Metric, dim: usize, grid_bits: f64, extent: Extent) -> KeyScale {
        let Some(r) = Reach::of(metric, dim, grid_bits, extent) else {
            return KeyScale::ONE;
        };
        let f32_fits = |e: f64| r.top_at(e) <= F32_KEY_TOP && r.top_at(e) >= -F32_KEY_TOP;
        if r.f64_fits(0.0) && (!scales_exactly(metric) || f32_fits(0.0)) {
            return KeyScale::ONE;
        }
        let (h, l) = (r.h, r.l);
        let for_f32 = (r.top + (l - F32_KEY_TOP) / h).ceil();
        let no_overflow = (r.top + (l - KEY_LIMIT) / h).ceil();
        let no_underflow = match h <= 1.0 {
            true => f64::INFINITY,
            false => (r.bottom + KEY_LIMIT / h).floor(),
        };
        KeyScale {
            exp: for_f32.min(no_underflow).max(no_overflow) as i32,
        }
    }

    /// Whether `metric`'s keys between values of `set` (and of any set this holds for too) can
    /// be computed unscaled, with f32 approximate keys beside them, as by an engine whose tiles
    /// compute keys in f32 and whose exact keys are f64 without a scale (the cuda engine's):
    /// the f64 keys neither overflow nor lose precision to underflow (for cosine and
    /// correlation: the rows' norms), and the largest key is at most 2^120. Unlike
    /// [`KeyScale::choose`]'s rule, keys far below f32's normal range are taken (such tiles
    /// bound their underflow), and minkowski's power sums must fit f32 too.
    /// A pass over the set only where its storage type can hold values that fail.
    pub fn fits_f32(metric: &Metric, set: &VectorSet) -> bool {
        let fits = |e: Extent| KeyScale::fits_f32_at(metric, set.dim(), set.elem_type(), e);
        widest(set.elem_type()).is_some_and(fits) || fits(Extent::of(set))
    }

    /// [`KeyScale::fits_f32`] for a set of `dim` values per row stored as `elem` whose values
    /// span `extent` (an engine asking it of a copy it has not made yet).
    pub fn fits_f32_at(metric: &Metric, dim: usize, elem: ElemType, extent: Extent) -> bool {
        let grid = grid_bits(elem);
        match Reach::of(metric, dim, grid, extent) {
            Some(r) => r.f64_fits(0.0) && r.top_at(0.0) <= F32_KEY_TOP,
            // Cosine and correlation: the rows' f64 norms hold the squares of their lowest bits.
            None => {
                !matches!(metric, Metric::Cosine | Metric::Correlation)
                    || extent.max == 0.0
                    || 2.0 * (exponent(extent.min) as f64 - grid) >= -KEY_LIMIT
            }
        }
    }

    /// The scale of the keys between `base` and `queries` under `metric`: a pass over each set
    /// only when their storage types could hold values whose keys leave f64's range.
    pub fn of(metric: &Metric, base: &VectorSet, queries: &VectorSet) -> KeyScale {
        if !KeyScale::needs_extent(metric, base, queries) {
            return KeyScale::ONE;
        }
        let extent = match std::ptr::eq(base, queries) {
            true => Extent::of(base),
            false => Extent::of(base).union(Extent::of(queries)),
        };
        KeyScale::of_extent(metric, base, queries, extent)
    }

    /// Whether [`KeyScale::of`] needs the sets' extent: false when every value their storage
    /// types can hold gives scale 1 (f16 and u8 under every metric; f32 and bf16 under cosine,
    /// correlation and minkowski orders below about 6).
    pub fn needs_extent(metric: &Metric, base: &VectorSet, queries: &VectorSet) -> bool {
        if key_degree(metric) == 0.0 {
            return false;
        }
        match widest(base.elem_type()).zip(widest(queries.elem_type())) {
            Some((a, b)) => {
                let bits = KeyScale::grid(base, queries);
                KeyScale::choose(metric, base.dim(), bits, a.union(b)) != KeyScale::ONE
            }
            None => true,
        }
    }

    /// [`KeyScale::choose`] for two sets whose values together span `extent`.
    pub fn of_extent(
        metric: &Metric,
        base: &VectorSet,
        queries: &VectorSet,
        extent: Extent,
    ) -> KeyScale {
        KeyScale::choose(metric, base.dim(), KeyScale::grid(base, queries), extent)
    }

    fn grid(base: &VectorSet, queries: &VectorSet) -> f64 {
        grid_bits(base.elem_type()).max(grid_bits(queries.elem_type()))
    }

    /// [`KeyScale::of`] for f32 values held row-major (`dim` wide), base and queries alike.
    pub fn of_f32(metric: &Metric, dim: usize, values: &[f32]) -> KeyScale {
        let w = widest(ElemType::F32).expect("f32 has a range");
        match KeyScale::choose(metric, dim, 23.0, w) {
            KeyScale::ONE => KeyScale::ONE,
            _ => KeyScale::choose(metric, dim, 23.0, Extent::of_f32(values)),
        }
    }

    /// [`KeyScale::of`] for data sets (strings and user metrics: [`KeyScale::ONE`]).
    pub fn of_sets(metric: &Metric, base: &Dataset, queries: &Dataset) -> KeyScale {
        match (base, queries, metric) {
            (_, _, Metric::Custom(_)) => KeyScale::ONE,
            (Dataset::Vectors(b), Dataset::Vectors(q), m) => KeyScale::of(m, b, q),
            _ => KeyScale::ONE,
        }
    }

    /// The exact key between two vectors at this scale ([`exact::vector_key`] when 1).
    pub fn vector_key<T: Copy + Into<f64>>(self, metric: &Metric, a: &[T], b: &[T]) -> f64 {
        exact::scaled_vector_key(metric, a, b, self.exp)
    }

    /// The exact key between row `i` of `base` and row `j` of `queries` at this scale
    /// ([`exact::set_key`] when 1).
    pub fn set_key(
        self,
        metric: &Metric,
        base: &VectorSet,
        i: usize,
        queries: &VectorSet,
        j: usize,
    ) -> f64 {
        if self.exp == 0 || matches!(metric, Metric::Custom(_)) {
            return exact::set_key(metric, base, i, queries, j);
        }
        self.vector_key(metric, &base.row_f64(i), &queries.row_f64(j))
    }

    /// The exact key between base item `i` and query item `j` at this scale.
    pub fn item_key(
        self,
        metric: &Metric,
        base: &Dataset,
        i: usize,
        queries: &Dataset,
        j: usize,
    ) -> f64 {
        match (base, queries) {
            (Dataset::Vectors(b), Dataset::Vectors(q)) => self.set_key(metric, b, i, q, j),
            _ => exact::item_key(metric, base, i, queries, j),
        }
    }

    /// The metric's value for a key at this scale, in f64: ±∞ when the true value lies beyond
    /// f64's range (see [`f64_value`] for writing it), possibly rounded to a subnormal or zero
    /// below it.
    pub fn distance(self, metric: &Metric, key: f64) -> f64 {
        let d = metric.key_to_distance(key);
        match (self.exp, value_degree(metric)) {
            (0, _) | (_, 0) => d,
            (e, deg) => ldexp(d, e.saturating_mul(deg)),
        }
    }

    /// The key threshold of a range radius at this scale (see [`Metric::radius_to_key`]).
    pub fn radius_key(self, metric: &Metric, radius: f64) -> f64 {
        match (self.exp, value_degree(metric)) {
            (0, _) | (_, 0) => metric.radius_to_key(radius),
            (e, deg) => metric.radius_to_key(ldexp(radius, -e.saturating_mul(deg))),
        }
    }

    /// The factor from keys computed on query rows times 2^-q_exp and base rows times
    /// 2^-b_exp (equal for every key but the dot product's) to keys at this scale, and whether
    /// it is exact (a power of two; the minkowski power sum of an order that is not a whole
    /// number rounds it).
    pub fn factor_from(self, metric: &Metric, (q_exp, b_exp): (i32, i32)) -> (f64, bool) {
        let h = key_degree(metric);
        let shift = h / 2.0 * (q_exp as f64 + b_exp as f64 - 2.0 * self.exp as f64);
        if shift == 0.0 {
            return (1.0, true);
        }
        if shift.fract() == 0.0 && shift.abs() <= 1000.0 {
            return (ldexp(1.0, shift as i32), true);
        }
        (shift.exp2(), false)
    }
}

/// A reported value written as f32: rounded to nearest, and beyond f32's range its largest
/// finite value of that sign, so a true distance is never written as infinity.
#[inline]
pub fn f32_value(d: f64) -> f32 {
    d.clamp(-(f32::MAX as f64), f32::MAX as f64) as f32
}

/// A reported value written as f64: as it is, and f64's largest finite value of its sign for
/// a true value beyond f64's range (computed as ±∞).
#[inline]
pub fn f64_value(d: f64) -> f64 {
    d.clamp(-f64::MAX, f64::MAX)
}

/// The exponent that brings the largest magnitude of `row` into [1, 2) (0 for a zero row).
pub fn row_exponent<T: Copy + Into<f64>>(row: &[T]) -> i32 {
    let m = row.iter().fold(0.0f64, |m, &x| m.max(x.into().abs()));
    if m > 0.0 && m.is_finite() {
        exponent(m)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldexp_rounds_once() {
        let cases = [
            (1.5, 10, 1536.0),
            (1.0, -1074, f64::from_bits(1)),
            (3.0, -1075, f64::from_bits(2)), // 1.5 · 2^-1074 rounds to even: 2 · 2^-1074
            (1.0, 1024, f64::INFINITY),
            (-1.0, -1080, -0.0),
            (f64::MIN_POSITIVE / 8.0, 1000, 2f64.powi(-25)),
            (f64::MAX, -2000, 2f64.powi(-977) * (2.0 - 2f64.powi(-52))),
        ];
        for (x, n, want) in cases {
            assert_eq!(ldexp(x, n), want, "{x} · 2^{n}");
        }
        for n in [-1100, -1074, -1022, -10, 0, 10, 1000] {
            for x in [1.0, 1.25, 3.0e-310, 1.0e300, -7.0] {
                let a = ldexp(ldexp(x, n), -n);
                let exact = ldexp(x, n).abs() >= f64::MIN_POSITIVE && ldexp(x, n).is_finite();
                if exact {
                    assert_eq!(a, x, "{x} · 2^{n} and back");
                }
            }
        }
    }

    #[test]
    fn exponents_and_extents() {
        assert_eq!(exponent(1.0), 0);
        assert_eq!(exponent(0.75), -1);
        assert_eq!(exponent(f64::from_bits(1)), -1074);
        assert_eq!(exponent(ldexp(3.0, -1070)), -1069);
        let e = Extent::of_f32(&[0.0, -3.0, 1e-40, 2.5]);
        assert_eq!((e.max, e.min), (3.0, 1e-40f32 as f64));
        assert_eq!(Extent::of_f32(&[0.0, -0.0]), Extent::EMPTY);
    }

    /// A set is measured once: every ask and every clone give its extent, a gathered subset
    /// measures its own rows.
    #[test]
    fn a_set_is_measured_once_and_its_subsets_apart() {
        use crate::data::{Buffer, VectorData};
        let values = vec![0.5f32, -3.0, 1e-30, 0.0, 2.0, 7.0];
        let set = VectorSet::new(3, 2, VectorData::F32(Buffer::Owned(values))).unwrap();
        let whole = Extent {
            max: 7.0,
            min: 1e-30f32 as f64,
        };
        assert_eq!(Extent::of(&set), whole);
        assert_eq!(Extent::of(&set), whole);
        assert_eq!(Extent::of(&set.clone()), whole);
        assert_eq!(Extent::of(&set.gather(&[0])), Extent { max: 3.0, min: 0.5 });
        assert_eq!(
            Extent::of(&set.gather(&[2, 1])),
            Extent {
                max: 7.0,
                min: 1e-30f32 as f64
            }
        );
        assert_eq!(Extent::of(&set.gather(&[2])), Extent { max: 7.0, min: 2.0 });
    }

    /// The NaN check of f32 sets measures their extent in the same pass, the one `Extent::of`
    /// would make, and still finds every NaN and infinity wherever its chunk lies.
    #[test]
    fn the_nan_check_measures_the_extent_it_passes() {
        use crate::data::{Buffer, VectorData};
        let (n, d) = (3000, 70);
        let values: Vec<f32> = (0..n * d)
            .map(|i| ((i % 997) as f32 - 498.0) * 2f32.powi((i % 61) as i32 - 30))
            .collect();
        let set = |v: Vec<f32>| VectorSet::new(n, d, VectorData::F32(Buffer::Owned(v))).unwrap();
        let fresh = set(values.clone());
        assert_eq!(fresh.find_non_finite(), None);
        assert_eq!(
            fresh.extent_cell().get(),
            Some(&Extent::scan(&set(values.clone())))
        );
        for (at, bad) in [
            (0, f32::NAN),
            (n * d - 1, f32::INFINITY),
            (150_001, -f32::INFINITY),
        ] {
            for measured_first in [false, true] {
                let mut v = values.clone();
                v[at] = bad;
                let s = set(v);
                if measured_first {
                    Extent::of(&s);
                }
                assert_eq!(s.find_non_finite(), Some((at / d, at % d)), "{bad} at {at}");
                assert_eq!(s.find_non_finite(), Some((at / d, at % d)), "asked again");
            }
        }
    }

    /// Ordinary data keeps scale 1; f64 extremes and large minkowski power sums do not.
    #[test]
    fn ordinary_data_keeps_scale_one() {
        let ext = |max: f64, min: f64| Extent { max, min };
        for m in Metric::builtins()
            .iter()
            .filter(|m| **m != Metric::Levenshtein)
        {
            let w = widest(ElemType::F32).unwrap();
            let whole_f32 = KeyScale::choose(m, 1 << 14, 23.0, w) == KeyScale::ONE;
            assert_eq!(whole_f32, !scales_exactly(m), "{m}");
            for bits in [23.0, 52.0] {
                let ordinary = KeyScale::choose(m, 1 << 14, bits, ext(1e12, 1e-12));
                assert_eq!(ordinary, KeyScale::ONE, "{m}");
            }
            let f16 = widest(ElemType::F16).unwrap();
            assert_eq!(KeyScale::choose(m, 128, 10.0, f16), KeyScale::ONE, "{m}");
        }
        let e = Metric::Euclidean;
        assert_ne!(
            KeyScale::choose(&e, 16, 52.0, ext(1e300, 1e290)),
            KeyScale::ONE
        );
        assert_ne!(
            KeyScale::choose(&e, 16, 52.0, ext(1e-300, 1e-310)),
            KeyScale::ONE
        );
        // Cityblock's keys scale exactly: a scale brings them into f32's range and changes
        // no distance.
        let c = Metric::Cityblock;
        let s = KeyScale::choose(&c, 2, 52.0, ext(1e300, 1e-310));
        assert_ne!(s, KeyScale::ONE);
        let (a, b) = ([1e300, -3e-310], [-2.5e299, 7e-310]);
        let plain = exact::vector_key(&c, &a, &b);
        assert_eq!(s.distance(&c, s.vector_key(&c, &a, &b)), plain);
        assert_ne!(
            KeyScale::choose(&Metric::Minkowski(8.0), 16, 23.0, ext(1e38, 1.0)).exp(),
            0
        );
    }

    /// The scale follows the data: multiplying every value by 2^j moves the exponent by j.
    #[test]
    fn scales_are_shift_equivariant() {
        let m = Metric::SqEuclidean;
        let a = KeyScale::choose(
            &m,
            100,
            52.0,
            Extent {
                max: 3e300,
                min: 1e290,
            },
        );
        let b = KeyScale::choose(
            &m,
            100,
            52.0,
            Extent {
                max: 3e300 * 2f64.powi(-7),
                min: 1e290 * 2f64.powi(-7),
            },
        );
        assert_eq!(a.exp() - b.exp(), 7);
        assert_eq!(f32_value(1e39), f32::MAX);
        assert_eq!(f32_value(-1e300), -f32::MAX);
        assert_eq!(f64_value(f64::INFINITY), f64::MAX);
        assert!(f32_value(f64::NAN).is_nan());
    }

    /// Keys inside f32's range unscaled: every metric of a positive degree at ordinary values,
    /// not past 2^120 for minkowski's power sums too (which keep scale 1 for f64), and every
    /// value for the scale-free metrics; f16 sets need no pass.
    #[test]
    fn keys_fit_f32_where_the_values_let_them() {
        let at = |x: f32, d: usize| VectorSet::from_f32(2, d, vec![x; 2 * d]).unwrap();
        let cube = Metric::Minkowski(3.0);
        assert!(KeyScale::fits_f32(&cube, &at(2f32.powi(30), 130)));
        assert!(
            KeyScale::of(&cube, &at(2f32.powi(40), 130), &at(2f32.powi(40), 130)) == KeyScale::ONE
        );
        assert!(!KeyScale::fits_f32(&cube, &at(2f32.powi(40), 130)));
        for m in [Metric::Euclidean, Metric::InnerProduct, Metric::Cityblock] {
            assert!(KeyScale::fits_f32(&m, &at(1e6, 17)), "{m}");
            assert!(!KeyScale::fits_f32(&m, &at(2f32.powi(126), 17)), "{m}");
        }
        for m in [Metric::Cosine, Metric::Correlation] {
            assert!(KeyScale::fits_f32(&m, &at(2f32.powi(126), 17)), "{m}");
        }
        // Far below f32's normal range: f64 keys hold them (the CPU's rule scales them).
        let tiny = at(2f32.powi(-140), 17);
        assert!(KeyScale::of(&Metric::Euclidean, &tiny, &tiny) != KeyScale::ONE);
        for m in Metric::builtins() {
            assert!(KeyScale::fits_f32(&m, &tiny), "{m}");
        }
        // f64 values whose keys underflow f64 are not.
        let f64s = |x: f64| VectorSet::from_f64(2, 3, vec![x; 6]).unwrap();
        assert!(KeyScale::fits_f32(
            &Metric::Euclidean,
            &f64s(2f64.powi(-200))
        ));
        assert!(!KeyScale::fits_f32(
            &Metric::Euclidean,
            &f64s(2f64.powi(-600))
        ));
        assert!(KeyScale::fits_f32(
            &Metric::Cityblock,
            &f64s(2f64.powi(-600))
        ));
        // Cosine and correlation: rows whose f64 norms underflow are not either.
        for m in [Metric::Cosine, Metric::Correlation] {
            assert!(!KeyScale::fits_f32(&m, &f64s(2f64.powi(-600))), "{m}");
            assert!(KeyScale::fits_f32(&m, &f64s(2f64.powi(-200))), "{m}");
        }
        let h = VectorSet::new(1, 2, VectorData::F16(vec![half::f16::MAX; 2].into())).unwrap();
        assert!(KeyScale::fits_f32(&Metric::Euclidean, &h));
    }
}
