//! Backends' health and what the pool decided about them (recorded by `events.rs`).

use crate::telemetry::metrics::register::{counter_vec, forget_in, gauge_vec, histogram_vec};
use kubegate_pool::CloseReason;
use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Registry};

const PROBE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Recorded by the pool's events.
pub struct BackendMetrics {
    /// `kubegate_backend_state{backend,state}`: one-hot per backend.
    pub state: IntGaugeVec,
    /// `kubegate_backend_cluster{backend,cluster}`: 1, the cluster each backend belongs to.
    pub cluster: IntGaugeVec,
    /// `kubegate_backend_state_transitions_total{backend,from,to}`.
    pub state_transitions: IntCounterVec,
    /// `kubegate_backend_probes_total{backend,result}`.
    pub probes: IntCounterVec,
    /// `kubegate_backend_probe_duration_seconds{backend}`.
    pub probe_duration: HistogramVec,
    /// `kubegate_backend_readyz_check_failing{backend,check}`: 1 while the check fails.
    pub readyz_check_failing: IntGaugeVec,
    /// `kubegate_backend_drains_total{backend}`: drains started with connections open.
    pub drains: IntCounterVec,
    /// `kubegate_backend_connections_closed_total{backend,reason}`: connections kubegate closed.
    pub forced_closes: IntCounterVec,
}

impl BackendMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> BackendMetrics {
        BackendMetrics {
            state: gauge_vec(r, "kubegate_backend_state", "1 for each backend's current health state (unknown, ready, not_ready, down, removed).", &["backend", "state"]),
            cluster: gauge_vec(r, "kubegate_backend_cluster", "Always 1: the cluster each backend belongs to (join on backend to group any backend series by cluster).", &["backend", "cluster"]),
            state_transitions: counter_vec(r, "kubegate_backend_state_transitions_total", "Backend health state changes.", &["backend", "from", "to"]),
            probes: counter_vec(r, "kubegate_backend_probes_total", "Readiness probes by result (pass, fail, tls_error, refused, timeout, reset, error, not_run).", &["backend", "result"]),
            probe_duration: histogram_vec(r, "kubegate_backend_probe_duration_seconds", "Time for one readiness probe: connect, TLS handshake and response.", &["backend"], PROBE_BUCKETS),
            readyz_check_failing: gauge_vec(r, "kubegate_backend_readyz_check_failing", "1 while the named readyz check of the backend fails in its verbose answer.", &["backend", "check"]),
            drains: counter_vec(r, "kubegate_backend_drains_total", "Drains started: a backend with open connections stopped being ready or was removed.", &["backend"]),
            forced_closes: counter_vec(r, "kubegate_backend_connections_closed_total", "Connections kubegate closed itself, by reason (backend_down, drain_timeout, shutdown_grace).", &["backend", "reason"]),
        }
    }

    pub(super) fn init_backend(&self, backend: &str) {
        for reason in CloseReason::ALL {
            self.forced_closes
                .with_label_values(&[backend, reason.as_str()]);
        }
        self.drains.with_label_values(&[backend]);
    }

    pub(super) fn forget(&self, backend: &str) {
        forget_in(
            &[
                &self.state,
                &self.cluster,
                &self.state_transitions,
                &self.probes,
                &self.probe_duration,
                &self.readyz_check_failing,
                &self.drains,
                &self.forced_closes,
            ],
            backend,
        );
    }
}
