//! kubegate's configuration, built from `kubegate-config`'s own types and written as the YAML
//! kubegate loads: a key renamed in the schema fails to compile here instead of failing a test
//! (or a load test run) when kubegate refuses the file.

use anyhow::Context;
use kubegate_config::{BackendSpec, Config, FrontProxy, ListenerMode, ListenerSpec, ServingTls};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The files of a terminate-mode listener and of kubegate's front-proxy identity.
#[derive(Clone, Debug)]
pub struct TerminateFiles {
    /// Serving certificate and key clients see.
    pub serving: (PathBuf, PathBuf),
    /// CA that verifies client certificates.
    pub client_ca: Option<PathBuf>,
    /// kubegate's front-proxy certificate and key (`upstream.front_proxy`).
    pub front_proxy: Option<(PathBuf, PathBuf)>,
}

impl TerminateFiles {
    /// The files of a kubeadm layout in `pki` (`pki::write_kubeadm_layout`): the gateway's
    /// serving pair, the cluster CA for clients, kubeadm's `front-proxy-client` upstream.
    pub fn kubeadm(pki: &Path) -> TerminateFiles {
        TerminateFiles {
            serving: (pki.join("gateway.crt"), pki.join("gateway.key")),
            client_ca: Some(pki.join("ca.crt")),
            front_proxy: Some((
                pki.join("front-proxy-client.crt"),
                pki.join("front-proxy-client.key"),
            )),
        }
    }
}

/// kubegate listening on `listen` (passthrough), its admin endpoint on `admin`, in front of
/// `backends` (name, address) whose certificates `ca` signs for the name `kubernetes`; every
/// other key at its default.
pub fn config(
    listen: SocketAddr,
    admin: SocketAddr,
    backends: &[(String, SocketAddr)],
    ca: &Path,
) -> Config {
    let mut c = Config::new(
        vec![ListenerSpec::passthrough(listen)],
        backends
            .iter()
            .map(|(name, address)| BackendSpec::named(name, *address))
            .collect(),
    );
    c.admin.address = admin;
    c.health.tls.ca_file = Some(ca.to_path_buf());
    c.health.tls.server_name = "kubernetes".into();
    c
}

/// Every listener of `config` terminates TLS with `files`; the front-proxy pair, if any, is
/// kubegate's identity upstream.
pub fn terminate(config: &mut Config, files: &TerminateFiles) {
    for l in &mut config.listeners {
        l.mode = ListenerMode::Terminate;
        let mut tls = ServingTls::new(files.serving.0.clone(), files.serving.1.clone());
        tls.client_ca_file = files.client_ca.clone();
        l.tls = Some(tls);
    }
    config.upstream.front_proxy = files
        .front_proxy
        .as_ref()
        .map(|(cert, key)| FrontProxy::new(cert.clone(), key.clone()));
}

/// Writes `config` to `path`, as [`write_text`] does: the one writer of kubegate's
/// configuration for tests, load tests and the simulator's clusters.
pub fn write(config: &Config, path: &Path) -> anyhow::Result<()> {
    write_text(&config.to_yaml(), path)
}

/// Writes `text` (a configuration, or a broken one) to `path` whole and renamed into place:
/// a kubegate watching the file never reads half of it.
pub fn write_text(text: &str, path: &Path) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_configuration_loads_back_as_built() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        let backends = [("replica-1".to_string(), "127.0.0.1:7001".parse().unwrap())];
        let mut c = config(
            "127.0.0.1:6443".parse().unwrap(),
            "127.0.0.1:9444".parse().unwrap(),
            &backends,
            &ca,
        );
        let pair = (dir.path().join("g.crt"), dir.path().join("g.key"));
        terminate(
            &mut c,
            &TerminateFiles {
                serving: pair.clone(),
                client_ca: Some(ca.clone()),
                front_proxy: Some(pair),
            },
        );
        let path = dir.path().join("kubegate.yaml");
        write(&c, &path).unwrap();
        // Parsed and validated as kubegate does, but for the files (none exist here).
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Config = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.listeners[0].mode, ListenerMode::Terminate);
    }
}
