//! The CUDA engine against the f64 reference, on fresh random and adversarial inputs.
//! Every test needs a CUDA GPU: run with `cargo test -p voisin-cuda -- --include-ignored`.

mod common;
use common::{engine, normal, same_knn, same_range, seed};

use rand::prelude::*;
use rand_distr::StandardNormal;
use voisin::data::{Buffer, VectorData};
use voisin::{reference, Dataset, Engine, Metric, VectorSet};
use voisin_cuda::{CudaEngine, CudaOptions, Select};

/// Small integers with many exact duplicates and ties, a zero vector and a constant vector.
fn adversarial(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let mut v: Vec<f32> = (0..n * d).map(|_| rng.gen_range(-2..=2) as f32).collect();
    for r in 0..n {
        if r % 7 == 3 && r >= 1 {
            let (a, b) = v.split_at_mut(r * d);
            b[..d].copy_from_slice(&a[(r - 1) * d..r * d]);
        }
    }
    v[..d].iter_mut().for_each(|x| *x = 0.0);
    if n > 1 {
        v[d..2 * d].iter_mut().for_each(|x| *x = 1.5);
    }
    VectorSet::from_f32(n, d, v).unwrap().into()
}

const GEMM: [Metric; 5] = [
    Metric::Euclidean,
    Metric::SqEuclidean,
    Metric::Cosine,
    Metric::Correlation,
    Metric::InnerProduct,
];

fn all_metrics() -> Vec<Metric> {
    let mut m = GEMM.to_vec();
    m.extend([Metric::Cityblock, Metric::Chebyshev, Metric::Minkowski(3.0)]);
    m
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn smoke_knn_euclidean() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (base, queries) = (normal(&mut rng, 3000, 64), normal(&mut rng, 50, 64));
    let e = engine(Select::Auto);
    eprintln!("device: {}", e.device_name());
    let got = e.knn(&base, &queries, 10, &Metric::Euclidean).unwrap();
    same_knn(
        &got,
        &reference::knn(&base, &queries, 10, &Metric::Euclidean).unwrap(),
        "smoke",
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_all_metrics_dims_and_k() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    for &(n, d) in &[(1000usize, 1usize), (1337, 3), (700, 127), (300, 1025)] {
        let base = normal(&mut rng, n, d);
        let queries = normal(&mut rng, 37, d);
        for m in all_metrics() {
            for k in [1, 10, 100, n - 1, n + 5] {
                let what = format!("knn n={n} d={d} k={k} {m}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_large_k_both_selections() {
    let mut rng = StdRng::seed_from_u64(seed());
    let base = normal(&mut rng, 20_011, 32);
    let queries = normal(&mut rng, 23, 32);
    for sel in [Select::Auto, Select::Block, Select::Radix] {
        let e = engine(sel);
        for k in [1, 10, 100, 1000, 4096, 5000] {
            if sel == Select::Block && k > 1500 {
                assert!(e.knn(&base, &queries, k, &Metric::Euclidean).is_err());
                continue;
            }
            for m in [Metric::Euclidean, Metric::InnerProduct, Metric::Cityblock] {
                let what = format!("knn {sel:?} k={k} {m}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn knn_ties_duplicates_zero_vectors() {
    let mut rng = StdRng::seed_from_u64(seed());
    for sel in [Select::Auto, Select::Radix] {
        let e = engine(sel);
        for &(n, d) in &[(2500usize, 3usize), (900, 16)] {
            let base = adversarial(&mut rng, n, d);
            let queries = adversarial(&mut rng, 41, d);
            for m in all_metrics() {
                for k in [1, 10, 100, n - 1] {
                    let what = format!("adversarial knn {sel:?} n={n} d={d} k={k} {m}");
                    let want = reference::knn(&base, &queries, k, &m).unwrap();
                    same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_matches_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    for sel in [Select::Auto, Select::Radix] {
        // A small tile budget forces several triangle tiles with a ragged last one.
        let e = CudaEngine::with_options(
            0,
            CudaOptions {
                select: sel,
                tile_bytes: 3 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        for (n, d, adv) in [
            (1501usize, 8usize, false),
            (1234, 3, true),
            (401, 127, false),
        ] {
            let data = if adv {
                adversarial(&mut rng, n, d)
            } else {
                normal(&mut rng, n, d)
            };
            for m in all_metrics() {
                for k in [1, 10, 100, n - 1, n + 3] {
                    let what = format!("graph {sel:?} n={n} d={d} k={k} {m} adv={adv}");
                    let want = reference::graph(&data, k, &m).unwrap();
                    same_knn(&e.graph(&data, k, &m).unwrap(), &want, &what);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn range_matches_reference() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    for &(n, d, adv) in &[
        (3000usize, 4usize, false),
        (1500, 3, true),
        (500, 127, false),
    ] {
        let base = if adv {
            adversarial(&mut rng, n, d)
        } else {
            normal(&mut rng, n, d)
        };
        let queries = normal(&mut rng, 29, d);
        for m in all_metrics() {
            // Radii at a few quantiles of the reference distances of the first query.
            let all = reference::knn(&base, &queries, n, &m).unwrap();
            let (_, dist) = all.row(0);
            for frac in [0.0, 0.01, 0.2] {
                let r = dist[((n - 1) as f64 * frac) as usize] as f64;
                let what = format!("range n={n} d={d} r={r} {m}");
                let want = reference::range(&base, &queries, r, &m).unwrap();
                same_range(&e.range(&base, &queries, r, &m).unwrap(), &want, &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn storage_types_convert_exactly() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (n, d) = (1200, 24);
    let u: Vec<u8> = (0..n * d).map(|_| rng.gen()).collect();
    let base: Dataset = VectorSet::new(n, d, VectorData::U8(Buffer::Owned(u)))
        .unwrap()
        .into();
    let h: Vec<half::f16> = (0..40 * d)
        .map(|_| half::f16::from_f32(rng.gen_range(0.0f32..255.0)))
        .collect();
    let queries: Dataset = VectorSet::new(40, d, VectorData::F16(Buffer::Owned(h)))
        .unwrap()
        .into();
    let e = engine(Select::Auto);
    for m in all_metrics() {
        let what = format!("u8 base, f16 queries, knn {m}");
        let want = reference::knn(&base, &queries, 10, &m).unwrap();
        same_knn(&e.knn(&base, &queries, 10, &m).unwrap(), &want, &what);
    }
}

#[test]
fn missing_gpu_is_an_error_not_a_panic() {
    if !voisin_cuda::gpu_available() {
        let err = CudaEngine::new(0).err().expect("no GPU here");
        assert!(matches!(err, voisin::Error::Device(_)), "{err}");
    } else {
        let err = CudaEngine::new(10_000).err().expect("no such device");
        assert!(err.to_string().contains("does not exist"), "{err}");
    }
}

/// A base larger than one 64 MiB staging buffer (17.9M values: two chunks), so uploads and
/// downloads go through the double-buffered pinned path; k=1000 makes the candidate lists and
/// exact-key pairs large too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn large_transfers_in_chunks() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (base, queries) = (normal(&mut rng, 140_000, 128), normal(&mut rng, 12, 128));
    let e = engine(Select::Auto);
    for m in [Metric::Euclidean, Metric::Cosine] {
        for k in [10, 1000] {
            let want = reference::knn(&base, &queries, k, &m).unwrap();
            same_knn(
                &e.knn(&base, &queries, k, &m).unwrap(),
                &want,
                &format!("large {m} k={k}"),
            );
        }
    }
}

/// Every base vector identical: no f32 bound can separate the k-th candidate from the rest, so
/// each query must widen until its list holds the whole base (exact_evals = queries × n), from
/// either first selection, and the ids are then 0..k by the tie-break.
#[test]
#[ignore = "needs a CUDA GPU"]
fn all_ties_widen_to_the_whole_base() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (n, d, nq) = (5000usize, 7usize, 9usize);
    let row: Vec<f32> = (0..d).map(|_| rng.sample(StandardNormal)).collect();
    let base: Dataset = VectorSet::from_f32(n, d, row.repeat(n)).unwrap().into();
    let queries = normal(&mut rng, nq, d);
    for sel in [Select::Block, Select::Radix] {
        let e = engine(sel);
        for m in [Metric::Euclidean, Metric::Cosine, Metric::Cityblock] {
            let got = e.knn(&base, &queries, 10, &m).unwrap();
            same_knn(
                &got,
                &reference::knn(&base, &queries, 10, &m).unwrap(),
                "all ties",
            );
            assert_eq!(
                got.stats.exact_evals,
                (nq * n) as u64,
                "{sel:?} {m}: widening"
            );
            let g = e.graph(&base, 10, &m).unwrap();
            same_knn(
                &g,
                &reference::graph(&base, 10, &m).unwrap(),
                "all ties graph",
            );
        }
    }
}

/// Rows far from the origin with a small spread: f32 cancellation in ‖a‖² + ‖b‖² − 2a·b is
/// severe without centring, and the cosine/correlation/inner-product bounds are stressed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn offset_data_stays_exact() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (n, d) = (3000usize, 64usize);
    let mk = |rng: &mut StdRng, n: usize| -> Dataset {
        let v: Vec<f32> = (0..n * d)
            .map(|_| 1000.0 + rng.sample::<f32, _>(StandardNormal) * 0.01)
            .collect();
        VectorSet::from_f32(n, d, v).unwrap().into()
    };
    let (base, queries) = (mk(&mut rng, n), mk(&mut rng, 31));
    let e = engine(Select::Auto);
    for m in all_metrics() {
        for k in [1, 10, 100] {
            let want = reference::knn(&base, &queries, k, &m).unwrap();
            same_knn(
                &e.knn(&base, &queries, k, &m).unwrap(),
                &want,
                &format!("offset {m} k={k}"),
            );
        }
        let want = reference::graph(&base, 10, &m).unwrap();
        same_knn(
            &e.graph(&base, 10, &m).unwrap(),
            &want,
            &format!("offset graph {m}"),
        );
    }
}

/// Degenerate shapes (empty sets, one item, two items) and bad input: the same answers as the
/// reference, or a clear error, never a panic.
#[test]
#[ignore = "needs a CUDA GPU"]
fn edge_shapes_and_bad_input() {
    let mut rng = StdRng::seed_from_u64(seed());
    let e = engine(Select::Auto);
    let empty: Dataset = VectorSet::from_f32(0, 4, vec![]).unwrap().into();
    let one = normal(&mut rng, 1, 4);
    let two = normal(&mut rng, 2, 4);
    let queries = normal(&mut rng, 3, 4);
    for m in all_metrics() {
        for (base, what) in [(&empty, "empty"), (&one, "one"), (&two, "two")] {
            let want = reference::knn(base, &queries, 5, &m).unwrap();
            same_knn(
                &e.knn(base, &queries, 5, &m).unwrap(),
                &want,
                &format!("{what} {m}"),
            );
            let want = reference::graph(base, 5, &m).unwrap();
            same_knn(
                &e.graph(base, 5, &m).unwrap(),
                &want,
                &format!("graph {what} {m}"),
            );
            let want = reference::range(base, &queries, 1.0, &m).unwrap();
            same_range(&e.range(base, &queries, 1.0, &m).unwrap(), &want, what);
        }
        let want = reference::knn(&two, &empty, 5, &m).unwrap();
        same_knn(&e.knn(&two, &empty, 5, &m).unwrap(), &want, "no queries");
    }
    let wrong_dim = normal(&mut rng, 3, 5);
    assert!(e
        .knn(&two, &wrong_dim, 1, &Metric::Euclidean)
        .unwrap_err()
        .is_user_error());
    assert!(e
        .knn(&two, &queries, 0, &Metric::Euclidean)
        .unwrap_err()
        .is_user_error());
    let nan: Dataset = VectorSet::from_f32(2, 2, vec![0.0, 1.0, f32::NAN, 2.0])
        .unwrap()
        .into();
    let err = e.graph(&nan, 1, &Metric::Euclidean).unwrap_err();
    assert!(
        err.is_user_error() && err.to_string().contains("vector 1"),
        "{err}"
    );
    assert!(e.range(&two, &queries, -1.0, &Metric::Euclidean).is_err());
}

/// A NaN or an infinity is named by row and column (base rows before queries), on one GPU and
/// on several: the check rides on the device's row preparation, whose norms turn non-finite.
#[test]
#[ignore = "needs a CUDA GPU"]
fn non_finite_values_are_named_by_row_and_column() {
    let mut rng = StdRng::seed_from_u64(seed());
    let one = engine(Select::Auto);
    let two = voisin_cuda::MultiGpu::new(&[0, 0]).unwrap();
    let engines: [&dyn Engine; 2] = [&one, &two];
    let (n, d) = (3001usize, 7usize);
    let clean = |rng: &mut StdRng, n: usize| -> Vec<f32> {
        (0..n * d).map(|_| rng.sample(StandardNormal)).collect()
    };
    let set = |v: Vec<f32>, n: usize| -> Dataset { VectorSet::from_f32(n, d, v).unwrap().into() };
    for m in common::metrics() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let (row, col) = (rng.gen_range(1..n), rng.gen_range(0..d));
            let mut b = clean(&mut rng, n);
            b[row * d + col] = bad;
            let mut q = clean(&mut rng, 40);
            q[5 * d + 3] = bad;
            let (base, queries) = (set(b, n), set(q, 40));
            let want_base = format!("vector {row} holds a NaN or infinite value at column {col}");
            let want_query = "vector 5 holds a NaN or infinite value at column 3";
            let clean_base = set(clean(&mut rng, n), n);
            for e in engines {
                let what = format!("{} {m} {bad}", e.name());
                let msg = |r: voisin::Result<_>| -> String {
                    match r {
                        Ok(_) => panic!("{what}: no error"),
                        Err(err) => {
                            assert!(err.is_user_error(), "{what}: {err}");
                            err.to_string()
                        }
                    }
                };
                let err = msg(e.knn(&base, &queries, 3, &m).map(|_| ()));
                assert!(err.contains(&want_base), "{what}: knn {err}");
                let err = msg(e.knn(&clean_base, &queries, 3, &m).map(|_| ()));
                assert!(err.contains(want_query), "{what}: knn queries {err}");
                let err = msg(e.graph(&base, 3, &m).map(|_| ()));
                assert!(err.contains(&want_base), "{what}: graph {err}");
                let err = msg(e.range(&base, &queries, 1.0, &m).map(|_| ()));
                assert!(err.contains(&want_base), "{what}: range {err}");
            }
        }
    }
}
