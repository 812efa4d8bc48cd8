//! Issue 40's hostile inputs at the library's seams: which files a run touches
//! (`RunFiles`, `check_one_set`, member syntax on any bytes), archives (in-place members,
//! duplicate names, the inflation budget), delimited text (the header rule, empty fields,
//! values beyond f32) and declared metrics. The CLI's `tests/hostile_corpus.rs` runs the same
//! classes end to end.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::*;
use voisin::data::{Buffer, ElemType, VectorData};
use voisin::Metric;
use voisin_io::{
    check_one_set, choose_metric, parse_bytes, parse_bytes_with, read_dataset, split_member,
    stdin_once, write_vectors, Declared, Format, Given, Header, Input, ReadOptions, Role, RunFiles,
    Written,
};

fn err(r: Result<impl std::fmt::Debug, voisin_io::IoError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn member_syntax_keeps_the_bytes_of_the_name() {
    let (file, member) = split_member(Path::new(OsStr::from_bytes(b"/x/d\xe9.NPZ:train")));
    assert_eq!(file.as_os_str().as_bytes(), b"/x/d\xe9.NPZ");
    assert_eq!(member.as_deref(), Some("train"));
    let (file, member) = split_member(Path::new("t.parquet:a.npz:b"));
    assert_eq!(
        (file.to_str(), member.as_deref()),
        (Some("t.parquet:a.npz"), Some("b"))
    );
    // `.pq` is a Parquet extension for columns too, as it is for the format.
    let (file, member) = split_member(Path::new("t.pq:emb"));
    assert_eq!(
        (file.to_str(), member.as_deref()),
        (Some("t.pq"), Some("emb"))
    );
    assert_eq!(
        voisin_io::Format::from_path(Path::new("t.PQ:emb")).unwrap(),
        voisin_io::Format::Parquet
    );
    let e = voisin_io::Format::from_path(Path::new("t.xyz"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown input format '.xyz'") && e.contains(".pq"),
        "{e}"
    );
}

#[test]
fn an_output_that_is_an_input_is_refused_whatever_its_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let at = |n: &str| dir.path().join(n);
    std::fs::copy(fixture("arrays.npz"), at("a.npz")).unwrap();
    std::fs::hard_link(at("a.npz"), at("h.npz")).unwrap();
    std::os::unix::fs::symlink(at("a.npz"), at("l.npz")).unwrap();
    let member = at("l.npz:train");
    for out in ["a.npz", "h.npz"] {
        let e = err(check_run(&member, &at(out), None));
        assert!(e.contains("is an input of this command"), "{e}");
    }
    let idx = at("i.npz");
    let index_out = RunFiles {
        inputs: vec![("--input", &member)],
        output: Some(Written::File(&at("a.npz"))),
        checkpoint: None,
    };
    assert!(err(index_out.check())
        .contains("is the input of this command; the index would overwrite it"));
    let fine = RunFiles {
        inputs: vec![("--input", &member)],
        output: Some(Written::File(&idx)),
        checkpoint: None,
    };
    fine.check().unwrap();
}

/// The checks of a run reading `input` and writing a result to `out`, with `checkpoint`.
fn check_run(
    input: &Path,
    out: &Path,
    checkpoint: Option<&Path>,
) -> Result<(), voisin_io::IoError> {
    RunFiles {
        inputs: vec![("--input", input)],
        output: Some(Written::Result {
            path: out,
            range: false,
            exact: false,
        }),
        checkpoint,
    }
    .check()
}

#[test]
fn outputs_stay_out_of_the_checkpoint_folder() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let input = fixture("c_f32.npy");
    for (out, made) in [
        ("ck/g.ivecs", true),
        ("ck/g.npz", true),
        ("ck/g.tsv", false),
    ] {
        if made {
            std::fs::create_dir_all(&ck).unwrap();
        } else {
            let _ = std::fs::remove_dir_all(&ck);
        }
        let e = err(check_run(&input, &dir.path().join(out), Some(&ck)));
        assert!(e.contains("inside the checkpoint folder"), "{e}");
    }
    // Beside the folder, and in a folder within it, is fine.
    std::fs::create_dir_all(ck.join("sub")).unwrap();
    for out in ["g.ivecs", "ck/sub/g.ivecs"] {
        check_run(&input, &dir.path().join(out), Some(&ck)).unwrap();
    }
}

#[test]
fn standard_input_is_read_once_and_exact_distances_need_room() {
    let dash = Path::new("-");
    let e = err(stdin_once(&[("--base", dash), ("--query", dash)]));
    assert!(
        e.contains("--base and --query") && e.contains("only once"),
        "{e}"
    );
    stdin_once(&[("--base", dash), ("--query", Path::new("q.npy"))]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ivecs");
    let files = RunFiles {
        inputs: vec![],
        output: Some(Written::Result {
            path: &out,
            range: false,
            exact: true,
        }),
        checkpoint: None,
    };
    assert!(err(files.check()).contains("f64 distances cannot go"));
}

#[test]
fn pairs_need_one_set_read_twice() {
    let f = |n: &str| fixture(n);
    let e = err(check_one_set(&f("ann.hdf5"), &f("ann.hdf5")));
    assert!(e.contains("'train'") && e.contains("'test'"), "{e}");
    let e = err(check_one_set(&f("arrays.npz"), &f("arrays.npz")));
    assert!(e.contains("arrays.npz:train"), "{e}");
    check_one_set(&f("arrays.npz:test"), &f("arrays.npz:test")).unwrap();
    check_one_set(&f("one_z.npz"), &f("one_z.npz")).unwrap();
    check_one_set(&f("c_f32.npy"), &f("c_f32.npy")).unwrap();
    let e = err(check_one_set(&f("c_f32.npy"), &f("c_f64.npy")));
    assert!(e.contains("give the same file"), "{e}");
}

/// A ZIP archive of stored members (name, bytes).
fn stored_zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut file, mut dir) = (Vec::new(), Vec::new());
    for (name, bytes) in members {
        let offset = file.len() as u32;
        let mut common = Vec::new();
        common.extend(20u16.to_le_bytes());
        common.extend([0u8; 8]);
        common.extend(crc32(bytes).to_le_bytes());
        common.extend((bytes.len() as u32).to_le_bytes());
        common.extend((bytes.len() as u32).to_le_bytes());
        common.extend((name.len() as u16).to_le_bytes());
        common.extend(0u16.to_le_bytes());
        file.extend(0x0403_4b50u32.to_le_bytes());
        file.extend(&common);
        file.extend(name.as_bytes());
        file.extend(*bytes);
        dir.extend(0x0201_4b50u32.to_le_bytes());
        dir.extend(20u16.to_le_bytes());
        dir.extend(&common);
        dir.extend([0u8; 10]);
        dir.extend(offset.to_le_bytes());
        dir.extend(name.as_bytes());
    }
    let (at, size) = (file.len() as u32, dir.len() as u32);
    file.extend(dir);
    file.extend(0x0605_4b50u32.to_le_bytes());
    file.extend([0u8; 4]);
    file.extend((members.len() as u16).to_le_bytes());
    file.extend((members.len() as u16).to_le_bytes());
    file.extend(size.to_le_bytes());
    file.extend(at.to_le_bytes());
    file.extend(0u16.to_le_bytes());
    file
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

fn npy_bytes(n: usize, d: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    let v = voisin::data::VectorSet::from_f32(n, d, values(n, d)).unwrap();
    write_vectors(&p, &v).unwrap();
    std::fs::read(p).unwrap()
}

#[test]
fn archive_members_of_one_name_are_refused() {
    let a = npy_bytes(3, 2);
    let zip = stored_zip(&[("train.npy", &a), ("test.npy", &a), ("train.npy", &a)]);
    let e = err(parse_bytes(Format::Npz, &zip, Role::Query));
    assert!(
        e.contains("two members named train.npy (entries 1 and 3"),
        "{e}"
    );
}

#[test]
fn archive_members_are_read_in_place() {
    let dir = tempfile::tempdir().unwrap();
    // Stored, in a mapped file: a window of the map where the values are aligned (a 30-byte
    // local header and a 6-byte name put them at a multiple of 4), a copy elsewhere.
    for (name, aligned) in [("ab.npy", true), ("abc.npy", false)] {
        let stored = dir.path().join("s.npz");
        std::fs::write(&stored, stored_zip(&[(name, &npy_bytes(5, 3))])).unwrap();
        let ds = read_dataset(&stored, &ReadOptions::default()).unwrap();
        assert_eq!(is_mapped(&ds), aligned && cfg!(target_endian = "little"));
        assert_eq!(as_f32(&ds), (5, 3, values(5, 3)));
    }
    // Deflated (numpy.savez_compressed): the values in the inflated bytes, not a copy.
    let ds = read(&fixture("one_z.npz")).unwrap();
    let v = ds.as_vectors().unwrap();
    assert!(matches!(v.data(), VectorData::F32(Buffer::Shared(_))));
    assert_eq!(as_f32(&ds), (5, 3, values(5, 3)));
}

#[test]
fn inflation_is_bounded_by_the_memory_budget() {
    let small = ReadOptions {
        memory: Some(64),
        ..ReadOptions::default()
    };
    let e = err(read_dataset(&fixture("one_z.npz"), &small));
    assert!(
        e.contains("member emb.npy inflates to") && e.contains("memory budget of 64 bytes"),
        "{e}"
    );
    let ample = ReadOptions {
        memory: Some(1 << 20),
        ..ReadOptions::default()
    };
    read_dataset(&fixture("one_z.npz"), &ample).unwrap();
}

fn csv(text: &str, header: Header) -> Result<voisin::Dataset, voisin_io::IoError> {
    let opts = ReadOptions {
        header,
        ..ReadOptions::default()
    };
    parse_bytes_with(Format::Csv, text.as_bytes(), &opts)
}

#[test]
fn the_csv_header_rule() {
    let rows = |r: Result<voisin::Dataset, _>| r.unwrap().len();
    // auto: text is a header; pandas' column numbers above decimals are one; other numbers
    // are data; column numbers above whole numbers are refused as ambiguous.
    assert_eq!(rows(csv("x,y\n1,2\n", Header::Auto)), 1);
    assert_eq!(rows(csv("0,1\n0.5,2\n3,4\n", Header::Auto)), 2);
    assert_eq!(rows(csv("0,1\n1e3,2\n", Header::Auto)), 1);
    assert_eq!(rows(csv("1,0\n2,3\n", Header::Auto)), 2);
    // A lone line of column numbers is a row.
    assert_eq!(rows(csv("0,1\n", Header::Auto)), 1);
    let e = err(csv("0,1,2\n3,4,5\n", Header::Auto));
    assert!(
        e.contains("line 1 reads 0,1,2") && e.contains("--header yes"),
        "{e}"
    );
    assert_eq!(rows(csv("0,1,2\n3,4,5\n", Header::No)), 2);
    assert_eq!(rows(csv("0,1,2\n3,4,5\n", Header::Yes)), 1);
    assert_eq!(rows(csv("\n\n0,1\n0.5,1\n", Header::Auto)), 1);
    let e = err(csv("x,y\n1,2\n", Header::No));
    assert!(e.contains("line 1, field 1: not a number"), "{e}");
}

#[test]
fn empty_csv_fields_are_refused_where_they_are() {
    for (text, want) in [
        ("1,,3\n4,5,6\n", "line 1, field 2 is empty"),
        ("1,2\n3, \n", "line 2, field 2 is empty"),
        ("1\t2\n\n\t4\n", "line 3, field 1 is empty"),
        (
            ",0,1\n0,1.5,2\n",
            "line 1, field 1 is empty (pandas writes its index column",
        ),
    ] {
        let format = if text.contains('\t') {
            Format::Tsv
        } else {
            Format::Csv
        };
        let e = err(parse_bytes(format, text.as_bytes(), Role::Base));
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn csv_values_beyond_f32_are_read_as_f64() {
    let ds = parse_bytes(Format::Csv, b"1e39,0.1\n-2e-46,3\n", Role::Base).unwrap();
    let v = ds.as_vectors().unwrap();
    assert_eq!(v.elem_type(), ElemType::F64);
    assert_eq!(v.rows_f64(0, 2).as_ref(), &[1e39, 0.1, -2e-46, 3.0]);
    // Ordinary text stays the f32 nearest to it; inf and nan stay what they say.
    let ds = parse_bytes(Format::Csv, b"0.1,inf\n-0,nan\n", Role::Base).unwrap();
    let v = ds.as_vectors().unwrap();
    assert_eq!(v.elem_type(), ElemType::F32);
    let got = v.as_f32().unwrap();
    assert_eq!(got[0], 0.1f32);
    assert!(got[1].is_infinite() && got[3].is_nan());
    for (text, what) in [("1e400,1\n", "1e400"), ("1,-1e-400\n", "-1e-400")] {
        let e = err(parse_bytes(Format::Csv, text.as_bytes(), Role::Base));
        assert!(
            e.contains(what) && e.contains("beyond the range of float64"),
            "{e}"
        );
    }
}

#[test]
fn declared_metrics_come_from_every_input() {
    let open = |n: &str| Input::open(&fixture(n), None).unwrap();
    let (ann, angular, int) = (
        open("ann.hdf5"),
        open("angular.hdf5"),
        open("int_distance.hdf5"),
    );
    let plain = open("c_f32.npy");
    assert_eq!(angular.declared().unwrap(), Declared::Name("cosine".into()));
    assert_eq!(
        int.declared().unwrap(),
        Declared::Unusable("an integer (3)".into())
    );
    assert_eq!(
        choose_metric(None, &[&plain, &angular]).unwrap(),
        Metric::Cosine
    );
    let e = err(choose_metric(None, &[&ann, &angular]));
    assert!(
        e.contains("but ") && e.contains("ann.hdf5 declares 'euclidean'"),
        "{e}"
    );
    let e = err(choose_metric(
        Some(Given::Flag(&Metric::Cityblock)),
        &[&plain, &angular],
    ));
    assert!(e.contains("--metric cityblock"), "{e}");
    let e = err(choose_metric(None, &[&int]));
    assert!(e.contains("an integer (3), not a metric name"), "{e}");
    assert_eq!(
        choose_metric(Some(Given::Flag(&Metric::Chebyshev)), &[&int]).unwrap(),
        Metric::Chebyshev
    );
    let idx = Path::new("i.vidx");
    let e = err(choose_metric(
        Some(Given::Index(idx, &Metric::Euclidean)),
        &[&angular],
    ));
    assert!(e.contains("the index i.vidx answers euclidean"), "{e}");
    assert_eq!(choose_metric(None, &[&plain]).unwrap(), Metric::Euclidean);
}

/// A deflated member inflates into exactly the size its directory entry declares: data that
/// holds more, or less, is refused (the declared size bounds the memory taken).
#[test]
fn a_deflated_member_must_fill_its_declared_size_exactly() {
    let good = std::fs::read(fixture("one_z.npz")).unwrap();
    let size_at = |sig: u32, off: usize| {
        let at = good
            .windows(4)
            .position(|w| w == sig.to_le_bytes())
            .unwrap();
        at + off
    };
    // Uncompressed size: byte 22 of the local header, byte 24 of the central record.
    let (local, central) = (size_at(0x0403_4b50, 22), size_at(0x0201_4b50, 24));
    let declared = u32::from_le_bytes(good[central..central + 4].try_into().unwrap());
    for (size, words) in [
        (declared - 1, "holds more than"),
        (declared + 1, &*format!("holds {declared} bytes")),
    ] {
        let mut lie = good.clone();
        for at in [local, central] {
            lie[at..at + 4].copy_from_slice(&size.to_le_bytes());
        }
        let e = err(parse_bytes(Format::Npz, &lie, Role::Base));
        assert!(e.contains(words), "{e}");
    }
}
