//! Watch-event framing of a backend's response: the first byte picks JSON lines or protobuf and
//! the read sizes; the rest is the stream. Never a panic, and what is held stays bounded.
//!
//! The property lives in `fuzz/targets/watch_framing.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/watch_framing.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
