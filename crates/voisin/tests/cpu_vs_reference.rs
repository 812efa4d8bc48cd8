//! The CPU engine against the plain f64 reference, for every metric and query type, on random
//! and adversarial data. Both rank by the same exact keys with the same tie-break, so results
//! must be identical, not merely close.

use half::f16;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::data::{Buffer, VectorData};
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
    let canberra = Metric::Custom(CustomMetric::for_vectors(
        "canberra",
        |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| {
                    let den = (x as f64).abs() + (y as f64).abs();
                    if den == 0.0 {
                        0.0
                    } else {
                        (x as f64 - y as f64).abs() / den
                    }
                })
                .sum::<f64>()
        },
    ));
    check_all(&base, &queries, &canberra, &[1, 10], "canberra");
    let sbase: Dataset = words(&mut rng, 300).into();
    let squeries: Dataset = words(&mut rng, 20).into();
    let len_diff = Metric::Custom(CustomMetric::for_strings(
        "length",
        |a: &[char], b: &[char]| a.len().abs_diff(b.len()) as f64,
    ));
    check_all(&sbase, &squeries, &len_diff, &[1, 10], "length");
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
