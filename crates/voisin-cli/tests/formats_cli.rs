//! Issue 15 through the binary: `--include-self` and `--pairs` against brute force, `.npz` and
//! `.csr.npz` outputs against TSV, `--distances f64`, inputs from `.npz`, CSV and a pipe, the
//! HDF5 `distance` attribute, help texts and usage errors; and, where Python with NumPy and
//! SciPy is available (`VOISIN_PYTHON` or `python3`), one-liners loading every output format,
//! and UMAP's `precomputed_knn` fed from `voisin graph --include-self` when umap-learn is there.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use voisin::metric::exact::item_key;
use voisin::{reference, Dataset, Metric, VectorSet};

fn vectors(rows: &[Vec<f32>]) -> Dataset {
    VectorSet::from_f32(rows.len(), rows[0].len(), rows.concat())
        .unwrap()
        .into()
}

fn ok(s: &Scratch, args: &[&str]) -> String {
    let out = s.run(args);
    assert!(out.status.success(), "args {args:?}: {}", stderr(&out));
    stdout(&out)
}

fn fails(s: &Scratch, args: &[&str]) -> String {
    let out = s.run(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "args {args:?}: {}",
        stderr(&out)
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Tie-heavy data: 60 rows of small integers, duplicates included.
fn tied() -> Vec<Vec<f32>> {
    let mut rows = int_rows(60, 4, 151, 3);
    rows[7] = rows[3].clone();
    rows[40] = rows[3].clone();
    rows
}

#[test]
fn include_self_puts_the_item_first_then_its_k_minus_1_neighbours() {
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    let g = reference::graph(&vectors(&rows), 4, &Metric::Euclidean).unwrap();
    let want: Vec<Line> = expected_lines((0..rows.len()).map(|q| {
        let (ids, ds) = g.row(q);
        let mut row = vec![(q as u32, 0.0)];
        row.extend(ids.iter().copied().zip(ds.iter().copied()));
        (q, row)
    }));
    let got = ok(
        &s,
        &["graph", "--input", "x.fvecs", "-k", "5", "--include-self"],
    );
    assert_same_lines(&parse_tsv(&got), &want);
    let e = fails(
        &s,
        &["graph", "--input", "x.fvecs", "-k", "1", "--include-self"],
    );
    assert!(e.contains("--include-self needs -k 2 or more"), "{e}");
}

/// (min, max, distance) of every pair, sorted, from TSV lines.
fn pair_set(lines: &[Line]) -> Vec<(usize, u32, u32)> {
    let mut v: Vec<(usize, u32, u32)> = lines
        .iter()
        .map(|l| (l.query, l.neighbor, l.distance.to_bits()))
        .collect();
    v.sort();
    v
}

#[test]
fn pairs_hold_each_unordered_pair_once() {
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    let data = vectors(&rows);

    // Range self-join: brute force pairs i < j within the radius.
    let r = reference::range(&data, &data, 1.5, &Metric::Euclidean).unwrap();
    let mut want = Vec::new();
    for q in 0..rows.len() {
        let (ids, ds) = r.row(q);
        for (&j, &d) in ids.iter().zip(ds) {
            if (q as u32) < j {
                want.push((q, j, d.to_bits()));
            }
        }
    }
    want.sort();
    let got = ok(
        &s,
        &[
            "range", "--base", "x.fvecs", "--query", "x.fvecs", "--radius", "1.5", "--pairs",
        ],
    );
    let lines = parse_tsv(&got);
    assert_eq!(pair_set(&lines), want);
    assert!(lines.iter().all(|l| (l.query as u32) < l.neighbor));
    // Within a row: by distance, then index.
    for w in lines.windows(2).filter(|w| w[0].query == w[1].query) {
        assert!((w[0].distance, w[0].neighbor) < (w[1].distance, w[1].neighbor));
    }
    s.raw("y.fvecs", &fvecs(&rows));
    let e = fails(
        &s,
        &[
            "range", "--base", "x.fvecs", "--query", "y.fvecs", "--radius", "1", "--pairs",
        ],
    );
    assert!(e.contains("--pairs is for self-joins"), "{e}");

    // Graph: an edge in either direction, once.
    let g = reference::graph(&data, 3, &Metric::Euclidean).unwrap();
    let mut edges = BTreeSet::new();
    for q in 0..rows.len() {
        let (ids, ds) = g.row(q);
        for (&j, &d) in ids.iter().zip(ds) {
            let (a, b) = ((q as u32).min(j), (q as u32).max(j));
            edges.insert((a as usize, b, d.to_bits()));
        }
    }
    let got = ok(&s, &["graph", "--input", "x.fvecs", "-k", "3", "--pairs"]);
    assert_eq!(
        pair_set(&parse_tsv(&got)),
        edges.into_iter().collect::<Vec<_>>()
    );
}

#[test]
fn npz_outputs_hold_what_tsv_holds_and_f64_distances_are_exact() {
    let s = Scratch::new();
    let rows = normal_rows(50, 6, 152);
    s.raw("x.fvecs", &fvecs(&rows));
    // The 4-NN graph of x.fvecs with `extra` options.
    let graph = |extra: &[&'static str]| -> Vec<&'static str> {
        [&["graph", "--input", "x.fvecs", "-k", "4"][..], extra].concat()
    };
    let tsv = ok(&s, &graph(&[]));
    ok(&s, &graph(&["--out", "g.npz"]));
    ok(&s, &graph(&["--out", "g.csr.npz"]));
    assert_eq!(
        listing(s.dir.path()),
        ["g.csr.npz", "g.npz", "x.fvecs"]
            .iter()
            .map(|n| n.to_string())
            .collect()
    );
    let read = |p: &str| voisin_io::read_dataset(&s.path(p), &Default::default()).unwrap();
    let want: Vec<f32> = parse_tsv(&tsv).iter().map(|l| l.distance).collect();
    for member in ["g.npz:distances", "g.csr.npz:data"] {
        let d = read(member);
        let v = d.as_vectors().unwrap();
        assert_eq!(v.rows_f32(0, v.len()), want, "{member}");
    }

    // --distances f64: the exact values, computed again on the inputs.
    let data = vectors(&rows);
    let exact = ok(&s, &graph(&["--distances", "f64"]));
    for l in exact.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let (q, i): (usize, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let d: f64 = f[2].parse().unwrap();
        let m = Metric::Euclidean;
        assert_eq!(
            d,
            m.key_to_distance(item_key(&m, &data, i, &data, q)),
            "{l}"
        );
    }
    let e = fails(&s, &graph(&["--distances", "f64", "--out", "g.ivecs"]));
    assert!(e.contains("use .npz, .npy or .tsv"), "{e}");
}

#[test]
fn npz_csv_and_piped_inputs_match_fvecs() {
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    s.raw("x.npy", &npy_f32(&rows));
    let csv: String = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        })
        .collect();
    s.raw("X.CSV", format!("a,b,c,d\n{csv}").as_bytes());
    let want = ok(&s, &["graph", "--input", "x.fvecs", "-k", "3"]);
    assert_eq!(ok(&s, &["graph", "--input", "X.CSV", "-k", "3"]), want);
    ok(
        &s,
        &["graph", "--input", "x.fvecs", "-k", "3", "--out", "g.npz"],
    );
    // An .npz member as input (here the graph's f32 distances: 60 vectors of dimension 3).
    let d = ok(&s, &["graph", "--input", "g.npz:distances", "-k", "2"]);
    assert_eq!(parse_tsv(&d).len(), 120);

    // Standard input with --format.
    let mut child = Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(["graph", "--input", "-", "--format", "npy", "-k", "3"])
        .current_dir(s.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&npy_f32(&rows))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), want);
    let e = fails(&s, &["graph", "--input", "-", "-k", "3"]);
    assert!(e.contains("give --format"), "{e}");
}

#[test]
fn hdf5_distance_attribute_sets_the_metric() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data/angular.hdf5");
    let path = f.to_str().unwrap();
    let read = |role| {
        voisin_io::read_dataset(
            &f,
            &voisin_io::ReadOptions {
                role,
                mmap: false,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let (train, test) = (read(voisin_io::Role::Base), read(voisin_io::Role::Query));
    let r = reference::knn(&train, &test, 4, &Metric::Cosine).unwrap();
    let want = expected_lines((0..r.n_queries).map(|q| {
        let (ids, ds) = r.row(q);
        (q, ids.iter().copied().zip(ds.iter().copied()).collect())
    }));
    let s = Scratch::new();
    let args = ["knn", "--base", path, "--query", path, "-k", "4"];
    assert_same_lines(&parse_tsv(&ok(&s, &args)), &want);
    let with = |m: &'static str| [&args[..], &["--metric", m]].concat();
    assert_same_lines(&parse_tsv(&ok(&s, &with("cosine"))), &want);
    let e = fails(&s, &with("euclidean"));
    assert!(
        e.contains("declares distance 'cosine'") && e.contains("--metric euclidean"),
        "{e}"
    );
}

#[test]
fn help_has_examples_and_gpu_options_apart() {
    let s = Scratch::new();
    for cmd in [
        &["knn"][..],
        &["graph"],
        &["range"],
        &["demo"],
        &["index", "build"],
        &["index", "query"],
    ] {
        let help = ok(&s, &[cmd, &["--help"]].concat());
        assert!(help.contains("Example"), "{cmd:?}: {help}");
        if ["knn", "graph", "range"].contains(&cmd[0]) {
            assert!(help.contains("GPU options:"), "{cmd:?}: {help}");
            let gpu = help.split("GPU options:").nth(1).unwrap();
            assert!(
                gpu.contains("--gpus") && gpu.contains("--precision"),
                "{help}"
            );
        }
    }
    let build = ok(&s, &["index", "build", "--help"]);
    assert!(build.contains("--radius-base"), "{build}");
    let query = ok(&s, &["index", "query", "--help"]);
    assert!(query.contains("[default: auto]"), "{query}");
    // The old name still parses (hidden alias) and usage errors name the subcommand's help.
    let e = fails(
        &s,
        &["index", "build", "--input", "x.fvecs", "--base", "1.5"],
    );
    assert!(e.ends_with("(see voisin index build --help)\n"), "{e}");
    assert!(
        e.contains("required arguments") && !e.contains("unexpected argument"),
        "{e}"
    );
    let e = fails(&s, &["graph", "--input", "x.fvecs"]);
    assert!(e.ends_with("(see voisin graph --help)\n"), "{e}");
}

/// The Python that the format one-liners run with: `VOISIN_PYTHON`, else `python3`, when it has
/// NumPy and SciPy; `None` (and a note on stderr) otherwise.
fn python_with(modules: &str) -> Option<String> {
    let py = std::env::var("VOISIN_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = Command::new(&py)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: {py} lacks {modules} (set VOISIN_PYTHON to a Python that has them)");
    }
    found.then_some(py)
}

fn python(py: &str, dir: &Path, code: &str) -> String {
    let out = Command::new(py)
        .args(["-c", code])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{code}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn python_loads_every_output_format() {
    let Some(py) = python_with("numpy, scipy") else {
        return;
    };
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    for out in ["g.npz", "g.csr.npz", "g.npy", "g.tsv", "g.ivecs", "f.npz"] {
        let mut args = vec!["graph", "--input", "x.fvecs", "-k", "3", "--out", out];
        if out == "f.npz" {
            args.extend(["--distances", "f64"]);
        }
        ok(&s, &args);
    }
    ok(
        &s,
        &[
            "range", "--base", "x.fvecs", "--query", "x.fvecs", "--radius", "1", "--out", "r.npz",
        ],
    );
    // Each one-liner prints the indices as a flat list of the rows' neighbours.
    let want = python(
        &py,
        s.dir.path(),
        "import numpy as np; print(np.load('g.npz')['indices'].ravel().tolist())",
    );
    let one_liners = [
        "import scipy.sparse as sp; m = sp.load_npz('g.csr.npz'); assert m.shape == (60, 60); print(m.indices.tolist())",
        "import numpy as np; print(np.load('g.indices.npy').ravel().tolist())",
        "import numpy as np; print(np.loadtxt('g.tsv', usecols=1, dtype=np.int64).tolist())",
        "import numpy as np; a = np.fromfile('g.ivecs', dtype='<i4').reshape(-1, 4); assert (a[:, 0] == 3).all(); print(a[:, 1:].ravel().tolist())",
        "import numpy as np; f = np.load('f.npz'); assert f['distances'].dtype == np.float64; print(f['indices'].ravel().tolist())",
    ];
    for code in one_liners {
        assert_eq!(python(&py, s.dir.path(), code), want, "{code}");
    }
    // Distances agree across formats; range offsets are CSR row starts.
    python(&py, s.dir.path(), "import numpy as np, scipy.sparse as sp; d = np.load('g.npz')['distances']; \
        assert (sp.load_npz('g.csr.npz').data == d.ravel()).all(); \
        assert (np.load('g.distances.npy') == d).all(); \
        assert (np.fromfile('g.fvecs', dtype='<f4').reshape(-1, 4)[:, 1:] == d).all(); \
        assert (np.load('f.npz')['distances'].astype(np.float32) == d).all(); \
        r = np.load('r.npz'); o = r['offsets']; assert o[0] == 0 and o[-1] == len(r['indices']) == len(r['distances'])");
}

#[test]
fn umap_takes_the_include_self_graph_as_is() {
    let Some(py) = python_with("numpy, scipy, umap") else {
        return;
    };
    let s = Scratch::new();
    s.raw("x.fvecs", &fvecs(&normal_rows(300, 8, 153)));
    for out in ["g.npz", "g.csr.npz"] {
        let args = [
            "graph",
            "--input",
            "x.fvecs",
            "--out",
            out,
            "--include-self",
            "-k",
            "15",
        ];
        ok(&s, &args);
    }
    let out = python(&py, s.dir.path(), "import numpy as np, umap, scipy.sparse as sp; \
        g = np.load('g.npz'); X = np.fromfile('x.fvecs', dtype='<f4').reshape(-1, 9)[:, 1:]; \
        assert (g['indices'][:, 0] == np.arange(len(X))).all(); \
        m = sp.load_npz('g.csr.npz'); assert m.shape == (300, 300); \
        e = umap.UMAP(n_neighbors=15, precomputed_knn=(g['indices'], g['distances']), random_state=0).fit_transform(X); \
        print(e.shape)");
    assert_eq!(out, "(300, 2)");
}

#[test]
fn index_query_stats_follow_the_shared_schema() {
    let s = Scratch::new();
    s.raw("x.fvecs", &fvecs(&normal_rows(40, 3, 154)));
    let json = |args: &[&str]| -> serde_json::Value {
        let out = s.run(args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(stderr(&out).trim()).unwrap()
    };
    let knn = json(&[
        "knn", "--base", "x.fvecs", "--query", "x.fvecs", "-k", "3", "--stats",
    ]);
    ok(
        &s,
        &[
            "index", "build", "--input", "x.fvecs", "--kind", "lc", "--out", "x.vidx",
        ],
    );
    let query = json(&[
        "index", "query", "--index", "x.vidx", "--query", "x.fvecs", "-k", "3", "--stats",
    ]);
    for key in knn.as_object().unwrap().keys() {
        if !key.starts_with("engine") && !key.starts_with("index_") && key != "intrinsic_dim" {
            assert!(query.get(key).is_some(), "index query lacks {key}: {query}");
        }
    }
    for phase in knn["time_s"].as_object().unwrap().keys() {
        assert!(query["time_s"][phase].is_f64(), "{phase}: {query}");
    }
    assert_eq!(query["command"], "index query");
    assert_eq!(query["results"], knn["results"]);
}

#[test]
fn parquet_input_matches_npy() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data");
    let s = Scratch::new();
    let run = |name: &str| {
        let p = data.join(name);
        ok(&s, &["graph", "--input", p.to_str().unwrap(), "-k", "2"])
    };
    let want = run("c_f32.npy");
    for name in [
        "fixed_list.parquet",
        "columns.parquet",
        "two_lists.parquet:vec",
    ] {
        assert_eq!(run(name), want, "{name}");
    }
}

/// TSV lines of `n` result rows (`row(q)`: ids and distances of query `q`).
fn lines_of<'a>(n: usize, row: impl Fn(usize) -> (&'a [u32], &'a [f32])) -> Vec<Line> {
    expected_lines((0..n).map(|q| {
        let (ids, ds) = row(q);
        (q, ids.iter().copied().zip(ds.iter().copied()).collect())
    }))
}

/// TSV lines of a range-style result.
fn rows_lines(r: &voisin::RangeResult) -> Vec<Line> {
    lines_of(r.n_queries(), |q| r.row(q))
}

#[test]
fn ties_all_returns_every_item_at_the_kth_distance() {
    let s = Scratch::new();
    let rows = tied();
    let queries = int_rows(15, 4, 152, 3);
    s.raw("x.fvecs", &fvecs(&rows));
    s.raw("q.fvecs", &fvecs(&queries));
    let (data, q) = (vectors(&rows), vectors(&queries));
    let run = |cmd: &[&str], metric: &str, engine: &str, k: &str, ties: &str| {
        let common = [
            "--metric", metric, "--engine", engine, "-k", k, "--ties", ties,
        ];
        ok(&s, &[cmd, &common[..]].concat())
    };
    let knn = ["knn", "--base", "x.fvecs", "--query", "q.fvecs"];
    let graph = ["graph", "--input", "x.fvecs"];
    for (metric, engines) in [
        ("euclidean", &["brute", "lc", "kd", "cover"][..]),
        ("cityblock", &["brute", "sss"]),
        ("inner_product", &["brute"]),
        ("cosine", &["brute"]),
    ] {
        let m: Metric = metric.parse().unwrap();
        for k in [1usize, 5] {
            let want_knn = reference::knn_ties(&data, &q, k, &m).unwrap();
            let want_graph = reference::graph_ties(&data, k, &m).unwrap();
            assert!(want_graph.indices.len() > rows.len() * k, "ties at k={k}");
            for engine in engines {
                let (ks, what) = (k.to_string(), format!("{metric} {engine} k={k}"));
                let got = run(&knn, metric, engine, &ks, "all");
                assert_same_lines(&parse_tsv(&got), &rows_lines(&want_knn));
                let got = run(&graph, metric, engine, &ks, "all");
                assert_same_lines(&parse_tsv(&got), &rows_lines(&want_graph));
                // --ties first is the default: exactly k.
                let plain = run(&graph, metric, engine, &ks, "first");
                let default = ok(&s, &[&graph[..], &["--metric", metric, "-k", &ks]].concat());
                let want = reference::graph(&data, k, &m).unwrap();
                assert_eq!(parse_tsv(&plain).len(), rows.len() * k, "{what}");
                assert_same_lines(&parse_tsv(&plain), &knn_rows(&want));
                assert_same_lines(&parse_tsv(&default), &knn_rows(&want));
            }
        }
    }
    // Strings: edit distances are integers, ties everywhere (auto takes an index for them).
    let words = ["ab", "ba", "abc", "b", "a", "", "abc", "cab", "bb", "aa"];
    s.raw("w.txt", words.join("\n").as_bytes());
    let set: Dataset = voisin::StringSet::from_strings(words).unwrap().into();
    let want = reference::graph_ties(&set, 2, &Metric::Levenshtein).unwrap();
    for engine in ["auto", "brute", "lc"] {
        let got = ok(
            &s,
            &[
                "graph", "--input", "w.txt", "-k", "2", "--ties", "all", "--engine", engine,
            ],
        );
        assert_same_lines(&parse_tsv(&got), &rows_lines(&want));
    }
}

/// k-NN rows as TSV lines.
fn knn_rows(r: &voisin::KnnResult) -> Vec<Line> {
    lines_of(r.n_queries, |q| r.row(q))
}

#[test]
fn ties_all_goes_with_include_self_pairs_and_checkpoints() {
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    let data = vectors(&rows);
    let others = reference::graph_ties(&data, 3, &Metric::Euclidean).unwrap();
    let graph = |extra: &[&'static str]| -> Vec<&'static str> {
        [&["graph", "--input", "x.fvecs", "--ties", "all"][..], extra].concat()
    };
    // --include-self -k 4: the item, then its 3 nearest others and their ties.
    let want = expected_lines((0..rows.len()).map(|q| {
        let (ids, ds) = others.row(q);
        let mut row = vec![(q as u32, 0.0)];
        row.extend(ids.iter().copied().zip(ds.iter().copied()));
        (q, row)
    }));
    let got = ok(&s, &graph(&["-k", "4", "--include-self"]));
    assert_same_lines(&parse_tsv(&got), &want);
    // --pairs: each edge of the tied graph once.
    let mut edges = BTreeSet::new();
    for q in 0..rows.len() {
        let (ids, ds) = others.row(q);
        for (&j, &d) in ids.iter().zip(ds) {
            edges.insert(((q as u32).min(j) as usize, (q as u32).max(j), d.to_bits()));
        }
    }
    let got = ok(&s, &graph(&["-k", "3", "--pairs"]));
    assert_eq!(
        pair_set(&parse_tsv(&got)),
        edges.into_iter().collect::<Vec<_>>()
    );
    // A checkpointed build gives the same rows.
    let printed = ok(&s, &graph(&["-k", "3"]));
    let dir = s.path("ckpt");
    let checkpointed = ok(
        &s,
        &[
            &graph(&["-k", "3"])[..],
            &["--checkpoint", dir.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(checkpointed, printed);
    // --distances f64: the same rows with their exact distances.
    let exact = ok(&s, &graph(&["-k", "3", "--distances", "f64"]));
    let wide: Vec<(usize, u32, f64)> = exact
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let lines = parse_tsv(&printed);
    assert_eq!(wide.len(), lines.len());
    let m = Metric::Euclidean;
    for ((q, i, d), l) in wide.into_iter().zip(&lines) {
        assert_eq!((q, i), (l.query, l.neighbor));
        let key = item_key(&m, &data, i as usize, &data, q);
        assert_eq!(d, m.key_to_distance(key));
    }
}

/// The little-endian values after an `.npy` header.
fn npy_values<const N: usize>(bytes: &[u8]) -> Vec<[u8; N]> {
    let start = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    bytes[start..]
        .chunks(N)
        .map(|c| c.try_into().unwrap())
        .collect()
}

#[test]
fn ties_all_writes_range_style_files() {
    let s = Scratch::new();
    let rows = tied();
    s.raw("x.fvecs", &fvecs(&rows));
    let want = reference::graph_ties(&vectors(&rows), 2, &Metric::Euclidean).unwrap();
    let graph = |out: &'static str| {
        [
            "graph", "--input", "x.fvecs", "-k", "2", "--ties", "all", "--out", out,
        ]
    };
    for out in ["g.npz", "g.csr.npz", "g.npy", "g.ivecs", "g.tsv"] {
        ok(&s, &graph(out));
    }
    let tsv = std::fs::read_to_string(s.path("g.tsv")).unwrap();
    assert_same_lines(&parse_tsv(&tsv), &rows_lines(&want));
    // .npy: indices, distances and the CSR offsets beside them.
    let offsets: Vec<i64> = npy_values::<8>(&std::fs::read(s.path("g.offsets.npy")).unwrap())
        .into_iter()
        .map(i64::from_le_bytes)
        .collect();
    let want_offsets: Vec<i64> = want.offsets.iter().map(|&o| o as i64).collect();
    assert_eq!(offsets, want_offsets);
    let ids: Vec<i64> = npy_values::<8>(&std::fs::read(s.path("g.indices.npy")).unwrap())
        .into_iter()
        .map(i64::from_le_bytes)
        .collect();
    assert_eq!(
        ids,
        want.indices
            .iter()
            .map(|&i| i64::from(i))
            .collect::<Vec<_>>()
    );
    // .ivecs: rows of their own length.
    let ivecs = std::fs::read(s.path("g.ivecs")).unwrap();
    let mut at = 0;
    for q in 0..rows.len() {
        let len = i32::from_le_bytes(ivecs[at..at + 4].try_into().unwrap()) as usize;
        let row: Vec<u32> = (0..len)
            .map(|j| {
                i32::from_le_bytes(ivecs[at + 4 + 4 * j..at + 8 + 4 * j].try_into().unwrap()) as u32
            })
            .collect();
        assert_eq!(row, want.row(q).0, "row {q}");
        at += 4 + 4 * len;
    }
    assert_eq!(at, ivecs.len());
    // .npz and .csr.npz hold the same values.
    let read = |p: &str| voisin_io::read_dataset(&s.path(p), &Default::default()).unwrap();
    for member in ["g.npz:distances", "g.csr.npz:data"] {
        let d = read(member);
        let v = d.as_vectors().unwrap();
        assert_eq!(v.rows_f32(0, v.len()), want.distances, "{member}");
    }
    if let Some(py) = python_with("numpy, scipy") {
        let check = "import numpy as np, scipy.sparse as sp; g = np.load('g.npz'); \
            o = g['offsets']; m = sp.load_npz('g.csr.npz'); \
            assert (m.indptr == o).all() and (m.indices == g['indices']).all(); \
            assert m.shape == (60, 60) and (np.diff(o) >= 2).all(); print(int(o[-1]))";
        let total = python(&py, s.dir.path(), check);
        assert_eq!(total, want.indices.len().to_string());
    }
}
