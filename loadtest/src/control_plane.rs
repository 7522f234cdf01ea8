//! The control plane under test, and the faults carried out on it.
//!
//! - **Simulated** (the default): one etcd and N `kubegate-sim` replica processes on loopback
//!   (the test bed's), each restartable and signalable, so faults are real signals to real
//!   processes. Replicas accept the front-proxy scheme (`--requestheader-*`, kubeadm's flags),
//!   so gateways that terminate TLS can pass clients' identities on.
//! - **External** (`--control-plane FILE`): apiservers the load test does not run, with the
//!   commands that carry each fault out (`external.rs`). The same scenarios and report.

mod external;

use crate::client::{Client, ClientTls};
pub use external::ExternalSpec;
use kubegate_testbed::pki::write_kubeadm_layout_answering;
use kubegate_testbed::{Etcd, Replica, ReplicaFlags};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The simulated replicas' static bearer tokens (`--token-auth-file`), beside the PKI.
const TOKENS: &str = "tokens.csv";

/// A service account's token every simulated replica accepts: the runaway client of the
/// storm run, when it runs as a token client.
pub const RUNAWAY_TOKEN: &str = "storm-runaway-token";
/// Whose [`RUNAWAY_TOKEN`] is, as `namespace:name` (a `service_accounts` rule's form).
pub const RUNAWAY_SERVICE_ACCOUNT: &str = "storm:runaway";

/// Tokens of one service account (`kube-system:kube-proxy`) every simulated replica accepts:
/// each herd informer's own, as every kube-proxy pod has its own bound token.
pub const HERD_TOKENS: usize = 5000;

/// Herd informer `i`'s token (of [`HERD_TOKENS`]).
pub fn herd_token(i: usize) -> String {
    format!("herd-kube-proxy-{i}")
}

/// The tokens file: [`RUNAWAY_TOKEN`] and the [`HERD_TOKENS`], with the groups the apiserver
/// gives a service account.
fn tokens_file() -> String {
    let (ns, name) = RUNAWAY_SERVICE_ACCOUNT
        .split_once(':')
        .expect("namespace:name");
    let mut out = format!(
        "{RUNAWAY_TOKEN},system:serviceaccount:{ns}:{name},uid-runaway,\"system:serviceaccounts,system:serviceaccounts:{ns}\"\n"
    );
    for i in 0..HERD_TOKENS {
        out.push_str(&format!(
            "{},system:serviceaccount:kube-system:kube-proxy,uid-kube-proxy,\"system:serviceaccounts,system:serviceaccounts:kube-system\"\n",
            herd_token(i)
        ));
    }
    out
}

/// How the replicas run (simulated ones; an external control plane runs as it is).
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// `--shutdown-delay-duration`.
    pub shutdown_delay: String,
    /// `--goaway-chance`: the probability that an HTTP/2 request is its connection's last.
    pub goaway_chance: f64,
    /// The simulator's `--latency`: added to every API request.
    pub latency: Duration,
    /// The simulator's `--watch-cache`: watches served from one cache per resource.
    pub watch_cache: bool,
    /// Version flags (`--binary-version`, `--runtime-config`); none: the simulator's own.
    pub version: Vec<String>,
}

impl ReplicaSettings {
    /// The simulator's flags that have no field of their own in `ReplicaFlags`, with
    /// `version` as the version flags; the static tokens are in `pki`.
    fn extra_flags(&self, version: &[String], pki: &Path) -> Vec<String> {
        let mut extra = vec![
            "--token-auth-file".into(),
            pki.join(TOKENS).display().to_string(),
        ];
        if self.watch_cache {
            extra.push("--watch-cache".into());
        }
        extra.extend(version.iter().cloned());
        extra
    }
}

enum Backend {
    Simulated {
        etcd: Etcd,
        replicas: Vec<Replica>,
        settings: ReplicaSettings,
    },
    External(ExternalSpec),
}

/// etcd and the replicas.
pub struct ControlPlane {
    dir: PathBuf,
    pki: PathBuf,
    backend: Backend,
    tls: ClientTls,
}

impl ControlPlane {
    /// Certificates in `dir/pki`, etcd, and `n` simulated replicas run with `settings`.
    pub async fn start(
        dir: &Path,
        n: usize,
        settings: ReplicaSettings,
    ) -> anyhow::Result<ControlPlane> {
        ControlPlane::start_answering(dir, n, settings, &[]).await
    }

    /// [`ControlPlane::start`], the serving certificates (the replicas' and the one for a
    /// gateway that terminates TLS) also valid for `server_names`.
    pub async fn start_answering(
        dir: &Path,
        n: usize,
        settings: ReplicaSettings,
        server_names: &[&str],
    ) -> anyhow::Result<ControlPlane> {
        std::fs::create_dir_all(dir)?;
        let pki = dir.join("pki");
        write_kubeadm_layout_answering(&pki, "https://127.0.0.1:6443", server_names)?;
        std::fs::write(pki.join(TOKENS), tokens_file())?;
        let etcd = Etcd::new(dir).start()?;
        let tls = ClientTls::load(&pki)?;
        let mut replicas = Vec::new();
        for i in 0..n {
            let name = format!("replica-{}", i + 1);
            let mut flags = ReplicaFlags::new(
                &name,
                (pki.join("apiserver.crt"), pki.join("apiserver.key")),
                &pki.join("ca.crt"),
            );
            flags.front_proxy_ca = Some(pki.join("front-proxy-ca.crt"));
            flags.etcd = Some(etcd.url());
            flags.shutdown_delay = Some(settings.shutdown_delay.clone());
            flags.goaway_chance = Some(settings.goaway_chance);
            flags.latency = Some(settings.latency);
            flags.startup = Some("0s".into());
            flags.extra = settings.extra_flags(&settings.version, &pki);
            replicas.push(Replica::start(flags, &dir.join(format!("{name}.log")))?);
        }
        let cp = ControlPlane {
            dir: dir.to_path_buf(),
            pki,
            backend: Backend::Simulated {
                etcd,
                replicas,
                settings,
            },
            tls,
        };
        for i in 0..n {
            cp.wait_ready(i, Duration::from_secs(20)).await?;
        }
        Ok(cp)
    }

    /// The control plane `spec` describes; commands log into `dir`.
    pub async fn external(dir: &Path, spec: ExternalSpec) -> anyhow::Result<ControlPlane> {
        std::fs::create_dir_all(dir)?;
        let tls = ClientTls::load(&spec.pki)?;
        let cp = ControlPlane {
            dir: dir.to_path_buf(),
            pki: spec.pki.clone(),
            backend: Backend::External(spec),
            tls,
        };
        for i in 0..cp.len() {
            cp.wait_ready(i, Duration::from_secs(60)).await?;
        }
        Ok(cp)
    }

    /// The PKI directory (`ca.crt`, `admin.crt`, `kubeconfig`, ...).
    pub fn pki(&self) -> PathBuf {
        self.pki.clone()
    }

    /// TLS settings for clients.
    pub fn tls(&self) -> &ClientTls {
        &self.tls
    }

    /// How many replicas.
    pub fn len(&self) -> usize {
        match &self.backend {
            Backend::Simulated { replicas, .. } => replicas.len(),
            Backend::External(spec) => spec.replicas.len(),
        }
    }

    /// Replica `i`'s name.
    pub fn name(&self, i: usize) -> String {
        match &self.backend {
            Backend::Simulated { replicas, .. } => replicas[i].name().to_string(),
            Backend::External(spec) => spec.replicas[i].name.clone(),
        }
    }

    /// Replica addresses.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        match &self.backend {
            Backend::Simulated { replicas, .. } => replicas.iter().map(Replica::addr).collect(),
            Backend::External(spec) => spec.replicas.iter().map(|r| r.address).collect(),
        }
    }

    /// Whether replica `i` answers `/readyz` with 200 now.
    pub async fn ready(&self, i: usize) -> bool {
        let Ok(mut c) = Client::connect(self.addresses()[i], &self.tls, false).await else {
            return false;
        };
        matches!(c.send("GET", "/readyz", None).await, Ok(r) if r.status == 200)
    }

    /// Waits until replica `i` answers `/readyz` with 200.
    pub async fn wait_ready(&self, i: usize, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.ready(i).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!(
            "{} not ready after {limit:?}{}",
            self.name(i),
            self.log_tail(i)
        )
    }

    /// The last lines of simulated replica `i`'s log, for an error that should explain
    /// itself where the run's directory is gone (a test's), on one line (a report's table
    /// cell holds it); empty for an external one.
    fn log_tail(&self, i: usize) -> String {
        let Backend::Simulated { replicas, .. } = &self.backend else {
            return String::new();
        };
        let log = replicas[i].log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join(" / ");
        format!("; the end of its log: {tail}")
    }

    /// Runs replica `i`'s command `which` (external), or says it has none.
    async fn command(&self, i: Option<usize>, which: &str) -> anyhow::Result<()> {
        let Backend::External(spec) = &self.backend else {
            anyhow::bail!("{which}: not a command of a simulated control plane");
        };
        let replica = i.map(|i| &spec.replicas[i]);
        let command = match (replica, which) {
            (Some(r), "stop") => r.stop.as_ref(),
            (Some(r), "start") => r.start.as_ref(),
            (Some(r), "kill") => r.kill.as_ref(),
            (Some(r), "freeze") => r.freeze.as_ref(),
            (Some(r), "thaw") => r.thaw.as_ref(),
            (Some(r), "fail_readyz") => r.fail_readyz.as_ref(),
            (Some(r), "pass_readyz") => r.pass_readyz.as_ref(),
            (None, "etcd stop") => spec.etcd.as_ref().map(|e| &e.stop),
            (None, "etcd start") => spec.etcd.as_ref().map(|e| &e.start),
            _ => None,
        };
        let Some(command) = command else {
            anyhow::bail!(
                "the control-plane file has no `{which}` command{}: this scenario cannot run against it",
                replica.map(|r| format!(" for {}", r.name)).unwrap_or_default()
            );
        };
        external::run(
            command,
            replica,
            spec.command_timeout,
            &self.dir.join("commands.log"),
        )
        .await
    }

    /// Stops replica `i` from answering anything, its connections left open (SIGSTOP).
    pub async fn freeze(&self, i: usize) -> anyhow::Result<()> {
        self.stop_or_continue(i, libc::SIGSTOP, "freeze").await
    }

    /// Undoes [`ControlPlane::freeze`] (SIGCONT).
    pub async fn thaw(&self, i: usize) -> anyhow::Result<()> {
        self.stop_or_continue(i, libc::SIGCONT, "thaw").await
    }

    /// Sends a simulated replica `signal`, or runs an external one's `command`.
    async fn stop_or_continue(&self, i: usize, signal: i32, command: &str) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Simulated { replicas, .. } => {
                // A replica that already ended has nothing to stop or continue.
                let _ = replicas[i].signal(signal);
                Ok(())
            }
            Backend::External(_) => self.command(Some(i), command).await,
        }
    }

    /// SIGTERM, then waits (up to `limit`) for the replica to exit by itself (its shutdown
    /// sequence); whether it did.
    pub async fn terminate(&mut self, i: usize, limit: Duration) -> anyhow::Result<bool> {
        match &mut self.backend {
            Backend::Simulated { replicas, .. } => {
                let r = &mut replicas[i];
                let _ = r.signal(libc::SIGTERM);
                let exited =
                    tokio::task::block_in_place(|| !r.running() || r.wait_exit(limit).is_some());
                r.kill();
                Ok(exited)
            }
            Backend::External(_) => self.command(Some(i), "stop").await.map(|()| true),
        }
    }

    /// SIGTERM to every replica at once, then waits for all of them to exit.
    pub async fn terminate_all(&mut self, limit: Duration) -> anyhow::Result<bool> {
        match &mut self.backend {
            Backend::Simulated { replicas, .. } => {
                for r in replicas.iter() {
                    let _ = r.signal(libc::SIGTERM);
                }
                let mut all = true;
                for r in replicas.iter_mut() {
                    all &= tokio::task::block_in_place(|| {
                        !r.running() || r.wait_exit(limit).is_some()
                    });
                    r.kill();
                }
                Ok(all)
            }
            Backend::External(spec) => {
                // Every replica's stop at once, as SIGTERM to all of them would be.
                let mut stops = Vec::new();
                for r in &spec.replicas {
                    let command = r.stop.clone().ok_or_else(|| {
                        anyhow::anyhow!(
                            "the control-plane file has no `stop` command for {}",
                            r.name
                        )
                    })?;
                    let (r, timeout, log) = (
                        r.clone(),
                        spec.command_timeout,
                        self.dir.join("commands.log"),
                    );
                    stops.push(tokio::spawn(async move {
                        external::run(&command, Some(&r), timeout, &log).await
                    }));
                }
                for s in stops {
                    s.await??;
                }
                Ok(true)
            }
        }
    }

    /// Takes etcd away (SIGTERM, then waits for it to exit).
    pub async fn stop_etcd(&mut self, limit: Duration) -> anyhow::Result<bool> {
        match &mut self.backend {
            Backend::Simulated { etcd, .. } => Ok(tokio::task::block_in_place(|| etcd.stop(limit))),
            Backend::External(_) => self.command(None, "etcd stop").await.map(|()| true),
        }
    }

    /// Brings etcd back (on its data directory and ports).
    pub async fn start_etcd(&mut self) -> anyhow::Result<()> {
        match &mut self.backend {
            Backend::Simulated { etcd, .. } => etcd.restart(),
            Backend::External(_) => self.command(None, "etcd start").await,
        }
    }

    /// SIGKILL now.
    pub async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        match &mut self.backend {
            Backend::Simulated { replicas, .. } => {
                replicas[i].kill();
                Ok(())
            }
            Backend::External(_) => self.command(Some(i), "kill").await,
        }
    }

    /// Starts replica `i` again (its port stays), with a startup duration (simulated ones).
    pub async fn restart(&mut self, i: usize, startup: &str) -> anyhow::Result<()> {
        match &mut self.backend {
            Backend::Simulated { replicas, .. } => {
                let r = &mut replicas[i];
                r.flags.startup = Some(startup.to_string());
                r.restart()
            }
            Backend::External(_) => self.command(Some(i), "start").await,
        }
    }

    /// Starts replica `i` again as another version: its version flags replaced by
    /// `version` (a simulated control plane only: an external one is upgraded by its own
    /// tools).
    pub async fn restart_as(
        &mut self,
        i: usize,
        startup: &str,
        version: Vec<String>,
    ) -> anyhow::Result<()> {
        let Backend::Simulated {
            replicas, settings, ..
        } = &mut self.backend
        else {
            anyhow::bail!("upgrade: only a simulated control plane is upgraded by the load test");
        };
        replicas[i].flags.extra = settings.extra_flags(&version, &self.pki);
        self.restart(i, startup).await
    }

    /// The simulated replicas' fault ports (their `/state` counts requests and watches; a
    /// replica keeps its port across restarts); none for an external control plane.
    pub fn fault_ports(&self) -> Vec<u16> {
        match &self.backend {
            Backend::Simulated { replicas, .. } => {
                replicas.iter().map(|r| r.flags.fault_port).collect()
            }
            Backend::External(_) => Vec::new(),
        }
    }

    /// Saturates replica `i`'s priority level `level` with traffic no gateway sees, its
    /// rejections asking for `retry_after` seconds (`Some`), or calms it (`None`). Simulated
    /// replicas only.
    pub fn saturate_level(
        &self,
        i: usize,
        level: &str,
        retry_after: Option<u32>,
    ) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Simulated { replicas, .. } => replicas[i].saturate_level(level, retry_after),
            Backend::External(_) => {
                anyhow::bail!("saturating a priority level needs the simulator's fault port")
            }
        }
    }

    /// Makes readyz check `check` of replica `i` fail or pass (the simulator's fault port;
    /// an external control plane's `fail_readyz`/`pass_readyz`).
    pub async fn force_check(&self, i: usize, check: &str, failing: bool) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Simulated { replicas, .. } => replicas[i].force_check(check, failing),
            Backend::External(_) => {
                let which = if failing {
                    "fail_readyz"
                } else {
                    "pass_readyz"
                };
                self.command(Some(i), which).await
            }
        }
    }
}
