//! The readiness of the replicas' other port a passthrough listener forwards to
//! (`backend_port`): beside the replica's own readiness (its `/readyz`, which decides for the
//! cluster), a port that refused a connect is tried last — for [`PASSED_OVER`], or with
//! `backend_probe: tcp` until a probe passes again. A konnectivity-server or a supervisor can
//! be down while its host's apiserver is ready; its listener then goes to the others first,
//! and the apiserver's own traffic is not touched.
//!
//! With `backend_probe: tcp`, every replica of the listener's clusters is probed each
//! `health.interval`, all at once, each connect bounded by `health.timeout` (a connect then a
//! close: the service may log it). A replica not probed yet is taken as ready: its `/readyz` has
//! just passed, and the first round runs as the listener starts.

use crate::state::Gateway;
use kubegate_config::ListenerSpec;
use kubegate_net::{dial, out_of_resources};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a port that refused a connect is tried last, without a probe to say when it is
/// back.
pub const PASSED_OVER: Duration = Duration::from_secs(10);

/// The replicas (by their apiserver address) whose other port failed: until when (`None`:
/// until a probe passes).
#[derive(Default)]
pub struct PortReadiness {
    failing: Mutex<HashMap<SocketAddr, Option<Instant>>>,
}

impl PortReadiness {
    fn failing(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Option<Instant>>> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replicas whose port failed lately: tried last.
    pub fn not_ready(&self) -> Vec<SocketAddr> {
        let now = Instant::now();
        let mut failing = self.failing();
        failing.retain(|_, until| until.is_none_or(|t| t > now));
        failing.keys().copied().collect()
    }

    /// `replica`'s port refused a connect: tried last until a probe passes (`probed`) or,
    /// without one, for [`PASSED_OVER`].
    pub fn failed(&self, replica: SocketAddr, probed: bool) {
        let until = (!probed).then(|| Instant::now() + PASSED_OVER);
        self.failing().insert(replica, until);
    }

    /// A probe round's outcome: the `failed` ports are the failing ones, until the next round
    /// (the others passed, and replicas gone are forgotten).
    fn probed(&self, failed: &[SocketAddr]) {
        let mut failing = self.failing();
        failing.clear();
        failing.extend(failed.iter().map(|a| (*a, None)));
    }
}

/// `replica`'s other `port`, on its host (its IPv6 scope kept).
pub fn on_port(replica: SocketAddr, port: Option<u16>) -> SocketAddr {
    let mut to = replica;
    if let Some(port) = port {
        to.set_port(port);
    }
    to
}

/// Probes `port` on the replicas of `listener`'s clusters for the process's life.
pub async fn probe(
    gw: Arc<Gateway>,
    listener: Arc<ListenerSpec>,
    port: u16,
    readiness: Arc<PortReadiness>,
) {
    loop {
        let health = gw.config().load().health.clone();
        let clusters = gw.clusters();
        // Each replica (named by its address) probed where its new work goes.
        let replicas: Vec<(SocketAddr, SocketAddr)> = clusters
            .all()
            .iter()
            .filter(|c| {
                listener
                    .clusters
                    .as_ref()
                    .is_none_or(|names| names.iter().any(|n| n == c.name()))
            })
            .flat_map(|c| c.pool().backends())
            .map(|b| (b.address, b.connect_address()))
            .collect();
        let mut probes = tokio::task::JoinSet::new();
        for (replica, at) in replicas {
            let timeout = health.timeout;
            probes.spawn(async move {
                match dial(on_port(at, Some(port)), timeout).await {
                    Ok(_) => None,
                    // kubegate's own shortage says nothing of the port.
                    Err(e) if out_of_resources(&e) => None,
                    Err(_) => Some(replica),
                }
            });
        }
        let mut failed = Vec::new();
        while let Some(outcome) = probes.join_next().await {
            failed.extend(outcome.ok().flatten());
        }
        readiness.probed(&failed);
        tokio::time::sleep(health.interval).await;
    }
}
