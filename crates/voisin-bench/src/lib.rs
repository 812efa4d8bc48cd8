//! What the benchmark programs of `src/bin/` share: the data kinds they measure ([`kinds`]).
//! The programs themselves use the engines through their public faces only.

pub mod kinds;
