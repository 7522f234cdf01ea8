//! A simulated apiserver replica (`kubegate-sim`): the flags it runs with — kube-apiserver's
//! names, so a reader recognises them — its process, and its fault port.

use crate::bins::binary;
use crate::ports::{free_addr, free_port, plain_http, wait_listening};
use crate::process::ChildProcess;
use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// How long a replica may take to open its listener.
const LISTENING: Duration = Duration::from_secs(30);

/// The front-proxy common name replicas accept, as kubeadm configures it.
pub const FRONT_PROXY_CN: &str = "front-proxy-client";

/// How a replica runs.
#[derive(Clone, Debug)]
pub struct ReplicaFlags {
    /// `--replica-name` (logs, the `X-Kubegate-Sim-Replica` header).
    pub name: String,
    /// `--bind-address` and `--secure-port`.
    pub address: SocketAddr,
    /// `--fault-port`.
    pub fault_port: u16,
    /// `--tls-cert-file`, `--tls-private-key-file`.
    pub serving: (PathBuf, PathBuf),
    /// `--client-ca-file`.
    pub client_ca: PathBuf,
    /// `--requestheader-client-ca-file`, with kubeadm's header names.
    pub front_proxy_ca: Option<PathBuf>,
    /// `--requestheader-allowed-names` (with a front-proxy CA): [`FRONT_PROXY_CN`], as
    /// kubeadm sets it, unless changed.
    pub front_proxy_names: Vec<String>,
    /// `--etcd-servers`; none: an in-memory store of its own.
    pub etcd: Option<String>,
    /// `--shutdown-delay-duration`.
    pub shutdown_delay: Option<String>,
    /// `--goaway-chance`.
    pub goaway_chance: Option<f64>,
    /// `--latency`.
    pub latency: Option<Duration>,
    /// `--startup-duration`.
    pub startup: Option<String>,
    /// Any further flags, as written.
    pub extra: Vec<String>,
}

impl ReplicaFlags {
    /// Replica `name` on a free loopback port, serving `serving` and trusting `client_ca`.
    pub fn new(name: &str, serving: (PathBuf, PathBuf), client_ca: &Path) -> ReplicaFlags {
        ReplicaFlags {
            name: name.to_string(),
            address: free_addr(),
            fault_port: free_port(),
            serving,
            client_ca: client_ca.to_path_buf(),
            front_proxy_ca: None,
            front_proxy_names: vec![FRONT_PROXY_CN.to_string()],
            etcd: None,
            shutdown_delay: None,
            goaway_chance: None,
            latency: None,
            startup: None,
            extra: Vec::new(),
        }
    }

    /// The command line.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: OsString| {
            a.push(format!("--{name}").into());
            a.push(value);
        };
        flag("bind-address", self.address.ip().to_string().into());
        flag("secure-port", self.address.port().to_string().into());
        flag("fault-port", self.fault_port.to_string().into());
        flag("tls-cert-file", self.serving.0.clone().into());
        flag("tls-private-key-file", self.serving.1.clone().into());
        flag("client-ca-file", self.client_ca.clone().into());
        flag("replica-name", self.name.clone().into());
        if let Some(ca) = &self.front_proxy_ca {
            flag("requestheader-client-ca-file", ca.clone().into());
            flag(
                "requestheader-allowed-names",
                self.front_proxy_names.join(",").into(),
            );
            flag("requestheader-username-headers", "X-Remote-User".into());
            flag("requestheader-group-headers", "X-Remote-Group".into());
            flag(
                "requestheader-extra-headers-prefix",
                "X-Remote-Extra-".into(),
            );
        }
        if let Some(url) = &self.etcd {
            flag("etcd-servers", url.into());
        }
        if let Some(d) = &self.shutdown_delay {
            flag("shutdown-delay-duration", d.into());
        }
        if let Some(c) = self.goaway_chance {
            flag("goaway-chance", c.to_string().into());
        }
        if let Some(l) = self.latency {
            flag("latency", format!("{}ms", l.as_millis()).into());
        }
        if let Some(s) = &self.startup {
            flag("startup-duration", s.into());
        }
        a.extend(self.extra.iter().map(OsString::from));
        a
    }
}

/// A running (or stopped) replica.
pub struct Replica {
    /// How it runs; [`Replica::restart`] takes changes made here.
    pub flags: ReplicaFlags,
    log: PathBuf,
    proc: Option<ChildProcess>,
}

impl Replica {
    /// Starts a replica with `flags`, its output appended to `log`, and waits until it
    /// listens.
    pub fn start(flags: ReplicaFlags, log: &Path) -> anyhow::Result<Replica> {
        let mut r = Replica {
            flags,
            log: log.to_path_buf(),
            proc: None,
        };
        r.launch()?;
        Ok(r)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let mut cmd = Command::new(binary("kubegate-sim"));
        cmd.args(self.flags.args());
        self.proc = Some(ChildProcess::spawn(&mut cmd, &self.log)?);
        wait_listening(self.flags.address, LISTENING)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.flags.name
    }

    /// Its TLS address.
    pub fn addr(&self) -> SocketAddr {
        self.flags.address
    }

    /// Starts it again on the same address with its flags as they are now (killed first if
    /// it still runs).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.launch()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(ChildProcess::pid)
    }

    /// Sends `sig` (`libc::SIGTERM`, `SIGSTOP`, ...); a replica that already ended has
    /// nothing to receive it.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        match &self.proc {
            Some(p) => p.signal(sig),
            None => Err(io::Error::other("the replica is not running")),
        }
    }

    /// Waits up to `limit` for it to exit by itself; its status if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = self.proc.as_mut()?.wait_exit(limit)?;
        self.proc = None;
        Some(status)
    }

    /// Still running.
    pub fn running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(ChildProcess::running)
    }

    /// Ends it now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// POSTs `what` (path and query, e.g. `/fail?check=etcd`) to its fault port.
    pub fn fault(&self, what: &str) -> anyhow::Result<()> {
        let resp = plain_http(("127.0.0.1", self.flags.fault_port), "POST", what);
        anyhow::ensure!(
            resp.starts_with("HTTP/1.1 200"),
            "{} fault port {what}: {resp:?}",
            self.flags.name
        );
        Ok(())
    }

    /// Makes readyz check `check` fail (true) or pass again (false).
    pub fn force_check(&self, check: &str, failing: bool) -> anyhow::Result<()> {
        let path = if failing { "/fail" } else { "/pass" };
        self.fault(&format!("{path}?check={check}"))
    }

    /// Adds `ms` of latency to every API request.
    pub fn set_latency_ms(&self, ms: u64) -> anyhow::Result<()> {
        self.fault(&format!("/latency?ms={ms}"))
    }

    /// Saturates priority level `level` with traffic no gateway sees, its rejections asking
    /// for `retry_after` seconds (`Some`), or calms it (`None`): its new requests get priority
    /// and fairness's 429 meanwhile.
    pub fn saturate_level(&self, level: &str, retry_after: Option<u32>) -> anyhow::Result<()> {
        match retry_after {
            Some(s) => self.fault(&format!(
                "/apf?level={level}&state=saturated&retry_after={s}"
            )),
            None => self.fault(&format!("/apf?level={level}&state=calm")),
        }
    }

    /// Makes each request of priority level `level` wait `ms` in its queues first (no
    /// rejection), through the fault port; `None` calms the level.
    pub fn queue_level(&self, level: &str, ms: Option<u64>) -> anyhow::Result<()> {
        match ms {
            Some(ms) => self.fault(&format!("/apf?level={level}&state=queued&ms={ms}")),
            None => self.fault(&format!("/apf?level={level}&state=calm")),
        }
    }

    /// Revokes static token `token` through the fault port: requests carrying it get 401.
    pub fn revoke_token(&self, token: &str) -> anyhow::Result<()> {
        self.fault(&format!("/revoke?token={token}"))
    }

    /// Puts its watch caches in `state` through the fault port: `initializing` (429 to LISTs
    /// and watches, `/readyz` passing), `lagging` (they stop taking etcd's changes: a watch
    /// from beyond them fails "Too large resource version"), or `ready`.
    pub fn set_cache(&self, state: &str) -> anyhow::Result<()> {
        self.fault(&format!("/cache?state={state}"))
    }
}
