//! Sets whose keys leave the range the tiles compute in, answered on copies brought into it by
//! exact powers of two (docs/design/exact-scaling.md, "The CUDA engine: scaled copies").
//!
//! A request goes to the unscaled road first; only where that refuses the values for their
//! magnitudes ([`tiles_take`]) is a copy made, so ordinary data is read as before. Two rules,
//! the CPU engine's own:
//!
//! - The metrics whose keys scale exactly (squared euclidean, euclidean, inner product,
//!   cityblock, chebyshev): every value times 2^-exp, `exp` the core's [`KeyScale`] of the
//!   problem (base and queries together). The exact keys of the copies are then the CPU
//!   engine's scaled keys bit for bit (`exact::scaled_vector_key` is `vector_key` of the same
//!   `ldexp`), so the ids agree, and every reported distance is formed from its key at that
//!   scale ([`KeyScale::distance`]), as the CPU engine forms it.
//! - Cosine and correlation: each row whose largest magnitude lies outside f32's normal range
//!   (whose f32 rounding overflows, or below 2^-126) is brought to [1, 2) by its own power of
//!   two. Their keys do not depend on a row's scale: the exact key scales each row the same way
//!   where its sums would leave f64's safe range, and elsewhere a power of two changes no
//!   rounding while the products stay normal.
//!
//! The copy keeps its storage type where every scaled value is a normal number of that type
//! (an explicit half precision needs it), and is f64 otherwise. Minkowski power sums go
//! through `powf`, whose rounding a scale may change: they stay refused, for the CPU engine.

use rayon::prelude::*;
use voisin::data::{ElemType, VectorData};
use voisin::engine::{GraphRequest, KnnRequest, KnnResult, RangeRequest, RangeResult};
use voisin::metric::exact;
use voisin::metric::scale::{self, ldexp, row_exponent, scales_exactly, Extent, KeyScale};
use voisin::{Dataset, Metric, Result, VectorSet};

use crate::numerics::plan::{tiles_take, vector_metric};

/// How the values of one problem are brought into the tiles' range.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scale {
    /// Every value times 2^-exp.
    Problem(KeyScale),
    /// Each row outside f32's normal range to [1, 2).
    Rows,
}

impl Scale {
    /// The scale of `metric`'s problem over `base` and `queries`, whose values together span
    /// `raw` ([`raw_extent`]): `None` where scaling does not apply (the metric's keys do not
    /// scale exactly, or they need no scale). [`KeyScale::of`], from extents already taken.
    fn of(metric: &Metric, base: &VectorSet, queries: &VectorSet, raw: Extent) -> Option<Scale> {
        match metric {
            Metric::Cosine | Metric::Correlation => Some(Scale::Rows),
            m if scales_exactly(m) && KeyScale::needs_extent(m, base, queries) => {
                match KeyScale::of_extent(m, base, queries, raw) {
                    KeyScale::ONE => None,
                    s => Some(Scale::Problem(s)),
                }
            }
            _ => None,
        }
    }

    /// The power of two row `row` is multiplied by (its exponent, negated).
    fn row_exp(self, row: &[f64]) -> i32 {
        match self {
            Scale::Problem(s) => s.exp(),
            Scale::Rows => {
                let m = row.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
                match (m as f32).is_infinite() || (m > 0.0 && m < f32::MIN_POSITIVE as f64) {
                    true => row_exponent(row),
                    false => 0,
                }
            }
        }
    }

    /// The extent of `set`'s values once scaled, from their extent `raw` (a pass per row for
    /// [`Scale::Rows`], which `raw` does not hold).
    fn extent(self, set: &VectorSet, raw: Extent) -> Extent {
        let scaled = |e: Extent, exp: i32| Extent {
            max: ldexp(e.max, -exp),
            min: ldexp(e.min, -exp),
        };
        match self {
            Scale::Problem(s) => scaled(raw, s.exp()),
            Scale::Rows => (0..set.len())
                .into_par_iter()
                .map(|i| {
                    let row = set.row_f64(i);
                    let e = row.iter().fold(Extent::EMPTY, |e, &x| {
                        e.union(Extent {
                            max: x.abs(),
                            min: if x == 0.0 { f64::INFINITY } else { x.abs() },
                        })
                    });
                    scaled(e, self.row_exp(&row))
                })
                .reduce(|| Extent::EMPTY, Extent::union),
        }
    }
}

/// The storage type a scaled copy of values stored as `elem` spanning `scaled` (once scaled)
/// takes: its own where every scaled value is a normal number of it, else f64.
fn copy_type(elem: ElemType, scaled: Extent) -> ElemType {
    let (max, min) = match elem {
        ElemType::F32 => (f32::MAX as f64, f32::MIN_POSITIVE as f64),
        ElemType::Bf16 => (half::bf16::MAX.to_f64(), half::bf16::MIN_POSITIVE.to_f64()),
        ElemType::F16 => (half::f16::MAX.to_f64(), half::f16::MIN_POSITIVE.to_f64()),
        ElemType::F64 | ElemType::U8 => return ElemType::F64,
    };
    let inside = scaled.max <= max && (scaled.min >= min || scaled.min == f64::INFINITY);
    if inside {
        elem
    } else {
        ElemType::F64
    }
}

/// The extent of `set`'s values where `metric`'s scale is one per problem (one pass), else
/// [`Extent::EMPTY`] (scale-free metrics scale rows alone).
fn raw_extent(metric: &Metric, set: &VectorSet) -> Extent {
    match scales_exactly(metric) {
        true => Extent::of(set),
        false => Extent::EMPTY,
    }
}

/// One set's copy as it will be made, from its values' extent `raw`: its storage type, and
/// whether the tiles take it.
fn plan_copy(
    (set, raw): (&VectorSet, Extent),
    metric: &Metric,
    scale: Scale,
    keep_type: bool,
) -> Option<ElemType> {
    let e = scale.extent(set, raw);
    let elem = copy_type(set.elem_type(), e);
    let takes = KeyScale::fits_f32_at(metric, set.dim(), elem, e)
        && (elem != ElemType::F64 || (e.max as f32).is_finite());
    (takes && (!keep_type || elem == set.elem_type())).then_some(elem)
}

/// Whether the engine answers `set` under `metric` through a scaled copy (its `supports`, for
/// a set the unscaled road refuses): `keep_type` where its precision needs the stored type.
pub(crate) fn takes(data: &Dataset, metric: &Metric, keep_type: bool) -> bool {
    let Ok(set) = vector_metric(data, metric) else {
        return false;
    };
    let raw = raw_extent(metric, set);
    Scale::of(metric, set, set, raw)
        .is_some_and(|s| plan_copy((set, raw), metric, s, keep_type).is_some())
}

/// The copy of `set` at `scale`, stored as `elem`.
fn copy(set: &VectorSet, scale: Scale, elem: ElemType) -> Result<VectorSet> {
    let d = set.dim().max(1);
    let mut v = vec![0f64; set.len() * set.dim()];
    v.par_chunks_mut(d).enumerate().for_each(|(i, out)| {
        let row = set.row_f64(i);
        let exp = scale.row_exp(&row);
        out.iter_mut()
            .zip(row.iter())
            .for_each(|(o, &x)| *o = ldexp(x, -exp));
    });
    let data = VectorData::rounded(v, elem);
    VectorSet::new(set.len(), set.dim(), data)
}

/// A problem on scaled copies: the base's and (when they are another set) the queries'.
struct Scaled {
    scale: Scale,
    base: Dataset,
    queries: Option<Dataset>,
}

impl Scaled {
    /// The copies of a problem whose sets the unscaled road refused (`None` where a set is
    /// taken as it is, scaling does not apply, or the copies would be refused too).
    fn of(
        metric: &Metric,
        base: &Dataset,
        queries: &Dataset,
        keep_type: bool,
    ) -> Result<Option<Scaled>> {
        let (Ok(b), Ok(q)) = (vector_metric(base, metric), vector_metric(queries, metric)) else {
            return Ok(None);
        };
        let same = std::ptr::eq(base, queries);
        if tiles_take(b, metric).is_ok() && (same || tiles_take(q, metric).is_ok()) {
            return Ok(None);
        }
        let rb = raw_extent(metric, b);
        let rq = if same { rb } else { raw_extent(metric, q) };
        let Some(scale) = Scale::of(metric, b, q, rb.union(rq)) else {
            return Ok(None);
        };
        let plan = |side| plan_copy(side, metric, scale, keep_type);
        let Some(be) = plan((b, rb)) else {
            return Ok(None);
        };
        let queries = match same {
            true => None,
            false => match plan((q, rq)) {
                Some(qe) => Some(Dataset::Vectors(copy(q, scale, qe)?)),
                None => return Ok(None),
            },
        };
        Ok(Some(Scaled {
            scale,
            base: Dataset::Vectors(copy(b, scale, be)?),
            queries,
        }))
    }

    fn queries(&self) -> &Dataset {
        self.queries.as_ref().unwrap_or(&self.base)
    }

    fn sets(&self) -> (&VectorSet, &VectorSet) {
        fn set(d: &Dataset) -> &VectorSet {
            match d {
                Dataset::Vectors(v) => v,
                Dataset::Strings(_) => unreachable!("copies are vectors"),
            }
        }
        (set(&self.base), set(self.queries()))
    }

    /// The metric's value between query row `q` and base row `i` at the problem's scale,
    /// in f64, from the copies' exact key (the CPU engine's value).
    fn distance(&self, metric: &Metric, i: u32, q: usize) -> f64 {
        let (b, qs) = self.sets();
        let key = exact::set_key(metric, b, i as usize, qs, q);
        match self.scale {
            Scale::Problem(s) => s.distance(metric, key),
            Scale::Rows => metric.key_to_distance(key),
        }
    }

    /// The k-NN rows of the copies with the distances of the original values.
    fn knn(&self, metric: &Metric, mut res: KnnResult) -> KnnResult {
        if self.scale == Scale::Rows {
            return res;
        }
        let k = res.k.max(1);
        res.distances
            .par_chunks_mut(k)
            .zip(res.indices.par_chunks(k))
            .enumerate()
            .for_each(|(q, (ds, ids))| {
                for (d, &i) in ds.iter_mut().zip(ids) {
                    *d = scale::f32_value(self.distance(metric, i, q));
                }
            });
        res
    }

    /// The key threshold of `radius` in the copies' units, widened as the CPU engine widens it
    /// (cpu/search.rs): a pair is within the radius when its key is at most this and its
    /// distance at the problem's scale is within the radius.
    fn key_limit(&self, metric: &Metric, radius: f64) -> f64 {
        let Scale::Problem(s) = self.scale else {
            return metric.radius_to_key(radius);
        };
        let key = s.radius_key(metric, radius);
        key + key.abs() * 1e-12 + f64::MIN_POSITIVE
    }

    /// The radius that asks the copies for every pair whose key is within
    /// [`Scaled::key_limit`], and a few more (room for the conversion back to a key).
    fn radius(&self, metric: &Metric, radius: f64) -> f64 {
        if self.scale == Scale::Rows {
            return radius;
        }
        let r = metric.key_to_distance(self.key_limit(metric, radius));
        let slack = r.abs() * 2f64.powi(-30) + f64::MIN_POSITIVE;
        let r = match metric {
            Metric::InnerProduct => r - slack,
            _ => r + slack,
        };
        r.clamp(-f64::MAX, f64::MAX)
    }

    /// The range rows of the copies (asked at [`Scaled::radius`]) cut to `radius` on the
    /// originals' distances, as the CPU engine decides them.
    fn range(&self, metric: &Metric, radius: f64, res: RangeResult) -> RangeResult {
        let Scale::Problem(s) = self.scale else {
            return res;
        };
        let limit = self.key_limit(metric, radius);
        let (b, qs) = self.sets();
        let rows: Vec<Vec<(f64, u32)>> = (0..res.offsets.len().saturating_sub(1))
            .into_par_iter()
            .map(|q| {
                res.indices[res.offsets[q]..res.offsets[q + 1]]
                    .iter()
                    .map(|&i| (exact::set_key(metric, b, i as usize, qs, q), i))
                    .filter(|&(key, _)| {
                        key <= limit && metric.within(s.distance(metric, key), radius)
                    })
                    .collect()
            })
            .collect();
        let mut out = RangeResult::from_rows_by(rows, |key| s.distance(metric, key));
        out.stats = res.stats;
        out
    }
}

/// `first`, the unscaled road's answer; where that refused the values for their magnitudes,
/// `again` on the copies of `base` and `queries` (the refusal itself where none apply).
fn or_scaled<T>(
    first: Result<T>,
    (metric, base, queries): (&Metric, &Dataset, &Dataset),
    keep_type: bool,
    again: impl FnOnce(&Scaled) -> Result<T>,
) -> Result<T> {
    let refused = match first {
        Err(e) if e.is_user_error() => e,
        other => return other,
    };
    match Scaled::of(metric, base, queries, keep_type)? {
        Some(s) => again(&s),
        None => Err(refused),
    }
}

/// `plain` on `req`, or where it refuses the values for their magnitudes, on scaled copies,
/// with the originals' distances.
pub(crate) fn knn(
    req: &KnnRequest<'_>,
    keep_type: bool,
    plain: impl Fn(&KnnRequest<'_>) -> Result<KnnResult>,
) -> Result<KnnResult> {
    let m = req.metric();
    or_scaled(plain(req), (m, req.base(), req.queries()), keep_type, |s| {
        let res = plain(&KnnRequest::new(&s.base, s.queries(), req.k(), m)?)?;
        Ok(s.knn(m, res))
    })
}

/// [`knn`] for range searches.
pub(crate) fn range(
    req: &RangeRequest<'_>,
    keep_type: bool,
    plain: impl Fn(&RangeRequest<'_>) -> Result<RangeResult>,
) -> Result<RangeResult> {
    let m = req.metric();
    or_scaled(plain(req), (m, req.base(), req.queries()), keep_type, |s| {
        let radius = s.radius(m, req.radius());
        let res = plain(&RangeRequest::new(&s.base, s.queries(), radius, m)?)?;
        Ok(s.range(m, req.radius(), res))
    })
}

/// [`knn`] for graphs (not checkpointed ones: `passes::build`).
pub(crate) fn graph(
    req: &GraphRequest<'_>,
    keep_type: bool,
    plain: impl Fn(&GraphRequest<'_>) -> Result<KnnResult>,
) -> Result<KnnResult> {
    let (m, data) = (req.metric(), req.data());
    or_scaled(plain(req), (m, data, data), keep_type, |s| {
        let res = plain(&GraphRequest::new(&s.base, req.k(), m)?)?;
        Ok(s.knn(m, res))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::vectors;
    use rand::prelude::*;
    use voisin::cpu::CpuEngine;
    use voisin::engine::{Engine, Op};

    /// `n` rows of `d` values uniform in (−1, 1) times 2^e(row), every fifth row a copy of the
    /// one before and every seventh zero, stored as `elem`.
    fn set(seed: u64, elem: ElemType, n: usize, d: usize, e: impl Fn(usize) -> i32) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut v: Vec<f64> = (0..n * d)
            .map(|i| rng.gen_range(-1.0f64..1.0) * 2f64.powi(e(i / d)))
            .collect();
        for r in 1..n {
            match (r % 7, r % 5) {
                (3, _) => v[r * d..(r + 1) * d].fill(0.0),
                (_, 2) => v.copy_within((r - 1) * d..r * d, r * d),
                _ => {}
            }
        }
        let data = VectorData::rounded(v, elem);
        Dataset::Vectors(VectorSet::new(n, d, data).unwrap())
    }

    /// The CPU engine behind the tiles' refusal: the road a request takes unscaled, with
    /// the CPU's exact answers where the tiles would take the values.
    fn tiles_then_cpu<'a>(b: &'a Dataset, q: &'a Dataset, m: &Metric) -> Result<()> {
        vectors(b, m)?;
        vectors(q, m).map(|_| ())
    }

    /// Every operation through the wrapper over the tiles' road equals the CPU engine on the
    /// original values, byte for byte; `Err` for a request the wrapper refuses.
    fn same_as_cpu(b: &Dataset, q: &Dataset, m: &Metric) -> std::result::Result<(), String> {
        let cpu = CpuEngine::default();
        let k = 4;
        let want = cpu.knn(b, q, k, m).unwrap();
        let req = KnnRequest::new(b, q, k, m).unwrap();
        let got = knn(&req, false, |r| {
            tiles_then_cpu(r.base(), r.queries(), m)?;
            cpu.knn_request(r)
        })
        .map_err(|e| e.to_string())?;
        assert_eq!(got.indices, want.indices, "knn ids");
        assert_eq!(got.distances, want.distances, "knn distances");
        let req = GraphRequest::new(b, k, m).unwrap();
        let got = graph(&req, false, |r| {
            tiles_then_cpu(r.data(), r.data(), m)?;
            cpu.graph_request(r)
        })
        .unwrap();
        let want = cpu.graph(b, k, m).unwrap();
        assert_eq!(got.indices, want.indices, "graph ids");
        assert_eq!(got.distances, want.distances, "graph distances");
        for j in [1, 3] {
            let radius = f64::from(cpu.knn(b, q, k, m).unwrap().row(0).1[j]);
            let req = RangeRequest::new(b, q, radius, m).unwrap();
            let got = range(&req, false, |r| {
                tiles_then_cpu(r.base(), r.queries(), m)?;
                cpu.range_request(r)
            })
            .unwrap();
            let want = cpu.range(b, q, radius, m).unwrap();
            assert_eq!(got.offsets, want.offsets, "range offsets at {radius:e}");
            assert_eq!(got.indices, want.indices, "range ids at {radius:e}");
            assert_eq!(
                got.distances, want.distances,
                "range distances at {radius:e}"
            );
        }
        Ok(())
    }

    fn metrics() -> Vec<Metric> {
        vec![
            Metric::Euclidean,
            Metric::SqEuclidean,
            Metric::InnerProduct,
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Cosine,
            Metric::Correlation,
        ]
    }

    #[test]
    fn refused_magnitudes_answer_as_the_cpu_engine_on_scaled_copies() {
        // Each case: a stored type and the exponents its rows take in turn.
        let cases: [(ElemType, &[i32]); 9] = [
            (ElemType::F32, &[100]),
            (ElemType::F32, &[127]),
            (ElemType::F32, &[-140, -20, 0, 70, 126]),
            (ElemType::Bf16, &[110]),
            (ElemType::F64, &[600]),
            (ElemType::F64, &[1020]),
            (ElemType::F64, &[-600]),
            (ElemType::F64, &[-1060]),
            (ElemType::F64, &[-300, 0, 200, 500]),
        ];
        let (mut answered, mut cases_run, mut refused) = (0, 0, Vec::new());
        for (c, &(elem, exps)) in cases.iter().enumerate() {
            let e = |r: usize| exps[r % exps.len()];
            for d in [1usize, 3, 17] {
                let b = set(c as u64 * 31 + d as u64, elem, 37, d, e);
                let q = set(c as u64 * 31 + d as u64 + 7, elem, 6, d, |r| e(r + 1));
                for m in metrics() {
                    cases_run += 1;
                    let taken = takes(&b, &m, false) && takes(&q, &m, false);
                    let plain = vectors(&b, &m).is_ok() && vectors(&q, &m).is_ok();
                    eprintln!("case {c} {elem:?} d={d} {m}");
                    match same_as_cpu(&b, &q, &m) {
                        Ok(()) => answered += usize::from(!plain),
                        // A refusal is the tiles' own line, and only where `takes` refuses.
                        Err(e) => {
                            assert!(!taken, "{elem:?} d={d} case {c} {m}: refused: {e}");
                            assert!(e.contains("--device cpu"), "{e}");
                            refused.push(format!("{elem:?} d={d} case {c} {m}"));
                        }
                    }
                }
            }
        }
        // Most of these are refused unscaled; the copies take them.
        eprintln!(
            "{answered} of {cases_run} cases answered on scaled copies; refused: {refused:?}"
        );
        assert!(
            answered * 2 > cases_run,
            "{answered} of {cases_run} answered scaled"
        );
    }

    #[test]
    fn what_a_copy_takes() {
        let far = set(1, ElemType::F32, 20, 3, |_| 100);
        assert!(vectors(&far, &Metric::Euclidean).is_err());
        assert!(
            takes(&far, &Metric::Euclidean, true),
            "f32 at 2^100 keeps f32"
        );
        // The engine answers it, but not in a checkpointed graph (the folder names the input).
        let ops = [Op::Knn, Op::Graph, Op::GraphCheckpointed];
        let answered = ops.map(|op| super::super::supports(&far, &Metric::Euclidean, op));
        assert_eq!(answered, [true, true, false]);
        // Minkowski's power sums go through powf: no scale for them.
        assert!(!takes(&far, &Metric::Minkowski(3.0), false));
        // bf16 rows from 2^-130 to 2^126: the copy is f64, which bf16 tiles cannot take.
        let wide = set(2, ElemType::Bf16, 20, 3, |r| [-130, 126][r % 2]);
        assert!(takes(&wide, &Metric::Euclidean, false));
        assert!(!takes(&wide, &Metric::Euclidean, true));
        // f64 cosine rows beyond f32: each row to [1, 2).
        let huge = set(3, ElemType::F64, 20, 3, |_| 700);
        assert!(vectors(&huge, &Metric::Cosine).is_err());
        assert!(takes(&huge, &Metric::Cosine, false));
        // Strings and user metrics are not vectors the tiles take.
        let words = voisin::data::StringSet::from_strings(["a", "b"]).unwrap();
        assert!(!takes(&Dataset::Strings(words), &Metric::Cosine, false));
    }

    #[test]
    fn a_copys_radius_asks_for_every_pair_and_no_fewer() {
        let b = set(4, ElemType::F32, 10, 3, |_| 100);
        let s = Scaled::of(&Metric::Euclidean, &b, &b, false)
            .unwrap()
            .unwrap();
        let Scale::Problem(k) = s.scale else {
            panic!("euclidean scales the problem")
        };
        assert!(k.exp() > 0);
        // Every key within the limit is within the radius asked of the copies.
        let m = Metric::Euclidean;
        let r = s.radius(&m, 1e30);
        assert!(r >= ldexp(1e30, -k.exp()));
        assert!(m.radius_to_key(r) >= s.key_limit(&m, 1e30));
        let ip = Metric::InnerProduct;
        let r = s.radius(&ip, -1e30);
        assert!(r <= ldexp(-1e30, -2 * k.exp()));
        assert!(ip.radius_to_key(r) >= s.key_limit(&ip, -1e30));
    }
}
