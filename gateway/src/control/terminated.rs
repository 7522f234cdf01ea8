//! The control tasks that follow a cluster terminate mode serves: its replicas' versions, the
//! share of its long-running requests, its shed object (`terminate.shed_object`), its runaway senders (`terminate.auto_shed`), its serving (if it has its own) and front-proxy
//! certificate files. Started with the cluster (at start or by the reload that adds it) and
//! ended with it (`Cluster::end_tasks`).

use crate::control::certs::{watch_certificates, Watched};
use crate::state::{Cluster, Gateway};
use crate::terminate::{TerminatePlane, TerminatedCluster};
use std::sync::Arc;

/// Starts the control tasks of `cluster`, served by `plane` as `served`, to end when it is
/// removed.
pub fn follow(
    gw: &Arc<Gateway>,
    plane: &Arc<TerminatePlane>,
    cluster: &Cluster,
    served: &TerminatedCluster,
) {
    let mode = served.mode();
    let versions = tokio::spawn(crate::terminate::learn_versions(
        gw.clone(),
        mode.live_upstreams().clone(),
    ));
    let share = tokio::spawn(crate::terminate::keep_share(
        gw.clone(),
        mode.cluster().pool().clone(),
    ));
    let certificates = tokio::spawn(watch_certificates(
        gw.clone(),
        Watched {
            serving: served
                .handshake()
                .map(|h| h.serving.clone())
                .into_iter()
                .collect(),
            terminate: vec![mode.clone()],
            plane: Some(plane.clone()),
            probes: false,
        },
    ));
    let shed_object = tokio::spawn(crate::control::shed_follow::follow(
        gw.clone(),
        mode.clone(),
    ));
    let auto_shed = tokio::spawn(crate::control::auto_shed::keep(gw.clone(), mode.clone()));
    for task in [versions, share, certificates, shed_object, auto_shed] {
        cluster.keep_task(task.abort_handle());
    }
}
