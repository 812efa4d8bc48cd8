//! Files written by the real h5py and NumPy (tests/data, made by gen_fixtures.py) read back with
//! the values the formula says they hold.

mod common;

use common::*;
use voisin::data::ElemType;
use voisin_io::Role;

#[test]
fn ann_benchmarks_hdf5_train_and_test() {
    for name in ["ann.hdf5", "ann_latest.h5", "ann_gzip.hdf5"] {
        for mmap in [true, false] {
            let base = read_with(&fixture(name), Role::Base, mmap).unwrap();
            assert_eq!(as_f32(&base), (20, 5, values(20, 5)), "{name}");
            assert_eq!(base.as_vectors().unwrap().elem_type(), ElemType::F32);
            let queries = read_with(&fixture(name), Role::Query, mmap).unwrap();
            assert_eq!(as_f32(&queries), (3, 5, values(3, 5)), "{name}");
        }
    }
}

#[test]
fn hdf5_u8_kept_and_exact_f64_converted() {
    let base = read_with(&fixture("train_u8.hdf5"), Role::Base, true).unwrap();
    let v = base.as_vectors().unwrap();
    assert_eq!(v.elem_type(), ElemType::U8);
    let expected: Vec<f32> = bytes_u8(6, 4).into_iter().map(f32::from).collect();
    assert_eq!(as_f32(&base), (6, 4, expected));
    let queries = read_with(&fixture("train_u8.hdf5"), Role::Query, true).unwrap();
    assert_eq!(queries.as_vectors().unwrap().elem_type(), ElemType::F32);
    assert_eq!(as_f32(&queries), (2, 4, values(2, 4)));
}

#[test]
fn hdf5_missing_dataset_lists_what_is_there() {
    let path = fixture("others.h5");
    let err = read(&path).unwrap_err();
    assert_eq!(
        err.message(),
        "no dataset 'train' (found: queries, vectors)"
    );
    assert_eq!(err.path(), path.as_path());
    assert!(err.is_user_error());
    let err = read_with(&path, Role::Query, false).unwrap_err();
    assert_eq!(err.message(), "no dataset 'test' (found: queries, vectors)");
}

#[test]
fn hdf5_wrong_rank_refused_and_inexact_f64_kept() {
    let err = read(&fixture("odd.h5")).unwrap_err();
    assert_eq!(
        err.message(),
        "dataset 'train' is 3-dimensional; expected a 2-D dataset (n, d)"
    );
    let ds = read_with(&fixture("odd.h5"), Role::Query, true).unwrap();
    let v = ds.as_vectors().unwrap();
    assert_eq!(v.elem_type(), ElemType::F64);
    assert_eq!(v.rows_f64(0, 2).as_ref(), &[0.1; 4]);
}

#[test]
fn numpy_files_in_every_layout() {
    let expected = (5, 3, values(5, 3));
    for name in [
        "c_f32.npy",
        "f_f32.npy",
        "c_f16.npy",
        "be_f32.npy",
        "f_be_f16.npy",
        "c_f64.npy",
        "v2_f32.npy",
    ] {
        for mmap in [true, false] {
            let ds = read_with(&fixture(name), Role::Base, mmap).unwrap();
            assert_eq!(as_f32(&ds), expected, "{name} mmap={mmap}");
        }
    }
    let elem = |name: &str| {
        read(&fixture(name))
            .unwrap()
            .as_vectors()
            .unwrap()
            .elem_type()
    };
    assert_eq!(elem("c_f16.npy"), ElemType::F16);
    assert_eq!(elem("f_be_f16.npy"), ElemType::F16);
    assert_eq!(elem("c_f64.npy"), ElemType::F32);
    assert_eq!(elem("c_u8.npy"), ElemType::U8);
    let u8s: Vec<f32> = bytes_u8(5, 3).into_iter().map(f32::from).collect();
    assert_eq!(as_f32(&read(&fixture("c_u8.npy")).unwrap()), (5, 3, u8s));
    let doubled: Vec<f32> = values(5, 3).iter().map(|v| v * 2.0).collect();
    assert_eq!(
        as_f32(&read(&fixture("c_i16.npy")).unwrap()),
        (5, 3, doubled)
    );
}

#[test]
fn numpy_one_d_is_a_column_of_scalars() {
    let ds = read(&fixture("one_d.npy")).unwrap();
    let col: Vec<f32> = (0..5).map(|i| value(i, 0)).collect();
    assert_eq!(as_f32(&ds), (5, 1, col));
}

#[test]
fn numpy_mapping_only_where_zero_copy_is_possible() {
    let mapped =
        |name: &str, mmap: bool| is_mapped(&read_with(&fixture(name), Role::Base, mmap).unwrap());
    assert!(mapped("c_f32.npy", true));
    assert!(mapped("c_f16.npy", true));
    assert!(mapped("c_u8.npy", true));
    assert!(!mapped("c_f32.npy", false));
    // Fortran order, foreign byte order and converted types need a copy.
    assert!(!mapped("f_f32.npy", true));
    assert!(!mapped("be_f32.npy", true));
    assert!(!mapped("c_f64.npy", true));
}

#[test]
fn numpy_unsupported_shapes_named_and_bool_read() {
    assert_eq!(
        read(&fixture("three_d.npy")).unwrap_err().message(),
        "array is 3-dimensional; expected a 2-D array (n, d) or a 1-D array"
    );
    let flags = read(&fixture("bool.npy")).unwrap();
    assert_eq!(flags.as_vectors().unwrap().elem_type(), ElemType::U8);
    assert_eq!(as_f32(&flags), (2, 2, vec![0.0; 4]));
}

#[test]
fn hdf5_unsupported_types_are_named() {
    let supported =
        "which is not supported (supported: f32, f64, u8, i8, i16, i32, i64, u16, u32, u64)";
    // int64 is read (exactly; these zeros as f32).
    let ints = read_with(&fixture("f16.h5"), Role::Query, true).unwrap();
    assert_eq!(as_f32(&ints), (2, 2, vec![0.0; 4]));
    // hdf5-pure has no name for half floats; its description of the type is passed on.
    let err = read(&fixture("f16.h5")).unwrap_err();
    assert!(
        err.message().starts_with("dataset 'train' has type other(")
            && err.message().ends_with(supported)
            && !err.message().contains('\n'),
        "{err}"
    );
}
