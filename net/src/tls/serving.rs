//! Serving TLS from files: a serving certificate that follows its files (swapped whole, the
//! current one kept when a new pair does not load) and optional client-certificate
//! verification. Used by terminate-mode listeners and by the admin endpoint.

use super::pem::{certified_key, load_roots};
use super::policy::TlsPolicy;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A serving certificate and the files it is read from, swapped whole when they change.
#[derive(Debug)]
pub struct ServingCert {
    current: arc_swap::ArcSwap<CertifiedKey>,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl ServingCert {
    /// Loads the pair now.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<ServingCert, String> {
        Ok(ServingCert {
            current: arc_swap::ArcSwap::from_pointee(certified_key(cert_file, key_file)?),
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
        })
    }

    /// The files it is read from, the certificate first.
    pub fn files(&self) -> [&Path; 2] {
        [&self.cert_file, &self.key_file]
    }

    /// Loads the pair again; new handshakes get it. On failure the current one stays.
    pub fn reload(&self) -> Result<(), String> {
        self.current
            .store(Arc::new(certified_key(&self.cert_file, &self.key_file)?));
        Ok(())
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The server side of a listener serving `cert`, offering `alpn` with the versions and suites
/// of `policy`; with `client_ca`, client certificates are asked for and verified against it
/// (clients without one are still accepted: bearer tokens, anonymous).
pub fn server_config(
    cert: Arc<ServingCert>,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
    policy: &TlsPolicy,
) -> Result<ServerConfig, String> {
    let provider = policy.provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(policy.versions())
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(load_roots(ca)?), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// What `tls` serves, loaded now: its serving certificate (which then follows its files) and
/// the server side around it, offering `alpn`. A listener's, a cluster's and the admin
/// endpoint's TLS are all read here.
pub fn serving(
    tls: &kubegate_config::ServingTls,
    alpn: &[&[u8]],
) -> Result<(Arc<ServingCert>, ServerConfig), String> {
    let cert = Arc::new(ServingCert::load(&tls.cert_file, &tls.key_file)?);
    let policy = TlsPolicy::new(tls.min_version, &tls.cipher_suites)?;
    let config = server_config(cert.clone(), tls.client_ca_file.as_deref(), alpn, &policy)?;
    Ok((cert, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::pem::tests::write_pair;

    #[test]
    fn a_failed_reload_keeps_the_serving_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = write_pair(dir.path(), "a");
        let serving = ServingCert::load(&crt, &key).unwrap();
        let before = serving.current();
        std::fs::write(&key, "garbage").unwrap();
        assert!(serving.reload().is_err());
        assert!(Arc::ptr_eq(&before, &serving.current()));
        let (crt2, key2) = write_pair(dir.path(), "b");
        std::fs::copy(&crt2, &crt).unwrap();
        std::fs::copy(&key2, &key).unwrap();
        serving.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &serving.current()));
        assert_eq!(serving.files(), [crt.as_path(), key.as_path()]);
    }
}
