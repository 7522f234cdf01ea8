//! What a `clusters` run stands up, for the isolation and scale parts alike: each cluster's
//! piece of kubegate's configuration, kubegate's configuration, and the kubegate process.

use anyhow::Context;
use kubegate_config::{
    BackendSpec, ClusterSpec, Config, FrontProxy, ListenerMode, ListenerSpec, ServingTls,
};
use kubegate_testbed::bins::binary;
use kubegate_testbed::{wait_listening, ChildProcess};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How kubegate's listener serves the clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Reads the ClientHello's server name and splices the connection to that cluster.
    Passthrough,
    /// Terminates TLS with the named cluster's certificate and client CA.
    Terminate,
}

impl Mode {
    pub(super) fn listener(self) -> ListenerMode {
        match self {
            Mode::Passthrough => ListenerMode::Passthrough,
            Mode::Terminate => ListenerMode::Terminate,
        }
    }

    /// Its name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Passthrough => "passthrough",
            Mode::Terminate => "terminate",
        }
    }
}

/// The server name cluster `name` answers: `a` → `a.clusters.test`.
pub fn server_name(name: &str) -> String {
    format!("{name}.clusters.test")
}

/// Cluster `name` in kubegate's configuration: its `backends` probed with the CA of the
/// kubeadm layout in `pki`; in terminate mode served with that layout's gateway certificate,
/// its clients verified by its CA, and kubegate's front-proxy certificate from it upstream.
pub(super) fn cluster_spec(
    name: &str,
    backends: &[(String, SocketAddr)],
    pki: &Path,
    mode: Mode,
    base: &Config,
) -> ClusterSpec {
    let mut health = base.health.clone();
    health.tls.ca_file = Some(pki.join("ca.crt"));
    health.tls.server_name = "kubernetes".into();
    let terminates = mode == Mode::Terminate;
    ClusterSpec {
        name: name.into(),
        server_names: vec![server_name(name)],
        backends: backends
            .iter()
            .map(|(n, a)| BackendSpec::named(n, *a))
            .collect(),
        discovery: None,
        health: Some(health),
        upstream: terminates.then(|| {
            let mut upstream = base.upstream.clone();
            upstream.front_proxy = Some(FrontProxy::new(
                pki.join("front-proxy-client.crt"),
                pki.join("front-proxy-client.key"),
            ));
            upstream
        }),
        dispatch: Vec::new(),
        tls: terminates.then(|| {
            ServingTls::new(pki.join("gateway.crt"), pki.join("gateway.key"))
                .verifying(Some(pki.join("ca.crt")))
        }),
    }
}

/// kubegate's configuration: one listener in `mode` at `listen` serving every cluster, no
/// default cluster (a client without a server name is refused), the admin endpoint at
/// `admin`.
pub(super) fn kubegate_config(
    listen: SocketAddr,
    admin: SocketAddr,
    mode: Mode,
    clusters: impl FnOnce(&Config) -> Vec<ClusterSpec>,
) -> Config {
    let mut c = Config::new(vec![ListenerSpec::passthrough(listen)], Vec::new());
    c.listeners[0].mode = mode.listener();
    c.admin.address = admin;
    c.clusters = clusters(&c);
    c
}

/// A kubegate process serving several clusters, ended with this handle.
pub(super) struct Kubegate {
    pub(super) listen: SocketAddr,
    pub(super) admin: SocketAddr,
    config: PathBuf,
    proc: ChildProcess,
}

impl Kubegate {
    /// Writes `config` into `dir` and runs kubegate on it until it listens.
    pub(super) fn start(dir: &Path, config: &Config) -> anyhow::Result<Kubegate> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("kubegate.yaml");
        kubegate_testbed::kubegate::write(config, &path)?;
        let mut cmd = std::process::Command::new(binary("kubegate"));
        cmd.arg("run").arg("--config").arg(&path);
        let proc = ChildProcess::spawn(&mut cmd, &dir.join("kubegate.log"))?;
        let listen = config.listeners[0].address;
        wait_listening(listen, Duration::from_secs(15)).context("kubegate did not listen")?;
        Ok(Kubegate {
            listen,
            admin: config.admin.address,
            config: path,
            proc,
        })
    }

    pub(super) fn pid(&self) -> anyhow::Result<u32> {
        self.proc.pid().context("kubegate has ended")
    }

    /// Replaces the configuration file whole and sends SIGHUP.
    pub(super) fn reload(&self, config: &Config) -> anyhow::Result<()> {
        kubegate_testbed::kubegate::write(config, &self.config)?;
        self.proc.signal(libc::SIGHUP)?;
        Ok(())
    }

    /// Waits until `n` backends over all clusters are ready, up to `limit`: how long it took.
    pub(super) async fn wait_ready_backends(
        &self,
        n: u64,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        crate::resumes::metric_reaches(self.admin, "kubegate_cluster_ready_backends", n, limit)
            .await
    }
}
