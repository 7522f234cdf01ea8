//! What `kubegate check` and every (re)load add to validation, beyond what the configuration
//! crate can see: the files kubegate reads at start parse and belong together (certificates
//! and their keys, CAs, the discovery kubeconfig), and every TLS section's versions and cipher
//! suites exist in kubegate's crypto provider. Findings name the key's path in the file.

use crate::control::discovery;
use kubegate_config::{Config, Finding, ListenerMode, ServingTls, TlsVersion};
use kubegate_net::tls::{certified_key, load_roots, TlsPolicy};

/// What `kubegate check` and every (re)load add to validation: the certificate files parse,
/// each key belongs to its certificate, and the TLS settings name suites kubegate has.
/// Findings name the key's path in the file.
pub fn check_files_and_tls(config: &Config) -> Vec<Finding> {
    let mut findings = check_tls(config);
    let mut serving = |at: String, tls: &ServingTls| {
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
        // Each cluster's upstream (the top-level one for a file without `clusters:`).
        let upstreams: Vec<(String, &kubegate_config::UpstreamConfig)> =
            match config.names_clusters() {
                false => vec![(String::new(), &config.upstream)],
                true => config
                    .clusters
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| Some((format!("clusters[{i}]."), c.upstream.as_ref()?)))
                    .collect(),
            };
        for (at, upstream) in upstreams {
            if let Some(fp) = &upstream.front_proxy {
                if let Err(e) = certified_key(&fp.cert_file, &fp.key_file) {
                    findings.push((format!("{at}upstream.front_proxy.key_file"), e));
                }
            }
            if let Some(ca) = &upstream.tls.ca_file {
                if let Err(e) = load_roots(ca) {
                    findings.push((format!("{at}upstream.tls.ca_file"), e));
                }
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
    for (i, c) in config.clusters.iter().enumerate() {
        if let Some(d) = &c.discovery {
            let ca = c
                .health
                .as_ref()
                .unwrap_or(&config.health)
                .tls
                .ca_file
                .as_deref();
            if let Err(e) = discovery::load_credentials(&d.kubeconfig, ca) {
                findings.push((format!("clusters[{i}].discovery.kubeconfig"), e));
            }
        }
        if let Some(tls) = &c.tls {
            if let Err(e) = certified_key(&tls.cert_file, &tls.key_file) {
                findings.push((format!("clusters[{i}].tls.key_file"), e));
            }
            if let Some(ca) = &tls.client_ca_file {
                if let Err(e) = load_roots(ca) {
                    findings.push((format!("clusters[{i}].tls.client_ca_file"), e));
                }
            }
        }
    }
    findings
}

/// Logs what `kubegate check` warns of in `config`, read from `text` at `path` (a rule that can
/// never match): at start and at every reload, so that a mistake is seen where it is made.
pub fn log_warnings(path: &std::path::Path, text: &str, config: &Config) {
    for w in kubegate_config::warnings(text, config) {
        tracing::warn!("{}:{}:{}: {}", path.display(), w.line, w.column, w.message);
    }
}

/// Each TLS section's `min_version` and `cipher_suites` against the crypto provider.
fn check_tls(config: &Config) -> Vec<Finding> {
    let mut sections: Vec<(String, Option<TlsVersion>, &[String])> = Vec::new();
    // Where each section present is, its min_version and its cipher_suites.
    let mut add = |at: String, policy| {
        let (min, suites) = policy;
        sections.push((at, min, suites));
    };
    for (i, l) in config.listeners.iter().enumerate() {
        if let Some(t) = &l.tls {
            add(
                format!("listeners[{i}].tls"),
                (t.min_version, &t.cipher_suites),
            );
        }
    }
    if let Some(t) = &config.admin.tls {
        add("admin.tls".into(), (t.min_version, &t.cipher_suites));
    }
    let (up, health) = (&config.upstream.tls, &config.health.tls);
    add("upstream.tls".into(), (up.min_version, &up.cipher_suites));
    add(
        "health.tls".into(),
        (health.min_version, &health.cipher_suites),
    );
    for (i, c) in config.clusters.iter().enumerate() {
        if let Some(t) = c.health.as_ref().map(|h| &h.tls) {
            add(
                format!("clusters[{i}].health.tls"),
                (t.min_version, &t.cipher_suites),
            );
        }
        if let Some(t) = c.upstream.as_ref().map(|u| &u.tls) {
            add(
                format!("clusters[{i}].upstream.tls"),
                (t.min_version, &t.cipher_suites),
            );
        }
        if let Some(t) = &c.tls {
            add(
                format!("clusters[{i}].tls"),
                (t.min_version, &t.cipher_suites),
            );
        }
    }
    sections
        .into_iter()
        .filter_map(|(at, min, suites)| {
            let e = TlsPolicy::new(min, suites).err()?;
            // An unknown name is reported at its own entry; a missing kind at the list.
            let at = match suites.iter().position(|s| e.contains(&format!("{s:?}"))) {
                Some(i) => format!("{at}.cipher_suites[{i}]"),
                None => format!("{at}.cipher_suites"),
            };
            Some((at, e))
        })
        .collect()
}
