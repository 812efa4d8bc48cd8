//! HDF5 reader (hdf5-pure plus this crate's checks): both ann-benchmarks datasets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

fuzz_target!(|data: &[u8]| {
    let _ = parse_bytes(Format::Hdf5, data, Role::Base);
    let _ = parse_bytes(Format::Hdf5, data, Role::Query);
});
