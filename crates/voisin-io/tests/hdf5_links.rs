//! HDF5 `train`/`test` reached through links (issue 14): a soft link within the file is
//! followed in both group formats, an external link or a loop of soft links is refused in one
//! line. Files made by h5py (gen_fixtures.py).

mod common;

use common::*;
use voisin_io::Role;

#[test]
fn soft_links_are_followed_in_both_group_formats() {
    for name in ["soft_v1.hdf5", "soft_v2.h5"] {
        for mmap in [true, false] {
            let base = read_with(&fixture(name), Role::Base, mmap).unwrap();
            assert_eq!(as_f32(&base), (20, 5, values(20, 5)), "{name}");
            let queries = read_with(&fixture(name), Role::Query, mmap).unwrap();
            assert_eq!(as_f32(&queries), (3, 5, values(3, 5)), "{name}");
        }
    }
}

#[test]
fn external_links_are_refused_in_one_line() {
    let path = fixture("external.hdf5");
    let err = read(&path).unwrap_err();
    assert!(err.is_user_error());
    assert_eq!(
        err.message(),
        "dataset 'train' is an external link to '/train' in ann.hdf5; voisin reads one file \
         (copy that dataset into this one)"
    );
    // The queries of the same file are a plain dataset.
    let queries = read_with(&path, Role::Query, true).unwrap();
    assert_eq!(as_f32(&queries), (3, 5, values(3, 5)));
}
