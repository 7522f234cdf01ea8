//! The pool's decisions, counted: kubegate's implementation of `PoolEvents`.

use crate::lifecycle::Lifecycle;
use crate::metrics::{set_one_hot, Metrics};
use kubegate_health::{BackendState, ProbeRecord, Transition};
use kubegate_pool::{CloseReason, PoolEvents};
use std::sync::Arc;

/// Turns pool decisions into metric updates.
pub struct MetricEvents {
    metrics: Arc<Metrics>,
    lifecycle: Arc<Lifecycle>,
}

impl MetricEvents {
    /// Counts into `metrics`; `kubegate_ready` also depends on the `lifecycle` phase.
    pub fn new(metrics: Arc<Metrics>, lifecycle: Arc<Lifecycle>) -> MetricEvents {
        MetricEvents { metrics, lifecycle }
    }

    fn publish_state(&self, name: &str, state: BackendState) {
        set_one_hot(
            &self.metrics.backend_state,
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
        self.publish_state(name, state);
    }

    fn backend_renamed(&self, old: &str, new: &str, state: BackendState) {
        self.metrics.forget_backend(old);
        self.metrics.init_backend(new);
        self.publish_state(new, state);
    }

    fn probed(&self, name: &str, record: &ProbeRecord) {
        let m = &self.metrics;
        m.probes
            .with_label_values(&[name, record.outcome.result_label()])
            .inc();
        m.probe_duration
            .with_label_values(&[name])
            .observe(record.latency.as_secs_f64());
    }

    fn failing_checks(&self, name: &str, before: &[String], now: &[String]) {
        let family = &self.metrics.readyz_check_failing;
        for check in before.iter().filter(|c| !now.contains(c)) {
            let _ = family.remove_label_values(&[name, check]);
        }
        for check in now {
            family.with_label_values(&[name, check]).set(1);
        }
    }

    fn state_changed(&self, name: &str, t: Transition) {
        self.publish_state(name, t.to);
        self.metrics
            .state_transitions
            .with_label_values(&[name, t.from.as_str(), t.to.as_str()])
            .inc();
    }

    fn drain_started(&self, name: &str) {
        self.metrics.drains.with_label_values(&[name]).inc();
    }

    fn closed(&self, name: &str, reason: CloseReason, count: usize) {
        self.metrics
            .forced_closes
            .with_label_values(&[name, reason.as_str()])
            .inc_by(count as u64);
    }

    fn forgotten(&self, name: &str) {
        self.metrics.forget_backend(name);
    }

    fn routing_changed(&self, ready: usize) {
        self.metrics
            .ready
            .set(self.lifecycle.readiness(ready).is_ok() as i64);
    }
}
