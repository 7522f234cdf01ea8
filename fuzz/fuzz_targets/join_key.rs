//! The joined-read key (`kubegate::terminate::join::key`), whatever two clients send: two
//! shaped requests share a key exactly when they are the same request, so no answer crosses
//! identities, selectors, encodings or resourceVersions.
//!
//! The property lives in `fuzz/targets/join_key.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/join_key.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
