//! A client certificate's identity (CN, O) from any DER.
//!
//! The property lives in `fuzz/targets/client_certificate.rs`, which `tests/fuzz_corpora.rs` also replays
//! over this target's corpus on stable, as an ordinary test.
#![no_main]

#[path = "../targets/client_certificate.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
