//! Good-path tests of the `voisin` binary: knn, graph and range over every input format,
//! compared with the core crate's f64 reference by ids (ties broken by the smaller index) and by
//! distances; the TSV layout; `--stats`; file outputs; and a reader that closes the pipe early.
//!
//! Data are small integers where ties matter (equal distances, duplicate rows) and Gaussian
//! where they do not.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use voisin::{reference, Dataset, KnnResult, Metric, RangeResult, StringSet, VectorSet};

fn vectors(rows: &[Vec<f32>]) -> Dataset {
    let d = rows[0].len();
    VectorSet::from_f32(rows.len(), d, rows.concat())
        .unwrap()
        .into()
}

fn knn_lines(r: &KnnResult) -> Vec<Line> {
    expected_lines((0..r.n_queries).map(|q| {
        let (ids, ds) = r.row(q);
        (q, ids.iter().copied().zip(ds.iter().copied()).collect())
    }))
}

fn range_lines(r: &RangeResult) -> Vec<Line> {
    expected_lines((0..r.n_queries()).map(|q| {
        let (ids, ds) = r.row(q);
        (q, ids.iter().copied().zip(ds.iter().copied()).collect())
    }))
}

/// Runs a command that must succeed and returns its standard output.
fn ok(s: &Scratch, args: &[&str]) -> String {
    let out = s.run(args);
    assert!(out.status.success(), "args {args:?}: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "args {args:?} wrote to stderr");
    stdout(&out)
}

#[test]
fn knn_matches_the_reference_for_every_vector_metric() {
    let s = Scratch::new();
    // Values 0..3 in 7 dimensions: many equal distances, duplicate rows and a zero vector.
    let mut base = int_rows(150, 7, 11, 4);
    base[17] = vec![0.0; 7];
    base[90] = base[3].clone();
    let queries = int_rows(23, 7, 12, 4);
    s.raw("base.fvecs", &fvecs(&base));
    s.raw("q.fvecs", &fvecs(&queries));
    let (b, q) = (vectors(&base), vectors(&queries));
    for name in [
        "euclidean",
        "sqeuclidean",
        "cosine",
        "correlation",
        "inner_product",
        "cityblock",
        "chebyshev",
        "minkowski:3",
    ] {
        let metric: Metric = name.parse().unwrap();
        let want = knn_lines(&reference::knn(&b, &q, 9, &metric).unwrap());
        let got = ok(
            &s,
            &[
                "knn",
                "--base",
                "base.fvecs",
                "--query",
                "q.fvecs",
                "-k",
                "9",
                "--metric",
                name,
            ],
        );
        assert_same_lines(&parse_tsv(&got), &want);
    }
}

#[test]
fn tsv_layout_is_exact() {
    let s = Scratch::new();
    s.raw(
        "b.fvecs",
        &fvecs(&[vec![0.0, 0.0], vec![3.0, 4.0], vec![1.0, 0.0]]),
    );
    s.raw("q.fvecs", &fvecs(&[vec![0.0, 0.0], vec![3.0, 3.0]]));
    let got = ok(
        &s,
        &["knn", "--base", "b.fvecs", "--query", "q.fvecs", "-k", "2"],
    );
    // Query 1 is at distance 1 from item 1 and sqrt(13) from item 2.
    let want = format!("0\t0\t0\n0\t2\t1\n1\t1\t1\n1\t2\t{}\n", 13f32.sqrt());
    assert_eq!(got, want);
}

#[test]
fn graph_over_fbin_keeps_duplicates_and_caps_k() {
    let s = Scratch::new();
    let mut rows = int_rows(40, 3, 21, 3);
    rows[5] = rows[30].clone();
    rows[6] = rows[30].clone();
    s.raw("x.fbin", &fbin(&rows));
    let data = vectors(&rows);
    for k in ["1", "6", "39", "500"] {
        let want =
            knn_lines(&reference::graph(&data, k.parse().unwrap(), &Metric::Euclidean).unwrap());
        let got = parse_tsv(&ok(&s, &["graph", "--input", "x.fbin", "-k", k]));
        assert_same_lines(&got, &want);
        assert!(
            got.iter().all(|l| l.neighbor as usize != l.query),
            "an item is its own neighbour"
        );
    }
    // Item 30's nearest neighbours are its two copies, at distance 0.
    let got = parse_tsv(&ok(&s, &["graph", "--input", "x.fbin", "-k", "2"]));
    let row30: Vec<u32> = got
        .iter()
        .filter(|l| l.query == 30)
        .map(|l| l.neighbor)
        .collect();
    assert_eq!(row30, vec![5, 6]);
}

#[test]
fn graph_over_gaussian_u8bin_bvecs_and_npy_inputs() {
    let s = Scratch::new();
    let bytes: Vec<Vec<u8>> = int_rows(60, 5, 31, 256)
        .iter()
        .map(|r| r.iter().map(|&v| v as u8).collect())
        .collect();
    s.raw("x.u8bin", &u8bin(&bytes));
    s.raw("x.bvecs", &bvecs(&bytes));
    let as_f32: Vec<Vec<f32>> = bytes
        .iter()
        .map(|r| r.iter().map(|&v| f32::from(v)).collect())
        .collect();
    let want = knn_lines(&reference::graph(&vectors(&as_f32), 4, &Metric::Cityblock).unwrap());
    for file in ["x.u8bin", "x.bvecs"] {
        let got = ok(&s, &["graph", "--input", file, "-k", "4", "--metric", "l1"]);
        assert_same_lines(&parse_tsv(&got), &want);
    }
    let gauss = normal_rows(70, 127, 32);
    s.raw("c.npy", &npy_f32(&gauss));
    s.raw("f.npy", &npy_f32_fortran(&gauss));
    let want = knn_lines(&reference::graph(&vectors(&gauss), 5, &Metric::Cosine).unwrap());
    for file in ["c.npy", "f.npy"] {
        let got = ok(
            &s,
            &["graph", "--input", file, "-k", "5", "--metric", "cosine"],
        );
        assert_same_lines(&parse_tsv(&got), &want);
    }
}

/// numpy's defaults: float64 (values f32 cannot hold) and int64 `.npy` inputs are read and
/// answered exactly on their own values, by ids and distances, for knn, graph and range.
#[test]
fn float64_and_int64_npy_inputs_are_answered_exactly() {
    let s = Scratch::new();
    let (n, m, d) = (90, 11, 6);
    // np.random.rand-like values, plus rows that differ from row 0 only below f32 precision.
    let mut rng_state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        (rng_state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut base: Vec<f64> = (0..n * d).map(|_| next()).collect();
    for r in 1..4 {
        for c in 0..d {
            base[r * d + c] = base[c] * (1.0 + r as f64 * 1e-12);
        }
    }
    let queries: Vec<f64> = (0..m * d).map(|_| next()).collect();
    let npy_f64 = |vals: &[f64], rows: usize| {
        let mut b = npy_header("<f8", false, &[rows, d]);
        vals.iter().for_each(|x| b.extend(x.to_le_bytes()));
        b
    };
    s.raw("base.npy", &npy_f64(&base, n));
    s.raw("q.npy", &npy_f64(&queries, m));
    let b: Dataset = VectorSet::from_f64(n, d, base).unwrap().into();
    let q: Dataset = VectorSet::from_f64(m, d, queries).unwrap().into();
    for name in ["euclidean", "cosine", "inner_product", "cityblock"] {
        let metric: Metric = name.parse().unwrap();
        let want = knn_lines(&reference::knn(&b, &q, 7, &metric).unwrap());
        let got = ok(
            &s,
            &[
                "knn", "--base", "base.npy", "--query", "q.npy", "-k", "7", "--metric", name,
            ],
        );
        assert_same_lines(&parse_tsv(&got), &want);
        let want = knn_lines(&reference::graph(&b, 4, &metric).unwrap());
        let got = ok(
            &s,
            &["graph", "--input", "base.npy", "-k", "4", "--metric", name],
        );
        assert_same_lines(&parse_tsv(&got), &want);
    }
    let want = range_lines(&reference::range(&b, &q, 0.5, &Metric::Euclidean).unwrap());
    let got = ok(
        &s,
        &[
            "range", "--base", "base.npy", "--query", "q.npy", "--radius", "0.5",
        ],
    );
    assert_same_lines(&parse_tsv(&got), &want);
    // int64 values 0..99 (numpy's default integer type), some beyond f32's integers.
    let ints: Vec<i64> = (0..n * d)
        .map(|i| {
            let v = (i * 37 % 100) as i64;
            if i % 5 == 0 {
                v + (1 << 40) + 1
            } else {
                v
            }
        })
        .collect();
    let mut bytes = npy_header("<i8", false, &[n, d]);
    ints.iter().for_each(|x| bytes.extend(x.to_le_bytes()));
    s.raw("ints.npy", &bytes);
    let set: Dataset = VectorSet::from_exact(n, d, &ints).unwrap().into();
    let want = knn_lines(&reference::graph(&set, 5, &Metric::Euclidean).unwrap());
    let got = ok(&s, &["graph", "--input", "ints.npy", "-k", "5"]);
    assert_same_lines(&parse_tsv(&got), &want);
}

#[test]
fn range_matches_the_reference() {
    let s = Scratch::new();
    let base = int_rows(120, 4, 41, 5);
    let queries = int_rows(17, 4, 42, 5);
    s.raw("b.npy", &npy_f32(&base));
    s.raw("q.fvecs", &fvecs(&queries));
    let (b, q) = (vectors(&base), vectors(&queries));
    // Radius 2 on integer data hits many points exactly on the boundary.
    for (metric, radius) in [
        ("euclidean", "2"),
        ("chebyshev", "1"),
        ("inner_product", "-3"),
        ("inner_product", "20"),
    ] {
        let m: Metric = metric.parse().unwrap();
        let want = range_lines(&reference::range(&b, &q, radius.parse().unwrap(), &m).unwrap());
        assert!(!want.is_empty(), "{metric} {radius} finds nothing");
        let got = ok(
            &s,
            &[
                "range", "--base", "b.npy", "--query", "q.fvecs", "--radius", radius, "--metric",
                metric,
            ],
        );
        assert_same_lines(&parse_tsv(&got), &want);
    }
}

#[test]
fn strings_default_to_levenshtein() {
    let s = Scratch::new();
    let words = [
        "kitten",
        "sitting",
        "mitten",
        "",
        "kitten",
        "résumé",
        "resume",
        "日本語",
        "日本",
        "knitting",
    ];
    s.raw("w.txt", (words.join("\n") + "\n").as_bytes());
    s.raw("q.txt", "mitt\nsmitten\n日\n".as_bytes());
    let w: Dataset = StringSet::from_strings(words).unwrap().into();
    let q: Dataset = StringSet::from_strings(["mitt", "smitten", "日"])
        .unwrap()
        .into();
    let m = Metric::Levenshtein;
    let got = ok(&s, &["graph", "--input", "w.txt", "-k", "3"]);
    assert_same_lines(
        &parse_tsv(&got),
        &knn_lines(&reference::graph(&w, 3, &m).unwrap()),
    );
    let got = ok(
        &s,
        &["knn", "--base", "w.txt", "--query", "q.txt", "-k", "4"],
    );
    assert_same_lines(
        &parse_tsv(&got),
        &knn_lines(&reference::knn(&w, &q, 4, &m).unwrap()),
    );
    let got = ok(
        &s,
        &[
            "range", "--base", "w.txt", "--query", "q.txt", "--radius", "2",
        ],
    );
    assert_same_lines(
        &parse_tsv(&got),
        &range_lines(&reference::range(&w, &q, 2.0, &m).unwrap()),
    );
}

#[test]
fn hdf5_reads_train_as_base_and_test_as_queries() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data/ann.hdf5");
    let read = |role| {
        voisin_io::read_dataset(
            &fixture,
            &voisin_io::ReadOptions {
                role,
                mmap: false,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let (train, test) = (read(voisin_io::Role::Base), read(voisin_io::Role::Query));
    assert_ne!(train.len(), test.len());
    let want = knn_lines(&reference::knn(&train, &test, 4, &Metric::Euclidean).unwrap());
    let s = Scratch::new();
    let path = fixture.to_str().unwrap();
    let got = ok(&s, &["knn", "--base", path, "--query", path, "-k", "4"]);
    assert_same_lines(&parse_tsv(&got), &want);
}

#[test]
fn real_digits_graph_matches_the_reference() {
    // The shipped data set (integer pixels, so ties abound), cut to 400 rows to stay quick.
    let digits =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/digits.u8bin"))
            .unwrap();
    let (n, d) = (400usize, 64usize);
    let mut cut = (n as u32).to_le_bytes().to_vec();
    cut.extend((d as u32).to_le_bytes());
    cut.extend(&digits[8..8 + n * d]);
    let s = Scratch::new();
    s.raw("digits.u8bin", &cut);
    let rows: Vec<Vec<f32>> = digits[8..8 + n * d]
        .chunks(d)
        .map(|r| r.iter().map(|&v| f32::from(v)).collect())
        .collect();
    let want = knn_lines(&reference::graph(&vectors(&rows), 10, &Metric::Euclidean).unwrap());
    let got = ok(&s, &["graph", "--input", "digits.u8bin", "-k", "10"]);
    assert_same_lines(&parse_tsv(&got), &want);
}

#[test]
fn options_do_not_change_results() {
    let s = Scratch::new();
    s.raw("x.fbin", &fbin(&normal_rows(90, 9, 51)));
    let base = ok(&s, &["graph", "--input", "x.fbin", "-k", "7"]);
    for extra in [
        &["--device", "cpu"][..],
        &["--device", "auto"],
        &["--threads", "1"],
        &["--memory", "4K"],
        &["--no-mmap"],
        &["--allow-nan", "zero"],
    ] {
        let mut args = vec!["graph", "--input", "x.fbin", "-k", "7"];
        args.extend(extra);
        assert_eq!(ok(&s, &args), base, "{extra:?} changed the output");
    }
}

#[test]
fn allow_nan_zero_reads_non_finite_values_as_zero() {
    let s = Scratch::new();
    let mut rows = int_rows(30, 3, 61, 4);
    rows[4][1] = f32::NAN;
    rows[9][0] = f32::INFINITY;
    s.raw("x.fvecs", &fvecs(&rows));
    rows[4][1] = 0.0;
    rows[9][0] = 0.0;
    let want = knn_lines(&reference::graph(&vectors(&rows), 3, &Metric::Euclidean).unwrap());
    let got = ok(
        &s,
        &[
            "graph",
            "--input",
            "x.fvecs",
            "-k",
            "3",
            "--allow-nan",
            "zero",
        ],
    );
    assert_same_lines(&parse_tsv(&got), &want);
}

#[test]
fn stdout_and_tsv_file_are_identical_and_other_outputs_hold_the_same_results() {
    let s = Scratch::new();
    s.raw("x.fvecs", &fvecs(&normal_rows(50, 6, 71)));
    let printed = ok(&s, &["graph", "--input", "x.fvecs", "-k", "5"]);
    assert_eq!(
        ok(
            &s,
            &["graph", "--input", "x.fvecs", "-k", "5", "--out", "r.tsv"]
        ),
        ""
    );
    assert_eq!(std::fs::read_to_string(s.path("r.tsv")).unwrap(), printed);
    assert_eq!(
        ok(
            &s,
            &["graph", "--input", "x.fvecs", "-k", "5", "--out", "-"]
        ),
        printed
    );
    let lines = parse_tsv(&printed);

    ok(
        &s,
        &["graph", "--input", "x.fvecs", "-k", "5", "--out", "r.ivecs"],
    );
    let ids = std::fs::read(s.path("r.ivecs")).unwrap();
    let ds = std::fs::read(s.path("r.fvecs")).unwrap();
    let word = |b: &[u8], i: usize| <[u8; 4]>::try_from(&b[4 * i..4 * i + 4]).unwrap();
    assert_eq!(ids.len(), 50 * 6 * 4);
    for (n, l) in lines.iter().enumerate() {
        let at = (n / 5) * 6 + 1 + n % 5;
        assert_eq!(i32::from_le_bytes(word(&ids, at)), l.neighbor as i32);
        assert_eq!(f32::from_le_bytes(word(&ds, at)), l.distance);
    }

    ok(
        &s,
        &["graph", "--input", "x.fvecs", "-k", "5", "--out", "r.npy"],
    );
    let ids = std::fs::read(s.path("r.indices.npy")).unwrap();
    let ds = std::fs::read(s.path("r.distances.npy")).unwrap();
    let data = |b: &[u8]| b[10 + u16::from_le_bytes([b[8], b[9]]) as usize..].to_vec();
    let (ids, ds) = (data(&ids), data(&ds));
    for (n, l) in lines.iter().enumerate() {
        let id = i64::from_le_bytes(ids[8 * n..8 * n + 8].try_into().unwrap());
        assert_eq!(id, i64::from(l.neighbor));
        assert_eq!(f32::from_le_bytes(word(&ds, n)), l.distance);
    }
    let mut names: Vec<String> = listing(s.dir.path()).into_iter().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "r.distances.npy",
            "r.fvecs",
            "r.indices.npy",
            "r.ivecs",
            "r.tsv",
            "x.fvecs"
        ]
    );
}

#[test]
fn stats_is_one_json_line() {
    let s = Scratch::new();
    s.raw("b.fvecs", &fvecs(&normal_rows(80, 12, 81)));
    s.raw("q.fvecs", &fvecs(&normal_rows(9, 12, 82)));
    let out = s.run(&[
        "knn", "--base", "b.fvecs", "--query", "q.fvecs", "-k", "4", "--stats", "--metric", "l2",
    ]);
    assert!(out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(err.trim()).expect("valid JSON");
    assert_eq!(v["command"], "knn");
    assert_eq!(v["metric"], "euclidean");
    assert!(v["device"].as_str().unwrap().starts_with("cpu"));
    assert_eq!(
        (v["n_base"].as_u64(), v["n_queries"].as_u64()),
        (Some(80), Some(9))
    );
    assert_eq!((v["dim"].as_u64(), v["k"].as_u64()), (Some(12), Some(4)));
    assert_eq!(
        v["results"].as_u64(),
        Some(parse_tsv(&stdout(&out)).len() as u64)
    );
    for phase in ["load", "transfer", "compute", "select", "write", "total"] {
        assert!(v["time_s"][phase].as_f64().unwrap() >= 0.0, "{phase}");
    }
    assert!(v["throughput_qps"].as_f64().unwrap() > 0.0);
    assert!(v["distance_evals"].is_u64());

    let out = s.run(&[
        "range", "--base", "b.fvecs", "--query", "q.fvecs", "--radius", "4", "--stats", "--out",
        "r.tsv",
    ]);
    let v: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(v["command"], "range");
    assert_eq!(v["radius"].as_f64(), Some(4.0));
    assert!(v.get("k").is_none());
    let written = std::fs::read_to_string(s.path("r.tsv")).unwrap();
    assert_eq!(
        v["results"].as_u64(),
        Some(parse_tsv(&written).len() as u64)
    );
}

#[test]
fn a_reader_that_stops_early_ends_the_run_quietly() {
    let s = Scratch::new();
    s.raw("x.fbin", &fbin(&int_rows(2500, 2, 91, 1000)));
    let mut child = Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(["graph", "--input", "x.fbin", "-k", "50"])
        .current_dir(s.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -1`: read a little of the 125 000 lines, then close the pipe.
    let mut first = [0u8; 64];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stderr(&out), "");
    assert!(out.status.success(), "{:?}", out.status);
    assert!(first.starts_with(b"0\t"));
}

#[test]
fn demo_runs_from_any_folder() {
    let s = Scratch::new();
    let out = s.run(&["demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("1797 handwritten digits"), "{text}");
    assert!(text.contains("neighbours show the same digit"), "{text}");
    let share: f64 = text
        .split("% of the 17970 neighbours")
        .next()
        .and_then(|t| t.split_whitespace().last())
        .and_then(|p| p.parse().ok())
        .expect("an agreement percentage");
    // Nearest neighbours of handwritten digits mostly show the same digit; chance is 10 %.
    assert!(share > 90.0 && share <= 100.0, "{share}");
}

/// `voisin doctor` names each CUDA library, where it was searched, and says whether a GPU is
/// used; on a machine without a driver it says that is why not.
#[test]
fn doctor_reports_what_it_found_of_cuda() {
    let s = Scratch::new();
    let text = ok(&s, &["doctor"]);
    for needle in [
        "driver",
        "cuBLAS",
        "NVRTC",
        "kernels",
        "searched, in order:",
        "GPU: ",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let used = text.contains("GPU: used under device auto");
    assert_eq!(used, voisin_cuda::gpu_available(), "{text}");
    if voisin_cuda::cuda_info().driver.is_none() {
        assert!(
            text.contains("GPU: not used: the CUDA driver (libcuda) cannot be loaded"),
            "{text}"
        );
    }
}

#[test]
fn help_and_version_exit_zero() {
    let s = Scratch::new();
    for args in [&["--help"][..], &["knn", "--help"], &["--version"]] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}
