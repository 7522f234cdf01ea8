//! Terminate mode's TLS: how kubegate reaches the apiservers (their CA and name, and
//! kubegate's front-proxy certificate). What clients see (a serving certificate that follows
//! its files, optional client-certificate verification) is `kubegate_net::tls`, shared with the
//! admin endpoint.
//!
//! Requests that carry an identity kubegate vouches for (`X-Remote-*` from a verified client
//! certificate) go over connections that present the front-proxy certificate; everything else
//! (bearer tokens, anonymous) over connections that present none. In the apiserver a client
//! certificate that fails its x509 authenticator is an error, and an error refuses anonymous
//! access (`union.NewFailOnError`): an anonymous `/readyz` sent with the front-proxy
//! certificate would get 401 instead of an answer.

use arc_swap::ArcSwapOption;
use kubegate_config::UpstreamConfig;
use kubegate_net::tls::{certified_key, load_roots, not_after, TlsPolicy};
use rustls::client::ClientConfig;
use rustls::pki_types::ServerName;
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::SystemTime;

/// ALPN protocols offered to clients, preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// How kubegate dials the apiservers: one client config per kind of upstream connection.
pub struct UpstreamTls {
    /// What connections for requests carrying `X-Remote-*` present: the front-proxy
    /// certificate. One cell for every generation of a cluster's upstream settings
    /// (`TerminateMode::replace` keeps it), so that a connection is always dialed with the
    /// certificate of now, whatever settings the request that dials it took.
    pub identity: Arc<ArcSwapOption<Presented>>,
    /// Presents nothing: bearer tokens and anonymous requests.
    pub without_identity: Arc<ClientConfig>,
    /// For upgraded (HTTP/1.1) connections.
    pub without_identity_h1: Arc<ClientConfig>,
    /// SNI sent and name verified.
    pub server_name: ServerName<'static>,
}

/// The front-proxy certificate, as connections present it.
pub struct Presented {
    /// For HTTP/2 connections.
    pub h2: Arc<ClientConfig>,
    /// For upgraded (HTTP/1.1) connections.
    pub h1: Arc<ClientConfig>,
    /// A hash of the certificate: connections record it, and one that presents another than
    /// the current takes no new request.
    pub fingerprint: u64,
    /// When it expires: connections that present it must be gone by then once another
    /// replaces it (the apiserver verifies it at every request).
    pub expires: Option<SystemTime>,
}

impl UpstreamTls {
    /// Whether requests can carry an identity kubegate vouches for (a front-proxy certificate
    /// is configured).
    pub fn vouches(&self) -> bool {
        self.identity.load().is_some()
    }

    /// What identity connections present now.
    pub fn presented(&self) -> Option<Arc<Presented>> {
        self.identity.load_full()
    }
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
        let policy = TlsPolicy::new(upstream.tls.min_version, &upstream.tls.cipher_suites)
            .map_err(|e| format!("upstream.tls: {e}"))?;
        let build = |identity: Option<&CertifiedKey>,
                     alpn: &[u8]|
         -> Result<Arc<ClientConfig>, String> {
            let builder = ClientConfig::builder_with_provider(policy.provider())
                .with_protocol_versions(policy.versions())
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
        let presented = match &identity {
            Some(key) => {
                let leaf = key.cert.first().map(|c| c.as_ref()).unwrap_or_default();
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::hash::Hash::hash(leaf, &mut h);
                Some(Arc::new(Presented {
                    h2: build(Some(key), b"h2")?,
                    h1: build(Some(key), b"http/1.1")?,
                    // Never 0: the mark of a connection that presents nothing.
                    fingerprint: std::hash::Hasher::finish(&h) | 1,
                    expires: not_after(leaf),
                }))
            }
            None => None,
        };
        Ok(UpstreamTls {
            identity: Arc::new(ArcSwapOption::new(presented)),
            without_identity: build(None, b"h2")?,
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
