//! Numeric CSV and TSV parser (header detection, field counts, number syntax).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Csv, data, Role::Base));
    common::touch(parse_bytes(Format::Tsv, data, Role::Base));
});
