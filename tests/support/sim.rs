//! One `kubegate-sim` replica of a test: the test bed's replica, plus what a test reads of it
//! (its certificate, to tell from the client side which replica answered) and panicking
//! helpers.

use crate::client::Conn;
use kubegate_testbed::{Pki, Replica, ReplicaFlags};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// How a simulated replica is started.
#[derive(Clone, Default)]
pub struct SimOptions {
    /// Extra flags, e.g. `["--shutdown-delay-duration", "2s"]`.
    pub args: Vec<String>,
    /// Serving pair to use instead of the replica's own valid one.
    pub serving: Option<(PathBuf, PathBuf)>,
    /// Trust this front-proxy CA for requestheader authentication (CN `front-proxy-client`).
    pub front_proxy_ca: Option<PathBuf>,
    /// Common names the front-proxy CA's certificates may have (default: kubeadm's
    /// `front-proxy-client`).
    pub front_proxy_names: Option<Vec<String>>,
    /// Store in this etcd (`--etcd-servers`) instead of in memory.
    pub etcd: Option<String>,
    /// Listen (and advertise) on this address instead of a free port on 127.0.0.1: replicas
    /// of one cluster share a port on distinct loopback addresses.
    pub address: Option<SocketAddr>,
}

/// One replica.
pub struct Sim {
    /// Replica name (also its serving certificate's common name).
    pub name: String,
    /// TLS address.
    pub addr: SocketAddr,
    /// Fault port.
    pub fault_port: u16,
    /// DER of its serving certificate, to recognise it from the client side.
    pub cert_der: Vec<u8>,
    replica: Replica,
}

impl Sim {
    /// Starts replica `name` trusting `fp`'s front-proxy CA (requestheader authentication, as
    /// behind kubegate's terminate mode), with extra flags `args`.
    pub fn behind_front_proxy(
        pki: &Pki,
        fp: &kubegate_testbed::FrontProxyPki,
        name: &str,
        args: Vec<String>,
    ) -> Sim {
        Sim::start(
            pki,
            name,
            SimOptions {
                args,
                front_proxy_ca: Some(fp.ca.clone()),
                ..Default::default()
            },
        )
    }

    /// Starts replica `name` with certificates from `pki` and waits until it accepts TCP.
    pub fn start(pki: &Pki, name: &str, opts: SimOptions) -> Sim {
        let serving = opts.serving.clone().unwrap_or_else(|| pki.serving(name));
        let mut flags = ReplicaFlags::new(name, serving, &pki.ca_file());
        if let Some(a) = opts.address {
            flags.address = a;
        }
        flags.front_proxy_ca = opts.front_proxy_ca;
        if let Some(names) = opts.front_proxy_names {
            flags.front_proxy_names = names;
        }
        flags.etcd = opts.etcd;
        flags.extra = opts.args;
        let pem = std::fs::read(&flags.serving.0).unwrap();
        let cert_der = rustls_pki_types::pem::PemObject::from_pem_slice(&pem)
            .map(|c: rustls_pki_types::CertificateDer<'static>| c.to_vec())
            .unwrap();
        let log = pki.dir().join(format!("{name}.log"));
        let replica = Replica::start(flags, &log).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        Sim {
            name: name.to_string(),
            addr: replica.addr(),
            fault_port: replica.flags.fault_port,
            cert_der,
            replica,
        }
    }

    /// Starts the replica again on the same address (killed first if it still runs).
    pub fn restart(&mut self) {
        self.replica
            .restart()
            .unwrap_or_else(|e| panic!("restart {}: {e:#}", self.name));
    }

    /// Starts the replica again on the same address with `args` instead of its extra flags
    /// (another version, another `--runtime-config`): killed first if it still runs.
    pub fn restart_with(&mut self, args: Vec<String>) {
        self.replica.flags.extra = args;
        self.restart();
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.replica.pid().expect("running") as i32
    }

    /// Sends `sig` (libc::SIGTERM, SIGSTOP, ...).
    pub fn signal(&self, sig: i32) {
        self.replica
            .signal(sig)
            .unwrap_or_else(|e| panic!("signal {sig} to {}: {e}", self.name));
    }

    /// Waits for the replica to exit by itself within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.replica.wait_exit(limit).unwrap_or_else(|| {
            panic!(
                "timed out after {limit:?} waiting for {} to exit",
                self.name
            )
        })
    }

    /// Kills now (SIGKILL) and reaps.
    pub fn kill(&mut self) {
        self.replica.kill();
    }

    /// Forces `check` to fail (true) or pass again (false), through the fault port.
    pub fn force_check(&self, check: &str, failing: bool) {
        self.replica
            .force_check(check, failing)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Saturates priority level `level` with traffic no gateway sees, its rejections asking
    /// for `retry_after` seconds (`Some`), or calms it (`None`).
    pub fn saturate_level(&self, level: &str, retry_after: Option<u32>) {
        self.replica
            .saturate_level(level, retry_after)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Makes each request of priority level `level` wait `ms` in its queues first, no
    /// rejection (`None` calms it).
    pub fn queue_level(&self, level: &str, ms: Option<u64>) {
        self.replica
            .queue_level(level, ms)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Revokes static token `token`: the replica answers requests carrying it 401.
    pub fn revoke_token(&self, token: &str) {
        self.replica
            .revoke_token(token)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Puts the replica's watch caches in `state`: `initializing` (429 to LISTs and watches,
    /// `/readyz` passing), `lagging` (behind etcd: a watch from beyond them fails "Too large
    /// resource version"), or `ready`.
    pub fn set_cache(&self, state: &str) {
        self.replica
            .set_cache(state)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Adds latency to every request.
    pub fn set_latency_ms(&self, ms: u64) {
        self.replica
            .set_latency_ms(ms)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// LIST requests it received since it started (its fault port's `/state`).
    pub fn lists_received(&self) -> u64 {
        self.counted("lists_received")
    }

    /// WATCH requests it received since it started.
    pub fn watches_received(&self) -> u64 {
        self.counted("watches_received")
    }

    /// WATCH requests with `sendInitialEvents` (watch-lists) it received since it started.
    pub fn watch_lists_received(&self) -> u64 {
        self.counted("watch_lists_received")
    }

    /// Watches open on it now.
    pub fn watches_open(&self) -> u64 {
        self.counted("watches")
    }

    /// SubjectAccessReviews it answered since it started.
    pub fn access_reviews_received(&self) -> u64 {
        self.counted("access_reviews_received")
    }

    /// Response body bytes it sent since it started, whole and streamed.
    pub fn bytes_sent(&self) -> u64 {
        self.counted("bytes_sent")
    }

    /// Asks its fault port for `what` (a path and query, `POST`); panics if refused.
    pub fn fault(&self, what: &str) {
        self.replica.fault(what).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// A count of its fault port's `/state` (`requests_received`, `writes_received`, ...).
    pub fn counted(&self, what: &str) -> u64 {
        let resp =
            kubegate_testbed::ports::plain_http(("127.0.0.1", self.fault_port), "GET", "/state");
        let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let state: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{}'s /state: {e}: {resp:?}", self.name));
        state[what]
            .as_u64()
            .unwrap_or_else(|| panic!("{what} in {state}"))
    }

    /// A TLS connection straight to this replica.
    pub async fn connect(&self, pki: &Pki, h2: bool) -> std::io::Result<Conn> {
        Conn::open(self.addr, pki, h2).await
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if self.replica.running() && std::thread::panicking() {
            eprintln!("---- log of {} ----\n{}", self.name, self.replica.log());
        }
    }
}
