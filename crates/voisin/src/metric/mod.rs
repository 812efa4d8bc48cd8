//! Metrics: their names, properties and distance functions.
//!
//! Every metric is ranked through a *key* that grows with distance (smaller key = closer):
//! `euclidean` ranks by the squared distance, `minkowski` by the p-th power sum (by the distance
//! itself above [`MINKOWSKI_POWER_KEY_MAX`]), and `inner_product` by the negated dot product. Engines select on keys and convert the final keys
//! to the metric's own value with [`Metric::key_to_distance`]. This module owns the definitions;
//! engines own the tiling and selection.
//!
//! - [`exact`]: f64 keys, the values every engine reports.
//! - [`simd`]: f32 kernels with run-time CPU feature detection, and their error bounds, used to
//!   produce candidates.
//! - [`levenshtein`]: bit-parallel edit distance over Unicode scalar values.
//! - [`rounding`]: how far keys move when f64 rows are rounded to f32 for an f32 pass.
//! - [`scale`]: exact power-of-two scaling, so that keys of values of any finite magnitude stay
//!   in range ([`scale::KeyScale`]), and how reported values beyond an output type are written.

pub mod exact;
pub mod levenshtein;
pub mod rounding;
pub mod scale;
pub mod simd;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The largest minkowski order ranked by the p-th power sum Σ|a−b|^p. Above it the sum leaves
/// f64's range for ordinary data (2^p overflows at p = 1024, and differences of f32 values reach
/// 2^128, so p > 8 may already overflow), so larger orders rank by the distance itself, computed
/// with the differences divided by the largest one before the power ([`exact::vector_key`]):
/// finite for every order, and equal to chebyshev's value when p is so large that only the
/// largest differences count.
pub const MINKOWSKI_POWER_KEY_MAX: f64 = 8.0;

/// A distance function over items of type `T`, for metrics the library does not know.
/// Closures `Fn(&T, &T) -> f64` implement it. Only the CPU engine and the metric indexes use it.
pub trait Distance<T: ?Sized>: Send + Sync {
    /// The distance between `a` and `b`, which is also the key items are ranked by (smaller is
    /// closer) and the value reported.
    fn distance(&self, a: &T, b: &T) -> f64;
}

impl<T: ?Sized, F> Distance<T> for F
where
    F: Fn(&T, &T) -> f64 + Send + Sync,
{
    fn distance(&self, a: &T, b: &T) -> f64 {
        self(a, b)
    }
}

/// A user-defined metric: a name and a distance over vectors, strings, or both.
#[derive(Clone)]
pub struct CustomMetric {
    /// The name the metric is shown with (`Display`, messages, checkpoint manifests) and
    /// compared by: two user metrics with one name are equal.
    pub name: String,
    /// A distance over f32 vectors. Without `vectors_f64` it takes only sets whose values f32
    /// holds exactly; others are refused ([`crate::engine::check_metric`]).
    pub vectors: Option<Arc<dyn Distance<[f32]>>>,
    /// A distance over f64 vectors: called with the stored values of every vector set (f32
    /// storage widened), so f64 data is measured exactly. Takes precedence over `vectors`.
    pub vectors_f64: Option<Arc<dyn Distance<[f64]>>>,
    /// A distance over strings, each handed over as its Unicode scalar values.
    pub strings: Option<Arc<dyn Distance<[char]>>>,
}

impl CustomMetric {
    /// A metric named `name` over f32 vectors only (see [`CustomMetric::vectors`]).
    pub fn for_vectors(name: impl Into<String>, f: impl Distance<[f32]> + 'static) -> Self {
        CustomMetric {
            name: name.into(),
            vectors: Some(Arc::new(f)),
            vectors_f64: None,
            strings: None,
        }
    }

    /// A metric over f64 vectors, for f64 data (every set is handed over as f64).
    pub fn for_vectors_f64(name: impl Into<String>, f: impl Distance<[f64]> + 'static) -> Self {
        CustomMetric {
            name: name.into(),
            vectors: None,
            vectors_f64: Some(Arc::new(f)),
            strings: None,
        }
    }

    /// A metric named `name` over strings only, each handed over as its chars.
    pub fn for_strings(name: impl Into<String>, f: impl Distance<[char]> + 'static) -> Self {
        CustomMetric {
            name: name.into(),
            vectors: None,
            vectors_f64: None,
            strings: Some(Arc::new(f)),
        }
    }
}

impl fmt::Debug for CustomMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomMetric({})", self.name)
    }
}

/// The metrics voisin knows, plus user metrics.
#[derive(Clone, Debug)]
pub enum Metric {
    /// √Σ(a−b)²; ranked by its square, the key of [`Metric::SqEuclidean`].
    Euclidean,
    /// Σ(a−b)², the squared euclidean distance.
    SqEuclidean,
    /// 1 − cos(a, b). A zero vector is at distance 1 from every vector (scikit-learn's rule).
    Cosine,
    /// 1 − Pearson r. A constant vector is at distance 1 from every vector.
    Correlation,
    /// Ranks by the largest dot product and reports the dot product.
    InnerProduct,
    /// Σ|a−b|, the L1 or manhattan distance.
    Cityblock,
    /// max|a−b|, the L∞ distance.
    Chebyshev,
    /// (Σ|a−b|^p)^(1/p), p ≥ 1.
    Minkowski(f64),
    /// Edit distance between strings: insertions, deletions and substitutions of Unicode scalar
    /// values, each of cost 1 ([`levenshtein`]).
    Levenshtein,
    /// A user metric ([`CustomMetric`]): its distance is its key and its reported value.
    Custom(CustomMetric),
}

/// What kind of items a metric applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// Dense numeric vectors ([`crate::data::VectorSet`]).
    Vectors,
    /// Strings ([`crate::data::StringSet`]).
    Strings,
}

impl Metric {
    /// The canonical (scipy) name.
    pub fn name(&self) -> String {
        match self {
            Metric::Euclidean => "euclidean".into(),
            Metric::SqEuclidean => "sqeuclidean".into(),
            Metric::Cosine => "cosine".into(),
            Metric::Correlation => "correlation".into(),
            Metric::InnerProduct => "inner_product".into(),
            Metric::Cityblock => "cityblock".into(),
            Metric::Chebyshev => "chebyshev".into(),
            Metric::Minkowski(p) => format!("minkowski:{p}"),
            Metric::Levenshtein => "levenshtein".into(),
            Metric::Custom(c) => c.name.clone(),
        }
    }

    /// Every built-in metric with a representative parameter, for tests and documentation.
    pub fn builtins() -> Vec<Metric> {
        vec![
            Metric::Euclidean,
            Metric::SqEuclidean,
            Metric::Cosine,
            Metric::Correlation,
            Metric::InnerProduct,
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Minkowski(3.0),
            Metric::Levenshtein,
        ]
    }

    /// Whether the metric can measure items of this kind.
    pub fn supports(&self, kind: ItemKind) -> bool {
        match self {
            Metric::Levenshtein => kind == ItemKind::Strings,
            Metric::Custom(c) => match kind {
                ItemKind::Vectors => c.vectors.is_some() || c.vectors_f64.is_some(),
                ItemKind::Strings => c.strings.is_some(),
            },
            _ => kind == ItemKind::Vectors,
        }
    }

    /// Metrics computed through matrix products with norms ([Dashti13] §3.2.1, docs/references.md).
    pub fn is_gemm(&self) -> bool {
        matches!(
            self,
            Metric::Euclidean
                | Metric::SqEuclidean
                | Metric::Cosine
                | Metric::Correlation
                | Metric::InnerProduct
        )
    }

    /// True metrics (triangle inequality holds), which metric-space indexes may prune with.
    pub fn is_true_metric(&self) -> bool {
        match self {
            Metric::Euclidean | Metric::Cityblock | Metric::Chebyshev | Metric::Levenshtein => true,
            Metric::Minkowski(p) => *p >= 1.0,
            _ => false,
        }
    }

    /// Whether the key is the p-th power sum of minkowski (false for large orders, whose key is
    /// the distance: see [`MINKOWSKI_POWER_KEY_MAX`]) or of any other metric.
    pub fn is_minkowski_power_sum(&self) -> bool {
        matches!(self, Metric::Minkowski(p) if *p <= MINKOWSKI_POWER_KEY_MAX)
    }

    /// Converts a key (what engines rank by) to the metric's reported value.
    pub fn key_to_distance(&self, key: f64) -> f64 {
        match self {
            Metric::Euclidean => key.max(0.0).sqrt(),
            Metric::InnerProduct => -key,
            Metric::Minkowski(p) if self.is_minkowski_power_sum() => key.max(0.0).powf(1.0 / p),
            _ => key,
        }
    }

    /// Whether a pair at this reported distance is inside a range query of radius `radius`.
    /// For `inner_product` the radius is a minimum dot product.
    pub fn within(&self, distance: f64, radius: f64) -> bool {
        match self {
            Metric::InnerProduct => distance >= radius,
            _ => distance <= radius,
        }
    }

    /// Checks a range-query radius for this metric.
    pub fn check_radius(&self, radius: f64) -> Result<()> {
        if !radius.is_finite() {
            return Err(Error::invalid(format!(
                "radius {radius} is not a finite number"
            )));
        }
        if radius < 0.0 && !matches!(self, Metric::InnerProduct) {
            return Err(Error::invalid(format!(
                "radius {radius} is negative (only inner_product takes a negative radius)"
            )));
        }
        Ok(())
    }

    /// The key threshold matching a radius: every pair with key ≤ this (computed exactly) is
    /// within the radius. Engines widen it by their error bound when filtering candidates and
    /// decide membership on exact distances with [`Metric::within`].
    pub fn radius_to_key(&self, radius: f64) -> f64 {
        match self {
            Metric::Euclidean => radius * radius,
            Metric::InnerProduct => -radius,
            Metric::Minkowski(p) if self.is_minkowski_power_sum() => radius.powf(*p),
            _ => radius,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl PartialEq for Metric {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Metric::Minkowski(a), Metric::Minkowski(b)) => a == b,
            (Metric::Custom(a), Metric::Custom(b)) => a.name == b.name,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

/// Parses scipy names and the aliases l2, l1, manhattan, linf, pearson, ip, dot, edit.
/// Minkowski takes its order as `minkowski:P` (`minkowski` alone means p = 2).
impl FromStr for Metric {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, param) = match lower.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (lower.as_str(), None),
        };
        let metric = match name {
            "euclidean" | "l2" => Metric::Euclidean,
            "sqeuclidean" | "sql2" => Metric::SqEuclidean,
            "cosine" => Metric::Cosine,
            "correlation" | "pearson" => Metric::Correlation,
            "inner_product" | "ip" | "dot" => Metric::InnerProduct,
            "cityblock" | "l1" | "manhattan" => Metric::Cityblock,
            "chebyshev" | "linf" => Metric::Chebyshev,
            "minkowski" => {
                let (p, text) = match param {
                    None => (2.0, "2"),
                    Some(p) => (
                        p.parse::<f64>().map_err(|_| {
                            Error::invalid(format!("minkowski order '{p}' is not a number"))
                        })?,
                        p,
                    ),
                };
                // The order as written: `1e-300` printed as an f64 spells out 300 zeros.
                check_minkowski_order(p, text)?;
                return Ok(Metric::Minkowski(p));
            }
            "levenshtein" | "edit" => Metric::Levenshtein,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown metric '{s}' (known: euclidean, sqeuclidean, cosine, correlation, \
                     inner_product, cityblock, chebyshev, minkowski:P, levenshtein)"
                )))
            }
        };
        if let Some(p) = param {
            return Err(Error::invalid(format!(
                "metric '{name}' takes no parameter (got ':{p}')"
            )));
        }
        Ok(metric)
    }
}

/// Refuses a minkowski order that is not a finite number >= 1, naming it as `shown` (the parser
/// shows it as written; [`crate::engine::check_metric`], for a metric built in code, as the f64).
pub(crate) fn check_minkowski_order(p: f64, shown: impl fmt::Display) -> Result<()> {
    if p.is_finite() && p >= 1.0 {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "minkowski order {shown} must be a finite number >= 1"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_aliases() {
        for (s, m) in [
            ("euclidean", Metric::Euclidean),
            ("L2", Metric::Euclidean),
            ("l1", Metric::Cityblock),
            ("manhattan", Metric::Cityblock),
            ("linf", Metric::Chebyshev),
            ("pearson", Metric::Correlation),
            ("ip", Metric::InnerProduct),
            ("edit", Metric::Levenshtein),
            ("minkowski:3", Metric::Minkowski(3.0)),
            ("minkowski", Metric::Minkowski(2.0)),
        ] {
            assert_eq!(s.parse::<Metric>().unwrap(), m, "{s}");
        }
        for bad in ["nope", "minkowski:0.5", "minkowski:x", "cosine:2", ""] {
            assert!(bad.parse::<Metric>().is_err(), "{bad}");
        }
    }

    /// A refused order is quoted as written, on one short line.
    #[test]
    fn bad_minkowski_orders_are_quoted_as_written() {
        for (text, shown) in [
            ("1e-300", "1e-300"),
            ("0.5", "0.5"),
            ("inf", "inf"),
            ("-0", "-0"),
        ] {
            let err = format!("minkowski:{text}").parse::<Metric>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("minkowski order {shown} must be a finite number >= 1")
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for m in Metric::builtins() {
            assert_eq!(m.name().parse::<Metric>().unwrap(), m);
        }
    }
}
