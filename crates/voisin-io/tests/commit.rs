//! The output commit as voisin-io's writers use it (issue 14): the files of a result are named
//! by one function, checked before work, never written through or over non-regular files or
//! foreign companions, and replaced whole, also under concurrent writers.

mod common;

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use common::names;
use voisin::data::VectorSet;
use voisin::engine::{KnnResult, RangeResult};
use voisin_io::{check_outputs, result_files, write_knn, write_range, write_vectors};

fn knn(k: usize) -> KnnResult {
    KnnResult {
        n_queries: 3,
        k,
        indices: (0..3 * k as u32).collect(),
        distances: (0..3 * k).map(|i| i as f32).collect(),
        ..Default::default()
    }
}

#[test]
fn result_files_name_every_file_of_an_output() {
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(result_files(&p("d/r.tsv"), false).unwrap(), [p("d/r.tsv")]);
    assert_eq!(
        result_files(&p("d/r.ivecs"), true).unwrap(),
        [p("d/r.ivecs"), p("d/r.fvecs")]
    );
    let two = [p("d/r.indices.npy"), p("d/r.distances.npy")];
    assert_eq!(result_files(&p("d/r.npy"), false).unwrap(), two);
    assert_eq!(result_files(&p("d/r.distances.npy"), false).unwrap(), two);
    assert_eq!(
        result_files(&p("d/r.npy"), true).unwrap()[2],
        p("d/r.offsets.npy")
    );
    let err = result_files(&p("r.csv"), false).unwrap_err();
    assert!(err.is_user_error() && err.message().contains("unknown output format"));
}

#[test]
fn checks_refuse_unusable_targets_as_user_errors() {
    let dir = tempfile::tempdir().unwrap();
    let at = |n: &str| dir.path().join(n);
    std::fs::write(at("real"), b"x").unwrap();
    symlink("real", at("link.tsv")).unwrap();
    std::fs::create_dir(at("folder.tsv")).unwrap();
    let long = at(&format!("{}.tsv", "n".repeat(256)));
    let mut slash = at("r.tsv").into_os_string();
    slash.push("/");
    for (path, needle) in [
        (at("link.tsv"), "symbolic link"),
        (at("folder.tsv"), "is a folder"),
        (PathBuf::from("/dev/null"), "character device"),
        (long, "too long"),
        (PathBuf::from(slash), "ends in '/'"),
        (at("no/such/r.tsv"), "does not exist"),
        (at("real/r.tsv"), "is not a folder"),
    ] {
        let err = check_outputs(std::slice::from_ref(&path)).unwrap_err();
        assert!(err.is_user_error(), "{err}");
        assert!(err.message().contains(needle), "{path:?}: {err}");
        assert!(!err.to_string().contains('\n'));
    }
    assert_eq!(names(dir.path()), ["folder.tsv", "link.tsv", "real"]);
}

#[test]
fn writers_never_replace_links_or_foreign_companions() {
    let dir = tempfile::tempdir().unwrap();
    let at = |n: &str| dir.path().join(n);
    std::fs::write(at("real"), b"keep").unwrap();
    symlink("real", at("l.ivecs")).unwrap();
    assert!(write_knn(&at("l.ivecs"), &knn(2)).is_err());
    std::fs::write(at("precious.fvecs"), b"keep").unwrap();
    let err = write_knn(&at("precious.ivecs"), &knn(2)).unwrap_err();
    assert!(
        err.message().contains("not part of an earlier result"),
        "{err}"
    );
    let v = VectorSet::from_f32(1, 2, vec![1.0, 2.0]).unwrap();
    assert!(write_vectors(&at("l.ivecs"), &v).is_err());
    let range = RangeResult {
        offsets: vec![0, 1],
        indices: vec![0],
        distances: vec![0.5],
        ..Default::default()
    };
    std::fs::write(at("r.offsets.npy"), b"keep").unwrap();
    assert!(write_range(&at("r.npy"), &range).is_err());
    assert_eq!(std::fs::read(at("real")).unwrap(), b"keep");
    assert_eq!(std::fs::read(at("precious.fvecs")).unwrap(), b"keep");
    assert_eq!(
        names(dir.path()),
        ["l.ivecs", "precious.fvecs", "r.offsets.npy", "real"]
    );
}

#[test]
fn concurrent_writers_leave_one_whole_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.ivecs");
    write_knn(&out, &knn(1)).unwrap();
    for _ in 0..20 {
        std::thread::scope(|s| {
            for k in [2, 5] {
                let out = &out;
                s.spawn(move || write_knn(out, &knn(k)).unwrap());
            }
        });
        let ids = std::fs::read(&out).unwrap().len();
        let ds = std::fs::read(out.with_extension("fvecs")).unwrap().len();
        assert_eq!(ids, ds, "indices of one writer, distances of the other");
        assert_eq!(names(dir.path()), ["c.fvecs", "c.ivecs"]);
    }
}
