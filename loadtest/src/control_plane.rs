//! The simulated control plane under test: one etcd and N `kubegate-sim` replica processes on
//! loopback, each restartable and signalable, so faults are real signals to real processes.
//! Replicas accept the front-proxy scheme (`--requestheader-*`, kubeadm's flags), so gateways
//! that terminate TLS can pass clients' identities on.

use crate::client::{Client, ClientTls};
use crate::procs::{free_port, sibling, spawn, wait_listening, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One replica.
pub struct Replica {
    /// Name (`replica-1`...).
    pub name: String,
    /// TLS address.
    pub addr: SocketAddr,
    fault_port: u16,
    proc: Option<Proc>,
}

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

/// The etcd every replica stores in; stoppable and restartable on the same data and ports.
struct Etcd {
    data_dir: PathBuf,
    log: PathBuf,
    client: SocketAddr,
    peer: SocketAddr,
    proc: Option<Proc>,
}

impl Etcd {
    fn url(&self) -> String {
        format!("http://{}", self.client)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let url = self.url();
        let peer = format!("http://{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "lt", "--data-dir"])
            .arg(&self.data_dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("lt={peer}")]);
        self.proc = Some(spawn(cmd, &self.log)?);
        wait_listening(self.client, Duration::from_secs(20))
    }
}

/// etcd and the replicas.
pub struct ControlPlane {
    dir: PathBuf,
    etcd: Etcd,
    /// The replicas, in order.
    pub replicas: Vec<Replica>,
    settings: ReplicaSettings,
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
        let status = Command::new(sibling("kubegate-sim"))
            .arg("certs")
            .arg(&pki)
            .output()?;
        anyhow::ensure!(status.status.success(), "kubegate-sim certs failed");
        let mut etcd = Etcd {
            data_dir: dir.join("etcd"),
            log: dir.join("etcd.log"),
            client: format!("127.0.0.1:{}", free_port()).parse()?,
            peer: format!("127.0.0.1:{}", free_port()).parse()?,
            proc: None,
        };
        etcd.launch()?;
        let tls = ClientTls::load(&pki)?;
        let mut cp = ControlPlane {
            dir: dir.to_path_buf(),
            etcd,
            replicas: Vec::new(),
            settings,
            tls,
        };
        for i in 0..n {
            cp.replicas.push(Replica {
                name: format!("replica-{}", i + 1),
                addr: format!("127.0.0.1:{}", free_port()).parse()?,
                fault_port: free_port(),
                proc: None,
            });
            cp.launch(i, "0s")?;
        }
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
        self.replicas.iter().map(|r| r.addr).collect()
    }

    fn launch(&mut self, i: usize, startup: &str) -> anyhow::Result<()> {
        let pki = self.pki();
        let r = &mut self.replicas[i];
        let mut cmd = Command::new(sibling("kubegate-sim"));
        cmd.args(["--secure-port", &r.addr.port().to_string()])
            .args(["--fault-port", &r.fault_port.to_string()])
            .arg("--tls-cert-file")
            .arg(pki.join("apiserver.crt"))
            .arg("--tls-private-key-file")
            .arg(pki.join("apiserver.key"))
            .arg("--client-ca-file")
            .arg(pki.join("ca.crt"))
            // kubeadm's front-proxy flags.
            .arg("--requestheader-client-ca-file")
            .arg(pki.join("front-proxy-ca.crt"))
            .args(["--requestheader-allowed-names", "front-proxy-client"])
            .args(["--requestheader-username-headers", "X-Remote-User"])
            .args(["--requestheader-group-headers", "X-Remote-Group"])
            .args(["--requestheader-extra-headers-prefix", "X-Remote-Extra-"])
            .args(["--etcd-servers", &self.etcd.url()])
            .args(["--shutdown-delay-duration", &self.settings.shutdown_delay])
            .args(["--goaway-chance", &self.settings.goaway_chance.to_string()])
            .args([
                "--latency",
                &format!("{}ms", self.settings.latency.as_millis()),
            ])
            .args(["--startup-duration", startup])
            .args(["--replica-name", &r.name]);
        r.proc = Some(spawn(cmd, &self.dir.join(format!("{}.log", r.name)))?);
        wait_listening(r.addr, Duration::from_secs(10))
    }

    /// Whether replica `i` answers `/readyz` with 200 now.
    pub async fn ready(&self, i: usize) -> bool {
        let Ok(mut c) = Client::connect(self.replicas[i].addr, &self.tls, false).await else {
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
        anyhow::bail!("{} not ready after {limit:?}", self.replicas[i].name)
    }

    /// Sends `sig` to replica `i`.
    pub fn signal(&self, i: usize, sig: i32) {
        if let Some(p) = &self.replicas[i].proc {
            // A replica that already ended has nothing to receive it.
            let _ = p.signal(sig);
        }
    }

    /// SIGTERM, then waits for the replica to exit by itself (its shutdown sequence).
    pub fn terminate(&mut self, i: usize, limit: Duration) -> bool {
        self.signal(i, libc::SIGTERM);
        let exited = self.replicas[i]
            .proc
            .as_mut()
            .map(|p| p.wait_exit(limit).is_some())
            .unwrap_or(true);
        self.replicas[i].proc = None;
        exited
    }

    /// SIGTERM to every replica at once, then waits for all of them to exit.
    pub fn terminate_all(&mut self, limit: Duration) -> bool {
        for i in 0..self.replicas.len() {
            self.signal(i, libc::SIGTERM);
        }
        let mut all = true;
        for r in &mut self.replicas {
            if let Some(mut p) = r.proc.take() {
                all &= p.wait_exit(limit).is_some();
            }
        }
        all
    }

    /// Stops etcd (SIGTERM, then waits for it to exit).
    pub fn stop_etcd(&mut self, limit: Duration) -> bool {
        let Some(mut p) = self.etcd.proc.take() else {
            return true;
        };
        let _ = p.signal(libc::SIGTERM);
        p.wait_exit(limit).is_some()
    }

    /// Starts etcd again on its data directory and ports.
    pub fn start_etcd(&mut self) -> anyhow::Result<()> {
        self.etcd.launch()
    }

    /// SIGKILL now.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.replicas[i].proc.take() {
            p.kill();
        }
    }

    /// Starts replica `i` again (its port stays), with a startup duration.
    pub fn restart(&mut self, i: usize, startup: &str) -> anyhow::Result<()> {
        self.kill(i);
        self.launch(i, startup)
    }

    /// Makes readyz check `check` of replica `i` fail or pass, through its fault port.
    pub fn force_check(&self, i: usize, check: &str, failing: bool) -> anyhow::Result<()> {
        let path = if failing { "fail" } else { "pass" };
        self.fault(i, &format!("{path}?check={check}"))
    }

    /// POSTs `what` (path and query) to replica `i`'s fault port.
    fn fault(&self, i: usize, what: &str) -> anyhow::Result<()> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.replicas[i].fault_port))?;
        write!(
            s,
            "POST /{what} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        anyhow::ensure!(out.starts_with("HTTP/1.1 200"), "fault port: {out}");
        Ok(())
    }
}
