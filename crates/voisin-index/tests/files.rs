//! Index files: every kind round-trips to an index that answers exactly as the original; wrong
//! magic, wrong version, truncation at every length, flipped bytes, a forged length field under a
//! valid checksum, inconsistent structure and foreign files are clear errors, never a panic.

mod common;

use common::*;
use voisin::metric::CustomMetric;
use voisin::{Dataset, Metric};
use voisin_index::file::{self, from_bytes, to_bytes, MAGIC};
use voisin_index::{DatasetIndex, Index, Kind, Params};

fn built(kind: Kind) -> Vec<(Dataset, Dataset, DatasetIndex)> {
    let out = build_each(kind);
    for (_, _, index) in &out {
        match index {
            DatasetIndex::Vectors(Index::Cover(t)) => t.check_invariants().unwrap(),
            DatasetIndex::Strings(Index::Cover(t)) => t.check_invariants().unwrap(),
            _ => {}
        }
    }
    out
}

fn build_each(kind: Kind) -> Vec<(Dataset, Dataset, DatasetIndex)> {
    let base_v = vectors(21, 90, 3, Some(4));
    let q_v = vector_queries(22, &base_v, 8, Some(4));
    let base_w = words(23, 120, "abc", 6);
    let q_w = words(24, 8, "abcd", 6);
    vec![
        (
            base_v.clone(),
            q_v,
            DatasetIndex::build(&base_v, Metric::Minkowski(3.0), kind, &Params::default()).unwrap(),
        ),
        (
            base_w.clone(),
            q_w,
            DatasetIndex::build(&base_w, Metric::Levenshtein, kind, &Params::default()).unwrap(),
        ),
    ]
}

fn err(bytes: &[u8]) -> String {
    match from_bytes(bytes) {
        Ok(_) => panic!("accepted a bad file"),
        Err(e) => {
            let text = e.to_string();
            assert!(e.is_user_error() && !text.contains('\n'), "{text}");
            text
        }
    }
}

/// Replaces the checksum so the damage gets past it and reaches the parser.
fn reseal(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn round_trip_answers_identically() {
    let dir = tempfile::tempdir().unwrap();
    for kind in Kind::ALL {
        for (_, queries, index) in built(kind) {
            let path = dir.path().join("x.vidx");
            file::save(&index, &path).unwrap();
            let back = file::load(&path).unwrap();
            assert_eq!(back.kind(), kind);
            assert_eq!(back.metric(), index.metric());
            assert_eq!(back.describe(), index.describe());
            for r in [0.0, 1.0, 2.0] {
                let (a, b) = (
                    index.range(&queries, r).unwrap(),
                    back.range(&queries, r).unwrap(),
                );
                assert_eq!(
                    (a.offsets, a.indices, a.distances),
                    (b.offsets, b.indices, b.distances)
                );
            }
            let (a, b) = (
                index.knn(&queries, 7).unwrap(),
                back.knn(&queries, 7).unwrap(),
            );
            assert_eq!((a.indices, a.distances), (b.indices, b.distances));
            assert_eq!(to_bytes(&back).unwrap(), to_bytes(&index).unwrap());
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["x.vidx".to_string()], "no temporary file left");
    }
}

#[test]
fn wrong_magic_version_and_foreign_files() {
    let good = to_bytes(&built(Kind::Lc).remove(0).2).unwrap();
    assert!(err(b"").contains("wrong magic"));
    assert!(err(b"hello world, not an index").contains("wrong magic"));
    assert!(err(b"\x93NUMPY\x01\x00{'descr': '<f4'}").contains("wrong magic"));
    let mut v = good.clone();
    v[0] ^= 0x20;
    assert!(err(&v).contains("wrong magic"));
    let mut v = good.clone();
    v[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(
        err(&v),
        "index format version 2 is not supported (this voisin reads version 1)"
    );
    assert_eq!(err(MAGIC), "index file is truncated");
}

#[test]
fn every_truncation_and_flipped_byte_is_caught() {
    for kind in Kind::ALL {
        for (_, _, index) in built(kind) {
            let good = to_bytes(&index).unwrap();
            for len in (0..good.len()).step_by(7).chain([good.len() - 1]) {
                let msg = err(&good[..len]);
                assert!(
                    msg.contains("checksum")
                        || msg.contains("magic")
                        || msg.contains("truncated")
                        || msg.contains("ends"),
                    "{kind} cut at {len}: {msg}"
                );
            }
            for pos in (MAGIC.len() + 4..good.len()).step_by(13) {
                let mut v = good.clone();
                v[pos] ^= 0x41;
                assert!(err(&v).contains("checksum"), "{kind} byte {pos}");
            }
        }
    }
}

#[test]
fn forged_lengths_and_structure_under_a_valid_checksum() {
    // Vectors: the item count sits right after the metric name; a huge count must not allocate.
    let index = built(Kind::Sss).remove(0).2;
    let good = to_bytes(&index).unwrap();
    let name_len = "minkowski:3".len();
    let count_at = MAGIC.len() + 4 + 2 + 4 + name_len;
    assert_eq!(good[count_at..count_at + 8], 90u64.to_le_bytes());
    for forged in [u64::MAX, 1 << 40, 91] {
        let mut v = good.clone();
        v[count_at..count_at + 8].copy_from_slice(&forged.to_le_bytes());
        reseal(&mut v);
        let msg = err(&v);
        assert!(
            msg.contains("larger than the file") || msg.contains("ends") || msg.contains("length"),
            "{forged}: {msg}"
        );
    }
    // Every single-byte change past the header, resealed, is either harmless or an error.
    for kind in Kind::ALL {
        for (_, queries, index) in built(kind) {
            let good = to_bytes(&index).unwrap();
            for pos in (MAGIC.len() + 4..good.len() - 4).step_by(5) {
                let mut v = good.clone();
                v[pos] = v[pos].wrapping_add(0x81);
                reseal(&mut v);
                if let Ok(back) = from_bytes(&v) {
                    // A changed value that keeps the layout valid (a distance, a coordinate) may
                    // give other answers but must not crash a query.
                    let _ = back.knn(&queries, 3);
                    let _ = back.range(&queries, 1.0);
                }
            }
        }
    }
}

#[test]
fn user_metric_indexes_are_not_saved() {
    let l1 = CustomMetric::for_vectors("mine", |a: &[f32], b: &[f32]| {
        a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).sum()
    });
    let base = vectors(25, 10, 2, None);
    let index =
        DatasetIndex::build(&base, Metric::Custom(l1), Kind::Lc, &Params::default()).unwrap();
    let msg = to_bytes(&index).err().unwrap().to_string();
    assert!(msg.contains("user metric mine"), "{msg}");
}
