//! What terminate mode keeps for each cluster it serves (those a terminate listener serves; the
//! one cluster of a file without `clusters:` among them): its terminate state (upstream, rules,
//! tokens) and, with `clusters:`, the handshake its clients get (its serving certificate, its
//! client CA, its TLS versions and suites). The plane's table of them, with the upstream
//! settings and rules each has in force, is put in force with the gateway's generation, whose
//! clusters it routes by: a new client finds what is configured now, and each request reads
//! its generation, upstream settings and rules in one load; a connection whose cluster a
//! reload removed goes on with what it was accepted with, toward its retired pool (whose
//! backends drain: its requests then find none).

use crate::state::{Cluster, Generation, Route};
use crate::telemetry::{Metrics, Refusal};
use crate::terminate::cluster::mode::{HeldInTotal, TerminateMode};
use crate::terminate::rules::Rules;
use crate::terminate::upstream::tls::ALPN;
use crate::terminate::upstream::upstreams::{UpstreamFiles, Upstreams};
use arc_swap::ArcSwap;
use kubegate_config::{DispatchRule, ListenerSpec, ServingTls};
use kubegate_net::tls::ServingCert;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What terminate mode shares across the clusters it serves, and its table of them.
pub struct TerminatePlane {
    /// Request bodies, joined answers and shared watches' windows held for every cluster
    /// together.
    held: HeldInTotal,
    /// The clusters served now.
    served: ArcSwap<Served>,
    /// Writers of `served` (a generation put in force, a certificate renewed), one at a time.
    writing: Mutex<()>,
}

/// What terminate mode serves in one generation: the gateway's generation (its configuration,
/// and its clusters, which clients are routed among), and each cluster a terminate listener
/// serves, by name. One load gives a request all it reads of the configuration.
pub struct Served {
    generation: Arc<Generation>,
    clusters: HashMap<String, ServedCluster>,
}

/// One cluster as terminate mode serves it in a generation: its long-lived state and
/// handshake, the upstream settings and rules in force.
#[derive(Clone)]
pub struct ServedCluster {
    /// Its long-lived state, and its handshake.
    pub terminated: Arc<TerminatedCluster>,
    /// Its upstream settings in force (a snapshot of `TerminateMode::upstreams`).
    pub upstreams: Arc<Upstreams>,
    /// Its `dispatch` rules, compiled.
    pub rules: Arc<Rules>,
}

/// One cluster's long-lived terminate state, and its handshake.
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
                generation: Arc::new(Generation::empty()),
                clusters: HashMap::new(),
            }),
            writing: Mutex::new(()),
        }
    }

    /// Terminate state for `cluster` with what `files` loaded, its `dispatch` rules compiled
    /// under its name, their series (and the cluster's) made in `metrics`: served once
    /// [`Self::put`] puts it in force.
    pub fn make(
        &self,
        cluster: &Arc<Cluster>,
        files: ClusterFiles,
        dispatch: &[DispatchRule],
        metrics: &Metrics,
    ) -> (Arc<TerminatedCluster>, Arc<Rules>) {
        let rules = Rules::compile(cluster.name(), dispatch, &metrics.terminate);
        metrics.terminate.cluster_served(cluster.name());
        metrics.joins.cluster_served(cluster.name());
        let mode = TerminateMode::with(files.upstream.of(cluster.clone()), &self.held);
        let terminated = Arc::new(TerminatedCluster {
            handshake: files.handshake,
            mode: Arc::new(mode),
        });
        (terminated, Arc::new(rules))
    }

    /// Puts in force `generation` (the gateway's, just put in force) and each cluster served
    /// in it, by name, with its rules; its upstream settings are those in force now.
    pub fn put(
        &self,
        generation: Arc<Generation>,
        served: HashMap<String, (Arc<TerminatedCluster>, Arc<Rules>)>,
    ) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let clusters = served
            .into_iter()
            .map(|(name, (terminated, rules))| {
                let upstreams = terminated.mode.upstreams();
                let served = ServedCluster {
                    terminated,
                    upstreams,
                    rules,
                };
                (name, served)
            })
            .collect();
        self.served.store(Arc::new(Served {
            generation,
            clusters,
        }));
    }

    /// `mode`'s new upstream settings (its front-proxy certificate's files changed): in force
    /// from the next request (`TerminateMode::replace`).
    pub fn renew_upstreams(&self, mode: &TerminateMode, upstreams: Upstreams) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        mode.replace(upstreams);
        let now = self.served.load();
        let name = mode.cluster().name();
        // The cluster still served, not another of its name (removed, then added again).
        let Some(entry) = now
            .clusters
            .get(name)
            .filter(|c| std::ptr::eq(Arc::as_ptr(&c.terminated.mode), mode))
        else {
            return;
        };
        let mut clusters = now.clusters.clone();
        let renewed = ServedCluster {
            upstreams: mode.upstreams(),
            ..entry.clone()
        };
        clusters.insert(name.to_string(), renewed);
        self.served.store(Arc::new(Served {
            generation: now.generation.clone(),
            clusters,
        }));
    }

    /// `dispatch` compiled for cluster `name`, for its next generation; the series of rules
    /// it no longer names are forgotten in `metrics`.
    pub fn compile_rules(
        &self,
        name: &str,
        dispatch: &[DispatchRule],
        metrics: &Metrics,
    ) -> Arc<Rules> {
        let rules = Rules::compile(name, dispatch, &metrics.terminate);
        let kept: Vec<&str> = rules.names().collect();
        metrics.terminate.forget_rules(name, &kept);
        Arc::new(rules)
    }

    /// What terminate mode serves now.
    pub fn served(&self) -> Arc<Served> {
        self.served.load_full()
    }

    /// Each cluster served now, by name, with its upstream settings: what terminate mode knows
    /// of its replicas (their flow control, what each serves).
    pub fn upstreams(&self) -> HashMap<String, Arc<Upstreams>> {
        let served = self.served.load();
        served
            .clusters
            .iter()
            .map(|(name, c)| (name.clone(), c.upstreams.clone()))
            .collect()
    }

    /// The cluster a client of `listener` that sent server `name` reaches, as served now.
    pub fn route(
        &self,
        listener: &ListenerSpec,
        name: Option<&str>,
    ) -> Result<ServedCluster, Refusal> {
        let served = self.served.load();
        match served.generation.clusters.route(listener, name) {
            Route::To(cluster) => served
                .clusters
                .get(cluster.name())
                .cloned()
                .ok_or(Refusal::UnknownServerName),
            Route::NoServerName => Err(Refusal::NoServerName),
            Route::UnknownServerName => Err(Refusal::UnknownServerName),
        }
    }
}

impl Served {
    /// Its generation.
    pub fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    /// The cluster whose long-lived state is `mode`, if it is served (a walk by pointer: a
    /// request's lookup, among a few clusters, hashes nothing).
    pub fn cluster_of(&self, mode: &Arc<TerminateMode>) -> Option<&ServedCluster> {
        self.clusters
            .values()
            .find(|c| Arc::ptr_eq(&c.terminated.mode, mode))
    }

    /// Every cluster served, by name.
    pub fn clusters(&self) -> &HashMap<String, ServedCluster> {
        &self.clusters
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
