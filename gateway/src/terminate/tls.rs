//! Terminate mode's TLS: what clients see (a serving certificate that follows its files,
//! optional client-certificate verification, ALPN `h2` and `http/1.1`) and how kubegate
//! reaches the apiservers (their CA and name, and kubegate's front-proxy certificate).
//!
//! Requests that carry an identity kubegate vouches for (`X-Remote-*` from a verified client
//! certificate) go over connections that present the front-proxy certificate; everything else
//! (bearer tokens, anonymous) over connections that present none. In the apiserver a client
//! certificate that fails its x509 authenticator is an error, and an error refuses anonymous
//! access (`union.NewFailOnError`): an anonymous `/readyz` sent with the front-proxy
//! certificate would get 401 instead of an answer.

use kubegate_config::{Config, Finding, ListenerMode, ListenerTls, UpstreamConfig};
use rustls::client::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use std::path::Path;
use std::sync::Arc;

/// ALPN protocols offered to clients, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in file", path.display()));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(roots)
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

/// The server side of one terminate-mode listener.
pub fn server_config(tls: &ListenerTls, cert: Arc<ServingCert>) -> Result<ServerConfig, String> {
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
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// How kubegate dials the apiservers: one client config per kind of upstream connection.
pub struct UpstreamTls {
    /// Presents the front-proxy certificate: requests carrying `X-Remote-*`.
    pub with_identity: Option<Arc<ClientConfig>>,
    /// Presents nothing: bearer tokens and anonymous requests.
    pub without_identity: Arc<ClientConfig>,
    /// For upgraded (HTTP/1.1) connections, the same two.
    pub with_identity_h1: Option<Arc<ClientConfig>>,
    /// See above.
    pub without_identity_h1: Arc<ClientConfig>,
    /// SNI sent and name verified.
    pub server_name: ServerName<'static>,
}

impl UpstreamTls {
    /// Builds the client configs from `upstream` (already validated: CA and name set).
    pub fn new(upstream: &UpstreamConfig) -> Result<UpstreamTls, String> {
        let ca = upstream
            .tls
            .ca_file
            .as_deref()
            .ok_or("upstream.tls.ca_file is not set")?;
        let roots = Arc::new(load_roots(ca)?);
        let name = upstream
            .tls
            .server_name
            .clone()
            .unwrap_or_else(|| "kubernetes".into());
        let server_name = ServerName::try_from(name.clone())
            .map_err(|e| format!("upstream.tls.server_name {name:?}: {e}"))?;
        let build = |identity: Option<&CertifiedKey>,
                     alpn: &[u8]|
         -> Result<Arc<ClientConfig>, String> {
            let builder = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots.clone());
            let mut config = match identity {
                Some(key) => builder
                    .with_client_cert_resolver(Arc::new(FixedClientCert(Arc::new(key.clone())))),
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(config))
        };
        let identity = match &upstream.front_proxy {
            Some(fp) => Some(certified_key(&fp.cert_file, &fp.key_file)?),
            None => None,
        };
        Ok(UpstreamTls {
            with_identity: identity
                .as_ref()
                .map(|k| build(Some(k), b"h2"))
                .transpose()?,
            without_identity: build(None, b"h2")?,
            with_identity_h1: identity
                .as_ref()
                .map(|k| build(Some(k), b"http/1.1"))
                .transpose()?,
            without_identity_h1: build(None, b"http/1.1")?,
            server_name,
        })
    }
}

/// Always presents the same certificate.
#[derive(Debug)]
struct FixedClientCert(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for FixedClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// What `kubegate check` and every (re)load add to validation: the certificate files parse and
/// each key belongs to its certificate. Findings name the key's path in the file.
pub fn check_files(config: &Config) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, l) in config.listeners.iter().enumerate() {
        let (ListenerMode::Terminate, Some(tls)) = (l.mode, &l.tls) else {
            continue;
        };
        if let Err(e) = certified_key(&tls.cert_file, &tls.key_file) {
            findings.push((format!("listeners[{i}].tls.key_file"), e));
        }
        if let Some(ca) = &tls.client_ca_file {
            if let Err(e) = load_roots(ca) {
                findings.push((format!("listeners[{i}].tls.client_ca_file"), e));
            }
        }
    }
    if config
        .listeners
        .iter()
        .any(|l| l.mode == ListenerMode::Terminate)
    {
        if let Some(fp) = &config.upstream.front_proxy {
            if let Err(e) = certified_key(&fp.cert_file, &fp.key_file) {
                findings.push(("upstream.front_proxy.key_file".into(), e));
            }
        }
        if let Some(ca) = &config.upstream.tls.ca_file {
            if let Err(e) = load_roots(ca) {
                findings.push(("upstream.tls.ca_file".into(), e));
            }
        }
    }
    findings
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
