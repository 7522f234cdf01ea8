//! The `/readyz?verbose` body parser (bytes from a backend, read as text).
//!
//! The property lives in `fuzz/targets/readyz_verbose.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/readyz_verbose.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
