//! The gateway's parts, each with its own job: the running configuration, the clusters (each
//! a backend pool, with the data planes' per-backend state), the lifecycle, the metrics, and
//! who costs the apiservers what. Nothing here decides a backend's state (the pool does) or
//! carries traffic (the data planes do).

use crate::state::backends::{Planes, Pool};
use crate::state::cluster::{Cluster, Clusters};
use crate::state::lifecycle::{Lifecycle, Phase};
use crate::state::listeners::ClientListener;
use crate::state::running::RunningConfig;
use crate::state::settings::pool_settings;
use crate::state::shed::Shed;
use crate::telemetry::costs::Costs;
use crate::telemetry::transitions::Transitions;
use crate::telemetry::{MetricEvents, Metrics};
use kubegate_config::Config;
use std::path::PathBuf;
use std::sync::Arc;

/// The gateway's shared state.
pub struct Gateway {
    /// Itself, for what its pools tell it (their readiness).
    this: std::sync::Weak<Gateway>,
    /// The configuration in force and its clusters, replaced together.
    config: RunningConfig,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    /// Who cost the apiservers what lately (terminate mode).
    costs: Arc<Costs>,
    /// Rules put in force at run time (terminate mode's `kubegate shed`).
    shed: Shed,
    /// Held through a scrape: the sender families are set, then read, as one.
    scrape: std::sync::Mutex<()>,
    /// The last backend state transitions, for the status page.
    transitions: Arc<Transitions>,
    /// The client listeners, in configuration order.
    listeners: Vec<&'static ClientListener>,
    /// When the process started.
    started: std::time::SystemTime,
    /// Client connections the open-files limit leaves room for.
    client_capacity: usize,
    /// The configured client limit last warned about (warned once, not at every reload).
    warned_limit: std::sync::atomic::AtomicUsize,
    /// Connections and requests waiting for a ready backend now, over every cluster
    /// (`net::hold`).
    held: std::sync::atomic::AtomicUsize,
}

impl Gateway {
    /// A gateway for `config` (read from `path`) with no cluster yet: start-up puts them in
    /// force as a reload does (`control::generation`); `accepting` unless it takes over from a
    /// running predecessor; room for `client_capacity` client connections in its descriptors;
    /// clients on `listeners`.
    pub fn new(
        config: Config,
        path: PathBuf,
        accepting: bool,
        client_capacity: usize,
        listeners: Vec<&'static ClientListener>,
    ) -> Arc<Gateway> {
        let metrics = Arc::new(Metrics::new());
        metrics.gateway.publish_build();
        let lifecycle = Arc::new(Lifecycle::new(metrics.clone(), accepting));
        let transitions = Arc::new(Transitions::default());
        // Pools tell the gateway's readiness through a weak handle to it.
        let gw = Arc::new_cyclic(|this| Gateway {
            this: this.clone(),
            config: RunningConfig::new(config, path),
            lifecycle,
            metrics,
            costs: Arc::default(),
            shed: Shed::default(),
            scrape: std::sync::Mutex::new(()),
            transitions,
            listeners,
            started: std::time::SystemTime::now(),
            client_capacity,
            warned_limit: std::sync::atomic::AtomicUsize::new(0),
            held: std::sync::atomic::AtomicUsize::new(0),
        });
        gw.publish_client_limit();
        gw
    }

    /// Client connections admitted at once: `limits.max_client_connections`, held to what the
    /// open-files limit leaves room for.
    pub fn client_limit(&self) -> usize {
        self.config
            .load()
            .limits
            .max_client_connections
            .min(self.client_capacity)
    }

    /// Publishes the client limit in force (at start and after each reload); warns when the
    /// open-files limit holds the configured one down (once per configured value).
    pub fn publish_client_limit(&self) {
        let configured = self.config.load().limits.max_client_connections;
        let limit = self.client_limit();
        let warned = self
            .warned_limit
            .swap(configured, std::sync::atomic::Ordering::Relaxed);
        if limit < configured && warned != configured {
            tracing::warn!(
                configured,
                limit,
                "limits.max_client_connections does not fit the open-files limit: at most {limit} client connections (raise the hard RLIMIT_NOFILE, e.g. LimitNOFILE= or the container runtime's ulimit)"
            );
        }
        self.metrics
            .net
            .client_connection_limit
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    /// Connections and requests waiting for a ready backend now, over every cluster: what
    /// `terminate.max_held_when_none_ready` bounds (`net::hold`).
    pub fn held(&self) -> &std::sync::atomic::AtomicUsize {
        &self.held
    }

    /// The running configuration.
    pub fn config(&self) -> &RunningConfig {
        &self.config
    }

    /// Every cluster, as configured now (a reload may replace them).
    pub fn clusters(&self) -> Arc<Clusters> {
        self.config.clusters()
    }

    /// A cluster for `spec`, its pool probing with `probes` (no backend added yet), its
    /// decisions counted in the gateway's metrics.
    pub fn new_cluster(
        &self,
        spec: &kubegate_config::ClusterConfig,
        drain: &kubegate_config::DrainConfig,
        probes: kubegate_health::ProbeSettings,
    ) -> Arc<Cluster> {
        // The gauge follows the whole gateway's readiness, not one pool's.
        let gw = self.this.clone();
        let readiness = Box::new(move || gw.upgrade().is_some_and(|g| g.ready().is_ok()));
        let events = Arc::new(MetricEvents::new(
            &spec.name,
            self.metrics.clone(),
            readiness,
            self.transitions.clone(),
        ));
        let metrics = self.metrics.clone();
        let pool = Pool::new(
            pool_settings(&spec.health, drain),
            Some(probes),
            events,
            move |name| Planes::new(metrics.clone(), name),
        );
        Arc::new(Cluster::new(spec.name.clone(), pool))
    }

    /// Every metric.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Every metric, for a task that outlives the borrow of the gateway.
    pub fn metrics_shared(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Who cost the apiservers what lately (terminate mode).
    pub fn costs(&self) -> &Arc<Costs> {
        &self.costs
    }

    /// Rules put in force at run time (terminate mode's `kubegate shed`).
    pub fn shed(&self) -> &Shed {
        &self.shed
    }

    /// The last backend state transitions, newest first.
    pub fn transitions(&self) -> &Transitions {
        &self.transitions
    }

    /// The Prometheus exposition, with the gauges that are read when scraped brought up to
    /// date (each listener's clients).
    pub fn render_metrics(&self) -> Vec<u8> {
        for l in &self.listeners {
            self.metrics
                .net
                .listener_clients
                .with_label_values(&[&l.address.to_string(), l.mode.as_str()])
                .set(i64::try_from(l.open()).unwrap_or(i64::MAX));
        }
        // Two scrapes at once (a pair of Prometheus servers) would otherwise see each other's
        // reset of the sender families.
        let _scrape = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.metrics.senders.show(&self.costs);
        self.metrics.render()
    }

    /// The client listeners.
    pub fn listeners(&self) -> &[&'static ClientListener] {
        &self.listeners
    }

    /// When the process started.
    pub fn started(&self) -> std::time::SystemTime {
        self.started
    }

    /// The gateway's phase.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// Moves the lifecycle forward and republishes readiness.
    pub fn advance(&self, phase: Phase) {
        if self.lifecycle.advance(phase) {
            self.metrics.gateway.ready.set(self.ready().is_ok() as i64);
        }
    }

    /// Ready to take traffic: serving, with at least one ready backend (in any cluster: one
    /// cluster's control plane down is no reason to take every other cluster's entry point
    /// out of its load balancer).
    pub fn ready(&self) -> Result<(), &'static str> {
        self.lifecycle.readiness(self.config.clusters().ready())
    }
}
