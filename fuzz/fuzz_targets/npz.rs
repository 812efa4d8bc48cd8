//! .npz parser (ZIP directory, ZIP64 fields, stored and deflated members, duplicate names, CRC,
//! member choice, inflation within a memory budget, then the .npy parser on the member).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, parse_bytes_with, Format, ReadOptions, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Npz, data, Role::Base));
    common::touch(parse_bytes(Format::Npz, data, Role::Query));
    let budget = ReadOptions {
        memory: Some(4096),
        ..ReadOptions::default()
    };
    common::touch(parse_bytes_with(Format::Npz, data, &budget));
});
