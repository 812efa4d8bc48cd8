//! .npy parser (header literal, dtype, shape and size checks, Fortran transpose, conversions).
#![no_main]
use libfuzzer_sys::fuzz_target;
use voisin_io::{parse_bytes, Format, Role};

mod common;

fuzz_target!(|data: &[u8]| {
    common::touch(parse_bytes(Format::Npy, data, Role::Base));
});
