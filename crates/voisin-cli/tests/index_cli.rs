//! `voisin index build` / `voisin index query` end to end: every kind answers k-NN and range
//! exactly as the f64 reference for words (levenshtein) and vectors (euclidean, cityblock), and
//! every bad index file or argument is one line, exit code 2, with nothing left behind.

mod common;

use common::*;
use voisin::{Dataset, Metric, StringSet, VectorSet};

const KINDS: [&str; 3] = ["lc", "sss", "cover"];

fn words() -> Vec<String> {
    let mut r = 7u64;
    (0..300)
        .map(|_| {
            // A small linear congruential stream keeps the words reproducible and full of ties.
            let len = 1 + (r % 6) as usize;
            (0..len)
                .map(|_| {
                    r = r
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (b'a' + (r >> 60) as u8 % 4) as char
                })
                .collect()
        })
        .collect()
}

fn lines_of(rows: impl Iterator<Item = (Vec<u32>, Vec<f32>)>) -> Vec<Line> {
    expected_lines(
        rows.enumerate()
            .map(|(q, (ids, ds))| (q, ids.into_iter().zip(ds).collect())),
    )
}

fn check_answers(
    s: &Scratch,
    base: &Dataset,
    queries: &Dataset,
    input: &str,
    query: &str,
    metric: &Metric,
    kinds: &[&str],
) {
    let name = metric.name();
    for &kind in kinds {
        let idx = format!("{kind}.vidx");
        let out = s.run(&[
            "index", "build", "--input", input, "--kind", kind, "--metric", &name, "--out", &idx,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        for k in [1, 4, 1000] {
            let out = s.run(&[
                "index",
                "query",
                "--index",
                &idx,
                "--query",
                query,
                "-k",
                &k.to_string(),
            ]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            let want = voisin::reference::knn(base, queries, k, metric).unwrap();
            let rows = (0..want.n_queries).map(|q| {
                let (i, d) = want.row(q);
                (i.to_vec(), d.to_vec())
            });
            assert_same_lines(&parse_tsv(&stdout(&out)), &lines_of(rows));
        }
        for r in ["0", "1", "2.5"] {
            let out = s.run(&[
                "index", "query", "--index", &idx, "--query", query, "--radius", r,
            ]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            let want = voisin::reference::range(base, queries, r.parse().unwrap(), metric).unwrap();
            let rows = (0..want.n_queries()).map(|q| {
                let (i, d) = want.row(q);
                (i.to_vec(), d.to_vec())
            });
            assert_same_lines(&parse_tsv(&stdout(&out)), &lines_of(rows));
        }
    }
}

#[test]
fn words_under_levenshtein_equal_the_reference() {
    let s = Scratch::new();
    let w = words();
    s.raw("w.txt", format!("{}\n", w.join("\n")).as_bytes());
    let q: Vec<String> = w.iter().step_by(29).map(|x| format!("{x}b")).collect();
    s.raw("q.txt", format!("{}\n", q.join("\n")).as_bytes());
    let base: Dataset = StringSet::from_strings(&w).unwrap().into();
    let queries: Dataset = StringSet::from_strings(&q).unwrap().into();
    check_answers(
        &s,
        &base,
        &queries,
        "w.txt",
        "q.txt",
        &Metric::Levenshtein,
        &KINDS,
    );
}

#[test]
fn vectors_equal_the_reference() {
    let s = Scratch::new();
    let b = int_rows(200, 3, 5, 4);
    let q = int_rows(12, 3, 6, 4);
    s.raw("b.fvecs", &fvecs(&b));
    s.raw("q.fvecs", &fvecs(&q));
    let set = |rows: &[Vec<f32>]| -> Dataset {
        VectorSet::from_f32(rows.len(), 3, rows.concat())
            .unwrap()
            .into()
    };
    for metric in [Metric::Euclidean, Metric::Cityblock] {
        // The k-d tree takes vectors only.
        let kinds = [&KINDS[..], &["kd"]].concat();
        check_answers(
            &s,
            &set(&b),
            &set(&q),
            "b.fvecs",
            "q.fvecs",
            &metric,
            &kinds,
        );
    }
}

#[test]
fn stats_report_evaluations_against_brute_force() {
    let s = Scratch::new();
    s.raw("w.txt", format!("{}\n", words().join("\n")).as_bytes());
    s.raw("q.txt", b"abc\nddd\n");
    let out = s.run(&[
        "index", "build", "--input", "w.txt", "--kind", "lc", "--out", "i.vidx", "--stats",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let build: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(build["n_items"], 300);
    let out = s.run(&[
        "index", "query", "--index", "i.vidx", "--query", "q.txt", "-k", "3", "--out", "r.tsv",
        "--stats",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let st: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(st["brute_force_evals_per_query"], 300);
    let per_query = st["evals_per_query"].as_f64().unwrap();
    assert!(per_query > 0.0 && per_query <= 300.0, "{st}");
    assert_eq!(st["distance_evals"].as_f64().unwrap(), 2.0 * per_query);
    assert_eq!(
        parse_tsv(&std::fs::read_to_string(s.path("r.tsv")).unwrap()).len(),
        6
    );
}

/// Exit code 2, one line beginning `voisin: error: <prefix>` and containing `needle`, no
/// standard output, and the folder as it was.
fn expect_bad(s: &Scratch, args: &[&str], prefix: &str, needle: &str) {
    let before = listing(s.dir.path());
    let out = s.run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.starts_with(&format!("voisin: error: {prefix}")),
        "{err:?}"
    );
    assert!(err.contains(needle), "{err:?} does not say {needle:?}");
    assert!(out.stdout.is_empty());
    assert_eq!(listing(s.dir.path()), before, "{args:?} changed the folder");
}

fn with_index() -> (Scratch, Vec<u8>) {
    let s = Scratch::new();
    s.raw("w.txt", format!("{}\n", words().join("\n")).as_bytes());
    s.raw("q.txt", b"abc\n");
    s.raw("q.fvecs", &fvecs(&int_rows(2, 3, 1, 3)));
    let out = s.run(&[
        "index", "build", "--input", "w.txt", "--kind", "cover", "--out", "i.vidx",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bytes = std::fs::read(s.path("i.vidx")).unwrap();
    (s, bytes)
}

fn query_bad(s: &Scratch, index: &str, needle: &str) {
    let args = [
        "index", "query", "--index", index, "--query", "q.txt", "-k", "2",
    ];
    expect_bad(s, &args, &format!("{index}: "), needle);
}

#[test]
fn bad_index_files() {
    let (s, good) = with_index();
    query_bad(&s, "w.txt", "not a voisin index file");
    query_bad(&s, "missing.vidx", "cannot read the index");
    s.raw("empty.vidx", b"");
    query_bad(&s, "empty.vidx", "wrong magic");
    let mut v = good.clone();
    v[8] = 9;
    s.raw("version.vidx", &v);
    query_bad(&s, "version.vidx", "version 9 is not supported");
    s.raw("short.vidx", &good[..good.len() / 2]);
    query_bad(&s, "short.vidx", "checksum mismatch");
    s.raw("cut.vidx", &good[..11]);
    query_bad(&s, "cut.vidx", "truncated");
    let mut v = good.clone();
    let mid = v.len() / 2;
    v[mid] ^= 1;
    s.raw("flip.vidx", &v);
    query_bad(&s, "flip.vidx", "checksum mismatch");
}

#[test]
fn bad_arguments_and_inputs() {
    let (s, _) = with_index();
    let q = |extra: &[&'static str]| {
        let mut a = vec!["index", "query", "--index", "i.vidx"];
        a.extend_from_slice(extra);
        a
    };
    expect_bad(
        &s,
        &q(&["--query", "q.fvecs", "-k", "1"]),
        "q.fvecs: ",
        "does not apply to vectors",
    );
    expect_bad(
        &s,
        &q(&["--query", "q.txt", "-k", "0"]),
        "",
        "k must be at least 1",
    );
    expect_bad(
        &s,
        &q(&["--query", "q.txt", "--radius", "-1"]),
        "",
        "radius -1",
    );
    expect_bad(
        &s,
        &q(&["--query", "q.txt", "-k", "1", "--radius", "1"]),
        "",
        "cannot be used with",
    );
    expect_bad(
        &s,
        &q(&["--query", "q.txt", "-k", "1", "--out", "i.vidx.tsv/x.tsv"]),
        "i.vidx.tsv/x.tsv: ",
        "does not exist",
    );
    let b = |extra: &[&'static str]| {
        let mut a = vec!["index", "build", "--input", "w.txt"];
        a.extend_from_slice(extra);
        a
    };
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--metric", "cosine", "--out", "x.vidx"]),
        "",
        "triangle inequality",
    );
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--metric", "euclidean", "--out", "x.vidx"]),
        "w.txt: ",
        "euclidean",
    );
    expect_bad(&s, &b(&["--kind", "kd", "--out", "x.vidx"]), "", "kd");
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--out", "w.txt"]),
        "w.txt: ",
        "would overwrite it",
    );
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--out", "."]),
        ".: ",
        "is a folder",
    );
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--out", "no/x.vidx"]),
        "no/x.vidx: ",
        "does not exist",
    );
    expect_bad(
        &s,
        &b(&["--kind", "cover", "--base", "1", "--out", "x.vidx"]),
        "",
        "base 1 must be > 1",
    );
    expect_bad(
        &s,
        &b(&["--kind", "lc", "--cluster-size", "0", "--out", "x.vidx"]),
        "",
        "cluster size",
    );
}

/// The stats line of a finished run, as JSON.
fn stats_of(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    let err = stderr(out);
    serde_json::from_str(err.lines().last().unwrap()).unwrap()
}

#[test]
fn every_engine_answers_as_brute_force() {
    let s = Scratch::new();
    s.raw("w.txt", format!("{}\n", words().join("\n")).as_bytes());
    s.raw("wq.txt", b"abc\nd\n\nbbbbbbbb\n");
    // 1500 points of a 40 x 40 grid: many duplicates and ties, low intrinsic dimension.
    s.raw("v.fvecs", &fvecs(&int_rows(1500, 2, 3, 40)));
    s.raw("vq.fvecs", &fvecs(&int_rows(1200, 2, 4, 40)));
    let runs: [Vec<&str>; 6] = [
        vec!["knn", "--base", "w.txt", "--query", "wq.txt", "-k", "5"],
        vec![
            "range", "--base", "w.txt", "--query", "wq.txt", "--radius", "2",
        ],
        vec!["graph", "--input", "w.txt", "-k", "7"],
        vec![
            "knn",
            "--base",
            "v.fvecs",
            "--query",
            "vq.fvecs",
            "-k",
            "4",
            "--metric",
            "cityblock",
        ],
        vec![
            "range", "--base", "v.fvecs", "--query", "vq.fvecs", "--radius", "1.5",
        ],
        vec!["graph", "--input", "v.fvecs", "-k", "6"],
    ];
    for args in &runs {
        let with = |engine: &str| {
            let mut a = args.clone();
            a.extend(["--device", "cpu", "--stats", "--engine", engine]);
            let out = s.run(&a);
            (stats_of(&out), stdout(&out))
        };
        let (brute_stats, brute) = with("brute");
        assert_eq!(brute_stats["engine"], "brute", "{args:?}");
        assert!(!brute.is_empty());
        // The k-d tree takes the vectors (its build measures no distance).
        let vectors = args.iter().any(|a| a.ends_with(".fvecs"));
        let kd: &[&str] = if vectors { &["kd"] } else { &[] };
        for &engine in [&["auto", "lc", "sss", "cover"][..], kd].concat().iter() {
            let (st, got) = with(engine);
            assert!(
                got == brute,
                "{args:?} --engine {engine} differs from brute force"
            );
            if engine == "kd" {
                assert_eq!(st["engine"], engine, "{args:?}");
                assert_eq!(st["index_build_evals"].as_u64().unwrap(), 0, "{st}");
            } else if engine != "auto" {
                assert_eq!(st["engine"], engine, "{args:?}");
                assert!(st["index_build_evals"].as_u64().unwrap() > 0, "{st}");
            }
        }
    }
    // auto: an index for the low-dimensional vectors with enough queries; the reason is given.
    let mut a = runs[3].clone();
    a.extend(["--device", "cpu", "--stats"]);
    let st = stats_of(&s.run(&a));
    assert_eq!(st["engine"], "kd", "{st}");
    assert!(
        st["engine_reason"]
            .as_str()
            .unwrap()
            .contains("intrinsic dimension"),
        "{st}"
    );
    assert!(st["intrinsic_dim"].as_f64().unwrap() < 6.0, "{st}");
    // 300 words are too few for an index to pay (range); k-NN over words is brute force.
    let mut a = runs[1].clone();
    a.extend(["--device", "cpu", "--stats"]);
    let st = stats_of(&s.run(&a));
    assert_eq!(st["engine"], "brute", "{st}");
    assert!(
        st["engine_reason"].as_str().unwrap().contains("too few"),
        "{st}"
    );
    let mut a = runs[0].clone();
    a.extend(["--device", "cpu", "--stats"]);
    let st = stats_of(&s.run(&a));
    assert_eq!(st["engine"], "brute", "{st}");
    assert!(
        st["engine_reason"]
            .as_str()
            .unwrap()
            .contains("k-NN over strings"),
        "{st}"
    );
}

/// `index query --device`: a bad value is a usage error (exit 2); without a GPU, cuda is a device
/// error (exit 1, one line, nothing written) and auto answers on the CPU, byte for byte as cpu.
/// On a GPU machine the cover tree of words is refused by cuda with a clear invalid-input error
/// and auto still answers on the CPU.
#[test]
fn index_query_devices() {
    let (s, _) = with_index();
    let q = |dev: &'static str, out: &'static str| {
        vec![
            "index", "query", "--index", "i.vidx", "--query", "q.txt", "-k", "3", "--device", dev,
            "--out", out,
        ]
    };
    let out = s.run(&q("gpu", "x.tsv"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("gpu"), "{}", stderr(&out));
    let cpu = s.run(&q("cpu", "cpu.tsv"));
    assert_eq!(cpu.status.code(), Some(0), "{}", stderr(&cpu));
    let auto = s.run(&q("auto", "auto.tsv"));
    assert_eq!(auto.status.code(), Some(0), "{}", stderr(&auto));
    assert_eq!(
        std::fs::read(s.path("cpu.tsv")).unwrap(),
        std::fs::read(s.path("auto.tsv")).unwrap()
    );
    let before = listing(s.dir.path());
    let cuda = s.run(&q("cuda", "cuda.tsv"));
    let err = stderr(&cuda);
    let want = if voisin_cuda::gpu_available() { 2 } else { 1 };
    assert_eq!(cuda.status.code(), Some(want), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert_eq!(listing(s.dir.path()), before, "a failed query left a file");
}

/// `index build --device`: cpu builds (and says so in --stats, beside the build's distance
/// evaluations); auto writes the same file (the GPU build is the CPU build under euclidean);
/// cuda without a GPU is a device error (exit 1, one line, nothing written). An index that cannot
/// prune (64-d normal data) is warned about in one line naming the input; one over 2-d data is not.
#[test]
fn index_build_devices_and_the_pruning_warning() {
    let s = Scratch::new();
    s.raw("high.fvecs", &fvecs(&normal_rows(2000, 64, 5)));
    s.raw("low.fvecs", &fvecs(&normal_rows(2000, 2, 6)));
    let build = |input: &str, dev: &str, out: &str| {
        s.run(&[
            "index", "build", "--input", input, "--kind", "lc", "--out", out, "--device", dev,
            "--stats",
        ])
    };
    let high = build("high.fvecs", "cpu", "high.vidx");
    let err = stderr(&high);
    assert_eq!(high.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("cannot prune")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].starts_with("voisin: high.fvecs: warning:"),
        "{err}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(err.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(stats["device"], "cpu", "{stats}");
    assert!(
        stats["build_distance_evals"].as_u64().unwrap() > 0,
        "{stats}"
    );
    let low = build("low.fvecs", "cpu", "low.vidx");
    assert_eq!(low.status.code(), Some(0), "{}", stderr(&low));
    assert!(!stderr(&low).contains("warning"), "{}", stderr(&low));
    let auto = build("low.fvecs", "auto", "auto.vidx");
    assert_eq!(auto.status.code(), Some(0), "{}", stderr(&auto));
    assert_eq!(
        std::fs::read(s.path("low.vidx")).unwrap(),
        std::fs::read(s.path("auto.vidx")).unwrap()
    );
    let before = listing(s.dir.path());
    let cuda = build("low.fvecs", "cuda", "cuda.vidx");
    if voisin_cuda::gpu_available() {
        assert_eq!(cuda.status.code(), Some(0), "{}", stderr(&cuda));
        assert_eq!(
            std::fs::read(s.path("low.vidx")).unwrap(),
            std::fs::read(s.path("cuda.vidx")).unwrap()
        );
    } else {
        let err = stderr(&cuda);
        assert_eq!(cuda.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert_eq!(listing(s.dir.path()), before, "a failed build left a file");
    }
}
