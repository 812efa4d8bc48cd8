//! The .npz and .csr.npz result files, and the .npz, CSV/TSV inputs, the HDF5 `distance`
//! attribute and input names (`data.npz:name`, upper-case extensions).

mod common;

use common::*;
use voisin_io::{
    declared_metric, parse_bytes, write_knn, write_knn_with, write_range, write_range_with, Format,
    Role, WriteOptions,
};

#[test]
fn npz_distances_equal_the_npy_ones() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("res.npz");
    let npy = dir.path().join("res.npy");
    write_knn(&npz, &knn()).unwrap();
    write_knn(&npy, &knn()).unwrap();
    let from_npz = read(&dir.path().join("res.npz:distances")).unwrap();
    let from_npy = read(&dir.path().join("res.distances.npy")).unwrap();
    assert_eq!(as_f32(&from_npz), as_f32(&from_npy));
    assert_eq!(as_f32(&from_npz).2, knn().distances);
    // Only the one file is written.
    assert!(!dir.path().join("res.indices.npz").exists());
    let e = read(&dir.path().join("res.npz")).unwrap_err();
    assert!(
        e.message().contains("name one as FILE.npz:NAME"),
        "{}",
        e.message()
    );
}

#[test]
fn range_npz_and_sparse_outputs_are_single_files() {
    let dir = tempfile::tempdir().unwrap();
    write_range(&dir.path().join("r.npz"), &range()).unwrap();
    let d = read(&dir.path().join("r.npz:distances")).unwrap();
    assert_eq!(as_f32(&d), (3, 1, range().distances));
    let csr = dir.path().join("r.csr.npz");
    let e = write_range(&csr, &range()).unwrap_err();
    assert!(e.message().contains("base set's size"), "{}", e.message());
    let opts = WriteOptions {
        columns: Some(8),
        ..Default::default()
    };
    write_range_with(&csr, &range(), &opts).unwrap();
    let data = read(&dir.path().join("r.csr.npz:data")).unwrap();
    assert_eq!(as_f32(&data), (3, 1, range().distances));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["r.csr.npz", "r.npz"]);
}

#[test]
fn exact_distances_are_written_as_f64() {
    let dir = tempfile::tempdir().unwrap();
    let exact = [0.0, 0.1f64, 1.5, 2.0, 1e300, 1e-300];
    let opts = WriteOptions {
        exact_distances: Some(&exact),
        ..Default::default()
    };
    let tsv = dir.path().join("r.tsv");
    write_knn_with(&tsv, &knn(), &opts).unwrap();
    let text = std::fs::read_to_string(&tsv).unwrap();
    assert!(text.starts_with("0\t3\t0\n0\t1\t0.1\n"), "{text}");
    let last: Vec<f64> = text
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(last, exact);
    // The member is float64: read back, it holds the f64 values themselves (0.1, 1e300 and
    // 1e-300 have no f32 form, so the set is stored as f64).
    let npz = dir.path().join("r.npz");
    write_knn_with(&npz, &knn(), &opts).unwrap();
    let back = read(&dir.path().join("r.npz:distances")).unwrap();
    let back = back.as_vectors().expect("vectors");
    assert!(matches!(back.data(), voisin::data::VectorData::F64(_)));
    let values: Vec<f64> = (0..back.len())
        .flat_map(|r| back.row_f64(r).to_vec())
        .collect();
    assert_eq!(values, exact);
    let e = write_knn_with(&dir.path().join("r.ivecs"), &knn(), &opts).unwrap_err();
    assert!(e.message().contains("use .npz"), "{}", e.message());
    let short = WriteOptions {
        exact_distances: Some(&exact[..2]),
        ..Default::default()
    };
    assert!(write_knn_with(&npz, &knn(), &short).is_err());
}

#[test]
fn numpy_npz_inputs_by_name_and_role() {
    let f = fixture("arrays.npz");
    for mmap in [true, false] {
        let base = read_with(&f, Role::Base, mmap).unwrap();
        assert_eq!(as_f32(&base), (5, 3, values(5, 3)));
        let queries = read_with(&f, Role::Query, mmap).unwrap();
        assert_eq!(as_f32(&queries), (2, 3, values(2, 3)));
    }
    let named = read(&fixture("arrays.npz:test")).unwrap();
    assert_eq!(as_f32(&named), (2, 3, values(2, 3)));
    let e = read(&fixture("arrays.npz:nope")).unwrap_err();
    assert!(
        e.message().contains("no array 'nope' (found: "),
        "{}",
        e.message()
    );
    assert!(e.path().ends_with("arrays.npz"));
    // Deflated members (numpy.savez_compressed); the only array needs no name.
    let z = read(&fixture("one_z.npz")).unwrap();
    assert_eq!(as_f32(&z), (5, 3, values(5, 3)));
}

#[test]
fn csv_and_tsv_inputs() {
    let csv = read(&fixture("c_f32.csv")).unwrap();
    assert_eq!(as_f32(&csv), (5, 3, values(5, 3)));
    let tsv = parse_bytes(Format::Tsv, b"1\t2.5\n\n-3\t4\r\n", Role::Base).unwrap();
    assert_eq!(as_f32(&tsv), (2, 2, vec![1.0, 2.5, -3.0, 4.0]));
    // Decimal text is read as the nearest f32.
    let tenth = parse_bytes(Format::Csv, b"0.1", Role::Base).unwrap();
    assert_eq!(as_f32(&tenth).2, vec![0.1f32]);
    assert_eq!(
        parse_err(Format::Csv, b"1,2\n3\n"),
        "line 2 has 1 fields but earlier lines have 2"
    );
    assert_eq!(
        parse_err(Format::Csv, b"1,2\n3,x\n"),
        "line 2, field 2: not a number"
    );
    assert_eq!(parse_err(Format::Csv, b"a,b\n"), "holds no rows of numbers");
}

#[test]
fn extensions_in_any_case_and_by_name() {
    assert_eq!(Format::from_path("X.NPY".as_ref()).unwrap(), Format::Npy);
    assert_eq!(
        Format::from_path("x.Npz:emb".as_ref()).unwrap(),
        Format::Npz
    );
    assert_eq!(Format::from_path("x.CSV".as_ref()).unwrap(), Format::Csv);
    assert_eq!(Format::from_name("H5"), Some(Format::Hdf5));
    assert_eq!(Format::from_name("xlsx"), None);
    assert_eq!(Format::from_name("PARQUET"), Some(Format::Parquet));
    let dir = tempfile::tempdir().unwrap();
    let upper = dir.path().join("C.NPY");
    std::fs::copy(fixture("c_f32.npy"), &upper).unwrap();
    assert_eq!(as_f32(&read(&upper).unwrap()), (5, 3, values(5, 3)));
}

#[test]
fn hdf5_distance_attribute_names_the_metric() {
    assert_eq!(
        declared_metric(&fixture("angular.hdf5"))
            .unwrap()
            .as_deref(),
        Some("cosine")
    );
    assert_eq!(
        declared_metric(&fixture("ann.hdf5")).unwrap().as_deref(),
        Some("euclidean")
    );
    assert_eq!(declared_metric(&fixture("others.h5")).unwrap(), None);
    assert_eq!(declared_metric(&fixture("c_f32.npy")).unwrap(), None);
}

/// A cheap stand-in for the fuzz targets in CI: every single-byte corruption and every
/// truncation of a real .npz is a clean error or a data set, never a panic.
#[test]
fn corrupted_npz_never_panics() {
    for name in ["arrays.npz", "one_z.npz"] {
        let good = std::fs::read(fixture(name)).unwrap();
        for at in 0..good.len() {
            for v in [0x00, 0xFF, good[at] ^ 1] {
                let mut bad = good.clone();
                bad[at] = v;
                let _ = parse_bytes(Format::Npz, &bad, Role::Base);
            }
            let _ = parse_bytes(Format::Npz, &good[..at], Role::Query);
        }
    }
}

#[test]
fn parquet_list_and_column_layouts() {
    for mmap in [true, false] {
        let fixed = read_with(&fixture("fixed_list.parquet"), Role::Base, mmap).unwrap();
        assert_eq!(as_f32(&fixed), (5, 3, values(5, 3)));
    }
    let cols = read(&fixture("columns.parquet")).unwrap();
    assert_eq!(as_f32(&cols), (5, 3, values(5, 3)));
    let vec = read(&fixture("two_lists.parquet:vec")).unwrap();
    assert_eq!(as_f32(&vec), (5, 3, values(5, 3)));
    let ids = read(&fixture("two_lists.parquet:id")).unwrap();
    assert_eq!(as_f32(&ids), (5, 1, vec![0.0, 1.0, 2.0, 3.0, 4.0]));
    let e = read(&fixture("two_lists.parquet")).unwrap_err();
    assert_eq!(
        e.message(),
        "holds 2 list columns (vec, other); name one as FILE.parquet:NAME"
    );
    let e = read(&fixture("columns.parquet:nope")).unwrap_err();
    assert_eq!(e.message(), "no column 'nope' (found: c0, c1, c2)");
}

/// As for .npz: corruptions and truncations of real Parquet files are errors, never panics.
#[test]
fn corrupted_parquet_never_panics() {
    let good = std::fs::read(fixture("fixed_list.parquet")).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x55;
        let _ = parse_bytes(Format::Parquet, &bad, Role::Base);
        let _ = parse_bytes(Format::Parquet, &good[..at], Role::Base);
    }
}
