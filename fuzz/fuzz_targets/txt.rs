//! .txt string-list parser (line splitting, UTF-8 checks).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Txt, data, Role::Base));
});
