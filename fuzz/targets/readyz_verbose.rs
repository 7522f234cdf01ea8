//! The `/readyz?verbose` body parser (bytes from a backend, read as text).

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let body = String::from_utf8_lossy(data);
    let report = kubegate_health::parse_verbose(&body);
    assert!(report.failing.iter().all(|n| !n.is_empty()));
}
