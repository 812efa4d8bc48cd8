//! Write then read every format, compare; mapped and owned reads agree; string lists keep
//! their content.

mod common;

use common::*;
use half::f16;
use rand::{Rng, SeedableRng};
use voisin::data::{Buffer, ElemType, StringSet, VectorData, VectorSet};
use voisin_io::{write_strings, write_vectors, Role};

fn random_f32(n: usize, d: usize, seed: u64) -> VectorSet {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let vals = (0..n * d).map(|_| rng.gen_range(-1e3f32..1e3)).collect();
    VectorSet::from_f32(n, d, vals).unwrap()
}

fn random_u8(n: usize, d: usize, seed: u64) -> VectorSet {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let vals = (0..n * d).map(|_| rng.gen()).collect();
    VectorSet::new(n, d, VectorData::U8(Buffer::Owned(vals))).unwrap()
}

fn random_f16(n: usize, d: usize, seed: u64) -> VectorSet {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let vals = (0..n * d)
        .map(|_| f16::from_f32(rng.gen_range(-100f32..100.0)))
        .collect();
    VectorSet::new(n, d, VectorData::F16(Buffer::Owned(vals))).unwrap()
}

fn all(v: &VectorSet) -> Vec<f32> {
    v.rows_f32(0, v.len()).into_owned()
}

/// Writes `v` as `name`, reads it back mapped and owned, and checks values, shape and storage.
fn round_trip(v: &VectorSet, name: &str, elem: ElemType, mapped: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    write_vectors(&path, v).unwrap();
    for mmap in [true, false] {
        let back = read_with(&path, Role::Base, mmap).unwrap();
        assert_eq!(
            as_f32(&back),
            (v.len(), v.dim(), all(v)),
            "{name} mmap={mmap}"
        );
        assert_eq!(back.as_vectors().unwrap().elem_type(), elem, "{name}");
        assert_eq!(is_mapped(&back), mapped && mmap, "{name} mmap={mmap}");
    }
    // Only the output itself is left: no temporary files.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn f32_formats() {
    // Dims 1, 3, 127 and a row count that is not a multiple of anything in particular.
    for (n, d) in [(1, 1), (7, 3), (13, 127)] {
        let v = random_f32(n, d, (n * d) as u64);
        round_trip(&v, "v.fvecs", ElemType::F32, false);
        round_trip(&v, "v.fbin", ElemType::F32, true);
        round_trip(&v, "v.npy", ElemType::F32, true);
    }
}

#[test]
fn u8_formats() {
    for (n, d) in [(1, 1), (9, 5), (4, 128)] {
        let v = random_u8(n, d, d as u64);
        round_trip(&v, "v.bvecs", ElemType::U8, false);
        round_trip(&v, "v.u8bin", ElemType::U8, true);
        round_trip(&v, "v.npy", ElemType::U8, true);
        // f32 formats hold u8 values exactly.
        round_trip(&v, "v.fvecs", ElemType::F32, false);
        round_trip(&v, "v.fbin", ElemType::F32, true);
    }
}

#[test]
fn f16_storage() {
    let v = random_f16(6, 7, 3);
    round_trip(&v, "v.npy", ElemType::F16, true);
    round_trip(&v, "v.fbin", ElemType::F32, true);
}

/// f64 values f32 cannot hold: `.npy` keeps them (`<f8`, mapped on read), f32 formats refuse
/// them rather than round.
#[test]
fn f64_storage() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(64);
    let vals: Vec<f64> = (0..5 * 3).map(|_| rng.gen_range(-1e3..1e3)).collect();
    let v = VectorSet::from_f64(5, 3, vals.clone()).unwrap();
    round_trip(&v, "v.npy", ElemType::F64, true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.npy");
    write_vectors(&path, &v).unwrap();
    let back = read(&path).unwrap();
    assert_eq!(
        back.as_vectors().unwrap().rows_f64(0, 5).as_ref(),
        &vals[..]
    );
    for ext in ["fvecs", "fbin"] {
        let err = write_vectors(&dir.path().join(format!("v.{ext}")), &v).unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                ".{ext} holds f32 values but these vectors hold f64 values with no exact f32 \
                 form (write .npy to keep them)"
            )
        );
    }
    // f64 storage of f32 numbers is written to every f32 format, and read back as f32.
    let narrow = VectorSet::from_f64(2, 2, vec![0.5, -3.0, 1e3, 0.25]).unwrap();
    round_trip(&narrow, "v.fbin", ElemType::F32, true);
    round_trip(&narrow, "v.npy", ElemType::F32, false);
}

#[test]
fn zero_rows_round_trip_in_headed_formats() {
    let v = VectorSet::from_f32(0, 4, vec![]).unwrap();
    round_trip(&v, "v.fbin", ElemType::F32, true);
    round_trip(&v, "v.npy", ElemType::F32, true);
}

#[test]
fn u8_only_formats_refuse_float_storage() {
    let dir = tempfile::tempdir().unwrap();
    let err = write_vectors(&dir.path().join("v.bvecs"), &random_f32(2, 2, 1)).unwrap_err();
    assert_eq!(
        err.message(),
        ".bvecs holds u8 values but these vectors are stored as f32"
    );
    let err = write_vectors(&dir.path().join("v.csv"), &random_f32(2, 2, 1)).unwrap_err();
    assert_eq!(
        err.message(),
        "cannot write vectors as '.csv' (known: .fvecs .bvecs .fbin .u8bin .npy)"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn ivecs_input_becomes_exact_f32() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.ivecs");
    let limit = 1 << 24;
    std::fs::write(&path, le(&[2i32, -limit, 7, 2, limit, 0])).unwrap();
    let ds = read(&path).unwrap();
    assert_eq!(as_f32(&ds), (2, 2, vec![-16777216.0, 7.0, 16777216.0, 0.0]));
}

#[test]
fn strings_round_trip() {
    let items = ["kitten", "", "sitting", "Ünïcödé ✓", "tab\there", "a\rb"];
    let set = StringSet::from_strings(items).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("words.txt");
    write_strings(&path, &set).unwrap();
    for mmap in [true, false] {
        let back = read_with(&path, Role::Base, mmap).unwrap();
        let s = back.as_strings().unwrap();
        let got: Vec<String> = (0..s.len()).map(|i| s.get_string(i)).collect();
        assert_eq!(got, items);
    }
}

#[test]
fn text_line_endings_and_bom() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("words.txt");
    std::fs::write(&path, b"\xEF\xBB\xBFone\r\ntwo\n\nthree").unwrap();
    let s = read(&path).unwrap();
    let s = s.as_strings().unwrap();
    let got: Vec<String> = (0..s.len()).map(|i| s.get_string(i)).collect();
    assert_eq!(got, ["one", "two", "", "three"]);
}

#[test]
fn strings_with_line_breaks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("words.txt");
    for bad in ["two\nlines", "ends in cr\r"] {
        let set = StringSet::from_strings(["fine", bad]).unwrap();
        let err = write_strings(&path, &set).unwrap_err();
        assert_eq!(
            err.message(),
            "string 1 contains a line break, which one-per-line text cannot hold"
        );
    }
    assert!(!path.exists());
}

/// A named pipe (what a shell's `<(zcat …)` gives) cannot be mapped and reports no length: it is
/// read to the end instead, whatever `mmap` says.
#[cfg(unix)]
#[test]
fn named_pipe_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipe.fbin");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let v = random_f32(3, 4, 9);
    let mut bytes = le(&[3u32, 4]);
    bytes.extend(le(v.as_f32().unwrap()));
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || std::fs::write(path, bytes).unwrap())
    };
    let back = read_with(&path, Role::Base, true).unwrap();
    writer.join().unwrap();
    assert_eq!(as_f32(&back), (3, 4, all(&v)));
    assert!(!is_mapped(&back));
}
