//! .fvecs/.ivecs/.bvecs parser: the first byte picks the flavour, the rest is the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&which, file)) = data.split_first() else {
        return;
    };
    let format = [Format::Fvecs, Format::Ivecs, Format::Bvecs][usize::from(which % 3)];
    common::touch(parse_bytes(format, file, Role::Base));
});
