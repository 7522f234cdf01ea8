//! The credentials discovery reads the EndpointSlices with, from a kubeconfig: the current
//! context's cluster CA (and `tls-server-name`) and user (client certificate and key, or a
//! token), inline (`*-data`) or in files relative to the kubeconfig, and its `server` (which
//! discovery does not use: it asks its backends directly; `kubegate shed` does).

use base64::Engine;
use kubegate_net::tls::{certs_from_pem, key_from_pem, provider, roots_from_pem};
use rustls::ClientConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: T,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: Option<String>,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    tls_server_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(alias = "tokenFile")]
    token_file: Option<PathBuf>,
    /// Set when the user authenticates through a plugin kubegate does not run.
    exec: Option<serde_yaml_ng::Value>,
    auth_provider: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize, Default)]
struct Context {
    cluster: String,
    user: String,
}

/// How discovery authenticates and whom it trusts.
pub struct Credentials {
    /// TLS for connections to the backends (HTTP/1.1).
    pub tls: Arc<ClientConfig>,
    /// The cluster's `tls-server-name`, if it names one.
    pub server_name: Option<String>,
    /// A bearer token, if the user has one.
    pub token: Option<String>,
    /// The cluster's `server` (discovery asks its backends directly; `kubegate shed` asks
    /// this).
    pub server: Option<String>,
}

/// Reads `path`; `fallback_ca` is used when the cluster names no CA.
pub fn load(path: &Path, fallback_ca: Option<&Path>) -> Result<Credentials, String> {
    let at = |what: &str| format!("{}: {what}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(&e.to_string()))?;
    let config: Kubeconfig = serde_yaml_ng::from_str(&text).map_err(|e| at(&e.to_string()))?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == config.current_context)
        .or(config.contexts.first())
        .ok_or_else(|| at("no context"))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.value.cluster)
        .ok_or_else(|| at(&format!("no cluster {:?}", context.value.cluster)))?;
    let user = config
        .users
        .iter()
        .find(|u| u.name == context.value.user)
        .ok_or_else(|| at(&format!("no user {:?}", context.value.user)))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let read = |data: &Option<String>,
                file: &Option<PathBuf>,
                what: &str|
     -> Result<Option<Vec<u8>>, String> {
        match (data, file) {
            (Some(d), _) => base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(Some)
                .map_err(|e| at(&format!("{what}-data: {e}"))),
            (None, Some(f)) => std::fs::read(base.join(f))
                .map(Some)
                .map_err(|e| at(&format!("{what} {}: {e}", f.display()))),
            (None, None) => Ok(None),
        }
    };
    let c = &cluster.value;
    let ca = match read(
        &c.certificate_authority_data,
        &c.certificate_authority,
        "certificate-authority",
    )? {
        Some(pem) => pem,
        None => std::fs::read(fallback_ca.ok_or_else(|| {
            at("the cluster names no certificate-authority (nor is another CA configured)")
        })?)
        .map_err(|e| at(&e.to_string()))?,
    };
    let roots = roots_from_pem(&ca, &at("certificate authority"))?;
    let u = &user.value;
    let credentials = u.client_certificate.is_some()
        || u.client_certificate_data.is_some()
        || u.token.is_some()
        || u.token_file.is_some();
    if !credentials && (u.exec.is_some() || u.auth_provider.is_some()) {
        return Err(at(
            "the user authenticates through an exec plugin or an auth provider, which kubegate does not run: use a kubeconfig with a client certificate or a token",
        ));
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let cert = read(
        &u.client_certificate_data,
        &u.client_certificate,
        "client-certificate",
    )?;
    let key = read(&u.client_key_data, &u.client_key, "client-key")?;
    let mut tls = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = certs_from_pem(&cert, &at("client-certificate"))?;
            let key = key_from_pem(&key, &at("client-key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| at(&format!("client certificate: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(at(
                "a client certificate needs its key and a key its certificate",
            ))
        }
    };
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let token = match (&u.token, &u.token_file) {
        (Some(t), _) => Some(t.trim().to_string()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(base.join(f))
                .map_err(|e| at(&format!("tokenFile {}: {e}", f.display())))?
                .trim()
                .to_string(),
        ),
        (None, None) => None,
    };
    Ok(Credentials {
        tls: Arc::new(tls),
        server_name: c.tls_server_name.clone(),
        token,
        server: c.server.clone(),
    })
}
