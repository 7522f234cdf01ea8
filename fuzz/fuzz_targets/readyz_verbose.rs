//! The `/readyz?verbose` body parser (bytes from a backend, read as text).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = String::from_utf8_lossy(data);
    let report = kubegate_health::parse_verbose(&body);
    assert!(report.failing.iter().all(|n| !n.is_empty()));
});
