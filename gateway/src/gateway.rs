//! The state every part of the gateway shares: the running configuration, the backends, the
//! routing table, the lifecycle and the metrics. Health results enter here and become state
//! changes, drains and a new routing table; nothing else changes a backend's state.

use crate::backend::{Backend, BackendInfo, CloseReason};
use crate::lifecycle::{Lifecycle, Phase};
use crate::metrics::{BackendMetrics, Metrics};
use arc_swap::ArcSwap;
use kubegate_config::{BackendSpec, Config};
use kubegate_health::{
    spawn_checker, BackendState, HealthObserver, HealthTracker, ProbeIntervals, ProbeOutcome,
    ProbeRecord, Prober, Thresholds, Transition,
};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Who new connections may go to. Rebuilt on every state change and reload; read lock-free.
#[derive(Default)]
pub struct RoutingTable {
    /// `ready` backends.
    pub ready: Vec<Arc<Backend>>,
    /// `not_ready` backends that still answer and are not shutting down: used only when
    /// `ready` is empty and `no_ready_backend: alive`.
    pub fallback: Vec<Arc<Backend>>,
}

/// The gateway's shared state.
pub struct Gateway {
    /// The running configuration.
    pub config: ArcSwap<Config>,
    /// The file it came from (reloads read it again).
    pub config_path: PathBuf,
    /// Every metric.
    pub metrics: Metrics,
    /// The process phase.
    pub lifecycle: Lifecycle,
    /// Who gets new connections.
    pub routing: ArcSwap<RoutingTable>,
    /// Rotates balancer choices.
    pub cursor: AtomicUsize,
    /// Counts applied reloads. Tasks that carry configuration into something they own (the
    /// accept loops: the listeners' keepalive) wait on it.
    pub reloads: tokio::sync::watch::Sender<u64>,
    /// Configured backends plus removed ones still draining.
    members: Mutex<Vec<Arc<Backend>>>,
    prober: ArcSwap<Prober>,
    this: Weak<Gateway>,
}

impl Gateway {
    /// A gateway for `config` with no backends started yet (see [`Gateway::start_backends`]).
    pub fn new(config: Config, config_path: PathBuf, prober: Prober) -> Arc<Gateway> {
        let metrics = Metrics::new();
        metrics
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let lifecycle = Lifecycle::new(&metrics);
        Arc::new_cyclic(|this| Gateway {
            config: ArcSwap::from_pointee(config),
            config_path,
            metrics,
            lifecycle,
            routing: ArcSwap::from_pointee(RoutingTable::default()),
            cursor: AtomicUsize::new(0),
            reloads: tokio::sync::watch::Sender::new(0),
            members: Mutex::new(Vec::new()),
            prober: ArcSwap::from_pointee(prober),
            this: this.clone(),
        })
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Backend>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every backend, configured or draining after removal.
    pub fn backends(&self) -> Vec<Arc<Backend>> {
        self.members().clone()
    }

    /// Creates the configured backends and starts their checkers. Must run inside the runtime
    /// that is to carry the health checks.
    pub fn start_backends(&self) {
        let config = self.config.load_full();
        for spec in &config.backends {
            self.add_backend(spec);
        }
        self.metrics
            .backends_configured
            .set(config.backends.len() as i64);
        self.rebuild_routing();
    }

    /// Adds a backend in `unknown` and starts probing it.
    pub fn add_backend(&self, spec: &BackendSpec) {
        let name = spec.display_name();
        let backend = Arc::new(Backend::new(
            spec.address,
            self.backend_info(spec),
            BackendState::Unknown,
        ));
        self.publish_state(&name, BackendState::Unknown);
        self.start_checker(&backend, BackendState::Unknown);
        tracing::info!(backend = %name, address = %spec.address, "backend added");
        let mut members = self.members();
        // A backend re-added while its old self still drains: the old one keeps draining.
        members.push(backend);
    }

    /// Renames or re-targets the probes of a kept backend; state and connections stay.
    pub fn update_backend(&self, before: &BackendSpec, after: &BackendSpec) {
        let Some(backend) = self.configured(after.address) else {
            return;
        };
        let old_name = before.display_name();
        let new_name = after.display_name();
        backend.set_info(self.backend_info(after));
        if old_name != new_name {
            self.metrics.forget_backend(&old_name);
            self.publish_state(&new_name, backend.state());
        }
        self.start_checker(&backend, backend.state());
        tracing::info!(backend = %new_name, previous_name = %old_name, "backend updated");
    }

    /// Stops probing a backend and drains it; it is forgotten when its connections are gone.
    pub fn remove_backend(&self, spec: &BackendSpec) {
        let Some(backend) = self.configured(spec.address) else {
            return;
        };
        backend.set_checker(None);
        let from = backend.state();
        self.apply_transition(
            &backend,
            Transition {
                from,
                to: BackendState::Removed,
            },
            "removed from configuration",
        );
    }

    /// Restarts every checker with the current prober and thresholds, keeping states.
    pub fn restart_checkers(&self) {
        for b in self.backends() {
            if b.state() != BackendState::Removed {
                self.start_checker(&b, b.state());
            }
        }
    }

    /// Replaces the prober (health settings changed).
    pub fn set_prober(&self, prober: Prober) {
        self.prober.store(Arc::new(prober));
    }

    fn configured(&self, address: std::net::SocketAddr) -> Option<Arc<Backend>> {
        self.members()
            .iter()
            .find(|b| b.address == address && b.state() != BackendState::Removed)
            .cloned()
    }

    fn backend_info(&self, spec: &BackendSpec) -> BackendInfo {
        let name = spec.display_name();
        self.metrics.init_backend(&name);
        BackendInfo {
            metrics: BackendMetrics::new(&self.metrics, &name),
            probe_address: spec.probe_address(),
            name,
        }
    }

    fn start_checker(&self, backend: &Arc<Backend>, state: BackendState) {
        let health = &self.config.load().health;
        let thresholds = Thresholds {
            rise: health.rise,
            fall: health.fall,
            max_rise: health.flap_damping.max_rise,
            stable_probes: probes_in(health.flap_damping.window, health.interval),
        };
        let intervals = ProbeIntervals {
            interval: health.interval,
            fast_interval: health.fast_interval,
        };
        let checker = spawn_checker(
            backend.info().probe_address,
            self.prober.load_full(),
            intervals,
            HealthTracker::resume(state, thresholds),
            Arc::new(Observer {
                backend: Arc::downgrade(backend),
                gateway: self.this.clone(),
            }),
        );
        backend.set_checker(Some(checker));
    }

    fn publish_state(&self, name: &str, state: BackendState) {
        for s in BackendState::ALL {
            self.metrics
                .backend_state
                .with_label_values(&[name, s.as_str()])
                .set((s == state) as i64);
        }
    }

    /// One probe finished for `backend`.
    fn on_probe(
        &self,
        backend: &Arc<Backend>,
        record: &ProbeRecord,
        transition: Option<Transition>,
    ) {
        let info = backend.info();
        let name = info.name.as_str();
        let m = &self.metrics;
        m.probes
            .with_label_values(&[name, record.outcome.result_label()])
            .inc();
        m.probe_duration
            .with_label_values(&[name])
            .observe(record.latency.as_secs_f64());
        if let ProbeOutcome::NotRun(detail) = &record.outcome {
            // Nothing was learned about the backend: its state, failing checks and last probe
            // stay as they were.
            tracing::warn!(backend = name, detail = %detail, "probe not run");
            return;
        }
        // Failing checks: set the ones failing now, drop the ones that recovered.
        let previous = backend.last_probe();
        let was_failing = previous
            .as_ref()
            .map(|p| p.outcome.failing_checks().to_vec())
            .unwrap_or_default();
        let failing = record.outcome.failing_checks();
        for check in was_failing.iter().filter(|c| !failing.contains(c)) {
            let _ = m.readyz_check_failing.remove_label_values(&[name, check]);
        }
        for check in failing {
            m.readyz_check_failing
                .with_label_values(&[name, check])
                .set(1);
        }
        let shutting_down = matches!(
            record.outcome,
            ProbeOutcome::Failed {
                shutting_down: true,
                ..
            }
        );
        if record.outcome == ProbeOutcome::Passed {
            backend.clear_ejection();
        }
        let was_shutting_down = backend.shutting_down();
        backend.set_last_probe(record.clone(), shutting_down);
        match transition {
            Some(t) => self.apply_transition(backend, t, &record.outcome.describe()),
            // A not-ready backend that starts shutting down leaves the fallback set.
            None if shutting_down != was_shutting_down => self.rebuild_routing(),
            None => {}
        }
    }

    /// Carries out a state change: metrics, one log line, drain or close, routing.
    fn apply_transition(&self, backend: &Arc<Backend>, t: Transition, reason: &str) {
        let name = backend.info().name.clone();
        let epoch = backend.set_state(t.to);
        self.publish_state(&name, t.to);
        self.metrics
            .state_transitions
            .with_label_values(&[&name, t.from.as_str(), t.to.as_str()])
            .inc();
        let open = backend.active_connections();
        tracing::info!(
            backend = %name,
            from = t.from.as_str(),
            to = t.to.as_str(),
            reason,
            open_connections = open,
            passes_to_ready = backend.passes_to_ready(),
            "backend state changed"
        );
        match t.to {
            BackendState::Down => {
                if open > 0 {
                    tracing::warn!(backend = %name, connections = open, "closing connections to a down backend");
                }
                self.close_connections(backend, CloseReason::BackendDown);
            }
            BackendState::NotReady | BackendState::Removed => {
                if open > 0 {
                    self.metrics.drains.with_label_values(&[&name]).inc();
                    let drain = &self.config.load().drain;
                    // A backend that is shutting down (or removed) ends its connections itself;
                    // one that fails for another reason will not.
                    let timeout = if t.to == BackendState::Removed || backend.shutting_down() {
                        drain.timeout
                    } else {
                        drain.failing_timeout
                    };
                    self.schedule_drain_deadline(backend, epoch, timeout);
                } else if t.to == BackendState::Removed {
                    self.forget(backend);
                }
            }
            BackendState::Ready | BackendState::Unknown => {}
        }
        self.rebuild_routing();
    }

    /// After `timeout`, closes what is still open, unless the state changed meanwhile.
    fn schedule_drain_deadline(&self, backend: &Arc<Backend>, epoch: u64, timeout: Duration) {
        let backend = backend.clone();
        let gateway = self.this.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if backend.epoch() != epoch {
                return;
            }
            let Some(gw) = gateway.upgrade() else { return };
            let open = gw.close_connections(&backend, CloseReason::DrainTimeout);
            let name = backend.info().name.clone();
            if open > 0 {
                tracing::warn!(backend = %name, connections = open, ?timeout, "drain timeout: closing connections");
            }
            if backend.state() == BackendState::Removed {
                // Give the closed connections a moment to deregister, then forget it.
                tokio::time::sleep(Duration::from_millis(100)).await;
                gw.forget(&backend);
            }
        });
    }

    /// Drops a removed backend from the members and its series from the metrics.
    fn forget(&self, backend: &Arc<Backend>) {
        self.members().retain(|b| !Arc::ptr_eq(b, backend));
        let name = backend.info().name.clone();
        if self.configured(backend.address).is_none() {
            self.metrics.forget_backend(&name);
        }
        tracing::info!(backend = %name, "backend forgotten");
    }

    /// Recomputes who gets new connections.
    pub fn rebuild_routing(&self) {
        let members = self.members();
        let ready = members
            .iter()
            .filter(|b| b.state() == BackendState::Ready)
            .cloned()
            .collect();
        let fallback = members
            .iter()
            .filter(|b| b.state() == BackendState::NotReady && !b.shutting_down())
            .cloned()
            .collect();
        self.routing
            .store(Arc::new(RoutingTable { ready, fallback }));
        drop(members);
        self.publish_ready();
    }

    /// Keeps `kubegate_ready` equal to what `/readyz` answers.
    pub fn publish_ready(&self) {
        self.metrics.ready.set(self.ready().is_ok() as i64);
    }

    /// Ready to take traffic: serving, with at least one ready backend.
    pub fn ready(&self) -> Result<(), &'static str> {
        match self.lifecycle.phase() {
            Phase::Starting => Err("starting"),
            Phase::Stopping | Phase::Draining => Err("shutting down"),
            Phase::Serving if self.routing.load().ready.is_empty() => Err("no ready backend"),
            Phase::Serving => Ok(()),
        }
    }

    /// Open proxied connections over all backends.
    pub fn open_connections(&self) -> i64 {
        self.members().iter().map(|b| b.active_connections()).sum()
    }

    /// Closes every open connection (shutdown grace ran out).
    pub fn close_for_shutdown(&self) {
        for b in &self.backends() {
            self.close_connections(b, CloseReason::ShutdownGrace);
        }
    }

    /// Closes the connections open to `backend` now and counts them by `reason`.
    fn close_connections(&self, backend: &Backend, reason: CloseReason) -> usize {
        let closed = backend.close_all();
        self.metrics
            .forced_closes
            .with_label_values(&[&backend.info().name, reason.as_str()])
            .inc_by(closed as u64);
        closed
    }
}

/// Routes one backend's probes into the gateway. Weak on both sides: a forgotten backend or a
/// dropped gateway ends the loop's effects without a reference cycle.
struct Observer {
    backend: Weak<Backend>,
    gateway: Weak<Gateway>,
}

impl HealthObserver for Observer {
    fn probed(
        &self,
        record: &ProbeRecord,
        transition: Option<Transition>,
        tracker: &HealthTracker,
    ) {
        if let (Some(gw), Some(b)) = (self.gateway.upgrade(), self.backend.upgrade()) {
            b.set_passes_to_ready(tracker.rise_needed());
            gw.on_probe(&b, record, transition);
        }
    }
}

/// How many probes at `interval` fit in `window` (at least one).
fn probes_in(window: Duration, interval: Duration) -> u32 {
    let n = window.as_secs_f64() / interval.as_secs_f64().max(1e-3);
    (n.ceil() as u32).max(1)
}
