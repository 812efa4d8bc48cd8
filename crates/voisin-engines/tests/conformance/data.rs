//! The suite's data and metrics: random and adversarial vectors of every element type, words,
//! and the built-in and user metrics.

use half::{bf16, f16};
use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::data::{Buffer, VectorData};
use voisin::metric::CustomMetric;
use voisin::{Dataset, Metric, StringSet, VectorSet};

/// Seeded, so that a failure replays.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A data generator: (rng, rows, dimension) -> row-major values.
pub type Gen = fn(&mut StdRng, usize, usize) -> Vec<f32>;

pub fn normal(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d).map(|_| rng.sample(StandardNormal)).collect()
}

/// Small integers: many exact ties and duplicate rows.
pub fn ties(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d).map(|_| rng.gen_range(0..3) as f32).collect()
}

/// Far from the origin with a tiny spread: the matrix-product form cancels badly here.
pub fn offset(rng: &mut StdRng, n: usize, d: usize) -> Vec<f32> {
    (0..n * d)
        .map(|_| 1000.0 + 0.01 * rng.sample::<f32, _>(StandardNormal))
        .collect()
}

/// The generators of the random and adversarial cases.
pub fn generators() -> [(&'static str, Gen); 3] {
    [("normal", normal), ("ties", ties), ("offset", offset)]
}

/// Rows 0 and 2 zero, the last row a copy of row 1 (sets of 4 rows or more).
pub fn with_zero_and_duplicate_rows<T: Copy + Default>(mut v: Vec<T>, d: usize) -> Vec<T> {
    let n = v.len() / d.max(1);
    if n >= 4 {
        v[..d].iter_mut().for_each(|x| *x = T::default());
        v[2 * d..3 * d].iter_mut().for_each(|x| *x = T::default());
        let row: Vec<T> = v[d..2 * d].to_vec();
        v[(n - 1) * d..].copy_from_slice(&row);
    }
    v
}

pub fn vectors(n: usize, d: usize, values: Vec<f32>) -> Dataset {
    VectorSet::from_f32(n, d, values).unwrap().into()
}

fn stored(n: usize, d: usize, data: VectorData) -> Dataset {
    VectorSet::new(n, d, data).unwrap().into()
}

/// `n` rows of dimension `d` stored in each element type, as (name, set): f32, f16, bf16 and
/// u8 from the same draw, f64 holding f32 values, and three f64 sets f32 cannot hold (full
/// mantissas; integers near 2^40 with ties and duplicates; rows apart only below f32's
/// resolution, with zero and duplicate rows).
pub fn element_types(rng: &mut StdRng, n: usize, d: usize) -> Vec<(&'static str, Dataset)> {
    let raw = with_zero_and_duplicate_rows(normal(rng, n, d), d);
    let bytes: Vec<u8> = with_zero_and_duplicate_rows((0..n * d).map(|_| rng.gen()).collect(), d);
    let gauss = |rng: &mut StdRng| rng.sample::<f64, _>(StandardNormal);
    let full: Vec<f64> = (0..n * d).map(|_| gauss(rng)).collect();
    let near_2_40: Vec<f64> = (0..n * d)
        .map(|_| (1u64 << 40) as f64 + rng.gen_range(0..3) as f64)
        .collect();
    let centre: Vec<f64> = (0..d).map(|_| gauss(rng)).collect();
    let below_f32: Vec<f64> = (0..n * d)
        .map(|i| centre[i % d] * (1.0 + 1.0e-10 * gauss(rng)))
        .collect();
    let f64_set = |v: Vec<f64>| stored(n, d, VectorData::F64(Buffer::Owned(v)));
    vec![
        ("f32", vectors(n, d, raw.clone())),
        (
            "f16",
            stored(
                n,
                d,
                VectorData::F16(Buffer::Owned(
                    raw.iter().map(|&x| f16::from_f32(x)).collect(),
                )),
            ),
        ),
        (
            "bf16",
            stored(
                n,
                d,
                VectorData::Bf16(Buffer::Owned(
                    raw.iter().map(|&x| bf16::from_f32(x)).collect(),
                )),
            ),
        ),
        ("u8", stored(n, d, VectorData::U8(Buffer::Owned(bytes)))),
        (
            "f64 holding f32 values",
            f64_set(raw.iter().map(|&x| f64::from(x)).collect()),
        ),
        ("f64", f64_set(full)),
        ("f64 near 2^40", f64_set(near_2_40)),
        (
            "f64 below f32 resolution",
            f64_set(with_zero_and_duplicate_rows(below_f32, d)),
        ),
    ]
}

/// Words of zero to four syllables (accents and CJK included): many ties, duplicates and
/// empty words.
pub fn words(rng: &mut StdRng, n: usize) -> Dataset {
    const SYLLABLES: [&str; 6] = ["ka", "é", "漢", "ab", "ba", "x"];
    let word = |rng: &mut StdRng| -> String {
        let syllables = rng.gen_range(0..5);
        (0..syllables)
            .map(|_| *SYLLABLES.choose(rng).unwrap())
            .collect()
    };
    let all: Vec<String> = (0..n).map(|_| word(rng)).collect();
    StringSet::from_strings(all).unwrap().into()
}

/// A user metric, not built in: Σ|a − b| / (1 + Σ|a + b|), over f32 or f64 rows.
fn damped_bray_curtis<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    let (mut apart, mut together) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y): (f64, f64) = (x.into(), y.into());
        apart += (x - y).abs();
        together += (x + y).abs();
    }
    apart / (1.0 + together)
}

/// Every built-in vector metric, and user metrics over f32 rows and over f64 rows.
pub fn vector_metrics() -> Vec<Metric> {
    let mut all: Vec<Metric> = Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect();
    all.push(Metric::Custom(CustomMetric::for_vectors(
        "bray-curtis",
        damped_bray_curtis::<f32>,
    )));
    all.push(Metric::Custom(CustomMetric::for_vectors_f64(
        "bray-curtis-f64",
        damped_bray_curtis::<f64>,
    )));
    all
}

/// Levenshtein and a user metric over strings.
pub fn string_metrics() -> Vec<Metric> {
    vec![
        Metric::Levenshtein,
        Metric::Custom(CustomMetric::for_strings(
            "length",
            |a: &[char], b: &[char]| a.len().abs_diff(b.len()) as f64,
        )),
    ]
}

/// Every metric the suite knows.
pub fn all_metrics() -> Vec<Metric> {
    let mut all = vector_metrics();
    all.extend(string_metrics());
    all
}
