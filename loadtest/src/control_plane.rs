//! The simulated control plane under test: one etcd and N `kubegate-sim` replica processes on
//! loopback, each restartable and signalable, so faults are real signals to real processes.

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

/// etcd and the replicas.
pub struct ControlPlane {
    dir: PathBuf,
    etcd_url: String,
    _etcd: Proc,
    /// The replicas, in order.
    pub replicas: Vec<Replica>,
    shutdown_delay: String,
    tls: ClientTls,
}

impl ControlPlane {
    /// Certificates in `dir/pki`, etcd, and `n` replicas with `--shutdown-delay-duration`.
    pub async fn start(dir: &Path, n: usize, shutdown_delay: &str) -> anyhow::Result<ControlPlane> {
        std::fs::create_dir_all(dir)?;
        let pki = dir.join("pki");
        let status = Command::new(sibling("kubegate-sim"))
            .arg("certs")
            .arg(&pki)
            .output()?;
        anyhow::ensure!(status.status.success(), "kubegate-sim certs failed");
        let client_port = free_port();
        let peer_port = free_port();
        let url = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "lt", "--data-dir"])
            .arg(dir.join("etcd"))
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
        let etcd = spawn(cmd, &dir.join("etcd.log"))?;
        wait_listening(
            format!("127.0.0.1:{client_port}").parse()?,
            Duration::from_secs(20),
        )?;
        let tls = ClientTls::load(&pki)?;
        let mut cp = ControlPlane {
            dir: dir.to_path_buf(),
            etcd_url: url,
            _etcd: etcd,
            replicas: Vec::new(),
            shutdown_delay: shutdown_delay.to_string(),
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
            .args(["--etcd-servers", &self.etcd_url])
            .args(["--shutdown-delay-duration", &self.shutdown_delay])
            .args(["--startup-duration", startup])
            .args(["--replica-name", &r.name]);
        r.proc = Some(spawn(cmd, &self.dir.join(format!("{}.log", r.name)))?);
        wait_listening(r.addr, Duration::from_secs(10))
    }

    /// Waits until replica `i` answers `/readyz` with 200.
    pub async fn wait_ready(&self, i: usize, limit: Duration) -> anyhow::Result<()> {
        let addr = self.replicas[i].addr;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(mut c) = Client::connect(addr, &self.tls, false).await {
                if let Ok(r) = c.send("GET", "/readyz", None).await {
                    if r.status == 200 {
                        return Ok(());
                    }
                }
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
        use std::io::{Read, Write};
        let path = if failing { "fail" } else { "pass" };
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.replicas[i].fault_port))?;
        write!(
            s,
            "POST /{path}?check={check} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        anyhow::ensure!(out.starts_with("HTTP/1.1 200"), "fault port: {out}");
        Ok(())
    }
}
