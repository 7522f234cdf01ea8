//! Bearer tokens: kubegate reads an `Authorization` value exactly as a transcription of the
//! apiserver's `bearertoken.go` (Go's `TrimSpace`, `SplitN`, `ToLower`) reads it.
//!
//! The property lives in `fuzz/targets/bearer_token.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/bearer_token.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
