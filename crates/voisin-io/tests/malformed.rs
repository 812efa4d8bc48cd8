//! Every malformed input gives one clear line naming the file and the problem, never a panic
//! and never an allocation of a declared size the file cannot back.

mod common;

use common::*;
use voisin::data::ElemType;
use voisin_io::{parse_bytes, Format, IoError, Role};

fn read_err(path: &std::path::Path) -> IoError {
    let err = read(path).unwrap_err();
    assert!(err
        .to_string()
        .starts_with(&format!("{}: ", path.display())));
    err
}

#[test]
fn file_level_problems() {
    let dir = tempfile::tempdir().unwrap();
    for ext in [
        "fvecs", "ivecs", "bvecs", "fbin", "u8bin", "npy", "hdf5", "h5", "txt",
    ] {
        let path = dir.path().join(format!("empty.{ext}"));
        std::fs::write(&path, b"").unwrap();
        for mmap in [true, false] {
            let err = read_with(&path, Role::Base, mmap).unwrap_err();
            assert_eq!(err.message(), "file is empty", "{ext}");
        }
        // The bytes entry point says the same.
        let format = voisin_io::Format::from_path(&path).unwrap();
        assert_eq!(parse_err(format, b""), "file is empty", "{ext}");
    }
    let missing = dir.path().join("missing.fbin");
    let err = read_err(&missing);
    assert!(err.is_user_error());
    assert_eq!(err.message(), "cannot open: No such file or directory");
    let folder = dir.path().join("folder.npy");
    std::fs::create_dir(&folder).unwrap();
    assert_eq!(read_err(&folder).message(), "is a folder, not a file");
    assert_eq!(
        read_err(&dir.path().join("x.xls")).message(),
        "unknown input format '.xls' (known: .fvecs .ivecs .bvecs .fbin .u8bin .npy .npz .hdf5 \
         .h5 .txt .csv .tsv .parquet .pq)"
    );
    assert_eq!(
        read_err(&dir.path().join("noext")).message(),
        "no file extension to tell the format (one of .fvecs .ivecs .bvecs .fbin .u8bin .npy \
         .npz .hdf5 .h5 .txt .csv .tsv .parquet .pq)"
    );
}

#[test]
fn texmex_problems() {
    let f = Format::Fvecs;
    assert_eq!(
        parse_err(f, &[1, 0, 0]),
        "file is 3 bytes, too short for a row header (a 4-byte dimension)"
    );
    assert_eq!(
        parse_err(f, &le(&[0i32, 0])),
        "row 0 declares dimension 0; dimensions must be positive"
    );
    assert_eq!(
        parse_err(f, &le(&[-3i32, 0, 0, 0])),
        "row 0 declares dimension -3; dimensions must be positive"
    );
    // Rows of differing dimensions, whether or not the lengths happen to line up.
    assert_eq!(
        parse_err(f, &le(&[2i32, 0, 0, 3, 0, 0])),
        "row 1 declares dimension 3, but row 0 has 2; every row must have the same dimension"
    );
    assert_eq!(
        parse_err(f, &le(&[2i32, 0, 0, 2, 0, 0, 1, 0])),
        "row 2 declares dimension 1, but row 0 has 2; every row must have the same dimension"
    );
    let mut truncated = le(&[2i32, 0, 0, 2, 0, 0, 2]);
    truncated.push(0);
    assert_eq!(
        parse_err(f, &truncated),
        "file ends with 5 bytes that are not a whole row (truncated last row or trailing \
         garbage); a row of dimension 2 takes 12 bytes"
    );
    let mut garbage = le(&[2i32, 0, 0]);
    garbage.extend([9, 9]);
    assert_eq!(
        parse_err(f, &garbage),
        "file ends with 2 bytes that are not a whole row (truncated last row or trailing \
         garbage); a row of dimension 2 takes 12 bytes"
    );
    // A huge declared dimension is compared with the file, not allocated.
    assert_eq!(
        parse_err(f, &le(&[i32::MAX, 0, 0])),
        "row 0 declares dimension 2147483647, which takes 8589934592 bytes, but the file has \
         only 12"
    );
    assert_eq!(
        parse_err(Format::Bvecs, &le(&[5i32, 0])),
        "row 0 declares dimension 5, which takes 9 bytes, but the file has only 8"
    );
}

/// Integers f32 cannot hold are kept exactly as f64 (no longer refused).
#[test]
fn ivecs_beyond_f32_are_f64() {
    let ds = parse_bytes(
        Format::Ivecs,
        &le(&[2i32, 3, 16_777_217, 2, 0, i32::MIN]),
        Role::Base,
    )
    .unwrap();
    let v = ds.as_vectors().unwrap();
    assert_eq!(v.elem_type(), ElemType::F64);
    assert_eq!(
        v.rows_f64(0, 2).as_ref(),
        &[3.0, 16_777_217.0, 0.0, -2_147_483_648.0]
    );
}

#[test]
fn big_ann_problems() {
    let f = Format::Fbin;
    assert_eq!(
        parse_err(f, &[1, 0, 0, 0, 1]),
        "file is 5 bytes, too short for the 8-byte header (u32 n, u32 d)"
    );
    assert_eq!(
        parse_err(f, &le(&[3u32, 0])),
        "header declares dimension 0; vectors need at least one component"
    );
    assert_eq!(
        parse_err(f, &le(&[10u32, 4, 0, 0, 0, 0])),
        "header declares 10 x 4 f32 values (160 bytes) but only 16 bytes follow the header \
         (truncated file?)"
    );
    assert_eq!(
        parse_err(f, &le(&[u32::MAX, u32::MAX, 0])),
        "header declares 4294967295 x 4294967295 f32 values, which overflows a 64-bit size"
    );
    let mut trailing = le(&[1u32, 2, 0, 0]);
    trailing.extend([1, 2, 3]);
    assert_eq!(
        parse_err(f, &trailing),
        "3 bytes of trailing data after the 1 x 2 f32 values the header declares"
    );
    assert_eq!(
        parse_err(Format::U8bin, &le(&[2u32, 3, 0])),
        "header declares 2 x 3 u8 values (6 bytes) but only 4 bytes follow the header \
         (truncated file?)"
    );
}

/// An npy file with the given header dictionary (padded as NumPy does) and data bytes.
fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut text = dict.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((text.len() as u16).to_le_bytes());
    out.extend(text.as_bytes());
    out.extend(data);
    out
}

fn npy_dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

#[test]
fn npy_preamble_and_header_problems() {
    let f = Format::Npy;
    assert_eq!(
        parse_err(f, b"PK\x03\x04 not numpy"),
        "not an npy file (it does not start with the \\x93NUMPY magic)"
    );
    assert_eq!(
        parse_err(f, b"\x93NUMPY\x01"),
        "file is 7 bytes, too short for an npy preamble"
    );
    assert_eq!(
        parse_err(f, b"\x93NUMPY\x09\x00\x10\x00{}"),
        "unsupported npy format version 9.0 (1.0, 2.0 and 3.0 are read)"
    );
    assert_eq!(
        parse_err(f, b"\x93NUMPY\x02\x00\x00\x00\x00\x40{}"),
        "npy header declares 1073741824 bytes, more than the limit of 65536"
    );
    assert_eq!(
        parse_err(f, b"\x93NUMPY\x01\x00\x64\x00{'descr'"),
        "npy header declares 100 bytes but the file ends 8 bytes after the preamble"
    );
    let cases: &[(&str, &str)] = &[
        ("[1, 2]", "malformed header: it is not a dictionary"),
        (
            "{'descr': '<f4', 'fortran_order': False}",
            "malformed header: no 'shape' entry",
        ),
        (
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 1)}",
            "malformed header: 'fortran_order' is not True or False",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': [1, 1]}",
            "malformed header: 'shape' is not a tuple",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2)}",
            "header holds a negative number",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 2)}",
            "header holds a number too large for 64 bits at byte 51",
        ),
        (
            "{'shape': ((((((((((((1,),),),),),),),),),),),)}",
            "malformed header: literals nested deeper than 8",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)} junk",
            "malformed header: unexpected text after the dictionary",
        ),
        ("{'descr': '<f4", "malformed header: unterminated string"),
        (
            "{'descr': '<f4', 'fortran_order': Maybe}",
            "malformed header: unexpected word 'Maybe'",
        ),
        (
            "{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,)}",
            "unsupported dtype: structured arrays are not vector data",
        ),
        (
            "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 1)}",
            "unsupported dtype '<c8' (supported: f32, f16, f64, u8, u16, u32, u64, i8, i16, i32, \
             i64, bool)",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()}",
            "array is 0-dimensional (a scalar); expected a 2-D array (n, d)",
        ),
    ];
    for (dict, msg) in cases {
        assert_eq!(parse_err(f, &npy(dict, &[0; 8])), *msg, "{dict}");
    }
}

#[test]
fn npy_size_problems() {
    let f = Format::Npy;
    assert_eq!(
        parse_err(f, &npy(&npy_dict("<f4", "(3, 0)"), &[])),
        "header declares dimension 0; vectors need at least one component"
    );
    assert_eq!(
        parse_err(f, &npy(&npy_dict("<f4", "(5000000000, 1)"), &[0; 4])),
        "header declares 5000000000 vectors, more than the limit of 4294967295"
    );
    assert_eq!(
        parse_err(
            f,
            &npy(&npy_dict("<f8", "(4294967295, 18446744073709551615)"), &[])
        ),
        "header declares 4294967295 x 18446744073709551615 f64 values, which overflows a 64-bit \
         size"
    );
    assert_eq!(
        parse_err(f, &npy(&npy_dict("<f4", "(100000, 128)"), &[0; 12])),
        "header declares 100000 x 128 f32 values (51200000 bytes) but only 12 bytes follow the \
         header (truncated file?)"
    );
    assert_eq!(
        parse_err(f, &npy(&npy_dict("|u1", "(2, 2)"), &[0; 7])),
        "3 bytes of trailing data after the 2 x 2 u8 values the header declares"
    );
    // A 64-bit integer f64 would round is the one value still refused.
    assert_eq!(
        parse_err(
            f,
            &npy(&npy_dict("<u8", "(1, 2)"), &le(&[1u64, (1 << 53) + 1]))
        ),
        "value 9007199254740993 at row 0, column 1 has no exact f64 form: it would be rounded \
         (f64 holds every integer only up to 2^53 = 9007199254740992 in magnitude)"
    );
}

/// float64 and integer dtypes load exactly: as f32 when every value is an f32 number, as f64
/// otherwise.
#[test]
fn npy_f64_and_integer_dtypes_load_exactly() {
    let load = |descr: &str, shape: &str, body: Vec<u8>| {
        let ds = parse_bytes(
            Format::Npy,
            &npy(&npy_dict(descr, shape), &body),
            Role::Base,
        )
        .unwrap_or_else(|e| panic!("{descr}: {e}"));
        let v = ds.as_vectors().unwrap().clone();
        (v.elem_type(), v.rows_f64(0, v.len()).into_owned())
    };
    assert_eq!(
        load("<f8", "(1, 2)", le(&[1.0f64, 0.1])),
        (ElemType::F64, vec![1.0, 0.1])
    );
    assert_eq!(
        load(
            ">f8",
            "(2,)",
            [0.5f64, 2.0].iter().flat_map(|x| x.to_be_bytes()).collect()
        ),
        (ElemType::F32, vec![0.5, 2.0])
    );
    assert_eq!(
        load("<i4", "(2,)", le(&[1i32, (1 << 25) + 1])),
        (ElemType::F64, vec![1.0, 33_554_433.0])
    );
    assert_eq!(
        load("<i8", "(1, 3)", le(&[-5i64, 99, (1 << 53) - 1])),
        (ElemType::F64, vec![-5.0, 99.0, 9_007_199_254_740_991.0])
    );
    assert_eq!(
        load("<i8", "(1, 2)", le(&[0i64, 99])),
        (ElemType::F32, vec![0.0, 99.0])
    );
    assert_eq!(
        load("<u8", "(1, 2)", le(&[7u64, 1 << 60])),
        (ElemType::F32, vec![7.0, 1_152_921_504_606_846_976.0])
    );
    assert_eq!(
        load("<u2", "(1, 2)", le(&[65_535u16, 3])),
        (ElemType::F32, vec![65_535.0, 3.0])
    );
    assert_eq!(
        load("<u4", "(1, 2)", le(&[u32::MAX, 3])),
        (ElemType::F64, vec![4_294_967_295.0, 3.0])
    );
    assert_eq!(
        load("|b1", "(1, 3)", vec![1, 0, 1]),
        (ElemType::U8, vec![1.0, 0.0, 1.0])
    );
}

#[test]
fn npy_hand_built_layouts() {
    // Fortran order transposes; Python 2 "L" suffixes and double quotes are accepted.
    let dict = "{\"descr\": \"<f4\", \"fortran_order\": True, \"shape\": (2L, 3L)}";
    let ds = parse_bytes(
        Format::Npy,
        &npy(dict, &le(&[1f32, 4.0, 2.0, 5.0, 3.0, 6.0])),
        Role::Base,
    )
    .unwrap();
    assert_eq!(as_f32(&ds), (2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    // Big-endian i16 converts.
    let data: Vec<u8> = [-300i16, 7].iter().flat_map(|v| v.to_be_bytes()).collect();
    let ds = parse_bytes(
        Format::Npy,
        &npy(&npy_dict(">i2", "(1, 2)"), &data),
        Role::Base,
    )
    .unwrap();
    assert_eq!(as_f32(&ds), (1, 2, vec![-300.0, 7.0]));
    // Zero rows are a valid (empty) set.
    let ds = parse_bytes(
        Format::Npy,
        &npy(&npy_dict("<f4", "(0, 5)"), &[]),
        Role::Base,
    )
    .unwrap();
    assert_eq!(as_f32(&ds), (0, 5, vec![]));
}

#[test]
fn hdf5_problems() {
    let f = Format::Hdf5;
    let msg = parse_err(f, b"this is not an HDF5 file at all");
    assert!(msg.starts_with("not a readable HDF5 file: "), "{msg}");
    // A real file cut short.
    let whole = std::fs::read(fixture("ann.hdf5")).unwrap();
    for cut in [100, 1000, whole.len() / 2] {
        let msg = parse_err(f, &whole[..cut]);
        assert!(!msg.is_empty());
    }
}

#[test]
fn text_problems() {
    assert_eq!(
        parse_err(Format::Txt, b"fine\nalso fine\nb\xffd\n\xff"),
        "line 3 is not valid UTF-8 (bad byte at column 2)"
    );
    assert_eq!(
        parse_err(Format::Txt, b"\xc3"),
        "line 1 is not valid UTF-8 (bad byte at column 1)"
    );
}

/// Inputs the fuzz targets found (see FUZZING.md), kept so the fixes stay fixed.
#[test]
fn fuzz_regressions() {
    // A 13 KB file whose chunk metadata made hdf5-pure allocate 4 GB before reading.
    let bytes = std::fs::read(fixture("fuzz/hdf5-oom-chunk-span.h5")).unwrap();
    let err = parse_bytes(Format::Hdf5, &bytes, Role::Base).unwrap_err();
    assert_eq!(
        err.message(),
        "dataset 'train' has a chunk of 4282943775 bytes at byte 0, past the end of the file \
         (13696 bytes)"
    );
    let err = parse_bytes(Format::Hdf5, &bytes, Role::Query).unwrap_err();
    assert_eq!(
        err.message(),
        "not a readable HDF5 file: HDF5 format error: invalid B-tree v1 signature"
    );
}
