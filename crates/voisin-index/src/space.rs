//! Metric spaces the indexes search: a set of items, the exact distance between two of them, and
//! how much rounding the pruning rules must tolerate.
//!
//! This module owns the adapters from voisin's data sets and metrics (and from any user
//! [`Distance`]) to one [`Space`] trait. It computes distances only through the core crate's
//! public functions (`metric::exact`, `metric::levenshtein`), so indexes report exactly the values
//! that brute force reports. It knows nothing of index structures.

use std::marker::PhantomData;

use voisin::metric::levenshtein::{self, Pattern};
use voisin::metric::scale::KeyScale;
use voisin::metric::{exact, Distance};
use voisin::{Error, Metric, Result, StringSet, VectorSet};

/// Relative rounding allowance for f64 distances: the triangle inequality may fail by a few ulps
/// on computed values, so a region is pruned only when it is out of reach by more than this.
const FLOAT_SLACK: f64 = 1e-9;

/// A finite set of items under a metric (the triangle inequality must hold: every pruning rule
/// rests on it).
///
/// Items are ranked by a *key* (as in `voisin::metric`: euclidean by the squared distance,
/// minkowski by the p-th power sum), and pruned by the distance itself, [`Space::to_distance`].
pub trait Space: Send + Sync {
    /// One item; queries are items of the same type.
    type Item: ?Sized + Sync;

    /// Number of items; they are numbered `0..len()`.
    fn len(&self) -> usize;

    /// Whether the set holds no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `i` of the set.
    fn item(&self, i: usize) -> &Self::Item;

    /// Exact key between two items (smaller = closer).
    fn key(&self, a: &Self::Item, b: &Self::Item) -> f64;

    /// The key when the distance is at most `max_distance`, else `None`. Spaces with a cheaper
    /// bounded distance (levenshtein) override it.
    fn key_within(&self, a: &Self::Item, b: &Self::Item, max_distance: f64) -> Option<f64> {
        let key = self.key(a, b);
        (self.to_distance(key) <= max_distance).then_some(key)
    }

    /// The distance from `item` to a fixed reference of the space that costs no evaluation
    /// (levenshtein: to the empty string, the length in chars), so that by the triangle
    /// inequality |anchor(x) − anchor(y)| ≤ d(x, y) and an index can rule an item out from two
    /// stored numbers before it touches the item. Exact, no rounding: a space whose anchors
    /// would need a rounding allowance returns `None`, as do spaces without one.
    fn anchor(&self, item: &Self::Item) -> Option<f64> {
        let _ = item;
        None
    }

    /// A query made ready for many evaluations: what a space would otherwise rebuild for every
    /// pair (levenshtein: the query's match masks). `()` where nothing is worth preparing.
    type Prepared;

    /// Prepares `query` once for [`Space::key_within_prepared`] against many items.
    fn prepare(&self, query: &Self::Item) -> Self::Prepared;

    /// [`Space::key_within`] from the query `a` prepared as `prepared`; the same answer.
    fn key_within_prepared(
        &self,
        prepared: &Self::Prepared,
        a: &Self::Item,
        b: &Self::Item,
        max_distance: f64,
    ) -> Option<f64> {
        let _ = prepared;
        self.key_within(a, b, max_distance)
    }

    /// The metric's distance for a key (monotone in the key).
    fn to_distance(&self, key: f64) -> f64;

    /// The exact distance between items `a` and `b` of the set.
    fn distance(&self, a: usize, b: usize) -> f64 {
        self.to_distance(self.key(self.item(a), self.item(b)))
    }

    /// How far computed distances of magnitude `scale` may stray from the triangle inequality.
    fn slack(&self, scale: f64) -> f64 {
        FLOAT_SLACK * scale.abs()
    }

    /// The order p of a coordinate-wise metric over vectors — the distance is (Σ|aᵢ−bᵢ|ᵖ)^(1/p):
    /// 1 for cityblock, 2 for euclidean, infinity for chebyshev — so that a bounding box bounds
    /// the distance to everything inside it (the k-d tree). `None` for other spaces.
    fn box_order(&self) -> Option<f64> {
        None
    }

    /// An item's coordinates, in spaces with a [`Space::box_order`].
    fn coords<'a>(&self, _item: &'a Self::Item) -> Option<&'a [f32]> {
        None
    }

    /// Whether a region whose distance lower bound is `bound` lies outside radius `radius`
    /// beyond doubt; `scale` is the size of the distances the bound was computed from.
    fn beyond(&self, bound: f64, radius: f64, scale: f64) -> bool {
        bound > radius + self.slack(scale + radius)
    }
}

/// Refuses metrics without the triangle inequality. User metrics are taken on trust.
pub fn check_metric(metric: &Metric) -> Result<()> {
    if matches!(metric, Metric::Custom(_)) || metric.is_true_metric() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "metric {metric} breaks the triangle inequality, which index pruning needs \
         (use euclidean, cityblock, chebyshev, minkowski:P with P >= 1, or levenshtein)"
    )))
}

/// The order p of a coordinate-wise metric, (Σ|aᵢ−bᵢ|ᵖ)^(1/p) (infinity for chebyshev), or
/// `None`: the metrics whose distance a bounding box bounds. Whether p makes a true metric is
/// [`check_metric`]'s business.
pub fn box_order(metric: &Metric) -> Option<f64> {
    match *metric {
        Metric::Cityblock => Some(1.0),
        Metric::Euclidean => Some(2.0),
        Metric::Chebyshev => Some(f64::INFINITY),
        Metric::Minkowski(p) => Some(p),
        _ => None,
    }
}

/// Dense vectors (held as f32) under a true vector metric or a user vector metric. Keys are at
/// the items' key scale (`voisin::metric::scale::KeyScale`: 1 but for minkowski power sums of
/// large orders over extreme values), so a query should lie within the items' magnitudes for
/// such orders to keep every key in range.
#[derive(Clone, Debug)]
pub struct VectorSpace {
    values: Vec<f32>,
    dim: usize,
    metric: Metric,
    scale: KeyScale,
}

impl VectorSpace {
    /// Copies `set`'s rows as f32 under `metric`. Errors when it holds f64 values with no exact
    /// f32 form, or as [`VectorSpace::from_f32`] does.
    pub fn new(set: &VectorSet, metric: Metric) -> Result<Self> {
        set.require_f32_exact("metric indexes")?;
        let values = set.rows_f32(0, set.len()).into_owned();
        Self::from_f32(values, set.dim(), metric)
    }

    /// From row-major values; `values.len()` must be a multiple of `dim`. Errors when it is not,
    /// when `dim` is 0, or when `metric` lacks the triangle inequality or is not a vector metric.
    pub fn from_f32(values: Vec<f32>, dim: usize, metric: Metric) -> Result<Self> {
        check_metric(&metric)?;
        let fits = match &metric {
            Metric::Custom(c) => c.vectors.is_some(),
            Metric::Levenshtein => false,
            _ => true,
        };
        if !fits {
            return Err(Error::invalid(format!(
                "metric {metric} does not apply to vectors"
            )));
        }
        if dim == 0 || !values.len().is_multiple_of(dim) {
            return Err(Error::invalid(format!(
                "{} values do not make rows of dimension {dim}",
                values.len()
            )));
        }
        let scale = match &metric {
            Metric::Custom(_) => KeyScale::ONE,
            m => KeyScale::of_f32(m, dim, &values),
        };
        Ok(VectorSpace {
            values,
            dim,
            metric,
            scale,
        })
    }

    /// Number of coordinates of each vector (at least 1).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The metric the space measures with.
    pub fn metric(&self) -> &Metric {
        &self.metric
    }

    /// Every item's coordinates, row after row (`len() * dim()` values).
    pub fn values(&self) -> &[f32] {
        &self.values
    }
}

impl Space for VectorSpace {
    type Item = [f32];
    type Prepared = ();

    fn prepare(&self, _query: &[f32]) {}

    fn len(&self) -> usize {
        self.values.len() / self.dim
    }

    fn item(&self, i: usize) -> &[f32] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }

    fn key(&self, a: &[f32], b: &[f32]) -> f64 {
        match &self.metric {
            Metric::Custom(c) => c.vectors.as_ref().expect("checked").distance(a, b),
            m => self.scale.vector_key(m, a, b),
        }
    }

    fn to_distance(&self, key: f64) -> f64 {
        self.scale.distance(&self.metric, key)
    }

    fn box_order(&self) -> Option<f64> {
        box_order(&self.metric)
    }

    fn coords<'a>(&self, item: &'a [f32]) -> Option<&'a [f32]> {
        Some(item)
    }
}

/// Strings under levenshtein or a user string metric.
#[derive(Clone, Debug)]
pub struct StringSpace {
    set: StringSet,
    metric: Metric,
}

impl StringSpace {
    /// Strings of `set` under `metric`. Errors unless `metric` is levenshtein or a user metric
    /// with a string distance.
    pub fn new(set: StringSet, metric: Metric) -> Result<Self> {
        check_metric(&metric)?;
        let fits = match &metric {
            Metric::Custom(c) => c.strings.is_some(),
            m => *m == Metric::Levenshtein,
        };
        if !fits {
            return Err(Error::invalid(format!(
                "metric {metric} does not apply to strings (strings take levenshtein)"
            )));
        }
        Ok(StringSpace { set, metric })
    }

    /// The string set the space holds.
    pub fn strings(&self) -> &StringSet {
        &self.set
    }

    /// The bounded key from `a` to `b`, with `a`'s match masks when `pattern` holds them.
    fn levenshtein_within(
        &self,
        pattern: Option<&Pattern>,
        a: &[char],
        b: &[char],
        max_distance: f64,
    ) -> Option<f64> {
        if matches!(self.metric, Metric::Custom(_)) || max_distance >= usize::MAX as f64 {
            let key = match pattern {
                Some(p) => p.distance(b) as f64,
                None => self.key(a, b),
            };
            return (key <= max_distance).then_some(key);
        }
        // Edit distances are whole numbers: within `max_distance` means within its floor.
        let max = max_distance.floor() as usize;
        if a.len().abs_diff(b.len()) > max {
            return None;
        }
        // Bounds the trimmed comparison decides cost less than the letter counts.
        if pattern.is_none() && max > levenshtein::TRIM_MAX && letter_bound(a, b) > max {
            return None;
        }
        match pattern {
            Some(p) => p.bounded(b, max),
            None => levenshtein::bounded(a, b, max),
        }
        .map(|d| d as f64)
    }

    /// The metric the space measures with: levenshtein or a user string metric.
    pub fn metric(&self) -> &Metric {
        &self.metric
    }
}

impl Space for StringSpace {
    type Item = [char];
    /// The query's match masks under levenshtein; none under a user metric.
    type Prepared = Option<Pattern>;

    fn prepare(&self, query: &[char]) -> Option<Pattern> {
        (self.metric == Metric::Levenshtein).then(|| Pattern::new(query))
    }

    /// The length: the edit distance from the empty string.
    fn anchor(&self, item: &[char]) -> Option<f64> {
        (self.metric == Metric::Levenshtein).then_some(item.len() as f64)
    }

    fn len(&self) -> usize {
        self.set.len()
    }

    fn item(&self, i: usize) -> &[char] {
        self.set.get(i)
    }

    fn key(&self, a: &[char], b: &[char]) -> f64 {
        match &self.metric {
            Metric::Custom(c) => c.strings.as_ref().expect("checked").distance(a, b),
            _ => exact::string_key(a, b),
        }
    }

    fn key_within(&self, a: &[char], b: &[char], max_distance: f64) -> Option<f64> {
        self.levenshtein_within(None, a, b, max_distance)
    }

    fn key_within_prepared(
        &self,
        prepared: &Option<Pattern>,
        a: &[char],
        b: &[char],
        max_distance: f64,
    ) -> Option<f64> {
        self.levenshtein_within(prepared.as_ref(), a, b, max_distance)
    }

    fn to_distance(&self, key: f64) -> f64 {
        key
    }

    fn slack(&self, scale: f64) -> f64 {
        match self.metric {
            // Whole numbers, computed exactly: the triangle inequality holds to the bit.
            Metric::Levenshtein => 0.0,
            _ => FLOAT_SLACK * scale.abs(),
        }
    }
}

/// A lower bound on the edit distance from letter counts: an insertion or deletion changes the
/// counts' L1 difference by at most 1 and a substitution by at most 2, so the distance is at least
/// half that difference. Letters share 64 buckets (which can only lower the difference, so the
/// bound stays valid); a few nanoseconds decide most pairs that a small cutoff rules out, before
/// the quadratic dynamic programme runs.
fn letter_bound(a: &[char], b: &[char]) -> usize {
    let mut counts = [0i32; 64];
    for &c in a {
        counts[c as usize & 63] += 1;
    }
    for &c in b {
        counts[c as usize & 63] -= 1;
    }
    let l1: u32 = counts.iter().map(|c| c.unsigned_abs()).sum();
    l1.div_ceil(2) as usize
}

/// Any items under a user distance (which must be a metric). Keys are the distances.
pub struct UserSpace<T, D> {
    items: Vec<T>,
    distance: D,
    _t: PhantomData<fn() -> T>,
}

impl<T, D: Distance<T>> UserSpace<T, D> {
    /// `items` under `distance`, taken on trust to be a metric (nothing is checked).
    pub fn new(items: Vec<T>, distance: D) -> Self {
        UserSpace {
            items,
            distance,
            _t: PhantomData,
        }
    }
}

impl<T: Send + Sync, D: Distance<T>> Space for UserSpace<T, D> {
    type Item = T;
    type Prepared = ();

    fn prepare(&self, _query: &T) {}

    fn len(&self) -> usize {
        self.items.len()
    }

    fn item(&self, i: usize) -> &T {
        &self.items[i]
    }

    fn key(&self, a: &T, b: &T) -> f64 {
        self.distance.distance(a, b)
    }

    fn to_distance(&self, key: f64) -> f64 {
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_metrics_without_triangle_inequality() {
        for m in [Metric::Cosine, Metric::SqEuclidean, Metric::InnerProduct] {
            let err = VectorSpace::from_f32(vec![0.0; 4], 2, m).unwrap_err();
            assert!(err.to_string().contains("triangle inequality"), "{err}");
        }
        assert!(VectorSpace::from_f32(vec![0.0; 4], 2, Metric::Minkowski(3.0)).is_ok());
        assert!(VectorSpace::from_f32(vec![0.0; 4], 2, Metric::Levenshtein).is_err());
        assert!(StringSpace::new(StringSet::new(), Metric::Euclidean).is_err());
    }

    #[test]
    fn bounded_levenshtein_agrees_with_full() {
        let s = StringSpace::new(
            StringSet::from_strings(["kitten", "sitting", "kit"]).unwrap(),
            Metric::Levenshtein,
        )
        .unwrap();
        let (a, b, c) = (s.item(0), s.item(1), s.item(2));
        assert_eq!(s.key(a, b), 3.0);
        assert_eq!(s.key_within(a, b, 3.5), Some(3.0));
        assert_eq!(s.key_within(a, b, 2.9), None);
        assert_eq!(s.key_within(a, c, 2.0), None);
        assert_eq!(s.key_within(a, c, 3.0), Some(3.0));
    }

    #[test]
    fn letter_bound_never_exceeds_the_edit_distance() {
        let words = [
            "", "a", "ab", "ba", "abc", "cab", "xyz", "aaaa", "kitten", "sitting", "été", "ete",
        ];
        for x in words {
            for y in words {
                let (a, b): (Vec<char>, Vec<char>) = (x.chars().collect(), y.chars().collect());
                let d = levenshtein::distance(&a, &b);
                assert!(letter_bound(&a, &b) <= d, "{x} {y}");
            }
        }
        let (a, b): (Vec<char>, Vec<char>) = ("abcd".chars().collect(), "wxyz".chars().collect());
        assert_eq!(letter_bound(&a, &b), 4);
    }
}
