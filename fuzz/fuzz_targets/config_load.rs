//! The config loader: YAML text to a validated config, or problems with positions inside it.
//!
//! The property lives in `fuzz/targets/config_load.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/config_load.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
