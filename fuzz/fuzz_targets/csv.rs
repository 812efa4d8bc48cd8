//! Numeric CSV and TSV parser (the header rule under each `--header`, empty fields, field
//! counts, number syntax, values beyond f32 read as f64).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes_with, Format, Header, ReadOptions};

mod common;

fuzz_target!(|data: &[u8]| {
    for header in [Header::Auto, Header::Yes, Header::No] {
        let opts = ReadOptions {
            header,
            ..ReadOptions::default()
        };
        common::touch(parse_bytes_with(Format::Csv, data, &opts));
        common::touch(parse_bytes_with(Format::Tsv, data, &opts));
    }
});
