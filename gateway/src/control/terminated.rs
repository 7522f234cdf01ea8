//! The control tasks that follow a cluster terminate mode serves: its replicas' versions, the
//! share of its long-running requests, its serving (if it has its own) and front-proxy
//! certificate files. Started with the cluster (at start or by the reload that adds it) and
//! ended with it.

use crate::control::certs::{watch_certificates, Watched};
use crate::state::Gateway;
use crate::terminate::TerminatedCluster;
use std::sync::Arc;

/// Starts `cluster`'s control tasks, to end when it is removed.
pub fn follow(gw: &Arc<Gateway>, cluster: &TerminatedCluster) {
    let mode = cluster.mode();
    let versions = tokio::spawn(crate::terminate::learn_versions(gw.clone(), mode.clone()));
    let share = tokio::spawn(crate::terminate::keep_share(
        gw.clone(),
        mode.cluster().pool().clone(),
    ));
    let certificates = tokio::spawn(watch_certificates(
        gw.clone(),
        Watched {
            serving: cluster
                .handshake()
                .map(|h| h.serving.clone())
                .into_iter()
                .collect(),
            terminate: vec![mode.clone()],
            probes: false,
        },
    ));
    for task in [versions, share, certificates] {
        cluster.keep_task(task.abort_handle());
    }
}
