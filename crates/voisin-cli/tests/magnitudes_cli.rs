//! Issue 40 through the binary: distances of f64 data near either end of f64's range in f32 and
//! `--distances f64` outputs, distances beyond f32's range, and the value and place of the
//! item itself under `--include-self` for every metric, the same in f32 and f64 outputs.

mod common;

use common::*;

fn npy_f64(rows: &[Vec<f64>]) -> Vec<u8> {
    let d = rows.first().map_or(0, Vec::len);
    let mut b = npy_header("<f8", false, &[rows.len(), d]);
    rows.iter()
        .flatten()
        .for_each(|x| b.extend(x.to_le_bytes()));
    b
}

/// (query, neighbour, distance as printed) of TSV output, f64 distances kept as f64.
fn lines(text: &str) -> Vec<(usize, u32, f64)> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

fn ok(s: &Scratch, args: &[&str]) -> String {
    let out = s.run(args);
    assert!(out.status.success(), "args {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Points on a line at 2^e·(0, 1, 3, 7, 15): euclidean distances are the exact differences,
/// whatever e is; f32 output holds them or saturates at f32's largest value, f64 output holds
/// them exactly (and saturates only beyond f64's range).
#[test]
fn f64_extremes_print_their_exact_distances() {
    for e in [1000i32, 960, -1000, -1070, 0] {
        let s = Scratch::new();
        let unit = 2f64.powi(e / 2) * 2f64.powi(e - e / 2);
        let xs = [0.0, 1.0, 3.0, 7.0, 15.0];
        let rows: Vec<Vec<f64>> = xs.iter().map(|&x| vec![x * unit, 0.0]).collect();
        s.raw("x.npy", &npy_f64(&rows));
        for (metric, deg) in [("euclidean", 1), ("cityblock", 1), ("sqeuclidean", 2)] {
            let args = [
                "knn", "--base", "x.npy", "--query", "x.npy", "-k", "5", "--metric", metric,
            ];
            let wide = ok(&s, &[&args[..], &["--distances", "f64"]].concat());
            let narrow = ok(&s, &args);
            for ((q, i, d64), (q2, i2, d32)) in lines(&wide).into_iter().zip(lines(&narrow)) {
                assert_eq!((q, i), (q2, i2), "e {e} {metric}");
                let diff = (xs[q] - xs[i as usize]).abs();
                let want = if deg == 1 {
                    diff * unit
                } else {
                    diff * diff * unit * unit
                };
                let want64 = if want.is_infinite() { f64::MAX } else { want };
                assert_eq!(d64, want64, "e {e} {metric} ({q}, {i}) f64");
                let want32 = (want as f32).clamp(-f32::MAX, f32::MAX);
                assert_eq!(d32 as f32, want32, "e {e} {metric} ({q}, {i}) f32");
            }
            // Rows in order of distance: the item itself, then outward.
            let order: Vec<u32> = lines(&narrow)
                .iter()
                .filter(|l| l.0 == 0)
                .map(|l| l.1)
                .collect();
            assert_eq!(order, vec![0, 1, 2, 3, 4], "e {e} {metric}");
        }
    }
}

/// `--include-self`: the item carries the metric's own distance to itself and sits where the
/// order puts it (first among equal distances), the same value in f32 and f64 outputs: under
/// inner_product its dot product with itself, under cosine 1 for a zero vector.
#[test]
fn include_self_carries_the_self_distance_in_order() {
    let s = Scratch::new();
    let rows = vec![
        vec![0.0f32, 0.0],
        vec![1.0, 0.0],
        vec![3.0, 1.0],
        vec![0.5, 0.5],
        vec![2.0, 2.0],
    ];
    s.raw("x.fvecs", &fvecs(&rows));
    let run = |metric: &str, extra: &[&str]| {
        let args = [
            "graph",
            "--input",
            "x.fvecs",
            "-k",
            "3",
            "--include-self",
            "--metric",
            metric,
        ];
        lines(&ok(&s, &[&args[..], extra].concat()))
    };
    for metric in ["inner_product", "cosine", "euclidean", "correlation"] {
        let narrow = run(metric, &[]);
        let wide = run(metric, &["--distances", "f64"]);
        for (a, b) in narrow.iter().zip(&wide) {
            assert_eq!((a.0, a.1), (b.0, b.1), "{metric}");
            assert_eq!(a.2 as f32, b.2 as f32, "{metric}: {a:?} against {b:?}");
        }
        let row = |q: usize| -> Vec<(u32, f64)> {
            narrow
                .iter()
                .filter(|l| l.0 == q)
                .map(|l| (l.1, l.2))
                .collect()
        };
        match metric {
            // Item 1 = (1, 0): dots 3 with item 2, 2 with item 4, 1 with itself.
            "inner_product" => assert_eq!(row(1), vec![(2, 3.0), (4, 2.0), (1, 1.0)]),
            // The zero vector is at 1 from everything, itself included, and comes first.
            "cosine" => assert_eq!(row(0)[0], (0, 1.0), "{:?}", row(0)),
            // A constant vector (the zero one) likewise under correlation.
            "correlation" => assert_eq!(row(0)[0], (0, 1.0), "{:?}", row(0)),
            _ => assert_eq!(row(2)[0], (2, 0.0)),
        }
        for q in 0..rows.len() {
            assert!(
                row(q).iter().any(|&(i, _)| i == q as u32),
                "{metric}: {q} missing"
            );
        }
    }
}
