//! The pool's decisions, counted (and its transitions kept for the status page): kubegate's
//! implementation of `PoolEvents`.

use crate::telemetry::metrics::{set_one_hot, Metrics};
use crate::telemetry::transitions::Transitions;
use kubegate_health::{BackendState, ProbeRecord, Transition};
use kubegate_pool::{CloseReason, PoolEvents};
use std::sync::Arc;

/// Whether the gateway takes traffic now (the lifecycle and every cluster's ready backends
/// decide; one pool knows only its own).
pub type Readiness = Box<dyn Fn() -> bool + Send + Sync>;

/// Turns one cluster's pool decisions into metric updates.
pub struct MetricEvents {
    /// The cluster whose pool this is.
    cluster: String,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    transitions: Arc<Transitions>,
}

impl MetricEvents {
    /// Counts `cluster`'s pool into `metrics` and keeps transitions in `transitions`;
    /// `kubegate_ready` follows `readiness` whenever a routing table changes.
    pub fn new(
        cluster: &str,
        metrics: Arc<Metrics>,
        readiness: Readiness,
        transitions: Arc<Transitions>,
    ) -> MetricEvents {
        MetricEvents {
            cluster: cluster.to_string(),
            metrics,
            readiness,
            transitions,
        }
    }

    fn publish_cluster(&self, name: &str) {
        self.metrics
            .backends
            .cluster
            .with_label_values(&[name, &self.cluster])
            .set(1);
    }

    fn publish_state(&self, name: &str, state: BackendState) {
        set_one_hot(
            &self.metrics.backends.state,
            &[name],
            &BackendState::ALL,
            state,
            BackendState::as_str,
        );
    }
}

impl PoolEvents for MetricEvents {
    fn backend_added(&self, name: &str, state: BackendState) {
        self.metrics.init_backend(name);
        self.publish_cluster(name);
        self.publish_state(name, state);
    }

    fn backend_renamed(&self, old: &str, new: &str, state: BackendState) {
        self.metrics.forget_backend(old);
        self.metrics.init_backend(new);
        self.publish_cluster(new);
        self.publish_state(new, state);
    }

    fn probed(&self, name: &str, record: &ProbeRecord) {
        let m = &self.metrics.backends;
        m.probes
            .with_label_values(&[name, record.outcome.result_label()])
            .inc();
        m.probe_duration
            .with_label_values(&[name])
            .observe(record.latency.as_secs_f64());
    }

    fn failing_checks(&self, name: &str, before: &[String], now: &[String]) {
        let family = &self.metrics.backends.readyz_check_failing;
        for check in before.iter().filter(|c| !now.contains(c)) {
            let _ = family.remove_label_values(&[name, check]);
        }
        for check in now {
            family.with_label_values(&[name, check]).set(1);
        }
    }

    fn state_changed(&self, name: &str, t: Transition) {
        self.publish_state(name, t.to);
        self.transitions.record(name, t.from, t.to);
        self.metrics
            .backends
            .state_transitions
            .with_label_values(&[name, t.from.as_str(), t.to.as_str()])
            .inc();
    }

    fn drain_started(&self, name: &str) {
        self.metrics
            .backends
            .drains
            .with_label_values(&[name])
            .inc();
    }

    fn closed(&self, name: &str, reason: CloseReason, count: usize) {
        self.metrics
            .backends
            .forced_closes
            .with_label_values(&[name, reason.as_str()])
            .inc_by(count as u64);
    }

    fn forgotten(&self, name: &str) {
        self.metrics.forget_backend(name);
    }

    fn routing_changed(&self, ready: usize) {
        let g = &self.metrics.gateway;
        g.cluster_ready_backends
            .with_label_values(&[&self.cluster])
            .set(i64::try_from(ready).unwrap_or(i64::MAX));
        g.ready.set((self.readiness)() as i64);
    }
}
