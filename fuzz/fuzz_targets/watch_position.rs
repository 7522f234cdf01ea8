//! A watch's position across events: any query and any JSON events, observed in order, then
//! asked where to resume and how to ask for it.
//!
//! The property lives in `fuzz/targets/watch_position.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/watch_position.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
