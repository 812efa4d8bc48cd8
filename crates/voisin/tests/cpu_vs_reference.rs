//! The CPU engine against the plain f64 reference, for every metric and query type, on random
//! and adversarial data. Both rank by the same exact keys with the same tie-break, so results
//! must be identical, not merely close.

use half::f16;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::data::{Buffer, ElemType, VectorData};
use voisin::metric::CustomMetric;
use voisin::reference::{compare_knn, compare_range};
use voisin::{reference, Dataset, Engine, Metric, StringSet, VectorSet};

fn vector_metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect()
}

/// A data generator: (rng, rows, dimension) -> row-major values.
type Gen = fn(&mut StdRng, usize, usize) -> Vec<f32>;

fn normal_f32(rng: &mut StdRng) -> f32 {
    StandardNormal.sample(rng)
}

fn normal(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d).map(|_| normal_f32(rng)).collect()
}

/// Small integers: many exact ties and duplicate rows.
fn ties(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d).map(|_| rng.gen_range(0..3) as f32).collect()
}

/// Far from the origin with a tiny spread: the matrix-product form cancels badly here.
fn offset(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d)
        .map(|_| 1000.0 + 0.01 * normal_f32(rng))
        .collect()
}

fn with_zero_and_duplicate_rows(mut v: Vec<f32>, d: usize) -> Vec<f32> {
    let n = v.len() / d;
    if n >= 4 {
        v[..d].iter_mut().for_each(|x| *x = 0.0);
        v[2 * d..3 * d].iter_mut().for_each(|x| *x = 0.0);
        let row: Vec<f32> = v[d..2 * d].to_vec();
        v[(n - 1) * d..].copy_from_slice(&row);
    }
    v
}

fn set(n: usize, d: usize, v: Vec<f32>) -> Dataset {
    VectorSet::from_f32(n, d, v).unwrap().into()
}

fn engine() -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(2),
        ..Default::default()
    })
    .unwrap()
}

fn check_all(base: &Dataset, queries: &Dataset, metric: &Metric, ks: &[usize], what: &str) {
    check_knn_graph(base, queries, metric, ks, what);
    check_range(base, queries, metric, what);
}

fn check_knn_graph(base: &Dataset, queries: &Dataset, metric: &Metric, ks: &[usize], what: &str) {
    let e = engine();
    for &k in ks {
        let want = reference::knn(base, queries, k, metric).unwrap();
        let got = e.knn(base, queries, k, metric).unwrap();
        compare_knn(&want, &got, 0.0).unwrap_or_else(|m| panic!("knn {what} {metric} k={k}: {m}"));
        let want = reference::graph(base, k, metric).unwrap();
        let got = e.graph(base, k, metric).unwrap();
        compare_knn(&want, &got, 0.0)
            .unwrap_or_else(|m| panic!("graph {what} {metric} k={k}: {m}"));
    }
}

fn check_range(base: &Dataset, queries: &Dataset, metric: &Metric, what: &str) {
    let e = engine();
    // A radius that returns a few percent of the base: the median of some 10th-nearest distances.
    let probe = reference::knn(base, queries, (base.len() / 20).max(1), metric).unwrap();
    let mut d: Vec<f32> = (0..probe.n_queries)
        .map(|q| *probe.row(q).1.last().unwrap())
        .collect();
    d.sort_by(f32::total_cmp);
    let radius = d[d.len() / 2] as f64;
    let want = reference::range(base, queries, radius, metric).unwrap();
    let got = e.range(base, queries, radius, metric).unwrap();
    compare_range(&want, &got, 0.0)
        .unwrap_or_else(|m| panic!("range {what} {metric} r={radius}: {m}"));
}

#[test]
fn every_vector_metric_on_random_and_adversarial_data() {
    let mut rng = StdRng::seed_from_u64(7);
    // n is no multiple of any tile size; 1300 spans several base tiles and graph blocks.
    for (n, m, d) in [(1300, 70, 3), (600, 40, 127), (300, 20, 1025), (200, 13, 1)] {
        let gens: [(&str, Gen); 3] = [("normal", normal), ("ties", ties), ("offset", offset)];
        for (what, gen) in gens {
            let base = set(n, d, with_zero_and_duplicate_rows(gen(&mut rng, n, d), d));
            let queries = set(m, d, with_zero_and_duplicate_rows(gen(&mut rng, m, d), d));
            for metric in vector_metrics() {
                check_all(
                    &base,
                    &queries,
                    &metric,
                    &[1, 10],
                    &format!("{what} n={n} d={d}"),
                );
            }
        }
    }
}

#[test]
fn k_at_and_beyond_the_number_of_items() {
    let mut rng = StdRng::seed_from_u64(11);
    let (n, d) = (37, 5);
    let base = set(n, d, normal(&mut rng, n, d));
    let queries = set(4, d, normal(&mut rng, 4, d));
    let e = engine();
    for metric in vector_metrics() {
        for k in [n - 1, n, n + 5] {
            let got = e.knn(&base, &queries, k, &metric).unwrap();
            assert_eq!(got.k, k.min(n));
            compare_knn(
                &reference::knn(&base, &queries, k, &metric).unwrap(),
                &got,
                0.0,
            )
            .unwrap();
            let got = e.graph(&base, k, &metric).unwrap();
            assert_eq!(got.k, k.min(n - 1));
            compare_knn(&reference::graph(&base, k, &metric).unwrap(), &got, 0.0).unwrap();
        }
    }
}

#[test]
fn a_single_item_has_no_graph_neighbours() {
    let base = set(1, 3, vec![1.0, 2.0, 3.0]);
    let g = engine().graph(&base, 5, &Metric::Euclidean).unwrap();
    assert_eq!((g.n_queries, g.k), (1, 0));
    assert!(g.indices.is_empty());
}

#[test]
fn storage_types_compute_in_f32() {
    let mut rng = StdRng::seed_from_u64(3);
    let (n, d) = (500, 17);
    let raw = normal(&mut rng, n, d);
    let as_f16: Vec<f16> = raw.iter().map(|&x| f16::from_f32(x)).collect();
    let back: Vec<f32> = as_f16.iter().map(|x| x.to_f32()).collect();
    let f16_set: Dataset = VectorSet::new(n, d, VectorData::F16(Buffer::Owned(as_f16)))
        .unwrap()
        .into();
    let f32_set = set(n, d, back);
    let bytes: Vec<u8> = (0..n * d).map(|_| rng.gen()).collect();
    let u8_set: Dataset = VectorSet::new(n, d, VectorData::U8(Buffer::Owned(bytes.clone())))
        .unwrap()
        .into();
    let u8_as_f32 = set(n, d, bytes.iter().map(|&b| b as f32).collect());
    let e = engine();
    for metric in vector_metrics() {
        assert_eq!(
            e.graph(&f16_set, 7, &metric).unwrap().indices,
            reference::graph(&f32_set, 7, &metric).unwrap().indices
        );
        assert_eq!(
            e.graph(&u8_set, 7, &metric).unwrap().indices,
            reference::graph(&u8_as_f32, 7, &metric).unwrap().indices
        );
    }
}

fn words(rng: &mut StdRng, n: usize) -> StringSet {
    let alphabet: Vec<char> = "abcdeé漢".chars().collect();
    StringSet::from_strings((0..n).map(|_| {
        let len = rng.gen_range(0..9);
        (0..len)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
            .collect::<String>()
    }))
    .unwrap()
}

#[test]
fn levenshtein_on_strings() {
    let mut rng = StdRng::seed_from_u64(5);
    let base: Dataset = words(&mut rng, 700).into();
    let queries: Dataset = words(&mut rng, 60).into();
    check_all(&base, &queries, &Metric::Levenshtein, &[1, 10, 50], "words");
}

#[test]
fn user_metrics_on_vectors_and_strings() {
    let mut rng = StdRng::seed_from_u64(9);
    let (n, d) = (400, 6);
    let base = set(n, d, ties(&mut rng, n, d));
    let queries = set(30, d, normal(&mut rng, 30, d));
    // Canberra distance: not built in.
    let canberra = Metric::Custom(CustomMetric::for_vectors("canberra", canberra::<f32>));
    check_all(&base, &queries, &canberra, &[1, 10], "canberra");
    let sbase: Dataset = words(&mut rng, 300).into();
    let squeries: Dataset = words(&mut rng, 20).into();
    let len_diff = Metric::Custom(CustomMetric::for_strings(
        "length",
        |a: &[char], b: &[char]| a.len().abs_diff(b.len()) as f64,
    ));
    check_all(&sbase, &squeries, &len_diff, &[1, 10], "length");
}

/// Canberra distance, not built in: a user metric over f32 or f64 rows.
fn canberra<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let (x, y): (f64, f64) = (x.into(), y.into());
            let den = x.abs() + y.abs();
            if den == 0.0 {
                0.0
            } else {
                (x - y).abs() / den
            }
        })
        .sum::<f64>()
}

/// An f64 data generator: (rng, rows, dimension) -> an f64 vector set.
type Gen64 = fn(&mut StdRng, usize, usize) -> VectorSet;

fn gauss(rng: &mut StdRng) -> f64 {
    StandardNormal.sample(rng)
}

fn f64_set(n: usize, d: usize, v: Vec<f64>) -> VectorSet {
    VectorSet::from_f64(n, d, v).unwrap()
}

/// Normal values with full f64 mantissas: almost none is an f32 number.
fn normal_f64(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    f64_set(
        n,
        d,
        (0..n * d).map(|_| StandardNormal.sample(rng)).collect(),
    )
}

/// int64 values near 2^40 (f32 holds none of the odd ones): exact ties and duplicates.
fn ties_i64(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let v: Vec<i64> = (0..n * d)
        .map(|_| (1i64 << 40) + rng.gen_range(0..3))
        .collect();
    let set = VectorSet::from_exact(n, d, &v).unwrap();
    assert_eq!(set.elem_type(), ElemType::F64);
    set
}

/// Far from the origin with a spread below f32's resolution there: f32 sees (nearly) one point.
fn offset_f64(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let centre: Vec<f64> = (0..d).map(|_| 1.0e4 * rng.gen_range(0.5..1.5)).collect();
    let v = (0..n * d)
        .map(|i| centre[i % d] + 1.0e-6 * gauss(rng))
        .collect();
    f64_set(n, d, v)
}

/// Rows that differ only below f32 precision around one random row, with zero and duplicate
/// rows.
fn below_f32(rng: &mut StdRng, n: usize, d: usize) -> VectorSet {
    let centre: Vec<f64> = (0..d).map(|_| StandardNormal.sample(rng)).collect();
    let mut v: Vec<f64> = (0..n * d)
        .map(|i| centre[i % d] * (1.0 + 1.0e-10 * gauss(rng)))
        .collect();
    if n >= 4 {
        v[..d].iter_mut().for_each(|x| *x = 0.0);
        let row: Vec<f64> = v[d..2 * d].to_vec();
        v[(n - 1) * d..].copy_from_slice(&row);
    }
    f64_set(n, d, v)
}

/// The metrics f64 data is checked under: every built-in vector metric and a user metric
/// over f64 rows.
fn f64_metrics() -> Vec<Metric> {
    let mut all = vector_metrics();
    all.push(Metric::Custom(CustomMetric::for_vectors_f64(
        "canberra",
        canberra::<f64>,
    )));
    all
}

#[test]
fn f64_values_are_answered_exactly_on_every_metric() {
    let mut rng = StdRng::seed_from_u64(64);
    for (n, m, d) in [(500, 30, 3), (200, 15, 127), (120, 9, 1025), (200, 13, 1)] {
        let gens: [(&str, Gen64); 4] = [
            ("normal", normal_f64),
            ("ties_i64", ties_i64),
            ("offset", offset_f64),
            ("below_f32", below_f32),
        ];
        for (what, gen) in gens {
            let base: Dataset = gen(&mut rng, n, d).into();
            let queries: Dataset = gen(&mut rng, m, d).into();
            for metric in f64_metrics() {
                check_all(
                    &base,
                    &queries,
                    &metric,
                    &[1, 10],
                    &format!("f64 {what} n={n} d={d}"),
                );
            }
        }
    }
}

#[test]
fn f64_k_up_to_n_minus_one() {
    let mut rng = StdRng::seed_from_u64(65);
    let (n, d) = (41, 3);
    let base: Dataset = below_f32(&mut rng, n, d).into();
    let queries: Dataset = normal_f64(&mut rng, 5, d).into();
    for metric in f64_metrics() {
        check_all(&base, &queries, &metric, &[n - 1, n], "f64 k=n-1");
    }
}

/// Values that differ only below f32 precision: rounded to f32 they tie (and the index
/// breaks the tie); the f64 answer separates them, and the engine must give the f64 answer.
#[test]
fn f64_separates_what_f32_rounding_would_tie() {
    let mut rng = StdRng::seed_from_u64(66);
    let (n, d) = (300, 4);
    let set64 = below_f32(&mut rng, n, d);
    let rounded: Dataset = VectorSet::from_f32(n, d, set64.rows_f32(0, n).into_owned())
        .unwrap()
        .into();
    let base: Dataset = set64.into();
    let e = engine();
    for metric in f64_metrics() {
        let want = reference::graph(&base, 5, &metric).unwrap();
        let got = e.graph(&base, 5, &metric).unwrap();
        compare_knn(&want, &got, 0.0).unwrap_or_else(|m| panic!("{metric}: {m}"));
        let f32_answer = reference::graph(&rounded, 5, &metric).unwrap();
        assert_ne!(
            want.indices, f32_answer.indices,
            "{metric}: the data does not tell f64 from f32"
        );
    }
}

/// f64 values beyond f32's normal range (which f32 would flush to zero or overflow) are
/// measured with exact keys throughout.
#[test]
fn f64_values_beyond_the_f32_range() {
    let mut rng = StdRng::seed_from_u64(67);
    let (n, d) = (150, 5);
    // Distances are reported as f32: at 1e45 they overflow to inf, so no radius is tried there.
    for scale in [1.0e-60, 1.0e45] {
        let v = |rng: &mut StdRng, n: usize| -> Dataset {
            let vals = (0..n * d)
                .map(|i| {
                    let x: f64 = StandardNormal.sample(rng);
                    // Mixed: some values in f32's range, some beyond it.
                    if i % 3 == 0 {
                        x
                    } else {
                        x * scale
                    }
                })
                .collect();
            f64_set(n, d, vals).into()
        };
        let (base, queries) = (v(&mut rng, n), v(&mut rng, 12));
        for metric in f64_metrics() {
            let what = format!("scale {scale}");
            check_knn_graph(&base, &queries, &metric, &[1, 7], &what);
            if scale < 1.0 {
                check_range(&base, &queries, &metric, &what);
            }
        }
    }
}

/// The widened bound still filters: on ordinary f64 data only a small share of the pairs is
/// re-ranked exactly.
#[test]
fn f64_filter_keeps_few_candidates() {
    let mut rng = StdRng::seed_from_u64(68);
    let (n, m, d) = (4000, 50, 16);
    let base: Dataset = normal_f64(&mut rng, n, d).into();
    let queries: Dataset = normal_f64(&mut rng, m, d).into();
    for metric in [Metric::Euclidean, Metric::Cosine, Metric::Cityblock] {
        let got = engine().knn(&base, &queries, 10, &metric).unwrap();
        let share = got.stats.exact_evals as f64 / (n * m) as f64;
        assert!(share < 0.05, "{metric}: {share} of the pairs re-ranked");
        compare_knn(
            &reference::knn(&base, &queries, 10, &metric).unwrap(),
            &got,
            0.0,
        )
        .unwrap();
    }
}

#[test]
fn exact_integer_and_bool_inputs() {
    // Compact storage: f32 when every value is one, f64 otherwise.
    let small = VectorSet::from_exact(2, 2, &[0i64, 1, 99, -16_777_216]).unwrap();
    assert_eq!(small.elem_type(), ElemType::F32);
    assert_eq!(small.as_f32().unwrap(), &[0.0, 1.0, 99.0, -16_777_216.0]);
    let big = VectorSet::from_exact(1, 2, &[16_777_217i64, 1 << 53]).unwrap();
    assert_eq!(big.elem_type(), ElemType::F64);
    assert_eq!(
        big.row_f64(0).as_ref(),
        &[16_777_217.0, 9_007_199_254_740_992.0]
    );
    let flags = VectorSet::from_exact(1, 3, &[true, false, true]).unwrap();
    assert_eq!(flags.as_f32().unwrap(), &[1.0, 0.0, 1.0]);
    let u = VectorSet::from_exact(1, 2, &[u16::MAX, 7u16]).unwrap();
    assert_eq!(u.as_f32().unwrap(), &[65_535.0, 7.0]);
    // Beyond 2^53 an integer may have no f64 form: named by row and column.
    let err = VectorSet::from_exact(2, 2, &[0i64, 0, 1, (1 << 53) + 1])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("value 9007199254740993 at row 1, column 1 has no exact f64 form"),
        "{err}"
    );
    // ... but one that f64 holds is taken.
    assert!(VectorSet::from_exact(1, 1, &[1u64 << 60]).is_ok());
    assert!(VectorSet::from_exact(1, 1, &[i64::MAX]).is_err());
    assert!(VectorSet::from_exact(1, 1, &[u64::MAX]).is_err());
    // f64 data whose values are all f32 numbers is stored as f32.
    let f = VectorSet::from_f64_compact(1, 2, vec![0.5, 3.0]).unwrap();
    assert_eq!(f.elem_type(), ElemType::F32);
    let f = VectorSet::from_f64_compact(1, 2, vec![0.1, 3.0]).unwrap();
    assert_eq!(f.elem_type(), ElemType::F64);
}

#[test]
fn an_f32_user_metric_refuses_f64_values_f32_cannot_hold() {
    let e = engine();
    let f32_canberra = Metric::Custom(CustomMetric::for_vectors("canberra", canberra::<f32>));
    let wide: Dataset = f64_set(2, 1, vec![0.1, 0.2]).into();
    let err = e.graph(&wide, 1, &f32_canberra).unwrap_err();
    assert!(err.is_user_error());
    assert!(err.to_string().contains("for_vectors_f64"), "{err}");
    // f64 storage of f32 numbers is fine: the f32 metric sees the exact values.
    let narrow: Dataset = f64_set(3, 1, vec![0.5, 0.25, 2.0]).into();
    check_all(
        &narrow,
        &narrow,
        &f32_canberra,
        &[1, 2],
        "f64 of f32 numbers",
    );
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let e = engine();
    let v = set(3, 2, vec![0.0; 6]);
    let w = set(3, 3, vec![0.0; 9]);
    let s: Dataset = StringSet::from_strings(["a", "b"]).unwrap().into();
    assert!(e
        .knn(&v, &v, 0, &Metric::Euclidean)
        .unwrap_err()
        .is_user_error());
    assert!(e
        .knn(&v, &w, 1, &Metric::Euclidean)
        .unwrap_err()
        .to_string()
        .contains("dimension"));
    assert!(e.knn(&v, &s, 1, &Metric::Euclidean).is_err());
    assert!(e
        .graph(&v, 1, &Metric::Levenshtein)
        .unwrap_err()
        .to_string()
        .contains("levenshtein"));
    assert!(e
        .graph(&s, 1, &Metric::Cosine)
        .unwrap_err()
        .to_string()
        .contains("strings"));
    assert!(e
        .range(&v, &v, -1.0, &Metric::Euclidean)
        .unwrap_err()
        .to_string()
        .contains("negative"));
    assert!(e.range(&v, &v, f64::NAN, &Metric::Euclidean).is_err());
}

#[test]
fn tiny_memory_budget_still_exact() {
    // 64 KiB forces query chunks in knn and several row passes in the graph.
    let e = CpuEngine::new(CpuOptions {
        threads: Some(2),
        memory_budget: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let mut rng = StdRng::seed_from_u64(13);
    let (n, d) = (1700, 9);
    let base = set(n, d, with_zero_and_duplicate_rows(ties(&mut rng, n, d), d));
    let queries = set(600, d, normal(&mut rng, 600, d));
    for metric in [Metric::Euclidean, Metric::Cityblock] {
        for k in [1, 10, 40] {
            compare_knn(
                &reference::graph(&base, k, &metric).unwrap(),
                &e.graph(&base, k, &metric).unwrap(),
                0.0,
            )
            .unwrap();
            compare_knn(
                &reference::knn(&base, &queries, k, &metric).unwrap(),
                &e.knn(&base, &queries, k, &metric).unwrap(),
                0.0,
            )
            .unwrap();
        }
    }
}
