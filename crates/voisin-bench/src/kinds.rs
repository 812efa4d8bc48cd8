//! The data kinds the benchmarks measure: gpu_bench's `--data` and `--kinds`. One place says
//! what each kind is, so that every benchmark that takes a kind measures the same values.
//!
//! A kind's rows come from a seed, in parallel (65,536 rows per seeded chunk), in their stored
//! type (an f16 set never exists as f32). What a kind shares between its sets (the clustered
//! kind's subspaces, the manifold's map) comes from one fixed seed, so that a base, its queries
//! and a graph set of one kind are drawn from one distribution; the set's seed draws its rows.
//! Besides the generated kinds of [`GENERATED`], a kind can be a real set read from a file
//! (`file:PATH`, any vector file voisin reads, f32, f16 or u8, at most `n` of its rows, evenly
//! spaced) or noisy copies of one (`noisy:PATH`: `n` rows, row i the file's row i modulo its
//! rows plus N(0, s²) noise in every value, s a fiftieth of the range of the file's values,
//! rounded to the stored type).

use std::io::Write;
use std::path::Path;

use half::f16;
use rand::prelude::*;
use rand_distr::{StandardNormal, StudentT};
use rayon::prelude::*;
use voisin::data::{ElemType, VectorData};
use voisin::{Dataset, VectorSet};

/// The clustered kind's subspaces, the generator the GPU tests use.
#[allow(dead_code)]
#[path = "../../voisin-cuda/tests/common/subspaces.rs"]
mod subspaces;

/// The generated kinds: name, and what a row is (`d` values).
pub const GENERATED: &[(&str, &str)] = &[
    ("normal", "N(0, 1) in every coordinate"),
    ("far", "normal + 100 in every coordinate: far from the origin"),
    (
        "huge",
        "normal times 2^70: squared distances beyond f32's range (the GPU scales a copy)",
    ),
    (
        "clustered",
        "points on 1,000 random 8-d affine subspaces (low intrinsic dimension, flat)",
    ),
    ("dups", "normal rows, each repeated 10 times: many exact duplicates"),
    (
        "heavy",
        "Student's t with 2 degrees of freedom in every coordinate: heavy tails",
    ),
    (
        "lognormal",
        "a normal direction times exp(N(0, 1)): lengths over orders of magnitude",
    ),
    (
        "aniso",
        "coordinate j normal times (j + 1)^-1/2: a PCA-like spectrum, effective dimension 18 of 128",
    ),
    (
        "manifold",
        "a smooth 3-d manifold: coordinate j = cos(w_j . t + b_j), t uniform in [0, 1]^3",
    ),
    ("u8", "SIFT-like skewed integers 0..=255 stored as u8"),
    ("f16", "normal stored as f16"),
];

/// The intrinsic dimension of the manifold kind.
const MANIFOLD_DIM: usize = 3;
/// Rows per seeded chunk of a generated set.
const CHUNK: usize = 65536;
/// The seed of what a kind's sets share (subspaces, the manifold's map).
const STRUCTURE_SEED: u64 = 0x5eed;

/// The set of kind `spec` (a name of [`GENERATED`], `file:PATH` or `noisy:PATH`): `n` rows of
/// `d` values from `seed` (a file's own dimension, and at most its rows for `file:`).
pub fn set(spec: &str, n: usize, d: usize, seed: u64) -> Result<VectorSet, String> {
    if let Some(file) = spec.strip_prefix("file:") {
        return Ok(evenly_spaced(&read(file)?, n));
    }
    if let Some(file) = spec.strip_prefix("noisy:") {
        return Ok(noisy(&read(file)?, n, seed));
    }
    generated(spec, n, d, seed)
}

/// The generated kind of the same stored type as `set`, the normal data a kind is compared
/// with: `normal` for f32, `f16` for f16, `u8` for u8 (None for other stored types).
pub fn reference(set: &VectorSet) -> Option<&'static str> {
    match set.elem_type() {
        ElemType::F32 => Some("normal"),
        ElemType::F16 => Some("f16"),
        ElemType::U8 => Some("u8"),
        _ => None,
    }
}

/// `set` as f32 .fbin (u32 n, u32 d, row-major f32, little endian) at `path`: every stored type
/// converts exactly.
pub fn write_fbin(path: &Path, set: &VectorSet) -> std::io::Result<()> {
    let (n, d) = (set.len(), set.dim());
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(&(n as u32).to_le_bytes())?;
    f.write_all(&(d as u32).to_le_bytes())?;
    for start in (0..n).step_by(CHUNK) {
        for x in set.rows_f32(start, (start + CHUNK).min(n)).iter() {
            f.write_all(&x.to_le_bytes())?;
        }
    }
    f.flush()
}

/// The vector file `file` (f32, f16 or u8), read whole.
fn read(file: &str) -> Result<VectorSet, String> {
    let opts = voisin_io::ReadOptions {
        mmap: false,
        ..Default::default()
    };
    let data =
        voisin_io::read_dataset(Path::new(file), &opts).map_err(|e| format!("{file}: {e}"))?;
    let Dataset::Vectors(set) = data else {
        return Err(format!("{file}: strings, where a data kind takes vectors"));
    };
    match set.elem_type() {
        ElemType::F32 | ElemType::F16 | ElemType::U8 => Ok(set),
        t => Err(format!(
            "{file}: {} values (a data kind takes f32, f16 or u8)",
            t.name()
        )),
    }
}

/// `n` evenly spaced rows of `set` (all of them where it holds no more), in its stored type.
fn evenly_spaced(set: &VectorSet, n: usize) -> VectorSet {
    let (total, d) = (set.len(), set.dim());
    if n >= total {
        return set.clone();
    }
    let picks: Vec<usize> = (0..n).map(|i| i * total / n).collect();
    fn gather<T: Copy>(v: &[T], d: usize, picks: &[usize]) -> Vec<T> {
        picks
            .iter()
            .flat_map(|&i| v[i * d..(i + 1) * d].iter().copied())
            .collect()
    }
    let values = match set.data() {
        VectorData::F32(v) => VectorData::F32(gather(v.as_slice(), d, &picks).into()),
        VectorData::F16(v) => VectorData::F16(gather(v.as_slice(), d, &picks).into()),
        VectorData::U8(v) => VectorData::U8(gather(v.as_slice(), d, &picks).into()),
        _ => unreachable!("read() keeps f32, f16 and u8 sets only"),
    };
    VectorSet::new(n, d, values).expect("rows of a set")
}

/// `n` noisy copies of the rows of `src` (the `noisy:` kind), in its stored type.
fn noisy(src: &VectorSet, n: usize, seed: u64) -> VectorSet {
    let all = src.rows_f32(0, src.len());
    let (lo, hi) = all
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    let s = (hi - lo) / 50.0;
    let d = src.dim();
    let row = |rng: &mut StdRng, i: usize, out: &mut [f32]| {
        let from = &all[(i % src.len()) * d..][..d];
        out.iter_mut()
            .zip(from)
            .for_each(|(o, &x)| *o = x + s * rng.sample::<f32, _>(StandardNormal));
    };
    stored(src.elem_type(), n, d, seed, &row)
}

/// `n` rows of `d` values of the generated kind `kind` from `seed`.
fn generated(kind: &str, n: usize, d: usize, seed: u64) -> Result<VectorSet, String> {
    if !GENERATED.iter().any(|&(name, _)| name == kind) {
        let names: Vec<&str> = GENERATED.iter().map(|&(name, _)| name).collect();
        return Err(format!(
            "unknown data kind '{kind}' (known: {}, file:PATH, noisy:PATH)",
            names.join(", ")
        ));
    }
    let mut shared = StdRng::seed_from_u64(STRUCTURE_SEED);
    // Clustered: 1,000 subspaces, each a centre (spread 3) and 8 directions (norm about 1).
    let spaces: Vec<Vec<f32>> = if kind == "clustered" {
        subspaces::subspaces(&mut shared, 1000, d)
    } else {
        Vec::new()
    };
    // Manifold: per coordinate MANIFOLD_DIM frequencies (N(0, pi^2): about half a period
    // across the cube) and a phase.
    let map: Vec<f32> = if kind == "manifold" {
        (0..d * (MANIFOLD_DIM + 1))
            .map(|i| {
                if i % (MANIFOLD_DIM + 1) < MANIFOLD_DIM {
                    std::f32::consts::PI * shared.sample::<f32, _>(StandardNormal)
                } else {
                    shared.gen_range(0.0..std::f32::consts::TAU)
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let t2 = StudentT::new(2.0f32).expect("two degrees of freedom");
    let normal = |rng: &mut StdRng, out: &mut [f32]| {
        out.iter_mut().for_each(|x| *x = rng.sample(StandardNormal))
    };
    // One row of f32 values (the u8 and f16 kinds round them to their type).
    let row = |rng: &mut StdRng, i: usize, out: &mut [f32]| match kind {
        "normal" | "f16" => normal(rng, out),
        "far" => out
            .iter_mut()
            .for_each(|x| *x = 100.0 + rng.sample::<f32, _>(StandardNormal)),
        "clustered" => {
            let s = &spaces[rng.gen_range(0..spaces.len())];
            subspaces::point_on(rng, s, out);
        }
        "dups" => {
            // Row i repeats row i − i % 10: the same values from the same seed.
            let mut r =
                StdRng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add((i / 10) as u64));
            normal(&mut r, out);
        }
        "huge" => {
            normal(rng, out);
            out.iter_mut().for_each(|x| *x *= 2f32.powi(70));
        }
        "heavy" => out.iter_mut().for_each(|x| *x = rng.sample(t2)),
        "lognormal" => {
            normal(rng, out);
            let len = rng.sample::<f32, _>(StandardNormal).exp();
            out.iter_mut().for_each(|x| *x *= len);
        }
        "aniso" => {
            normal(rng, out);
            out.iter_mut()
                .enumerate()
                .for_each(|(j, x)| *x /= ((j + 1) as f32).sqrt());
        }
        "manifold" => {
            let t: [f32; MANIFOLD_DIM] = std::array::from_fn(|_| rng.gen());
            for (x, c) in out.iter_mut().zip(map.chunks_exact(MANIFOLD_DIM + 1)) {
                let phase: f32 = c[..MANIFOLD_DIM].iter().zip(&t).map(|(w, t)| w * t).sum();
                *x = (phase + c[MANIFOLD_DIM]).cos();
            }
        }
        // SIFT-like: mostly small counts, a long tail up to 255.
        "u8" => out
            .iter_mut()
            .for_each(|x| *x = (rng.gen::<f32>().powi(3) * 255.0).round()),
        _ => unreachable!("checked above"),
    };
    let elem = match kind {
        "u8" => ElemType::U8,
        "f16" => ElemType::F16,
        _ => ElemType::F32,
    };
    Ok(stored(elem, n, d, seed, &row))
}

/// `n` rows of `d` values from `row` (given its chunk's generator and the row's index), each
/// chunk of rows from its own seed, converted to the stored type `elem` row by row (u8 rounded
/// to the nearest integer and saturated).
fn stored(
    elem: ElemType,
    n: usize,
    d: usize,
    seed: u64,
    row: &(impl Fn(&mut StdRng, usize, &mut [f32]) + Sync),
) -> VectorSet {
    fn fill<T: Copy + Send + Sync>(
        n: usize,
        d: usize,
        seed: u64,
        zero: T,
        conv: impl Fn(f32) -> T + Sync,
        row: &(impl Fn(&mut StdRng, usize, &mut [f32]) + Sync),
    ) -> Vec<T> {
        let mut v = vec![zero; n * d];
        v.par_chunks_mut(CHUNK * d)
            .enumerate()
            .for_each(|(c, chunk)| {
                let mut rng =
                    StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(c as u64));
                let mut buf = vec![0f32; d];
                for (r, out) in chunk.chunks_mut(d).enumerate() {
                    row(&mut rng, c * CHUNK + r, &mut buf);
                    out.iter_mut().zip(&buf).for_each(|(o, &x)| *o = conv(x));
                }
            });
        v
    }
    let values = match elem {
        ElemType::U8 => VectorData::U8(fill(n, d, seed, 0u8, |x| x.round() as u8, row).into()),
        ElemType::F16 => VectorData::F16(fill(n, d, seed, f16::ZERO, f16::from_f32, row).into()),
        _ => VectorData::F32(fill(n, d, seed, 0f32, |x| x, row).into()),
    };
    VectorSet::new(n, d, values).expect("a generated set")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind has the shape asked for, finite values, and is what its seed makes it (in
    /// chunks of rows from their own seeds: whatever the number of threads), in its type.
    #[test]
    fn kinds_are_deterministic_and_stored_as_named() {
        for &(kind, _) in GENERATED {
            let a = set(kind, 70_001, 19, 5).unwrap();
            assert_eq!((a.len(), a.dim()), (70_001, 19), "{kind}");
            let b = set(kind, 70_001, 19, 5).unwrap();
            let other = set(kind, 70_001, 19, 6).unwrap();
            assert_eq!(a.rows_f32(0, a.len()), b.rows_f32(0, b.len()), "{kind}");
            assert_ne!(
                a.rows_f32(0, a.len()),
                other.rows_f32(0, other.len()),
                "{kind}"
            );
            let want = match kind {
                "u8" => ElemType::U8,
                "f16" => ElemType::F16,
                _ => ElemType::F32,
            };
            assert_eq!(a.elem_type(), want, "{kind}");
            assert_eq!(
                reference(&a),
                Some(if kind == "u8" || kind == "f16" {
                    kind
                } else {
                    "normal"
                })
            );
            assert!(
                a.rows_f32(0, a.len()).iter().all(|x| x.is_finite()),
                "{kind}"
            );
        }
    }

    /// The kinds have the properties their names promise.
    #[test]
    fn kinds_look_as_described() {
        let (n, d) = (20_000, 128);
        let vals = |kind: &str| set(kind, n, d, 1).unwrap().rows_f32(0, n).into_owned();
        let mean = |v: &[f32]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!((mean(&vals("far")) - 100.0).abs() < 0.1);
        // huge: the normal kind's values times 2^70, each exactly (rows drawn alike).
        let (huge, normal) = (vals("huge"), vals("normal"));
        assert!(huge
            .iter()
            .zip(&normal)
            .all(|(h, x)| *h == x * 2f32.powi(70)));
        // dups: rows 10 apart in one group of ten are equal, groups differ.
        let dups = vals("dups");
        assert_eq!(dups[..d], dups[9 * d..10 * d]);
        assert_ne!(dups[..d], dups[10 * d..11 * d]);
        // heavy: far more large values than a normal set (|t_2| > 10 has probability 0.0098).
        let big = |v: &[f32]| v.iter().filter(|x| x.abs() > 10.0).count();
        assert!(big(&vals("heavy")) > n * d / 200 && big(&vals("normal")) == 0);
        // lognormal: row norms spread over more than a factor 100.
        let norms: Vec<f64> = vals("lognormal")
            .chunks(d)
            .map(|r| r.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt())
            .collect();
        let (lo, hi) = norms
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
        assert!(hi / lo > 100.0);
        // aniso: the variance of coordinate j is 1 / (j + 1).
        let aniso = vals("aniso");
        for j in [0, 3, 127] {
            let var = aniso
                .iter()
                .skip(j)
                .step_by(d)
                .map(|&x| (x as f64).powi(2))
                .sum::<f64>()
                / n as f64;
            assert!(
                (var * (j + 1) as f64 - 1.0).abs() < 0.05,
                "coordinate {j}: {var}"
            );
        }
        // manifold: values in [-1, 1], and a base and its queries on one manifold: a query's
        // nearest row is much nearer than a normal set of the same scale would put it.
        let base = vals("manifold");
        assert!(base.iter().all(|x| x.abs() <= 1.0));
        let q = set("manifold", 10, d, 2)
            .unwrap()
            .rows_f32(0, 10)
            .into_owned();
        let nearest = |r: &[f32]| {
            base.chunks(d)
                .map(|b| b.iter().zip(r).map(|(x, y)| (x - y).powi(2)).sum::<f32>())
                .fold(f32::MAX, f32::min)
        };
        for r in q.chunks(d) {
            // Rows lie about sqrt(d) = 11.3 apart at random; neighbours within 3.
            assert!(nearest(r) < 9.0, "{}", nearest(r));
        }
        let u = set("u8", n, d, 1).unwrap();
        assert!(matches!(u.data(), VectorData::U8(_)));
    }

    /// A file's rows, evenly spaced, and noisy copies of them, in the file's stored type.
    #[test]
    fn file_kinds_keep_the_stored_type() {
        let digits = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/digits.u8bin");
        let all = set(&format!("file:{digits}"), 1_000_000, 0, 1).unwrap();
        assert_eq!(
            (all.len(), all.dim(), all.elem_type()),
            (1797, 64, ElemType::U8)
        );
        let some = set(&format!("file:{digits}"), 10, 0, 1).unwrap();
        assert_eq!(some.row_f32(1), all.row_f32(179));
        let copies = set(&format!("noisy:{digits}"), 5000, 0, 1).unwrap();
        assert_eq!(
            (copies.len(), copies.dim(), copies.elem_type()),
            (5000, 64, ElemType::U8)
        );
        // Copy i of row i mod 1797: close to it, seldom equal to it in every value.
        let (a, b) = (copies.row_f32(1797 + 5), all.row_f32(5));
        let moved = a.iter().zip(b.iter()).filter(|(x, y)| x != y).count();
        assert!(moved > 0 && moved < 32, "{moved}");
        assert!(a.iter().zip(b.iter()).all(|(x, y)| (x - y).abs() <= 2.0));
        assert!(set("nonsense", 10, 4, 1)
            .unwrap_err()
            .contains("known: normal"));
        assert!(set("file:/nonexistent.fbin", 10, 4, 1)
            .unwrap_err()
            .starts_with("/nonexistent.fbin"));
    }
}
