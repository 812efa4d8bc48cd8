//! Forged index files (issue 14, class 8): a checksum catches accidents, not lies. Every byte of
//! the structure of each kind (List of Clusters, SSS, cover tree) is changed in several ways and
//! the checksum recomputed; the file must then be refused in one line, or, if every distance the
//! search prunes with still measures right, answer exactly as the original index does.

mod common;

use common::*;
use voisin::Metric;
use voisin_index::file::{from_bytes, to_bytes, MAGIC};
use voisin_index::{DatasetIndex, Kind, Params};

fn reseal(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

/// A change made to a file at a byte offset.
type Forge = fn(&mut [u8], usize);

/// The ways a byte (or the 8 bytes from it) is changed.
const FORGERIES: [(&str, Forge); 4] = [
    ("add 0x81", |v, at| v[at] = v[at].wrapping_add(0x81)),
    ("flip the low bit", |v, at| v[at] ^= 1),
    ("zero 8 bytes", |v, at| {
        let end = (at + 8).min(v.len() - 4);
        v[at..end].fill(0);
    }),
    ("set 0xFF", |v, at| v[at] = 0xFF),
];

#[test]
fn forged_structures_are_refused_or_answer_exactly() {
    let (n, dim) = (90, 3);
    let base = vectors(31, n, dim, Some(4));
    let queries = vector_queries(32, &base, 8, None);
    let metric = Metric::Euclidean;
    let name = metric.name();
    // The structure follows the header, the metric name, the count, the dimension and the items.
    let start = MAGIC.len() + 4 + 1 + 1 + 4 + name.len() + 8 + 8 + n * dim * 4;
    for kind in [Kind::Lc, Kind::Sss, Kind::Cover] {
        let index = DatasetIndex::build(&base, metric.clone(), kind, &Params::default()).unwrap();
        let want = index.knn(&queries, 5).unwrap();
        let want_range = index.range(&queries, 1.5).unwrap();
        let good = to_bytes(&index).unwrap();
        let (mut refused, mut accepted) = (0, 0);
        for at in start..good.len() - 4 {
            for (what, forge) in FORGERIES {
                let mut v = good.clone();
                forge(&mut v, at);
                if v == good {
                    continue;
                }
                reseal(&mut v);
                match from_bytes(&v) {
                    Err(e) => {
                        let text = e.to_string();
                        assert!(e.is_user_error(), "{kind:?} {what} at {at}: {text}");
                        assert!(!text.contains('\n') && !text.is_empty(), "{text}");
                        refused += 1;
                    }
                    Ok(back) => {
                        let got = back.knn(&queries, 5).unwrap();
                        assert_eq!(
                            (&got.indices, &got.distances),
                            (&want.indices, &want.distances),
                            "{kind:?}: {what} at byte {at} was accepted and answers otherwise"
                        );
                        let got = back.range(&queries, 1.5).unwrap();
                        assert_eq!(got.indices, want_range.indices, "{kind:?} {what} at {at}");
                        accepted += 1;
                    }
                }
            }
        }
        assert!(
            refused > accepted,
            "{kind:?}: {refused} refused, {accepted} accepted"
        );
    }
}

/// Items of a vector index holding NaN or an infinity under a valid checksum are refused in one
/// line, for every kind (the k-d tree keeps only its items, so they are all it can check).
#[test]
fn non_finite_items_are_refused() {
    let (n, dim) = (40, 3);
    let base = vectors(33, n, dim, Some(4));
    let metric = Metric::Euclidean;
    let items = MAGIC.len() + 4 + 1 + 1 + 4 + metric.name().len() + 8 + 8;
    for kind in [Kind::Lc, Kind::Sss, Kind::Cover, Kind::Kd] {
        let index = DatasetIndex::build(&base, metric.clone(), kind, &Params::default()).unwrap();
        let good = to_bytes(&index).unwrap();
        for (value, row) in [
            (f32::NAN, 0),
            (f32::INFINITY, 17),
            (f32::NEG_INFINITY, n - 1),
        ] {
            let mut v = good.clone();
            let at = items + (row * dim + 2) * 4;
            v[at..at + 4].copy_from_slice(&value.to_le_bytes());
            reseal(&mut v);
            let e = from_bytes(&v).err().expect("a non-finite item is refused");
            assert!(e.is_user_error(), "{kind:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "stored item {row} holds the value {value}; an index holds finite values only"
                ),
                "{kind:?}"
            );
        }
    }
}
