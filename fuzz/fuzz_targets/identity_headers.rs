//! Identity headers: whatever a client sends, no front-proxy header survives stripping, with
//! the apiserver's default names and with lists of several.
//!
//! The property lives in `fuzz/targets/identity_headers.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/identity_headers.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
