//! The simulated control plane under test: one etcd and N `kubegate-sim` replica processes on
//! loopback (the test bed's), each restartable and signalable, so faults are real signals to
//! real processes. Replicas accept the front-proxy scheme (`--requestheader-*`, kubeadm's
//! flags), so gateways that terminate TLS can pass clients' identities on.

use crate::client::{Client, ClientTls};
use kubegate_testbed::pki::write_kubeadm_layout;
use kubegate_testbed::{Etcd, Replica, ReplicaFlags};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the replicas run.
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// `--shutdown-delay-duration`.
    pub shutdown_delay: String,
    /// `--goaway-chance`: the probability that an HTTP/2 request is its connection's last.
    pub goaway_chance: f64,
    /// The simulator's `--latency`: added to every API request.
    pub latency: Duration,
}

/// etcd and the replicas.
pub struct ControlPlane {
    dir: PathBuf,
    etcd: Etcd,
    /// The replicas, in order (`replica-1`...).
    pub replicas: Vec<Replica>,
    tls: ClientTls,
}

impl ControlPlane {
    /// Certificates in `dir/pki`, etcd, and `n` replicas run with `settings`.
    pub async fn start(
        dir: &Path,
        n: usize,
        settings: ReplicaSettings,
    ) -> anyhow::Result<ControlPlane> {
        std::fs::create_dir_all(dir)?;
        let pki = dir.join("pki");
        write_kubeadm_layout(&pki, "https://127.0.0.1:6443")?;
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
            replicas.push(Replica::start(flags, &dir.join(format!("{name}.log")))?);
        }
        let cp = ControlPlane {
            dir: dir.to_path_buf(),
            etcd,
            replicas,
            tls,
        };
        for i in 0..n {
            cp.wait_ready(i, Duration::from_secs(20)).await?;
        }
        Ok(cp)
    }

    /// The PKI directory (`ca.crt`, `admin.crt`, `kubeconfig`, ...).
    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// TLS settings for clients.
    pub fn tls(&self) -> &ClientTls {
        &self.tls
    }

    /// Replica addresses.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.replicas.iter().map(Replica::addr).collect()
    }

    /// Whether replica `i` answers `/readyz` with 200 now.
    pub async fn ready(&self, i: usize) -> bool {
        let Ok(mut c) = Client::connect(self.replicas[i].addr(), &self.tls, false).await else {
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
        anyhow::bail!("{} not ready after {limit:?}", self.replicas[i].name())
    }

    /// Sends `sig` to replica `i`; a replica that already ended has nothing to receive it.
    pub fn signal(&self, i: usize, sig: i32) {
        let _ = self.replicas[i].signal(sig);
    }

    /// SIGTERM, then waits for the replica to exit by itself (its shutdown sequence).
    pub fn terminate(&mut self, i: usize, limit: Duration) -> bool {
        self.signal(i, libc::SIGTERM);
        let r = &mut self.replicas[i];
        let exited = !r.running() || r.wait_exit(limit).is_some();
        r.kill();
        exited
    }

    /// SIGTERM to every replica at once, then waits for all of them to exit.
    pub fn terminate_all(&mut self, limit: Duration) -> bool {
        for i in 0..self.replicas.len() {
            self.signal(i, libc::SIGTERM);
        }
        let mut all = true;
        for r in &mut self.replicas {
            all &= !r.running() || r.wait_exit(limit).is_some();
            r.kill();
        }
        all
    }

    /// Stops etcd (SIGTERM, then waits for it to exit).
    pub fn stop_etcd(&mut self, limit: Duration) -> bool {
        self.etcd.stop(limit)
    }

    /// Starts etcd again on its data directory and ports.
    pub fn start_etcd(&mut self) -> anyhow::Result<()> {
        self.etcd.restart()
    }

    /// SIGKILL now.
    pub fn kill(&mut self, i: usize) {
        self.replicas[i].kill();
    }

    /// Starts replica `i` again (its port stays), with a startup duration.
    pub fn restart(&mut self, i: usize, startup: &str) -> anyhow::Result<()> {
        let r = &mut self.replicas[i];
        r.flags.startup = Some(startup.to_string());
        r.restart()
    }

    /// Makes readyz check `check` of replica `i` fail or pass, through its fault port.
    pub fn force_check(&self, i: usize, check: &str, failing: bool) -> anyhow::Result<()> {
        self.replicas[i].force_check(check, failing)
    }
}
