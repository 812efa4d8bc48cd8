//! Result writers: exact TSV layout, ivecs/fvecs and npy layouts for k-NN and range results,
//! and all-or-nothing outputs.

mod common;

use std::path::Path;

use common::*;
use voisin::engine::{KnnResult, RangeResult};
use voisin_io::{write_knn, write_knn_tsv, write_range, write_range_tsv, Role};

fn knn() -> KnnResult {
    KnnResult {
        n_queries: 2,
        k: 3,
        indices: vec![3, 1, 4, 0, 2, 5],
        distances: vec![0.0, 0.1, 1.5, 2.0, 3.4028235e38, f32::MIN_POSITIVE],
        ..Default::default()
    }
}

fn range() -> RangeResult {
    RangeResult {
        offsets: vec![0, 2, 2, 3],
        indices: vec![7, 1, 0],
        distances: vec![0.25, 0.5, 1e-7],
        ..Default::default()
    }
}

fn tsv_of_knn(res: &KnnResult) -> String {
    let mut out = Vec::new();
    write_knn_tsv(&mut out, res).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn knn_tsv_exact_layout() {
    assert_eq!(
        tsv_of_knn(&knn()),
        "0\t3\t0\n0\t1\t0.1\n0\t4\t1.5\n1\t0\t2\n\
         1\t2\t340282350000000000000000000000000000000\n\
         1\t5\t0.000000000000000000000000000000000000011754944\n"
    );
}

#[test]
fn tsv_distances_round_trip_exactly() {
    let mut x = 1.0e-30f32;
    let mut distances = Vec::new();
    while x < 1.0e30 {
        distances.push(x);
        distances.push(x * 1.000_001);
        x *= 3.7;
    }
    let res = KnnResult {
        n_queries: 1,
        k: distances.len(),
        indices: (0..distances.len() as u32).collect(),
        distances: distances.clone(),
        ..Default::default()
    };
    let text = tsv_of_knn(&res);
    let back: Vec<f32> = text
        .lines()
        .map(|l| l.split('\t').nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(back, distances);
}

#[test]
fn range_tsv_skips_empty_rows() {
    let mut out = Vec::new();
    write_range_tsv(&mut out, &range()).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0\t7\t0.25\n0\t1\t0.5\n2\t0\t0.0000001\n"
    );
}

#[test]
fn tsv_file_matches_stdout_form() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.tsv");
    write_knn(&path, &knn()).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), tsv_of_knn(&knn()));
    write_range(&path, &range()).unwrap();
    let mut out = Vec::new();
    write_range_tsv(&mut out, &range()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), out);
    assert_eq!(names(dir.path()), ["out.tsv"]);
}

#[test]
fn knn_ivecs_with_fvecs_beside() {
    let dir = tempfile::tempdir().unwrap();
    write_knn(&dir.path().join("res.ivecs"), &knn()).unwrap();
    assert_eq!(names(dir.path()), ["res.fvecs", "res.ivecs"]);
    let ids = read(&dir.path().join("res.ivecs")).unwrap();
    assert_eq!(as_f32(&ids), (2, 3, vec![3.0, 1.0, 4.0, 0.0, 2.0, 5.0]));
    let ds = read(&dir.path().join("res.fvecs")).unwrap();
    assert_eq!(as_f32(&ds), (2, 3, knn().distances));
}

#[test]
fn range_ivecs_rows_have_their_own_length() {
    let dir = tempfile::tempdir().unwrap();
    write_range(&dir.path().join("res.ivecs"), &range()).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("res.ivecs")).unwrap(),
        le(&[2i32, 7, 1, 0, 1, 0])
    );
    let mut fvecs = le(&[2i32]);
    fvecs.extend(le(&[0.25f32, 0.5]));
    fvecs.extend(le(&[0i32, 1]));
    fvecs.extend(le(&[1e-7f32]));
    assert_eq!(std::fs::read(dir.path().join("res.fvecs")).unwrap(), fvecs);
}

/// Splits an npy file written by this crate into (header dictionary, data bytes).
fn npy_parts(path: &Path) -> (String, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0, "data must start 64-byte aligned");
    let header = String::from_utf8(bytes[10..10 + len].to_vec()).unwrap();
    (header.trim_end().to_string(), bytes[10 + len..].to_vec())
}

#[test]
fn knn_npy_pair_and_stem() {
    for out in ["res.npy", "res.indices.npy", "res.distances.NPY"] {
        let dir = tempfile::tempdir().unwrap();
        write_knn(&dir.path().join(out), &knn()).unwrap();
        assert_eq!(
            names(dir.path()),
            ["res.distances.npy", "res.indices.npy"],
            "{out}"
        );
        let (h, data) = npy_parts(&dir.path().join("res.indices.npy"));
        assert_eq!(
            h,
            "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }"
        );
        assert_eq!(data, le(&[3i64, 1, 4, 0, 2, 5]));
        // The distances file is an ordinary f32 array this crate reads back.
        let ds = read(&dir.path().join("res.distances.npy")).unwrap();
        assert_eq!(as_f32(&ds), (2, 3, knn().distances));
    }
}

#[test]
fn range_npy_flat_with_offsets() {
    let dir = tempfile::tempdir().unwrap();
    write_range(&dir.path().join("r.npy"), &range()).unwrap();
    assert_eq!(
        names(dir.path()),
        ["r.distances.npy", "r.indices.npy", "r.offsets.npy"]
    );
    let (h, data) = npy_parts(&dir.path().join("r.offsets.npy"));
    assert_eq!(
        h,
        "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"
    );
    assert_eq!(data, le(&[0i64, 2, 2, 3]));
    let (h, data) = npy_parts(&dir.path().join("r.indices.npy"));
    assert_eq!(
        h,
        "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"
    );
    assert_eq!(data, le(&[7i64, 1, 0]));
    let ds = read_with(&dir.path().join("r.distances.npy"), Role::Base, true).unwrap();
    assert_eq!(as_f32(&ds), (3, 1, range().distances));
}

#[test]
fn unwritable_and_unknown_outputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing/sub/out.tsv");
    let err = write_knn(&path, &knn()).unwrap_err();
    assert!(err.is_user_error());
    assert_eq!(err.path(), path.as_path());
    assert!(
        err.message().starts_with(&format!(
            "cannot create a file in {}: ",
            dir.path().join("missing/sub").display()
        )),
        "{err}"
    );
    let err = write_knn(&dir.path().join("out.csv"), &knn()).unwrap_err();
    assert_eq!(
        err.message(),
        "unknown output format '.csv' (known: .tsv, .ivecs with a .fvecs beside it, .npy)"
    );
    assert!(names(dir.path()).is_empty());
}

#[test]
fn failed_output_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    // Index too large for ivecs: refused before any file exists.
    let mut big = knn();
    big.indices[4] = u32::MAX;
    let err = write_knn(&dir.path().join("res.ivecs"), &big).unwrap_err();
    assert_eq!(
        err.message(),
        "index 4294967295 does not fit the i32 values of .ivecs; use .npy"
    );
    assert!(names(dir.path()).is_empty());
    // The second file of the pair cannot be placed (a folder is in the way): the first one,
    // already renamed, is removed again and no temporary file stays.
    std::fs::create_dir(dir.path().join("res.fvecs")).unwrap();
    std::fs::write(dir.path().join("res.fvecs/keep"), b"x").unwrap();
    let err = write_knn(&dir.path().join("res.ivecs"), &knn()).unwrap_err();
    assert_eq!(err.path(), dir.path().join("res.fvecs").as_path());
    assert!(
        err.message().starts_with("cannot rename into place: "),
        "{err}"
    );
    assert_eq!(names(dir.path()), ["res.fvecs"]);
}

#[test]
fn inconsistent_results_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = knn();
    bad.distances.pop();
    let err = write_knn(&dir.path().join("o.tsv"), &bad).unwrap_err();
    assert!(!err.is_user_error());
    assert_eq!(
        err.message(),
        "result is inconsistent: 6 indices and 5 distances for 2 x 3"
    );
    assert!(write_knn_tsv(Vec::new(), &bad).is_err());
    let mut bad = range();
    bad.offsets[1] = 9;
    assert!(write_range(&dir.path().join("o.tsv"), &bad).is_err());
    assert!(names(dir.path()).is_empty());
}
