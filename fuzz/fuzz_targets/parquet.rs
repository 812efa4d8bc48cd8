//! Parquet reader (the parquet crate's footer, pages and records, guarded against panics, and
//! this crate's layout rules).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Parquet, data, Role::Base));
});
