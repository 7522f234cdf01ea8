//! A single-member etcd on loopback, for replicas to share: started with its data in a folder
//! of the caller's, stoppable and started again on the same data and ports (the load test's
//! `etcd-down`).

use crate::ports::{free_addr, plain_http};
use crate::process::ChildProcess;
use crate::wait::wait_until;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long etcd may take to answer `/health` once started.
const READY: Duration = Duration::from_secs(20);

/// etcd: where it listens, where it keeps its data, its process while it runs.
pub struct Etcd {
    client: SocketAddr,
    peer: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    compaction: Option<String>,
    proc: Option<ChildProcess>,
}

impl Etcd {
    /// An etcd with its data and log in `dir`, on free loopback ports; not started yet.
    pub fn new(dir: &Path) -> Etcd {
        Etcd {
            client: free_addr(),
            peer: free_addr(),
            data_dir: dir.join("etcd-data"),
            log: dir.join("etcd.log"),
            compaction: None,
            proc: None,
        }
    }

    /// Listens for clients on `client` and for peers on `peer` instead.
    pub fn ports(mut self, client: SocketAddr, peer: SocketAddr) -> Etcd {
        self.client = client;
        self.peer = peer;
        self
    }

    /// Compacts its history periodically, keeping `retention` (etcd's
    /// `--auto-compaction-retention`, e.g. `5m`): for clusters that run for long.
    pub fn compaction(mut self, retention: &str) -> Etcd {
        self.compaction = Some(retention.to_string());
        self
    }

    /// Starts it and waits until `/health` says so.
    pub fn start(mut self) -> anyhow::Result<Etcd> {
        self.launch()?;
        Ok(self)
    }

    /// Its client URL (`--etcd-servers`).
    pub fn url(&self) -> String {
        format!("http://{}", self.client)
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(ChildProcess::pid)
    }

    /// Stops it (SIGTERM) and waits up to `limit` for it to exit; false if it did not.
    pub fn stop(&mut self, limit: Duration) -> bool {
        let Some(mut p) = self.proc.take() else {
            return true;
        };
        let _ = p.signal(nix::libc::SIGTERM);
        p.wait_exit(limit).is_some()
    }

    /// Compacts its history up to `revision` (etcd's `Compact` through its JSON gateway):
    /// older revisions can no longer be read. The raw HTTP answer.
    pub fn compact(&self, revision: i64) -> String {
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        crate::ports::plain_post_json(self.client, "/v3/kv/compaction", &body)
    }

    /// Starts it again on its data and ports.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop(Duration::from_secs(10));
        self.launch()
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let url = self.url();
        let peer = format!("http://{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "testbed", "--data-dir"])
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
            .args(["--initial-cluster", &format!("testbed={peer}")]);
        if let Some(retention) = &self.compaction {
            cmd.args(["--auto-compaction-mode", "periodic"])
                .args(["--auto-compaction-retention", retention]);
        }
        self.proc = Some(
            ChildProcess::spawn(&mut cmd, &self.log)
                .context("start etcd (Debian package etcd-server)")?,
        );
        let client = self.client;
        wait_until("etcd /health", READY, || {
            plain_http(client, "GET", "/health")
                .contains("\"health\":\"true\"")
                .then_some(())
        })?;
        Ok(())
    }
}
