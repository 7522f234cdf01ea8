//! What terminate mode keeps for each cluster it serves (those a terminate listener serves; the
//! one cluster of a file without `clusters:` among them): its terminate state (upstream, rules,
//! tokens) and, with `clusters:`, the handshake its clients get (its serving certificate, its
//! client CA, its TLS versions and suites). Kept with the cluster itself
//! (`Cluster::terminated`), so the table both planes route by finds it: a new client finds what
//! is configured now, a connection keeps the state it was accepted with (a removed cluster's
//! open connections end with its retired pool's drain).

use crate::state::Cluster;
use crate::telemetry::Metrics;
use crate::terminate::request::rules::Rules;
use crate::terminate::upstream::mode::{HeldInTotal, TerminateMode, UpstreamFiles};
use crate::terminate::upstream::tls::ALPN;
use kubegate_config::{DispatchRule, ServingTls};
use kubegate_net::tls::ServingCert;
use std::sync::{Arc, Mutex};
use tokio::task::AbortHandle;

/// What terminate mode shares across the clusters it serves, and how a cluster comes to be
/// served.
pub struct TerminatePlane {
    /// Request bodies, joined answers and shared watches' windows held for every cluster
    /// together.
    held: HeldInTotal,
}

/// One cluster's terminate state, and its handshake.
pub struct TerminatedCluster {
    /// Its own TLS (`clusters[].tls`); without, its clients complete their listener's.
    handshake: Option<Handshake>,
    mode: Arc<TerminateMode>,
    /// The control tasks that follow this cluster (its versions, its share, its certificate
    /// files): ended when it is removed.
    tasks: Mutex<Vec<AbortHandle>>,
}

/// A TLS server side: the config a handshake completes with, and its serving certificate,
/// which follows its files.
#[derive(Clone)]
pub struct Handshake {
    /// What a handshake completes with.
    pub config: Arc<rustls::ServerConfig>,
    /// Its certificate.
    pub serving: Arc<ServingCert>,
}

impl Handshake {
    /// Reads `tls` now.
    pub fn load(tls: &ServingTls) -> Result<Handshake, String> {
        let (serving, config) = kubegate_net::tls::serving(tls, &ALPN)?;
        Ok(Handshake {
            config: Arc::new(config),
            serving,
        })
    }
}

/// What a cluster's handshake and upstream read from files, loaded before anything changes.
pub struct ClusterFiles {
    handshake: Option<Handshake>,
    upstream: UpstreamFiles,
}

impl ClusterFiles {
    /// Reads `tls` (its own serving side, if it has one) and `upstream` of cluster `name` now.
    pub fn load(
        name: &str,
        tls: Option<&ServingTls>,
        upstream: &kubegate_config::UpstreamConfig,
    ) -> Result<ClusterFiles, String> {
        let at = |e: String| format!("cluster {name}: {e}");
        let handshake = tls.map(Handshake::load).transpose().map_err(at)?;
        let upstream = UpstreamFiles::load(upstream).map_err(|e| at(format!("upstream: {e}")))?;
        Ok(ClusterFiles {
            handshake,
            upstream,
        })
    }
}

impl TerminatePlane {
    /// No cluster served yet.
    pub fn new() -> TerminatePlane {
        TerminatePlane {
            held: HeldInTotal::default(),
        }
    }

    /// Serves `cluster` with what `files` loaded and its `dispatch` rules, compiled under its
    /// name, their series (and the cluster's) made in `metrics` (before the cluster is put in
    /// force); its terminate state, for its control tasks.
    pub fn serve(
        &self,
        cluster: &Arc<Cluster>,
        files: ClusterFiles,
        dispatch: &[DispatchRule],
        metrics: &Metrics,
    ) -> Arc<TerminatedCluster> {
        let rules = Rules::compile(cluster.name(), dispatch, &metrics.terminate);
        metrics.terminate.cluster_served(cluster.name());
        metrics.joins.cluster_served(cluster.name());
        let mode = TerminateMode::with(files.upstream.of(cluster.clone()), rules, &self.held);
        let entry = Arc::new(TerminatedCluster {
            handshake: files.handshake,
            mode: Arc::new(mode),
            tasks: Mutex::default(),
        });
        cluster.terminate_with(entry.clone());
        entry
    }
}

impl Default for TerminatePlane {
    fn default() -> TerminatePlane {
        TerminatePlane::new()
    }
}

impl TerminatedCluster {
    /// Its own TLS, if it has one (`clusters[].tls`).
    pub fn handshake(&self) -> Option<&Handshake> {
        self.handshake.as_ref()
    }

    /// Its terminate state.
    pub fn mode(&self) -> &Arc<TerminateMode> {
        &self.mode
    }

    /// Ends `task` with this cluster.
    pub fn keep_task(&self, task: AbortHandle) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }
}

impl Drop for TerminatedCluster {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|e| e.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}
