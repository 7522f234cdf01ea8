//! What `kubegate check` and every (re)load add to validation, beyond what the configuration
//! crate can see: the files kubegate reads at start parse and belong together (certificates
//! and their keys, CAs, the discovery kubeconfig). Findings name the key's path in the file.

use crate::control::discovery;
use kubegate_config::{Config, Finding, ListenerMode, ListenerTls};
use kubegate_net::tls::{certified_key, load_roots};

/// What `kubegate check` and every (re)load add to validation: the certificate files parse and
/// each key belongs to its certificate. Findings name the key's path in the file.
pub fn check_files(config: &Config) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut serving = |at: String, tls: &ListenerTls| {
        if let Err(e) = certified_key(&tls.cert_file, &tls.key_file) {
            findings.push((format!("{at}.key_file"), e));
        }
        if let Some(ca) = &tls.client_ca_file {
            if let Err(e) = load_roots(ca) {
                findings.push((format!("{at}.client_ca_file"), e));
            }
        }
    };
    for (i, l) in config.listeners.iter().enumerate() {
        if let (ListenerMode::Terminate, Some(tls)) = (l.mode, &l.tls) {
            serving(format!("listeners[{i}].tls"), tls);
        }
    }
    if let Some(tls) = &config.admin.tls {
        serving("admin.tls".into(), tls);
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
    if let Some(d) = &config.discovery {
        if let Err(e) =
            discovery::load_credentials(&d.kubeconfig, config.health.tls.ca_file.as_deref())
        {
            findings.push(("discovery.kubeconfig".into(), e));
        }
    }
    findings
}
