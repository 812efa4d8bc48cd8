//! .fbin/.u8bin parser: the first byte picks the flavour, the rest is the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&which, file)) = data.split_first() else {
        return;
    };
    let format = if which % 2 == 0 {
        Format::Fbin
    } else {
        Format::U8bin
    };
    common::touch(parse_bytes(format, file, Role::Base));
});
