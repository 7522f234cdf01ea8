//! Certificates, roots and keys from PEM, read from a file or given as bytes (a kubeconfig's
//! `*-data` fields). Errors name where the PEM came from: a file's path, or what the caller
//! calls the bytes.

use super::provider::provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use std::path::Path;

/// Every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    certs_from_pem(&pem, &path.display().to_string())
}

/// Every certificate in `pem` (at least one); `what` names it in errors.
pub fn certs_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no PEM certificate in file"));
    }
    Ok(certs)
}

/// A root store of every certificate in a PEM file.
pub fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    roots_from_pem(&pem, &path.display().to_string())
}

/// A root store of every certificate in `pem`; `what` names it in errors.
pub fn roots_from_pem(pem: &[u8], what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(pem, what)? {
        roots.add(cert).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(roots)
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    key_from_pem(&pem, &path.display().to_string())
}

/// The private key in `pem`; `what` names it in errors.
pub fn key_from_pem(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("{what}: no usable private key: {e}"))
}

/// A certificate chain and its key from files, checked to belong together.
pub fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain = load_certs(cert)?;
    let der = load_key(key)?;
    pair(
        chain,
        der,
        &key.display().to_string(),
        &cert.display().to_string(),
    )
}

/// A certificate chain and its key from PEM bytes, checked to belong together; `cert_what`
/// and `key_what` name them in errors.
pub fn certified_key_from_pem(
    cert: &[u8],
    cert_what: &str,
    key: &[u8],
    key_what: &str,
) -> Result<CertifiedKey, String> {
    pair(
        certs_from_pem(cert, cert_what)?,
        key_from_pem(key, key_what)?,
        key_what,
        cert_what,
    )
}

fn pair(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    key_what: &str,
    cert_what: &str,
) -> Result<CertifiedKey, String> {
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{key_what}: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("{key_what} does not belong to {cert_what}: {e}"))?;
    Ok(certified)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};
    use std::path::PathBuf;

    /// Writes `<name>.crt` and `<name>.key`, a self-signed pair for `kubernetes`.
    pub fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["kubernetes".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a_crt, a_key) = write_pair(dir.path(), "a");
        let (_, b_key) = write_pair(dir.path(), "b");
        assert!(certified_key(&a_crt, &a_key).is_ok());
        let err = certified_key(&a_crt, &b_key).unwrap_err();
        assert!(err.contains("does not belong to"), "{err}");
        let err = certified_key(&a_key, &a_key).unwrap_err();
        assert!(err.contains("no PEM certificate"), "{err}");
    }

    #[test]
    fn bytes_and_files_read_alike_and_errors_name_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = write_pair(dir.path(), "a");
        let (cert_pem, key_pem) = (std::fs::read(&crt).unwrap(), std::fs::read(&key).unwrap());
        assert!(certified_key_from_pem(
            &cert_pem,
            "client-certificate-data",
            &key_pem,
            "client-key-data"
        )
        .is_ok());
        assert_eq!(roots_from_pem(&cert_pem, "ca").unwrap().len(), 1);
        assert_eq!(load_roots(&crt).unwrap().len(), 1);
        let err = roots_from_pem(b"nothing here", "certificate-authority-data").unwrap_err();
        assert!(err.starts_with("certificate-authority-data: "), "{err}");
        let err = load_certs(&dir.path().join("missing.crt")).unwrap_err();
        assert!(err.contains("missing.crt"), "{err}");
        let err = key_from_pem(&cert_pem, "client-key-data").unwrap_err();
        assert!(
            err.contains("client-key-data: no usable private key"),
            "{err}"
        );
    }
}
