//! Kubeconfigs with everything embedded, so that they work from any folder.

use base64::Engine;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A kubeconfig for `server` (`https://IP:PORT`) trusting `ca`, authenticating with a client
/// certificate (PEM).
pub fn kubeconfig_with_certificate(server: &str, ca: &[u8], cert: &[u8], key: &[u8]) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: admin\n  context:\n    cluster: cluster\n    user: admin\n    namespace: default\ncurrent-context: admin\n",
        b64(ca),
        b64(cert),
        b64(key)
    )
}

/// A kubeconfig for `server` trusting `ca`, authenticating with a bearer `token`.
pub fn kubeconfig_with_token(server: &str, ca: &[u8], token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: token\n  user:\n    token: {token}\ncontexts:\n- name: token\n  context:\n    cluster: cluster\n    user: token\n    namespace: default\ncurrent-context: token\n",
        b64(ca)
    )
}
