//! HDF5 reader (hdf5-pure plus this crate's checks): both ann-benchmarks datasets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Hdf5, data, Role::Base));
    common::touch(parse_bytes(Format::Hdf5, data, Role::Query));
});
