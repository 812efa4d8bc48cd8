//! An extended-precision reference for tests: every key computed exactly in big-integer
//! arithmetic on the stored values' mantissas, distances rounded from it.
//!
//! Every finite f32 or f64 value is an integer times a power of two, so the values of one
//! problem (base and queries) are integers times one common power of two 2^shift. Squared
//! differences, dot products, cityblock and chebyshev sums and integer minkowski power sums are
//! then exact big integers; cosine and correlation compare p/√q exactly through p·|p|·q′ against
//! p′·|p′|·q (correlation on the rows centred exactly: d·x − Σx). Nothing here rounds until a key
//! becomes a reported distance (`Wide::distance`), which is within a few f64 ulps of the true
//! value. Included by `#[path]` from the tests of several crates (no product code uses it).

#![allow(dead_code)]

use std::cmp::Ordering;

use num_bigint::{BigInt, Sign};
use voisin::{KnnResult, Metric};

/// The exact key of a pair: smaller is closer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrueKey {
    /// An integer in units of the problem (sqeuclidean and euclidean: Σ(x−y)²; inner product:
    /// −Σxy; cityblock, chebyshev, minkowski: the sum, the max, the power sum).
    Int(BigInt),
    /// 1 − p/√q with q > 0 (cosine, correlation); a zero side is p = 0, q = 1.
    Cos { p: BigInt, q: BigInt },
}

impl PartialOrd for TrueKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TrueKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (TrueKey::Int(a), TrueKey::Int(b)) => a.cmp(b),
            (TrueKey::Cos { p: p1, q: q1 }, TrueKey::Cos { p: p2, q: q2 }) => {
                // Larger p/√q is closer: compare p·|p|/q, reversed.
                let a = p1 * BigInt::from(p1.magnitude().clone()) * q2;
                let b = p2 * BigInt::from(p2.magnitude().clone()) * q1;
                b.cmp(&a)
            }
            _ => panic!("keys of two kinds"),
        }
    }
}

/// The built-in vector metrics the reference knows (every one but minkowski orders that are
/// not whole numbers), with minkowski's representative order.
pub fn metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect()
}

/// One problem: base and query rows as integers in units of 2^shift.
pub struct Wide {
    pub metric: Metric,
    pub dim: usize,
    base: Vec<Vec<BigInt>>,
    queries: Vec<Vec<BigInt>>,
    shift: i64,
}

/// (mantissa, exponent) of a finite f64: x = m · 2^e.
fn split(x: f64) -> (BigInt, i64) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp - 1075)
    };
    let m = BigInt::from(m);
    (if x < 0.0 { -m } else { m }, e)
}

impl Wide {
    /// The problem of `base` and `queries` (row-major, `dim` wide) under `metric`.
    pub fn new(metric: &Metric, dim: usize, base: &[f64], queries: &[f64]) -> Wide {
        assert!(base.iter().chain(queries).all(|x| x.is_finite()));
        let shift = base
            .iter()
            .chain(queries)
            .filter(|&&x| x != 0.0)
            .map(|&x| split(x).1)
            .min()
            .unwrap_or(0);
        let rows = |v: &[f64]| -> Vec<Vec<BigInt>> {
            v.chunks_exact(dim)
                .map(|r| {
                    r.iter()
                        .map(|&x| {
                            let (m, e) = split(x);
                            m << (e - shift) as usize
                        })
                        .collect()
                })
                .collect()
        };
        Wide {
            metric: metric.clone(),
            dim,
            base: rows(base),
            queries: rows(queries),
            shift,
        }
    }

    pub fn n_base(&self) -> usize {
        self.base.len()
    }

    pub fn n_queries(&self) -> usize {
        self.queries.len()
    }

    /// The exact key between base item `i` and query `j`.
    pub fn key(&self, i: usize, j: usize) -> TrueKey {
        let (a, b) = (&self.queries[j], &self.base[i]);
        let diffs = || a.iter().zip(b).map(|(x, y)| (x - y).magnitude().clone());
        let int = |v: num_bigint::BigUint| TrueKey::Int(BigInt::from(v));
        match &self.metric {
            Metric::Euclidean | Metric::SqEuclidean => int(diffs().map(|t| &t * &t).sum()),
            Metric::InnerProduct => {
                TrueKey::Int(-a.iter().zip(b).map(|(x, y)| x * y).sum::<BigInt>())
            }
            Metric::Cityblock => int(diffs().sum()),
            Metric::Chebyshev => int(diffs().max().unwrap_or_default()),
            Metric::Minkowski(p) => {
                assert_eq!(p.fract(), 0.0, "integer orders only");
                int(diffs().map(|t| t.pow(*p as u32)).sum())
            }
            Metric::Cosine => cos_key(a, b),
            Metric::Correlation => cos_key(&centred(a), &centred(b)),
            m => panic!("no wide key for {m}"),
        }
    }

    /// The key as a float in the problem's own units (no power of two applied): the integer of
    /// an `Int` key (squared for euclidean), the distance of a `Cos` key. Comparable across the
    /// pairs of one problem, and finite wherever the problem's spread is.
    pub fn unit_value(&self, key: &TrueKey) -> f64 {
        match key {
            TrueKey::Int(s) => to_f64(s, 0),
            cos => self.distance(cos),
        }
    }

    /// How far the f64 key of pair (i, j) may be off beyond a relative error, in the units of
    /// [`Wide::unit_value`]: about 2⁻⁴⁰·Σ|xy| for a dot product, 2⁻⁴⁰ for cosine and
    /// correlation, nothing for sums of non-negative terms.
    pub fn abs_slack(&self, i: usize, j: usize) -> f64 {
        match self.metric {
            Metric::InnerProduct => {
                let s: BigInt = self.queries[j]
                    .iter()
                    .zip(&self.base[i])
                    .map(|(x, y)| BigInt::from((x * y).magnitude().clone()))
                    .sum();
                to_f64(&s, 0) * 2f64.powi(-40)
            }
            Metric::Cosine | Metric::Correlation => 2f64.powi(-40),
            _ => 0.0,
        }
    }

    /// The same slack in reported units.
    pub fn abs_slack_distance(&self, i: usize, j: usize) -> f64 {
        match self.metric {
            Metric::InnerProduct => ldexp(self.abs_slack(i, j), 2 * self.shift),
            _ => self.abs_slack(i, j),
        }
    }

    /// Query `j`'s base items sorted by (exact key, index), without `skip`.
    pub fn sorted(&self, j: usize, skip: Option<usize>) -> Vec<(TrueKey, u32)> {
        let mut row: Vec<(TrueKey, u32)> = (0..self.n_base())
            .filter(|&i| Some(i) != skip)
            .map(|i| (self.key(i, j), i as u32))
            .collect();
        row.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        row
    }

    /// The metric's reported value of a key, rounded to f64 (±inf beyond f64's range).
    pub fn distance(&self, key: &TrueKey) -> f64 {
        let sh = self.shift;
        match (&self.metric, key) {
            (Metric::SqEuclidean, TrueKey::Int(s)) => to_f64(s, 2 * sh),
            (Metric::InnerProduct, TrueKey::Int(s)) => to_f64(&-s, 2 * sh),
            (Metric::Cityblock | Metric::Chebyshev, TrueKey::Int(s)) => to_f64(s, sh),
            (Metric::Euclidean, TrueKey::Int(s)) => root(s, 2, sh),
            (Metric::Minkowski(p), TrueKey::Int(s)) => root(s, *p as u32, sh),
            (_, TrueKey::Cos { p, q }) => {
                const F: usize = 200;
                let den = (q << (2 * F)).sqrt();
                let c = (p << (2 * F)) / den;
                let key = (BigInt::from(1) << F) - c;
                to_f64(&key, -(F as i64)).clamp(0.0, 2.0)
            }
            (m, k) => panic!("{m} with key {k:?}"),
        }
    }

    /// Whether a pair at this key is within `radius` (inclusive; a minimum dot product for
    /// inner_product), decided exactly.
    pub fn within(&self, key: &TrueKey, radius: f64) -> bool {
        let (rm, re) = split(radius);
        let sh = self.shift;
        // a·2^ea against b·2^eb, exactly.
        let cmp = |a: &BigInt, ea: i64, b: &BigInt, eb: i64| {
            let e = ea.min(eb);
            (a << (ea - e) as usize).cmp(&(b << (eb - e) as usize))
        };
        match (&self.metric, key) {
            (Metric::SqEuclidean, TrueKey::Int(s)) => cmp(s, 2 * sh, &rm, re).is_le(),
            (Metric::InnerProduct, TrueKey::Int(s)) => cmp(&-s, 2 * sh, &rm, re).is_ge(),
            (Metric::Cityblock | Metric::Chebyshev, TrueKey::Int(s)) => cmp(s, sh, &rm, re).is_le(),
            (Metric::Euclidean, TrueKey::Int(s)) => cmp(s, 2 * sh, &(&rm * &rm), 2 * re).is_le(),
            (Metric::Minkowski(p), TrueKey::Int(s)) => {
                let p = *p as u32;
                cmp(s, p as i64 * sh, &rm.pow(p), p as i64 * re).is_le()
            }
            (_, TrueKey::Cos { p, q }) => {
                // 1 − p/√q ≤ r  ⟺  p/√q ≥ t = 1 − r, t = tm·2^te exactly.
                let (tm, te) = {
                    let e = re.min(0);
                    let one = BigInt::from(1) << (0 - e) as usize;
                    (one - (&rm << (re - e) as usize), e)
                };
                // p·|p| ≥ t·|t|·q, in units of 2^(2te).
                let lhs = p * BigInt::from(p.magnitude().clone());
                let rhs = &tm * BigInt::from(tm.magnitude().clone()) * q;
                cmp(&lhs, 0, &rhs, 2 * te).is_ge()
            }
            (m, k) => panic!("{m} with key {k:?}"),
        }
    }
}

/// d·x − Σx: the row centred, in units of 1/d (correlation is scale-free).
fn centred(a: &[BigInt]) -> Vec<BigInt> {
    let s: BigInt = a.iter().sum();
    let d = BigInt::from(a.len());
    a.iter().map(|x| x * &d - &s).collect()
}

fn cos_key(a: &[BigInt], b: &[BigInt]) -> TrueKey {
    let sq = |v: &[BigInt]| v.iter().map(|x| x * x).sum::<BigInt>();
    let (aa, bb) = (sq(a), sq(b));
    if aa.sign() == Sign::NoSign || bb.sign() == Sign::NoSign {
        return TrueKey::Cos {
            p: BigInt::from(0),
            q: BigInt::from(1),
        };
    }
    TrueKey::Cos {
        p: a.iter().zip(b).map(|(x, y)| x * y).sum(),
        q: aa * bb,
    }
}

/// (s·2^(p·sh))^(1/p) rounded to f64, through an integer root with 64 extra bits.
fn root(s: &BigInt, p: u32, sh: i64) -> f64 {
    const T: i64 = 64;
    // (s·2^(p·T))^(1/p) = s^(1/p)·2^T, then times 2^(sh − T).
    let big = s << (p as i64 * T) as usize;
    to_f64(&big.nth_root(p), sh - T)
}

/// m·2^e rounded to nearest f64 (±inf beyond its range; subnormal results may round twice).
pub fn to_f64(m: &BigInt, e: i64) -> f64 {
    if m.sign() == Sign::NoSign {
        return 0.0;
    }
    let neg = m.sign() == Sign::Minus;
    let mag = m.magnitude();
    let n = mag.bits() as i64;
    // The top 64 bits, with a sticky bit for everything below, round correctly to 53.
    let (top, e) = if n > 64 {
        let shifted = mag >> (n - 64) as usize;
        let sticky = (&shifted << (n - 64) as usize) != *mag;
        let t: u64 = shifted.try_into().expect("64 bits");
        (t | sticky as u64, e + n - 64)
    } else {
        (u64::try_from(mag.clone()).expect("64 bits"), e)
    };
    let v = ldexp(top as f64, e);
    if neg {
        -v
    } else {
        v
    }
}

/// x·2^n in steps that stay exact until the last.
pub fn ldexp(mut x: f64, mut n: i64) -> f64 {
    while n > 1000 {
        x *= 2f64.powi(1000);
        n -= 1000;
    }
    while n < -1000 && x.abs() >= 2f64.powi(-20) {
        x *= 2f64.powi(-1000);
        n += 1000;
    }
    if n < -1000 {
        return x * 2f64.powi(-1000) * 2f64.powi((n + 1000) as i32);
    }
    x * 2f64.powi(n as i32)
}

/// Whether an engine's reported distance `got` is `want` (the wide value) within the f64 key's
/// own error: a few f32 ulps relatively, plus `abs` for keys that carry an absolute error
/// (cosine, correlation, inner product). Both beyond f32's range count as equal when `got` is
/// f32's largest finite value of the right sign (the output rule).
pub fn close_f32(want: f64, got: f32, abs: f64) -> bool {
    if want.abs() > f32::MAX as f64 {
        return got == f32::MAX.copysign(want as f32);
    }
    let got = got as f64;
    (got - want).abs()
        <= 4.0 * f32::EPSILON as f64 * want.abs() + abs + f64::from(f32::MIN_POSITIVE) * 1e-6
}

/// One row of an engine's answer against the wide reference's sorted row `all`: every
/// distance within the key's error of the reference's at that rank (and beyond f32's range,
/// f32's largest value), and the item equal to the reference's wherever no other item is
/// within that error.
pub fn check_row(
    wide: &Wide,
    j: usize,
    ids: &[u32],
    dists: &[f32],
    all: &[(TrueKey, u32)],
    what: &str,
) {
    let m = &wide.metric;
    let val = |k: &TrueKey| wide.unit_value(k);
    assert_eq!(ids.len(), dists.len());
    let mut seen = std::collections::HashSet::new();
    for (p, (&gi, &gd)) in ids.iter().zip(dists).enumerate() {
        assert!(seen.insert(gi), "{what} {m} query {j}: item {gi} twice");
        let (wk, wi) = &all[p];
        let want = wide.distance(wk);
        let tol = wide.abs_slack_distance(*wi as usize, j);
        assert!(
            close_f32(want, gd, tol),
            "{what} {m} query {j} rank {p}: distance {gd} (item {gi}), want {want} (item {wi})"
        );
        let (wv, slack) = (val(wk), 2.0 * wide.abs_slack(*wi as usize, j));
        let near = |v: f64| (v - wv).abs() <= 1e-9 * v.abs().max(wv.abs()) + slack;
        let got_v = val(&wide.key(gi as usize, j));
        assert!(
            near(got_v),
            "{what} {m} query {j} rank {p}: item {gi} is at {got_v}, rank {p} at {wv} (item {wi})"
        );
        if all.iter().filter(|(k, _)| near(val(k))).count() == 1 {
            assert_eq!(
                gi, *wi,
                "{what} {m} query {j} rank {p}: item {gi}, want {wi} at {want}"
            );
        }
    }
}

pub fn check_knn(wide: &Wide, got: &KnnResult, k: usize, graph: bool, what: &str) {
    let k = k.min(wide.n_base() - graph as usize);
    assert_eq!(
        (got.n_queries, got.k),
        (wide.n_queries(), k),
        "{what} shape"
    );
    for j in 0..wide.n_queries() {
        let all = wide.sorted(j, graph.then_some(j));
        let (ids, dists) = got.row(j);
        check_row(wide, j, ids, dists, &all, what);
    }
}
