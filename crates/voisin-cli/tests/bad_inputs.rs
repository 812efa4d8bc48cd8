//! The bad-input corpus: every case runs the built binary on a broken file or a
//! bad argument and requires exit code 2, exactly one line on standard error of the form
//! `voisin: error: <file>: <problem>` (or without a file for argument problems) naming the
//! problem, nothing on standard output, and no file created, partial or otherwise.
//!
//! The broken files are generated here byte by byte, so each case shows exactly what is wrong.

mod common;

use common::*;

/// Asserts a clean bad-input failure: exit code 2, one line starting with `prefix`, holding
/// every `needle`, empty standard output, and the folder left exactly as it was.
fn expect_bad(s: &Scratch, args: &[&str], prefix: &str, needles: &[&str]) {
    let before = listing(s.dir.path());
    let out = s.run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "args {args:?}, stderr {err:?}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.ends_with('\n'), "{err:?}");
    let full_prefix = format!("voisin: error: {prefix}");
    assert!(
        err.starts_with(&full_prefix),
        "{err:?} does not start with {full_prefix:?}"
    );
    for n in needles {
        assert!(err.contains(n), "{err:?} does not say {n:?}");
    }
    assert!(!err.contains("panicked"), "{err:?}");
    assert!(out.stdout.is_empty(), "printed results: {}", stdout(&out));
    assert_eq!(
        listing(s.dir.path()),
        before,
        "files were created or removed"
    );
}

/// A folder with a small valid base set `good.fvecs` (4 x 2).
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.raw("good.fvecs", &fvecs(&int_rows(4, 2, 1, 5)));
    s
}

/// Builds a graph of `file` with results going to `out.tsv`.
fn graph_of(s: &Scratch, file: &str, prefix: &str, needles: &[&str]) {
    expect_bad(
        s,
        &["graph", "--input", file, "-k", "2", "--out", "out.tsv"],
        prefix,
        needles,
    );
}

// --- missing, unreadable or unrecognised files ---

#[test]
fn missing_file() {
    let s = scratch();
    graph_of(
        &s,
        "nope.fvecs",
        "nope.fvecs: ",
        &["cannot open", "No such file"],
    );
}

#[test]
fn directory_instead_of_file() {
    let s = scratch();
    std::fs::create_dir(s.path("dir.fvecs")).unwrap();
    graph_of(&s, "dir.fvecs", "dir.fvecs: ", &["folder, not a file"]);
}

#[test]
fn unknown_input_extension() {
    let s = scratch();
    s.raw("data.xls", b"1,2\n3,4\n");
    graph_of(
        &s,
        "data.xls",
        "data.xls: ",
        &["unknown input format '.xls'", ".fvecs"],
    );
}

#[test]
fn no_extension() {
    let s = scratch();
    s.raw("data", &fvecs(&[vec![1.0]]));
    graph_of(&s, "data", "data: ", &["no file extension"]);
}

#[test]
fn empty_fvecs() {
    let s = scratch();
    s.raw("empty.fvecs", b"");
    graph_of(&s, "empty.fvecs", "empty.fvecs: ", &["empty"]);
}

#[test]
fn empty_text() {
    let s = scratch();
    s.raw("empty.txt", b"");
    graph_of(&s, "empty.txt", "empty.txt: ", &["empty"]);
}

#[test]
fn fbin_with_zero_rows() {
    let s = scratch();
    s.raw("zero.fbin", &[0, 0, 0, 0, 4, 0, 0, 0]);
    graph_of(&s, "zero.fbin", "zero.fbin: ", &["holds no items"]);
}

// --- truncated files and wrong headers ---

#[test]
fn truncated_fvecs() {
    let s = scratch();
    let mut b = fvecs(&int_rows(3, 4, 2, 9));
    b.truncate(b.len() - 3);
    s.raw("cut.fvecs", &b);
    graph_of(&s, "cut.fvecs", "cut.fvecs: ", &["truncated"]);
}

#[test]
fn mixed_dimensions_in_fvecs() {
    let s = scratch();
    s.raw(
        "mixed.fvecs",
        &fvecs(&[vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0, 7.0]]),
    );
    graph_of(
        &s,
        "mixed.fvecs",
        "mixed.fvecs: ",
        &["row 2", "dimension 3", "same dimension"],
    );
}

#[test]
fn negative_dimension_in_fvecs() {
    let s = scratch();
    let mut b = (-5i32).to_le_bytes().to_vec();
    b.extend([0u8; 20]);
    s.raw("neg.fvecs", &b);
    graph_of(&s, "neg.fvecs", "neg.fvecs: ", &["dimension -5"]);
}

#[test]
fn truncated_bvecs() {
    let s = scratch();
    let mut b = bvecs(&[vec![1, 2, 3], vec![4, 5, 6]]);
    b.pop();
    s.raw("cut.bvecs", &b);
    graph_of(&s, "cut.bvecs", "cut.bvecs: ", &["truncated"]);
}

#[test]
fn fbin_shorter_than_its_header() {
    let s = scratch();
    s.raw("short.fbin", &[1, 0, 0]);
    graph_of(&s, "short.fbin", "short.fbin: ", &["too short", "header"]);
}

#[test]
fn truncated_fbin() {
    let s = scratch();
    let mut b = fbin(&int_rows(10, 4, 3, 7));
    b.truncate(8 + 4 * 25);
    s.raw("cut.fbin", &b);
    graph_of(&s, "cut.fbin", "cut.fbin: ", &["10 x 4", "truncated"]);
}

#[test]
fn u8bin_with_trailing_bytes() {
    let s = scratch();
    let mut b = u8bin(&[vec![1, 2], vec![3, 4]]);
    b.extend([9, 9, 9]);
    s.raw("long.u8bin", &b);
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "long.u8bin",
            "-k",
            "1",
            "--out",
            "out.tsv",
        ],
        "long.u8bin: ",
        &["2 x 2"],
    );
}

#[test]
fn huge_declared_size_in_fbin() {
    let s = scratch();
    let mut b = vec![0xff; 8];
    b.extend([0u8; 16]);
    s.raw("huge.fbin", &b);
    graph_of(&s, "huge.fbin", "huge.fbin: ", &["4294967295 x 4294967295"]);
}

#[test]
fn npy_with_wrong_magic() {
    let s = scratch();
    let mut b = npy_f32(&int_rows(2, 2, 4, 3));
    b[1] = b'X';
    s.raw("bad.npy", &b);
    graph_of(&s, "bad.npy", "bad.npy: ", &["not an npy file"]);
}

#[test]
fn npy_with_unsupported_dtype() {
    let s = scratch();
    let mut b = npy_header("<c16", false, &[3, 2]);
    b.extend([0u8; 3 * 2 * 16]);
    s.raw("complex.npy", &b);
    graph_of(
        &s,
        "complex.npy",
        "complex.npy: ",
        &["unsupported dtype '<c16'"],
    );
}

#[test]
fn truncated_npy() {
    let s = scratch();
    let mut b = npy_f32(&int_rows(5, 3, 5, 3));
    b.truncate(b.len() - 6);
    s.raw("cut.npy", &b);
    graph_of(&s, "cut.npy", "cut.npy: ", &["5 x 3", "truncated"]);
}

#[test]
fn npy_with_huge_declared_shape() {
    let s = scratch();
    let mut b = npy_header("<f4", false, &[1 << 40, 1 << 30]);
    b.extend([0u8; 64]);
    s.raw("huge.npy", &b);
    graph_of(
        &s,
        "huge.npy",
        "huge.npy: ",
        &["1099511627776 vectors", "limit"],
    );
}

#[test]
fn npy_with_three_dimensions() {
    let s = scratch();
    let mut b = npy_header("<f4", false, &[2, 2, 2]);
    b.extend([0u8; 32]);
    s.raw("cube.npy", &b);
    graph_of(&s, "cube.npy", "cube.npy: ", &["3-dimensional"]);
}

#[test]
fn zero_dimension_in_fvecs() {
    let s = scratch();
    s.raw("flat.fvecs", &[0, 0, 0, 0, 0, 0, 0, 0]);
    graph_of(&s, "flat.fvecs", "flat.fvecs: ", &["dimension 0"]);
}

/// An HDF5 file without the ann-benchmarks `train`/`test` layout (written by h5py, shipped with
/// voisin-io's tests).
#[test]
fn hdf5_without_train_dataset() {
    let s = scratch();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data/others.h5");
    s.raw("other.h5", &std::fs::read(fixture).unwrap());
    graph_of(&s, "other.h5", "other.h5: ", &["no dataset 'train'"]);
}

#[test]
fn hdf5_that_is_not_hdf5() {
    let s = scratch();
    s.raw("fake.hdf5", &b"this is not an HDF5 file at all. ".repeat(8));
    graph_of(&s, "fake.hdf5", "fake.hdf5: ", &["HDF5"]);
}

#[test]
fn text_that_is_not_utf8() {
    let s = scratch();
    s.raw("words.txt", b"kitten\nsitting\n\xff\xfeoops\n");
    graph_of(&s, "words.txt", "words.txt: ", &["line 3", "UTF-8"]);
}

// --- values ---

#[test]
fn nan_row_in_fvecs() {
    let s = scratch();
    s.raw(
        "nan.fvecs",
        &fvecs(&[
            vec![0.0, 1.0, 2.0],
            vec![3.0, 4.0, 5.0],
            vec![6.0, 7.0, f32::NAN],
        ]),
    );
    graph_of(
        &s,
        "nan.fvecs",
        "nan.fvecs: ",
        &["row 2, column 2 holds NaN", "--allow-nan zero"],
    );
}

#[test]
fn infinity_in_query_fbin() {
    let s = scratch();
    s.raw(
        "q.fbin",
        &fbin(&[vec![0.0, 1.0], vec![f32::NEG_INFINITY, 0.0]]),
    );
    expect_bad(
        &s,
        &[
            "knn",
            "--base",
            "good.fvecs",
            "--query",
            "q.fbin",
            "-k",
            "1",
            "--out",
            "out.tsv",
        ],
        "q.fbin: ",
        &["row 1, column 0 holds -inf"],
    );
}

#[test]
fn nan_in_f16_npy() {
    let s = scratch();
    let mut b = npy_header("<f2", false, &[2, 2]);
    for v in [1.0f32, f32::NAN, 2.0, 3.0] {
        b.extend(half::f16::from_f32(v).to_le_bytes());
    }
    s.raw("h.npy", &b);
    graph_of(&s, "h.npy", "h.npy: ", &["row 0, column 1 holds NaN"]);
}

// --- base and queries that do not match ---

#[test]
fn dimension_mismatch_between_base_and_queries() {
    let s = scratch();
    s.raw("q3.fvecs", &fvecs(&int_rows(2, 3, 6, 4)));
    expect_bad(
        &s,
        &[
            "knn",
            "--base",
            "good.fvecs",
            "--query",
            "q3.fvecs",
            "-k",
            "1",
            "--out",
            "out.tsv",
        ],
        "q3.fvecs: ",
        &["dimension 3", "good.fvecs has dimension 2"],
    );
}

#[test]
fn strings_against_vectors() {
    let s = scratch();
    s.raw("words.txt", b"kitten\nsitting\n");
    expect_bad(
        &s,
        &[
            "range",
            "--base",
            "good.fvecs",
            "--query",
            "words.txt",
            "--radius",
            "1",
            "--out",
            "out.tsv",
        ],
        "words.txt: ",
        &["metric euclidean does not apply to strings"],
    );
}

// --- metrics ---

#[test]
fn unknown_metric() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--metric",
            "hamming",
            "--out",
            "out.tsv",
        ],
        "",
        &["unknown metric 'hamming'", "euclidean"],
    );
}

#[test]
fn minkowski_order_below_one() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--metric",
            "minkowski:0.5",
        ],
        "",
        &["minkowski order 0.5"],
    );
}

#[test]
fn levenshtein_on_vectors() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--metric",
            "levenshtein",
            "--out",
            "o.tsv",
        ],
        "good.fvecs: ",
        &["levenshtein does not apply to vectors"],
    );
}

#[test]
fn euclidean_on_strings() {
    let s = scratch();
    s.raw("words.txt", b"kitten\nsitting\nmitten\n");
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "words.txt",
            "-k",
            "1",
            "--metric",
            "euclidean",
            "--out",
            "o.tsv",
        ],
        "words.txt: ",
        &["euclidean does not apply to strings", "levenshtein"],
    );
}

// --- parameters ---

#[test]
fn k_zero() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "0",
            "--out",
            "out.tsv",
        ],
        "",
        &["k must be at least 1"],
    );
}

#[test]
fn k_negative() {
    let s = scratch();
    expect_bad(
        &s,
        &["graph", "--input", "good.fvecs", "-k", "-3"],
        "",
        &["'-3'", "-k"],
    );
}

#[test]
fn unknown_precision() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--precision",
            "fp8",
            "--out",
            "out.tsv",
        ],
        "",
        &["unknown precision 'fp8'", "tf32"],
    );
}

#[test]
fn negative_radius() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "range",
            "--base",
            "good.fvecs",
            "--query",
            "good.fvecs",
            "--radius",
            "-0.5",
            "--out",
            "out.tsv",
        ],
        "",
        &["radius -0.5 is negative"],
    );
}

#[test]
fn nan_radius() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "range",
            "--base",
            "good.fvecs",
            "--query",
            "good.fvecs",
            "--radius",
            "nan",
        ],
        "",
        &["not a finite number"],
    );
}

#[test]
fn zero_threads() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--threads",
            "0",
            "--out",
            "out.tsv",
        ],
        "",
        &["--threads must be at least 1"],
    );
}

#[test]
fn bad_memory_size() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--memory",
            "lots",
        ],
        "",
        &["--memory", "'lots'"],
    );
}

#[test]
fn unknown_device() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--device",
            "tpu",
        ],
        "",
        &["'tpu'", "auto, cpu, cuda"],
    );
}

/// `graph` of the valid set with `--engine` and more arguments.
fn graph_engine(engine: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let graph = [
        "graph",
        "--input",
        "good.fvecs",
        "-k",
        "1",
        "--engine",
        engine,
    ];
    [&graph[..], extra].concat()
}

#[test]
fn unknown_engine() {
    let s = scratch();
    let args = graph_engine("balltree", &[]);
    expect_bad(
        &s,
        &args,
        "",
        &["'balltree'", "auto, brute, lc, sss, cover, kd"],
    );
}

#[test]
fn index_engine_where_no_index_can_run() {
    let s = scratch();
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--metric", "cosine"], &["cosine", "triangle inequality"]),
        (&["--device", "cuda"], &["--engine cover", "--device cuda"]),
        (&["--checkpoint", "ck"], &["--engine cover", "--checkpoint"]),
    ];
    for (extra, needles) in cases {
        expect_bad(&s, &graph_engine("cover", extra), "", needles);
    }
}

#[test]
fn bad_gpu_lists() {
    let s = scratch();
    for (value, needle) in [
        (
            "two",
            "'two' is not all, a GPU count or a list of GPU ordinals",
        ),
        ("0", "a GPU count must be at least 1"),
        ("0,,1", "'0,,1' is not all"),
    ] {
        expect_bad(
            &s,
            &[
                "graph",
                "--input",
                "good.fvecs",
                "-k",
                "1",
                "--gpus",
                value,
                "--out",
                "out.tsv",
            ],
            "",
            &["--gpus", needle],
        );
    }
}

#[test]
fn unknown_nan_policy() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--allow-nan",
            "keep",
        ],
        "",
        &["'keep'", "zero"],
    );
}

#[test]
fn missing_required_argument() {
    let s = scratch();
    expect_bad(
        &s,
        &["knn", "--base", "good.fvecs", "-k", "1"],
        "",
        &["--query"],
    );
}

#[test]
fn unknown_subcommand() {
    let s = scratch();
    expect_bad(&s, &["search", "--base", "good.fvecs"], "", &["'search'"]);
}

// --- outputs ---

#[test]
fn output_folder_missing() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "no/such/out.tsv",
        ],
        "no/such/out.tsv: ",
        &["folder no/such does not exist"],
    );
}

#[test]
fn output_folder_is_a_file() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "good.fvecs/out.tsv",
        ],
        "good.fvecs/out.tsv: ",
        &["is not a folder"],
    );
}

#[test]
fn output_is_a_folder() {
    let s = scratch();
    std::fs::create_dir(s.path("res.tsv")).unwrap();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "res.tsv",
        ],
        "res.tsv: ",
        &["is a folder"],
    );
}

#[test]
fn unknown_output_extension() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "res.csv",
        ],
        "res.csv: ",
        &["unknown output format", ".tsv"],
    );
}

#[test]
fn output_would_overwrite_the_input() {
    let s = scratch();
    // res.ivecs keeps its distances in a .fvecs beside it: here, the input itself.
    let before = std::fs::read(s.path("good.fvecs")).unwrap();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "good.ivecs",
        ],
        "good.ivecs: ",
        &["good.fvecs", "which is an input"],
    );
    assert_eq!(std::fs::read(s.path("good.fvecs")).unwrap(), before);
}

/// /proc takes no new files, not even from root, so this case holds under any user.
#[cfg(target_os = "linux")]
#[test]
fn unwritable_output_folder() {
    let s = scratch();
    expect_bad(
        &s,
        &[
            "graph",
            "--input",
            "good.fvecs",
            "-k",
            "1",
            "--out",
            "/proc/out.tsv",
        ],
        "/proc/out.tsv: ",
        &["cannot write in folder /proc"],
    );
}

// --- device failure is not bad input ---

#[test]
fn cuda_without_cuda_is_a_device_failure() {
    let s = scratch();
    let before = listing(s.dir.path());
    let out = s.run(&[
        "graph",
        "--input",
        "good.fvecs",
        "-k",
        "1",
        "--device",
        "cuda",
        "--out",
        "o.tsv",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("voisin: error: cuda: the CUDA driver (libcuda) cannot be loaded"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).lines().count(), 1);
    assert_eq!(listing(s.dir.path()), before);
}

/// A full disk on standard output is not the user's input: exit code 1, one line.
#[cfg(target_os = "linux")]
#[test]
fn full_standard_output_is_an_internal_failure() {
    let s = scratch();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(["graph", "--input", "good.fvecs", "-k", "2"])
        .current_dir(s.dir.path())
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("voisin: error: cannot write to standard output: No space left"),
        "{err}"
    );
}

#[test]
fn bad_index_query_gpu_options() {
    let s = scratch();
    for (option, value, needle) in [
        ("--gpus", "two", "'two' is not all, a GPU count"),
        ("--gpus", "0", "a GPU count must be at least 1"),
        ("--gpu-memory", "lots", "write a size such as 512M"),
        ("--gpu-memory", "0", "at least 1 byte"),
        ("--gpu-memory", "5Q", "unknown unit 'Q'"),
    ] {
        expect_bad(
            &s,
            &[
                "index",
                "query",
                "--index",
                "good.idx",
                "--query",
                "good.fvecs",
                "-k",
                "1",
                option,
                value,
            ],
            "",
            &[option, needle],
        );
    }
}
