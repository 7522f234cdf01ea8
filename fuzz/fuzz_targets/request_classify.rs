//! A request's verb and long-running class from any method and request target, and the same
//! reading whatever unreserved characters the target percent-encodes: the apiserver decodes
//! before it classifies, so `secret%73` is `secrets` to kubegate too.
//!
//! The property lives in `fuzz/targets/request_classify.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/request_classify.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
