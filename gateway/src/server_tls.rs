//! Server-side TLS from files: a serving certificate that follows its files (swapped whole,
//! the current one kept when a new pair does not load) and optional client-certificate
//! verification. Used by terminate-mode listeners and by the admin endpoint.

use kubegate_config::ListenerTls;
use kubegate_health::load_certs;
/// PEM roots are read as the prober reads its CA: one loader for both.
pub use kubegate_health::load_roots;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::path::Path;
use std::sync::Arc;

/// The crypto provider every TLS configuration of kubegate uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its key, checked to belong together.
pub fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain = load_certs(cert)?;
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{}: no usable private key: {e}", key.display()))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "{} does not belong to {}: {e}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(certified)
}

/// The serving certificate, swapped whole when its files change.
#[derive(Debug)]
pub struct ServingCert(arc_swap::ArcSwap<CertifiedKey>);

impl ServingCert {
    /// Loads the pair now.
    pub fn load(tls: &ListenerTls) -> Result<ServingCert, String> {
        Ok(ServingCert(arc_swap::ArcSwap::from_pointee(certified_key(
            &tls.cert_file,
            &tls.key_file,
        )?)))
    }

    /// Loads the pair again; on failure the current one stays.
    pub fn reload(&self, tls: &ListenerTls) -> Result<(), String> {
        self.0
            .store(Arc::new(certified_key(&tls.cert_file, &tls.key_file)?));
        Ok(())
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The server side of a listener with `tls`, offering `alpn`.
pub fn server_config(
    tls: &ListenerTls,
    cert: Arc<ServingCert>,
    alpn: &[&[u8]],
) -> Result<ServerConfig, String> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &tls.client_ca_file {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(load_roots(ca)?), provider)
                    // Bearer-token and anonymous clients present none.
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

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn write_pair(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
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
    fn a_failed_reload_keeps_the_serving_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = write_pair(dir.path(), "a");
        let tls = ListenerTls {
            cert_file: crt.clone(),
            key_file: key.clone(),
            client_ca_file: None,
        };
        let serving = ServingCert::load(&tls).unwrap();
        let before = serving.0.load_full();
        std::fs::write(&key, "garbage").unwrap();
        assert!(serving.reload(&tls).is_err());
        assert!(Arc::ptr_eq(&before, &serving.0.load_full()));
        let (crt2, key2) = write_pair(dir.path(), "b");
        std::fs::copy(&crt2, &crt).unwrap();
        std::fs::copy(&key2, &key).unwrap();
        serving.reload(&tls).unwrap();
        assert!(!Arc::ptr_eq(&before, &serving.0.load_full()));
    }
}
