//! The readiness of the replicas' other port a passthrough listener forwards to
//! (`backend_port` with `backend_probe: tcp`): beside the replica's own readiness (its
//! `/readyz`, which decides for the cluster), the port must accept a TCP connection. A
//! konnectivity-server or a supervisor can be down while its host's apiserver is ready; its
//! listener then passes that replica over, and the apiserver's own traffic is not touched.
//!
//! Every replica of every cluster is probed each `health.interval`, all at once, each connect
//! bounded by `health.timeout`. A replica not probed yet is taken as ready: its `/readyz` has
//! just passed, and the first round runs as the listener starts.

use crate::state::Gateway;
use kubegate_net::dial;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The replicas (by their apiserver address) whose other port failed its last probe.
#[derive(Default)]
pub struct PortReadiness {
    failing: Mutex<HashSet<SocketAddr>>,
}

impl PortReadiness {
    fn failing(&self) -> std::sync::MutexGuard<'_, HashSet<SocketAddr>> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replicas whose port failed its last probe: placed as already tried.
    pub fn not_ready(&self) -> Vec<SocketAddr> {
        self.failing().iter().copied().collect()
    }

    /// `replica`'s port failed a connect: passed over until a probe passes again.
    pub fn failed(&self, replica: SocketAddr) {
        self.failing().insert(replica);
    }

    fn probed(&self, replica: SocketAddr, passed: bool) {
        let mut failing = self.failing();
        if passed {
            failing.remove(&replica);
        } else {
            failing.insert(replica);
        }
    }
}

/// `replica`'s other `port`, on its host.
pub fn on_port(replica: SocketAddr, port: Option<u16>) -> SocketAddr {
    SocketAddr::new(replica.ip(), port.unwrap_or(replica.port()))
}

/// Probes `port` on every replica for the process's life.
pub async fn probe(gw: Arc<Gateway>, port: u16, readiness: Arc<PortReadiness>) {
    loop {
        let health = gw.config().load().health.clone();
        let replicas: Vec<SocketAddr> =
            gw.clusters().backends().iter().map(|b| b.address).collect();
        let mut probes = tokio::task::JoinSet::new();
        for replica in replicas {
            let readiness = readiness.clone();
            let timeout = health.timeout;
            probes.spawn(async move {
                let passed = dial(on_port(replica, Some(port)), timeout).await.is_ok();
                readiness.probed(replica, passed);
            });
        }
        while probes.join_next().await.is_some() {}
        tokio::time::sleep(health.interval).await;
    }
}
