//! Helpers shared by the voisin-io integration tests: the fixture value formula (mirrors
//! `data/gen_fixtures.py`), fixture paths, and short ways to read and compare.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use voisin::data::VectorData;
use voisin::engine::{KnnResult, RangeResult};
use voisin::Dataset;
use voisin_io::{parse_bytes, read_dataset, Format, IoError, ReadOptions, Role};

/// value(i, j) of gen_fixtures.py: exact in f16, f32 and f64.
pub fn value(i: usize, j: usize) -> f32 {
    ((7 * i + 3 * j) % 11) as f32 - 5.0 + 0.5 * (j % 2) as f32
}

pub fn values(n: usize, d: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|i| (0..d).map(move |j| value(i, j)))
        .collect()
}

pub fn bytes_u8(n: usize, d: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (0..d).map(move |j| ((7 * i + 3 * j) % 256) as u8))
        .collect()
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn read(path: &Path) -> Result<Dataset, IoError> {
    read_dataset(path, &ReadOptions::default())
}

pub fn read_with(path: &Path, role: Role, mmap: bool) -> Result<Dataset, IoError> {
    read_dataset(
        path,
        &ReadOptions {
            role,
            mmap,
            ..ReadOptions::default()
        },
    )
}

/// (n, d, all values as f32).
pub fn as_f32(ds: &Dataset) -> (usize, usize, Vec<f32>) {
    let v = ds.as_vectors().expect("a vector set");
    (v.len(), v.dim(), v.rows_f32(0, v.len()).into_owned())
}

pub fn is_mapped(ds: &Dataset) -> bool {
    match ds.as_vectors().expect("a vector set").data() {
        VectorData::F32(b) => b.is_mapped(),
        VectorData::F16(b) => b.is_mapped(),
        VectorData::Bf16(b) => b.is_mapped(),
        VectorData::U8(b) => b.is_mapped(),
        VectorData::F64(b) => b.is_mapped(),
    }
}

/// The message of a parse that must fail.
pub fn parse_err(format: Format, bytes: &[u8]) -> String {
    match parse_bytes(format, bytes, Role::Base) {
        Ok(ds) => panic!("expected an error, got {}", ds.describe()),
        Err(e) => {
            assert!(e.is_user_error(), "{e}");
            assert_eq!(e.to_string(), format!("<bytes>: {}", e.message()));
            assert!(!e.to_string().contains('\n'), "{e}");
            e.message().to_string()
        }
    }
}

/// Little-endian bytes of i32/u32/f32 words, for hand-built files.
pub fn le<T: bytemuck::Pod>(words: &[T]) -> Vec<u8> {
    const {
        assert!(
            cfg!(target_endian = "little"),
            "hand-built files assume a little-endian host"
        )
    };
    bytemuck::cast_slice(words).to_vec()
}

/// The entries of a folder, sorted: what a writer left behind.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A k-NN result of 2 queries x 3 with extreme distances, for the writer tests.
pub fn knn() -> KnnResult {
    KnnResult {
        n_queries: 2,
        k: 3,
        indices: vec![3, 1, 4, 0, 2, 5],
        distances: vec![0.0, 0.1, 1.5, 2.0, 3.4028235e38, f32::MIN_POSITIVE],
        ..Default::default()
    }
}

/// A range result of 3 queries, one with no result, for the writer tests.
pub fn range() -> RangeResult {
    RangeResult {
        offsets: vec![0, 2, 2, 3],
        indices: vec![7, 1, 0],
        distances: vec![0.25, 0.5, 1e-7],
        ..Default::default()
    }
}
