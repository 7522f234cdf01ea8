//! Several control planes behind one kubegate, picked by the TLS server name
//! (docs/failover.md, "Several clusters behind one kubegate"):
//!
//! - **Isolation** (`isolation.rs`): clusters a and b, each its own etcd, CA and simulated
//!   replicas; a failover scenario runs in a while b carries the same steady traffic. What b's
//!   clients see — failures, watch breaks, leader changes, latency before and during a's fault —
//!   is the figure; b must see nothing.
//! - **Scale** (`scale.rs`): N clusters of 3 replicas each, kubegate's memory at rest and under
//!   traffic to every cluster, and what a reload adding one more cluster costs: how long until
//!   it serves, its memory, and what the other clusters' clients saw meanwhile.

mod isolation;
mod scale;

pub use isolation::IsolationRun;
pub use scale::{ReloadCost, ScaleRow, Windows};

use crate::resumes::Scrape;
use crate::scenarios::Pace;
use anyhow::Context;
use kubegate_config::{
    BackendSpec, ClusterSpec, Config, FrontProxy, ListenerMode, ListenerSpec, ServingTls,
};
use kubegate_testbed::bins::binary;
use kubegate_testbed::{wait_listening, ChildProcess};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to run.
pub struct Plan {
    /// Scenarios run in cluster a (the matrix's names).
    pub scenarios: Vec<String>,
    /// kubegate's listener modes, each scenario run once per mode.
    pub modes: Vec<Mode>,
    /// Cluster counts of the scale figure, measured in each of `modes` (none: no scale run).
    pub sizes: Vec<usize>,
    /// How long the scale figure's readings wait.
    pub windows: Windows,
    /// Fault durations.
    pub pace: Pace,
    /// Working directory (configs, logs).
    pub dir: PathBuf,
}

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
    fn listener(self) -> ListenerMode {
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

/// Everything one `clusters` run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// One per scenario and mode.
    pub isolation: Vec<IsolationRun>,
    /// One per mode and cluster count.
    pub scale: Vec<ScaleRow>,
    /// The reload adding a cluster to the largest count, one per mode.
    pub reloads: Vec<ReloadCost>,
}

impl Report {
    /// The checks that did not hold, each said in a line (none: the run passed).
    pub fn failures(&self) -> Vec<String> {
        let mut failed: Vec<String> = self
            .isolation
            .iter()
            .filter(|r| r.status != "ok")
            .map(|r| format!("{} · {}: {}", r.scenario, r.mode.as_str(), r.status))
            .collect();
        failed.extend(self.scale.iter().filter(|r| r.status != "ok").map(|r| {
            format!(
                "{} clusters · {}: {}",
                r.clusters,
                r.mode.as_str(),
                r.status
            )
        }));
        failed.extend(self.reloads.iter().filter(|r| r.status != "ok").map(|r| {
            format!(
                "reload adding a cluster · {}: {}",
                r.mode.as_str(),
                r.status
            )
        }));
        failed
    }
}

/// Runs the isolation matrix, then the scale figure.
pub async fn run(plan: &Plan) -> anyhow::Result<Report> {
    let mut isolation = Vec::new();
    for scenario in &plan.scenarios {
        for &mode in &plan.modes {
            let label = format!("{scenario} · {}", mode.as_str());
            eprintln!("clusters: {label}: starting two control planes");
            let dir = plan.dir.join(scenario).join(mode.as_str());
            let run = isolation::run(scenario, mode, plan.pace, &dir, &label)
                .await
                .unwrap_or_else(|e| IsolationRun::failed(scenario, mode, format!("{e:#}")));
            eprintln!("clusters: {label}: {}", run.status);
            isolation.push(run);
        }
    }
    let (scale, reloads) = if plan.sizes.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let dir = plan.dir.join("scale");
        scale::run(&plan.sizes, &plan.modes, plan.windows, &dir).await?
    };
    Ok(Report {
        isolation,
        scale,
        reloads,
    })
}

/// The report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    if !report.isolation.is_empty() {
        out.push_str(&isolation::markdown(&report.isolation));
    }
    if !report.scale.is_empty() {
        out.push('\n');
        out.push_str(&scale::markdown(&report.scale, &report.reloads));
    }
    out
}

/// The server name cluster `name` answers: `a` → `a.clusters.test`.
pub fn server_name(name: &str) -> String {
    format!("{name}.clusters.test")
}

/// Cluster `name` in kubegate's configuration: its `backends` probed with the CA of the
/// kubeadm layout in `pki`; in terminate mode served with that layout's gateway certificate,
/// its clients verified by its CA, and kubegate's front-proxy certificate from it upstream.
fn cluster_spec(
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
fn kubegate_config(
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
struct Kubegate {
    listen: SocketAddr,
    admin: SocketAddr,
    config: PathBuf,
    proc: ChildProcess,
}

impl Kubegate {
    /// Writes `config` into `dir` and runs kubegate on it until it listens.
    fn start(dir: &Path, config: &Config) -> anyhow::Result<Kubegate> {
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

    fn pid(&self) -> anyhow::Result<u32> {
        self.proc.pid().context("kubegate has ended")
    }

    /// Replaces the configuration file whole (a rename: the file watcher never reads half of
    /// it) and sends SIGHUP.
    fn reload(&self, config: &Config) -> anyhow::Result<()> {
        let next = self.config.with_extension("yaml.next");
        kubegate_testbed::kubegate::write(config, &next)?;
        std::fs::rename(&next, &self.config)?;
        self.proc.signal(libc::SIGHUP)?;
        Ok(())
    }

    /// Waits until `n` backends over all clusters are ready, up to `limit`: how long it took.
    async fn wait_ready_backends(&self, n: u64, limit: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let ready = Scrape::of(self.admin)
                .await
                .map_or(0, |s| s.sum("kubegate_cluster_ready_backends"));
            if ready == n {
                return Ok(start.elapsed());
            }
            anyhow::ensure!(
                start.elapsed() < limit,
                "{ready} of {n} backends ready after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
