//! PROXY protocol headers: reading never panics, asks for at most `MAX_LENGTH` bytes, comes to
//! the same answer read piece by piece, and reads back the headers a balancer writes.
//!
//! The property lives in `fuzz/targets/proxy_header.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/proxy_header.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
