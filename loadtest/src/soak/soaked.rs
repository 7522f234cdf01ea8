//! The kubegate under soak: where it listens, what it reads, and its process (the soak starts
//! it; faults reconfigure and signal it).

use kubegate_config::{Config, ListenerSpec};
use kubegate_testbed::kubegate::{self as config, TerminateFiles};
use kubegate_testbed::ChildProcess as Proc;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the soaked kubegate listens and what it reads.
pub struct Layout {
    /// Passthrough listener.
    pub passthrough: SocketAddr,
    /// Terminate-mode listener.
    pub terminate: SocketAddr,
    /// Admin endpoint.
    pub admin: SocketAddr,
    pub(super) config: PathBuf,
    pub(super) pki: PathBuf,
    pub(super) backends: Vec<SocketAddr>,
}

impl Layout {
    /// The configuration with the first `n` replicas as backends and `drain_timeout`: a
    /// passthrough listener and a terminate-mode one.
    pub(super) fn config(&self, n: usize, drain_timeout: Duration) -> Config {
        let pki = &self.pki;
        let backends: Vec<(String, SocketAddr)> = self
            .backends
            .iter()
            .take(n)
            .enumerate()
            .map(|(i, b)| (format!("replica-{}", i + 1), *b))
            .collect();
        let mut c = config::config(self.terminate, self.admin, &backends, &pki.join("ca.crt"));
        config::terminate(&mut c, &TerminateFiles::kubeadm(pki));
        c.listeners
            .insert(0, ListenerSpec::passthrough(self.passthrough));
        c.drain.timeout = drain_timeout;
        c
    }

    /// Writes the config file (kubegate reloads it when it changes).
    pub(super) fn write_config(&self, text: &str) -> anyhow::Result<()> {
        config::write_text(text, &self.config)
    }
}

/// The kubegate under soak.
pub struct Soaked {
    pub(super) proc: Proc,
    /// Its addresses and files.
    pub layout: Layout,
}

impl Soaked {
    /// kubegate's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Sends `sig` to kubegate.
    pub fn signal(&self, sig: i32) -> anyhow::Result<()> {
        Ok(self.proc.signal(sig)?)
    }
}
