//! When certificates expire: the earliest `notAfter` of a PEM file's certificates (a chain, or
//! a CA bundle), for `kubegate_certificate_expiry_timestamp_seconds`.

use super::pem::load_certs;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The earliest expiry among the certificates in `path`.
pub fn earliest_expiry(path: &Path) -> Result<SystemTime, String> {
    let mut earliest: Option<SystemTime> = None;
    for der in load_certs(path)? {
        let at = not_after(&der)
            .ok_or_else(|| format!("{}: not an X.509 certificate", path.display()))?;
        earliest = Some(earliest.map_or(at, |e| e.min(at)));
    }
    earliest.ok_or_else(|| format!("{}: no certificate", path.display()))
}

/// When the DER certificate `der` expires (`notAfter`), if it is one.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let seconds = cert.validity().not_after.timestamp();
    Some(if seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(seconds as u64)
    } else {
        UNIX_EPOCH
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_expires_with_its_first_certificate_to_expire() {
        let dir = tempfile::tempdir().unwrap();
        let cert = |days: i64| {
            let mut p = rcgen::CertificateParams::new(vec!["x".into()]).unwrap();
            p.not_after = rcgen::date_time_ymd(2030, 1, 1) + time::Duration::days(days);
            p.self_signed(&rcgen::KeyPair::generate().unwrap())
                .unwrap()
                .pem()
        };
        let bundle = dir.path().join("bundle.crt");
        std::fs::write(&bundle, format!("{}{}", cert(30), cert(5))).unwrap();
        let at = earliest_expiry(&bundle).unwrap();
        let want = rcgen::date_time_ymd(2030, 1, 6).unix_timestamp() as u64;
        assert_eq!(at, UNIX_EPOCH + Duration::from_secs(want));
        std::fs::write(&bundle, "not pem").unwrap();
        assert!(earliest_expiry(&bundle).is_err());
    }
}
