//! .npz parser (ZIP directory, ZIP64 fields, stored and deflated members, CRC, member choice,
//! then the .npy parser on the member).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Npz, data, Role::Base));
    common::touch(parse_bytes(Format::Npz, data, Role::Query));
});
