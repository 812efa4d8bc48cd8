//! The hostile corpus of issue 40 on files, arguments and declared metadata: one table of cases,
//! run by [`run_case`], plus the cases that need bytes a command line cannot spell.
//!
//! | class | what | cases |
//! |---|---|---|
//! | 1 | an output that is an input: member syntax (`X.npz:train`, `t.parquet:emb`), hard links, standard input redirected from the output, through a link | `class1_*` |
//! | 4 | `--pairs` over two sets of one file (`train`/`test` of `.hdf5`, `.npz`) | `class4_*` |
//! | 5 | an output inside the `--checkpoint` folder (a two-file output hung on the folder lock) | `class5_*` |
//! | 6 | hostile `.npz`: inflation past the memory budget, a bomb, duplicate member names | `class6_*` |
//! | 7 | CSV: numeric headers (`--header yes\|no\|auto`), empty fields | `class7_*` |
//! | 8 | declared metrics: query files, standard input, conflicts, an integer attribute | `class8_*` |
//! | 9 | `--distances f64` into `.ivecs`, CSV values beyond f32, standard input twice, non-UTF-8 member syntax, f64 queries of an index, forged checkpoint lists with a duplicate neighbour | `class9_*` |
//!
//! Each failing case: the documented exit code, exactly one error line holding the case's words
//! (a word starting with `!` must be absent), nothing on standard output, no temporary file
//! left, and the folder byte-identical afterwards. A run that does not end within a minute
//! (the class 5 deadlock) fails the case.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::faults::*;
use common::*;

/// Where the case's standard input comes from.
#[derive(Clone, Copy)]
enum Stdin {
    Null,
    /// This file of the case's folder.
    File(&'static str),
}

/// What must come of a case.
#[derive(Clone, Copy)]
enum Expect {
    /// Exit code and words of the one error line; the folder unchanged.
    Fail(i32, &'static [&'static str]),
    /// Success, and this check of the folder and the output.
    Ok(fn(&Scratch, &Output)),
}

struct Case {
    name: &'static str,
    setup: fn(&Scratch),
    args: &'static str,
    stdin: Stdin,
    expect: Expect,
    /// Text files written before `setup` runs.
    files: &'static [(&'static str, &'static str)],
}

const fn fails(
    name: &'static str,
    setup: fn(&Scratch),
    args: &'static str,
    needles: &'static [&'static str],
) -> Case {
    Case {
        name,
        setup,
        args,
        stdin: Stdin::Null,
        expect: Expect::Fail(2, needles),
        files: &[],
    }
}

const fn works(
    name: &'static str,
    setup: fn(&Scratch),
    args: &'static str,
    check: fn(&Scratch, &Output),
) -> Case {
    Case {
        name,
        setup,
        args,
        stdin: Stdin::Null,
        expect: Expect::Ok(check),
        files: &[],
    }
}

/// The case with these text files in its folder.
const fn with(mut c: Case, files: &'static [(&'static str, &'static str)]) -> Case {
    c.files = files;
    c
}

const fn reading(mut c: Case, file: &'static str) -> Case {
    c.stdin = Stdin::File(file);
    c
}

fn fixture(s: &Scratch, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data");
    std::fs::copy(dir.join(name), s.path(name)).unwrap();
}

/// A folder with plain sets: `b5.fvecs` (20 x 5) and `q5.fvecs` (3 x 5), `base.fvecs`
/// (30 x 4) and `q.fvecs` (5 x 4).
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.raw("b5.fvecs", &fvecs(&int_rows(20, 5, 3, 7)));
    s.raw("q5.fvecs", &fvecs(&int_rows(3, 5, 4, 7)));
    s.raw("base.fvecs", &fvecs(&normal_rows(30, 4, 1)));
    s.raw("q.fvecs", &fvecs(&normal_rows(5, 4, 2)));
    s
}

fn run_timed(s: &Scratch, args: &[&str], stdin: Stdin) -> Output {
    let input = match stdin {
        Stdin::Null => Stdio::null(),
        Stdin::File(f) => std::fs::File::open(s.path(f)).unwrap().into(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(args)
        .current_dir(s.dir.path())
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} did not end within a minute (a deadlock?): {}",
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The one-line failure check, with `!word` for words that must be absent.
fn check_line(out: &Output, args: &[&str], code: i32, needles: &[&str]) {
    let (absent, present): (Vec<&str>, Vec<&str>) =
        needles.iter().partition(|n| n.starts_with('!'));
    check_fail(out, args, code, &present);
    let err = stderr(out);
    for a in absent {
        assert!(!err.contains(&a[1..]), "{err:?} says {:?}", &a[1..]);
    }
}

fn run_case(c: &Case) {
    let s = scratch();
    for (name, text) in c.files {
        s.raw(name, text.as_bytes());
    }
    (c.setup)(&s);
    let args: Vec<&str> = c.args.split_whitespace().collect();
    let before = snapshot(s.dir.path());
    let out = run_timed(&s, &args, c.stdin);
    let left = temporaries(s.dir.path());
    assert!(left.is_empty(), "{}: left {left:?}", c.name);
    match c.expect {
        Expect::Fail(code, needles) => {
            check_line(&out, &args, code, needles);
            assert_eq!(snapshot(s.dir.path()), before, "{}: files changed", c.name);
        }
        Expect::Ok(check) => {
            assert_eq!(out.status.code(), Some(0), "{}: {}", c.name, stderr(&out));
            check(&s, &out);
        }
    }
}

/// Runs every case of a class, each to its end, and fails naming those that failed.
fn run_class(prefix: &str) {
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .collect();
    assert!(!cases.is_empty(), "no case of {prefix}");
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| {
            let ok = std::panic::catch_unwind(|| run_case(c)).is_ok();
            eprintln!("case {}: {}", if ok { "ok" } else { "FAILED" }, c.name);
            !ok
        })
        .map(|c| c.name)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed: {failed:#?}",
        failed.len(),
        cases.len()
    );
}

// --- setups ---

fn nothing(_: &Scratch) {}

fn arrays(s: &Scratch) {
    fixture(s, "arrays.npz");
}

fn parquet(s: &Scratch) {
    fixture(s, "fixed_list.parquet");
}

fn index_of_arrays(s: &Scratch) {
    fixture(s, "arrays.npz");
    let out = s.run(&[
        "index",
        "build",
        "--input",
        "arrays.npz:train",
        "--kind",
        "lc",
        "--out",
        "i.vidx",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn tsv_data(s: &Scratch) {
    s.raw("data.tsv", b"0.5\t1\n2\t3\n4.5\t5\n6\t7.25\n");
}

fn ckpt_folder(s: &Scratch) {
    std::fs::create_dir(s.path("ck")).unwrap();
}

fn hdf5s(s: &Scratch) {
    for f in ["ann.hdf5", "angular.hdf5", "int_distance.hdf5"] {
        fixture(s, f);
    }
}

/// The `--stats` line's field `key`.
fn stat(out: &Output, key: &str) -> serde_json::Value {
    let err = stderr(out);
    let line = err.lines().last().expect("a stats line");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON stats");
    v[key].clone()
}

fn metric_is(out: &Output, want: &str) {
    assert_eq!(stat(out, "metric"), want, "{}", stderr(out));
}

fn n_base_is(out: &Output, want: u64) {
    assert_eq!(stat(out, "n_base"), want, "{}", stderr(out));
}

const CASES: &[Case] = &[
    // --- class 1: an output that is an input ---
    fails(
        "class1 knn results over the archive its base and queries come from",
        arrays,
        "knn --base arrays.npz:train --query arrays.npz:test -k 2 --out arrays.npz",
        &["arrays.npz: ", "input"],
    ),
    fails(
        "class1 a graph over the archive it was read from",
        arrays,
        "graph --input arrays.npz:train -k 2 --out arrays.npz",
        &["arrays.npz: ", "input"],
    ),
    fails(
        "class1 range results over their queries' archive",
        arrays,
        "range --base arrays.npz:train --query arrays.npz:test --radius 9 --out ./arrays.npz",
        &["arrays.npz: ", "input"],
    ),
    fails(
        "class1 an index over the Parquet table it indexes",
        parquet,
        "index build --input fixed_list.parquet:emb --kind lc --out fixed_list.parquet",
        &["fixed_list.parquet: ", "input"],
    ),
    fails(
        "class1 an index over its table through a link",
        |s| {
            fixture(s, "fixed_list.parquet");
            std::os::unix::fs::symlink("fixed_list.parquet", s.path("l.parquet")).unwrap();
        },
        "index build --input l.parquet:emb --kind sss --out fixed_list.parquet",
        &["fixed_list.parquet: ", "input"],
    ),
    fails(
        "class1 index query results over the archive of its queries",
        index_of_arrays,
        "index query --index i.vidx --query arrays.npz:test -k 2 --out arrays.npz",
        &["arrays.npz: ", "input"],
    ),
    fails(
        "class1 an output that is a hard link of the input",
        |s| {
            tsv_data(s);
            std::fs::hard_link(s.path("data.tsv"), s.path("copy.tsv")).unwrap();
        },
        "graph --input data.tsv -k 2 --out copy.tsv",
        &["copy.tsv: ", "input"],
    ),
    fails(
        "class1 an output that is a hard link of the index",
        |s| {
            index_of_arrays(s);
            std::fs::hard_link(s.path("i.vidx"), s.path("copy.npz")).unwrap();
        },
        "index query --index i.vidx --query arrays.npz:test -k 2 --out copy.npz",
        &["copy.npz: ", "input"],
    ),
    reading(
        fails(
            "class1 standard input redirected from the output",
            tsv_data,
            "graph --input - --format tsv -k 2 --out data.tsv",
            &["data.tsv: ", "standard input"],
        ),
        "data.tsv",
    ),
    reading(
        fails(
            "class1 standard input redirected from a companion of the output",
            |s| {
                s.raw("r.ivecs", &[]);
                s.raw("r.fvecs", &fvecs(&int_rows(6, 2, 9, 5)));
            },
            "graph --input - --format fvecs -k 2 --out r.ivecs",
            &["r.ivecs: ", "r.fvecs", "standard input"],
        ),
        "r.fvecs",
    ),
    // --- class 4: --pairs over two sets of one file ---
    fails(
        "class4 pairs over the train and test of one HDF5 file",
        hdf5s,
        "range --base ann.hdf5 --query ann.hdf5 --radius 1 --pairs",
        &["ann.hdf5: ", "--pairs", "'train'", "'test'"],
    ),
    fails(
        "class4 pairs over the train and test of one archive",
        arrays,
        "range --base arrays.npz --query arrays.npz --radius 1 --pairs",
        &["arrays.npz: ", "--pairs", "'train'", "'test'"],
    ),
    fails(
        "class4 pairs over two named members of one archive",
        arrays,
        "range --base arrays.npz:train --query arrays.npz:test --radius 1 --pairs",
        &["arrays.npz", "--pairs", "'train'", "'test'"],
    ),
    works(
        "class4 pairs over one member read twice",
        arrays,
        "range --base arrays.npz:train --query ./arrays.npz:train --radius 4 --pairs --out p.npz",
        |s, _| assert!(s.path("p.npz").exists()),
    ),
    works(
        "class4 pairs over the only array of an archive",
        |s| fixture(s, "one_z.npz"),
        "range --base one_z.npz --query one_z.npz --radius 4 --pairs --out p.npz",
        |s, _| assert!(s.path("p.npz").exists()),
    ),
    // --- class 5: outputs inside the checkpoint folder ---
    fails(
        "class5 a two-file output written into the checkpoint folder",
        ckpt_folder,
        "graph --input base.fvecs -k 2 --checkpoint ck --out ck/g.ivecs",
        &["ck/g.ivecs: ", "checkpoint folder"],
    ),
    fails(
        "class5 a resume with its output inside the checkpoint folder",
        ckpt_folder,
        "graph --input base.fvecs -k 2 --checkpoint ck --resume --out ck/g.npy",
        &["checkpoint folder"],
    ),
    fails(
        "class5 an output into the checkpoint folder through a link",
        |s| {
            ckpt_folder(s);
            std::os::unix::fs::symlink("ck", s.path("l")).unwrap();
        },
        "graph --input base.fvecs -k 2 --checkpoint ck --out l/g.ivecs",
        &["l/g.ivecs: ", "checkpoint folder"],
    ),
    fails(
        "class5 an output into the checkpoint folder by another path",
        ckpt_folder,
        "graph --input base.fvecs -k 2 --checkpoint ./ck/ --out ck/../ck/g.npy",
        &["ck/../ck/g.npy: ", "checkpoint folder"],
    ),
    fails(
        "class5 a one-file output into the checkpoint folder",
        ckpt_folder,
        "graph --input base.fvecs -k 2 --checkpoint ck --out ck/g.npz",
        &["ck/g.npz: ", "checkpoint folder"],
    ),
    fails(
        "class5 an output into a checkpoint folder still to be made",
        nothing,
        "graph --input base.fvecs -k 2 --checkpoint ck --out ck/g.tsv",
        &["ck/g.tsv: ", "checkpoint folder"],
    ),
    // --- class 6: hostile archives ---
    fails(
        "class6 an archive holding two members of one name",
        |s| {
            let a = npy_f32(&int_rows(4, 2, 1, 5));
            let b = npy_f32(&int_rows(3, 2, 2, 5));
            s.raw(
                "dup.npz",
                &zip(&[("train.npy", &a, false), ("train.npy", &b, false)]),
            );
        },
        "graph --input dup.npz -k 2",
        &["dup.npz: ", "train.npy", "two members"],
    ),
    fails(
        "class6 a named member that two members share",
        |s| {
            let a = npy_f32(&int_rows(4, 2, 1, 5));
            let t = npy_f32(&int_rows(2, 2, 3, 5));
            s.raw(
                "dup.npz",
                &zip(&[
                    ("emb.npy", &a, true),
                    ("test.npy", &t, false),
                    ("emb.npy", &a, true),
                ]),
            );
        },
        "knn --base dup.npz:emb --query dup.npz:test -k 2",
        &["dup.npz: ", "emb.npy", "two members"],
    ),
    fails(
        "class6 a deflated member larger than the memory budget",
        |s| {
            s.raw("z.npz", &zeros_npz(1 << 21, 4));
        },
        "graph --input z.npz -k 2 --memory 4M",
        &["z.npz: ", "train.npy", "memory budget", "--memory"],
    ),
    fails(
        "class6 an archive that inflates to 1.5 GiB, past the default budget",
        |s| {
            s.raw("bomb.npz", &zeros_npz(6 << 20, 64));
        },
        "graph --input bomb.npz -k 2",
        &[
            "bomb.npz: ",
            "memory budget",
            "!panicked",
            "!memory allocation",
        ],
    ),
    works(
        "class6 a deflated member within the budget",
        |s| {
            s.raw("z.npz", &zeros_npz(1 << 12, 4));
        },
        "graph --input z.npz -k 1 --memory 4M --stats",
        |_, out| n_base_is(out, 1 << 12),
    ),
    // --- class 7: CSV headers and empty fields ---
    with(
        works(
            "class7 the column numbers pandas writes above decimal rows are a header",
            nothing,
            "graph --input p.csv -k 1 --stats",
            |_, out| n_base_is(out, 3),
        ),
        &[("p.csv", "0,1,2\n0.5,1,2\n3,4.25,5\n6,7,8.5\n")],
    ),
    with(
        works(
            "class7 the column numbers of a TSV above decimal rows are a header",
            nothing,
            "graph --input p.tsv -k 1 --stats",
            |_, out| n_base_is(out, 2),
        ),
        &[("p.tsv", "0\t1\n0.5\t1\n3\t4.25\n")],
    ),
    with(
        fails(
            "class7 column numbers above whole numbers are ambiguous under auto",
            nothing,
            "graph --input a.csv -k 1",
            &["a.csv: ", "line 1", "--header yes", "--header no"],
        ),
        &[("a.csv", "0,1,2\n3,4,5\n6,7,8\n")],
    ),
    with(
        works(
            "class7 --header no reads a numeric first line as data",
            nothing,
            "graph --input a.csv -k 1 --header no --stats",
            |_, out| n_base_is(out, 3),
        ),
        &[("a.csv", "0,1,2\n3,4,5\n6,7,8\n")],
    ),
    with(
        works(
            "class7 --header yes skips a numeric first line",
            nothing,
            "graph --input a.csv -k 1 --header yes --stats",
            |_, out| n_base_is(out, 2),
        ),
        &[("a.csv", "0,1,2\n3,4,5\n6,7,8\n")],
    ),
    with(
        fails(
            "class7 --header no on a text header",
            nothing,
            "graph --input h.csv -k 1 --header no",
            &["h.csv: ", "line 1", "not a number"],
        ),
        &[("h.csv", "x,y\n1,2\n3,4\n")],
    ),
    with(
        fails(
            "class7 a first row with an empty field",
            nothing,
            "graph --input e.csv -k 1",
            &["e.csv: ", "line 1", "field 2", "empty"],
        ),
        &[("e.csv", "1,,3\n4,5,6\n7,8,9\n")],
    ),
    with(
        fails(
            "class7 an empty field further down",
            nothing,
            "graph --input e.csv -k 1",
            &["e.csv: ", "line 3", "field 3", "empty"],
        ),
        &[("e.csv", "1,2,3\n4,5,6\n7,8,\n")],
    ),
    with(
        fails(
            "class7 the index column pandas writes",
            nothing,
            "graph --input i.csv -k 1",
            &["i.csv: ", "line 1", "field 1", "empty", "index"],
        ),
        &[("i.csv", ",0,1\n0,0.5,1.5\n1,2.5,3.5\n")],
    ),
    with(
        fails(
            "class7 an empty field in a query file",
            nothing,
            "knn --base base.fvecs --query e.tsv -k 1",
            &["e.tsv: ", "line 2", "field 1", "empty"],
        ),
        &[("e.tsv", "1\t2\t3\t4\n\t5\t6\t7\n")],
    ),
    // --- class 8: declared metrics ---
    works(
        "class8 a plain base with an angular query file runs cosine",
        hdf5s,
        "knn --base b5.fvecs --query angular.hdf5 -k 2 --stats",
        |_, out| metric_is(out, "cosine"),
    ),
    fails(
        "class8 a euclidean base with an angular query file",
        hdf5s,
        "knn --base ann.hdf5 --query angular.hdf5 -k 2",
        &["angular.hdf5: ", "angular", "euclidean", "ann.hdf5"],
    ),
    fails(
        "class8 --metric against the query file's declaration",
        hdf5s,
        "knn --base b5.fvecs --query angular.hdf5 -k 2 --metric euclidean",
        &["angular.hdf5: ", "angular", "--metric euclidean"],
    ),
    reading(
        works(
            "class8 an HDF5 base on standard input declares its metric",
            hdf5s,
            "knn --base - --format hdf5 --query q5.fvecs -k 2 --stats",
            |_, out| metric_is(out, "cosine"),
        ),
        "angular.hdf5",
    ),
    reading(
        works(
            "class8 an HDF5 graph input on standard input declares its metric",
            hdf5s,
            "graph --input - --format hdf5 -k 2 --stats",
            |_, out| metric_is(out, "cosine"),
        ),
        "angular.hdf5",
    ),
    reading(
        fails(
            "class8 an HDF5 query file on standard input against --metric",
            hdf5s,
            "knn --base b5.fvecs --query - --format hdf5 -k 2 --metric cityblock",
            &["-: ", "'cosine'", "--metric cityblock"],
        ),
        "angular.hdf5",
    ),
    works(
        "class8 an integer distance attribute with --metric",
        hdf5s,
        "knn --base int_distance.hdf5 --query int_distance.hdf5 -k 2 --metric cityblock --stats",
        |_, out| metric_is(out, "cityblock"),
    ),
    works(
        "class8 an index built from a file with an integer distance attribute and --metric",
        hdf5s,
        "index build --input int_distance.hdf5 --kind lc --metric euclidean --out i.vidx",
        |s, _| assert!(s.path("i.vidx").exists()),
    ),
    fails(
        "class8 an integer distance attribute without --metric",
        hdf5s,
        "graph --input int_distance.hdf5 -k 2",
        &["int_distance.hdf5: ", "'distance'", "--metric"],
    ),
    fails(
        "class8 index queries declaring another metric than the index",
        |s| {
            hdf5s(s);
            let out = s.run(&[
                "index", "build", "--input", "b5.fvecs", "--kind", "lc", "--out", "i.vidx",
            ]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        },
        "index query --index i.vidx --query angular.hdf5 -k 2",
        &["angular.hdf5: ", "angular", "euclidean"],
    ),
    // --- class 9: the smaller items ---
    fails(
        "class9 f64 distances into .ivecs are refused before the inputs are read",
        nothing,
        "knn --base missing.fvecs --query q.fvecs -k 2 --distances f64 --out r.ivecs",
        &["r.ivecs: ", "f64", "!missing.fvecs"],
    ),
    works(
        "class9 CSV text beyond f32's range is kept as f64",
        |s| {
            s.raw("big.csv", b"1e39,0\n0,0\n3,4\n");
            s.raw("z.csv", b"0,0\n");
        },
        "knn --base big.csv --query z.csv -k 3 --distances f64",
        |_, out| far_is(out, 1e39),
    ),
    works(
        "class9 --allow-nan zero leaves finite CSV text beyond f32 alone",
        |s| {
            s.raw("big.csv", b"-2e39,0\n0,0\n3,4\n");
            s.raw("z.csv", b"0,0\n");
        },
        "knn --base big.csv --query z.csv -k 3 --distances f64 --allow-nan zero",
        |_, out| far_is(out, 2e39),
    ),
    with(
        fails(
            "class9 CSV text beyond f64's range",
            nothing,
            "graph --input huge.csv -k 1 --allow-nan zero",
            &["huge.csv: ", "line 1", "field 1", "float64"],
        ),
        &[("huge.csv", "1e400,0\n0,0\n")],
    ),
    fails(
        "class9 standard input given twice",
        nothing,
        "knn --base - --query - --format fvecs -k 2",
        &["standard input", "once", "!is empty"],
    ),
    fails(
        "class9 f64 queries of an index get advice that helps",
        |s| {
            index_of_arrays(s);
            let mut b = npy_header("<f8", false, &[2, 3]);
            for x in [0.1f64, 0.2, 0.3, 0.4, 0.5, 0.7] {
                b.extend(x.to_le_bytes());
            }
            s.raw("q64.npy", &b);
        },
        "index query --index i.vidx --query q64.npy -k 2",
        &["q64.npy: ", "f64", "brute", "!--device cpu"],
    ),
];

/// The distances of a 3-NN TSV of the query (0, 0): 0, 5 and `far`.
fn far_is(out: &Output, far: f64) {
    let text = stdout(out);
    let d: Vec<f64> = text
        .lines()
        .map(|l| l.split('\t').nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(d.len(), 3, "{text}");
    assert_eq!(&d[..2], &[0.0, 5.0], "{text}");
    assert!((d[2] - far).abs() <= 1e-12 * far, "{text}");
}

/// A ZIP archive of `(name, bytes, deflated)` members, as numpy writes them.
fn zip(members: &[(&str, &[u8], bool)]) -> Vec<u8> {
    let mut file = Vec::new();
    let mut dir = Vec::new();
    for &(name, bytes, deflated) in members {
        let data = if deflated {
            miniz_oxide::deflate::compress_to_vec(bytes, 6)
        } else {
            bytes.to_vec()
        };
        let crc = crc32fast::hash(bytes);
        member(
            &mut file,
            &mut dir,
            name,
            &data,
            bytes.len() as u64,
            crc,
            deflated,
        );
    }
    finish_zip(file, dir, members.len())
}

fn member(
    file: &mut Vec<u8>,
    dir: &mut Vec<u8>,
    name: &str,
    data: &[u8],
    size: u64,
    crc: u32,
    deflated: bool,
) {
    let method: u16 = if deflated { 8 } else { 0 };
    let offset = file.len() as u32;
    let mut common = Vec::new();
    common.extend(20u16.to_le_bytes());
    common.extend(0u16.to_le_bytes());
    common.extend(method.to_le_bytes());
    common.extend([0u8; 4]);
    common.extend(crc.to_le_bytes());
    common.extend((data.len() as u32).to_le_bytes());
    common.extend((size as u32).to_le_bytes());
    common.extend((name.len() as u16).to_le_bytes());
    common.extend(0u16.to_le_bytes());
    file.extend(0x0403_4b50u32.to_le_bytes());
    file.extend(&common);
    file.extend(name.as_bytes());
    file.extend(data);
    dir.extend(0x0201_4b50u32.to_le_bytes());
    dir.extend(20u16.to_le_bytes());
    dir.extend(&common);
    dir.extend([0u8; 10]); // comment length, disk, attributes
    dir.extend(offset.to_le_bytes());
    dir.extend(name.as_bytes());
}

fn finish_zip(mut file: Vec<u8>, dir: Vec<u8>, count: usize) -> Vec<u8> {
    let at = file.len() as u32;
    let size = dir.len() as u32;
    file.extend(dir);
    file.extend(0x0605_4b50u32.to_le_bytes());
    file.extend([0u8; 4]);
    file.extend((count as u16).to_le_bytes());
    file.extend((count as u16).to_le_bytes());
    file.extend(size.to_le_bytes());
    file.extend(at.to_le_bytes());
    file.extend(0u16.to_le_bytes());
    file
}

/// Deflate bits, least significant first.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, len: u32) {
        self.acc |= value << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code, most significant bit first.
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(u64::from(rev), len);
    }

    fn literal(&mut self, byte: u8) {
        match byte {
            0..=143 => self.code(0x30 + u32::from(byte), 8),
            _ => self.code(0x190 + u32::from(byte) - 144, 9),
        }
    }
}

/// An `.npz` whose only member `train.npy` is an `n × d` f32 array of zeros, deflated by hand
/// (one fixed-Huffman block of 258-byte copies), so that a large member costs little to make.
fn zeros_npz(n: usize, d: usize) -> Vec<u8> {
    let head = npy_header("<f4", false, &[n, d]);
    let zeros = n * d * 4;
    let mut b = Bits {
        out: Vec::with_capacity(zeros / 150),
        acc: 0,
        n: 0,
    };
    b.put(0b011, 3); // last block, fixed Huffman codes
    head.iter().for_each(|&c| b.literal(c));
    b.literal(0);
    let copies = (zeros - 1) / 258;
    for _ in 0..copies {
        b.code(0xC5, 8); // length 258
        b.put(0, 5); // distance 1
    }
    for _ in 0..(zeros - 1) % 258 {
        b.literal(0);
    }
    b.code(0, 7); // end of block
    b.put(0, 7);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    let chunk = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let m = left.min(chunk.len());
        crc.update(&chunk[..m]);
        left -= m;
    }
    let size = (head.len() + zeros) as u64;
    let (mut file, mut dir) = (Vec::new(), Vec::new());
    member(
        &mut file,
        &mut dir,
        "train.npy",
        &b.out,
        size,
        crc.finalize(),
        true,
    );
    finish_zip(file, dir, 1)
}

#[test]
fn class1_no_output_is_an_input() {
    run_class("class1");
}

#[test]
fn class4_pairs_need_one_set() {
    run_class("class4");
}

#[test]
fn class5_no_output_inside_the_checkpoint_folder() {
    run_class("class5");
}

#[test]
fn class6_hostile_archives() {
    run_class("class6");
}

#[test]
fn class7_csv_headers_and_empty_fields() {
    run_class("class7");
}

#[test]
fn class8_declared_metrics() {
    run_class("class8");
}

#[test]
fn class9_smaller_items() {
    run_class("class9");
}

/// Member syntax on a file name that is not UTF-8 reads the file it names.
#[test]
fn class9_member_syntax_on_a_non_utf8_name() {
    use std::ffi::OsStr;
    let s = scratch();
    let name = OsStr::from_bytes(b"d\xe9j\xe0.npz");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data");
    std::fs::copy(dir.join("arrays.npz"), s.dir.path().join(name)).unwrap();
    let mut base = name.to_os_string();
    base.push(":train");
    let out = Command::new(env!("CARGO_BIN_EXE_voisin"))
        .arg("graph")
        .arg("--input")
        .arg(&base)
        .args(["-k", "1", "--stats"])
        .current_dir(s.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    n_base_is(&out, 5);
}

/// Checkpoint files forged with a duplicate neighbour (and a valid checksum) are refused: the
/// partial lists of the open rows and a finished pass.
#[test]
fn class9_forged_checkpoint_lists_with_a_duplicate_neighbour() {
    let s = scratch();
    s.raw("mid.fvecs", &fvecs(&normal_rows(1100, 4, 8)));
    let ck: Vec<&str> = "graph --input mid.fvecs -k 2 --checkpoint ck --checkpoint-rows 512"
        .split_whitespace()
        .collect();
    let stopped = s.run(&[&ck[..], &["--stop-after-passes", "1"]].concat());
    assert_eq!(stopped.status.code(), Some(1), "{}", stderr(&stopped));
    let resume = [&ck[..], &["--resume"]].concat();
    let reseal = |v: &mut Vec<u8>| {
        let n = v.len();
        let crc = crc32fast::hash(&v[..n - 4]);
        v[n - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    let u32_at = |v: &[u8], at: usize| u32::from_le_bytes(v[at..at + 4].try_into().unwrap());
    let f64_at = |v: &[u8], at: usize| f64::from_le_bytes(v[at..at + 8].try_into().unwrap());

    // partial.bin: header (32 bytes), kind, pass flags, then per open row its length and
    // (id u32, key f64) entries.
    let partial = s.path("ck/partial.bin");
    let good = std::fs::read(&partial).unwrap();
    let lists = 32 + u32_at(&good, 20) as usize + u32_at(&good, 16) as usize;
    assert_eq!(
        u32_at(&good, lists),
        2,
        "the first open row holds 2 entries"
    );
    let (id0, key0) = (u32_at(&good, lists + 4), f64_at(&good, lists + 8));
    let mut forged = good.clone();
    forged[lists + 16..lists + 20].copy_from_slice(&id0.to_le_bytes());
    forged[lists + 20..lists + 28].copy_from_slice(&(key0 + 1.0).to_le_bytes());
    reseal(&mut forged);
    std::fs::write(&partial, &forged).unwrap();
    let out = run_timed(&s, &resume, Stdin::Null);
    check_line(&out, &resume, 2, &["partial.bin: ", "twice"]);
    std::fs::write(&partial, &good).unwrap();

    // pass-0000.bin: header (44 bytes), the ids of every row, then their keys.
    let pass = s.path("ck/pass-0000.bin");
    let good = std::fs::read(&pass).unwrap();
    let (ids, keys) = (44, 44 + 512 * 2 * 4);
    let mut forged = good.clone();
    let id0 = u32_at(&good, ids);
    let key1 = f64_at(&good, keys).max(f64_at(&good, keys + 8)) + 1.0;
    forged[ids + 4..ids + 8].copy_from_slice(&id0.to_le_bytes());
    forged[keys + 8..keys + 16].copy_from_slice(&key1.to_le_bytes());
    reseal(&mut forged);
    std::fs::write(&pass, &forged).unwrap();
    let out = run_timed(&s, &resume, Stdin::Null);
    check_line(&out, &resume, 2, &["pass-0000.bin: ", "twice"]);
    std::fs::write(&pass, &good).unwrap();

    let out = run_timed(&s, &resume, Stdin::Null);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
