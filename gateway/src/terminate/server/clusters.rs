//! What terminate mode keeps for each cluster it serves (those a terminate listener serves; the
//! one cluster of a file without `clusters:` among them): its terminate state (upstream, rules,
//! tokens) and, with `clusters:`, the handshake its clients get (its serving certificate, its
//! client CA, its TLS versions and suites). The plane's table of them is put in force with
//! the gateway's generation, whose clusters it routes by: a new client finds what is
//! configured now, a connection keeps the state it was accepted with (a removed cluster's open
//! connections end with its retired pool's drain).

use crate::state::{Cluster, Clusters, Route};
use crate::telemetry::{Metrics, Refusal};
use crate::terminate::cluster::{HeldInTotal, TerminateMode};
use crate::terminate::rules::Rules;
use crate::terminate::upstream::tls::ALPN;
use crate::terminate::upstream::upstreams::UpstreamFiles;
use arc_swap::ArcSwap;
use kubegate_config::{DispatchRule, ListenerSpec, ServingTls};
use kubegate_net::tls::ServingCert;
use std::collections::HashMap;
use std::sync::Arc;

/// What terminate mode shares across the clusters it serves, and how a cluster comes to be
/// served.
pub struct TerminatePlane {
    /// Request bodies, joined answers and shared watches' windows held for every cluster
    /// together.
    held: HeldInTotal,
    /// The clusters served now.
    served: ArcSwap<Served>,
}

/// The clusters terminate mode serves in one generation: the gateway's clusters of that
/// generation, which clients are routed among, and the terminate state of each one a terminate
/// listener serves, by name.
pub struct Served {
    clusters: Arc<Clusters>,
    terminated: HashMap<String, Arc<TerminatedCluster>>,
}

/// One cluster's terminate state, and its handshake.
pub struct TerminatedCluster {
    /// Its own TLS (`clusters[].tls`); without, its clients complete their listener's.
    handshake: Option<Handshake>,
    mode: Arc<TerminateMode>,
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
            served: ArcSwap::from_pointee(Served {
                clusters: Arc::new(Clusters::new(Vec::new(), false)),
                terminated: HashMap::new(),
            }),
        }
    }

    /// Terminate state for `cluster` with what `files` loaded and its `dispatch` rules,
    /// compiled under its name, their series (and the cluster's) made in `metrics`; served
    /// once [`Self::put`] puts it in force.
    pub fn make(
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
        Arc::new(TerminatedCluster {
            handshake: files.handshake,
            mode: Arc::new(mode),
        })
    }

    /// Puts in force `clusters` (the gateway's, of the generation just put in force) and the
    /// terminate state of each served, by name.
    pub fn put(
        &self,
        clusters: Arc<Clusters>,
        terminated: HashMap<String, Arc<TerminatedCluster>>,
    ) {
        self.served.store(Arc::new(Served {
            clusters,
            terminated,
        }));
    }

    /// The terminate state of every cluster served now, by name.
    pub fn terminated(&self) -> HashMap<String, Arc<TerminatedCluster>> {
        self.served.load().terminated.clone()
    }

    /// The terminate state of cluster `name`, if terminate mode serves it now.
    pub fn cluster(&self, name: &str) -> Option<Arc<TerminatedCluster>> {
        self.served.load().terminated.get(name).cloned()
    }

    /// The cluster a client of `listener` that sent server `name` reaches, and its terminate
    /// state: from one generation.
    pub fn route(
        &self,
        listener: &ListenerSpec,
        name: Option<&str>,
    ) -> Result<Arc<TerminatedCluster>, Refusal> {
        let served = self.served.load();
        match served.clusters.route(listener, name) {
            Route::To(cluster) => served
                .terminated
                .get(cluster.name())
                .cloned()
                .ok_or(Refusal::UnknownServerName),
            Route::NoServerName => Err(Refusal::NoServerName),
            Route::UnknownServerName => Err(Refusal::UnknownServerName),
        }
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
}
