//! Terminate mode's request shaping (`kubegate::terminate::request`), whatever a client sends:
//! no identity header of the client's and no connection-specific header reaches a backend, the
//! URI is absolute HTTPS with an authority, a held body has a matching `Content-Length`, and
//! `X-Forwarded-For` ends with the client's address.
//!
//! The property lives in `fuzz/targets/request_shaping.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/request_shaping.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
