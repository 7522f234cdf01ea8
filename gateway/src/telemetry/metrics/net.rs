//! The network plumbing both planes share: accepting clients, admitting them, connecting to
//! backends.

use crate::telemetry::labels::{AcceptError, ClientLimit, ConnectError, HoldOutcome, Refusal};
use crate::telemetry::metrics::register::{
    counter, counter_vec, forget_in, gauge, gauge_vec, Counted,
};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

/// Recorded by the accept loops, admission and the connect loop.
pub struct NetMetrics {
    /// `kubegate_accept_errors_total{reason}`: failed accepts on the listeners (see
    /// [`AcceptError`]).
    accept_errors: Counted<AcceptError>,
    /// `kubegate_client_connection_limit`: client connections admitted at once (the configured
    /// limit, held to what the open-files limit leaves room for).
    pub client_connection_limit: IntGauge,
    /// `kubegate_listener_client_connections{listener,mode}`: client connections open on
    /// each listener (set when scraped).
    pub listener_clients: IntGaugeVec,
    /// `kubegate_client_limit_closes_total{reason}`: client connections closed because they
    /// reached a limit (see [`ClientLimit`]).
    client_limit_closes: Counted<ClientLimit>,
    /// `kubegate_backend_connect_errors_total{backend,reason}`.
    connect_errors: IntCounterVec,
    /// `kubegate_backend_port_connect_errors_total{backend,port,reason}`: failed connects to a
    /// replica's other port (`listeners[].backend_port`), apart from the apiserver's.
    port_connect_errors: IntCounterVec,
    /// `kubegate_connect_retries_total`: client connections that needed another backend.
    pub connect_retries: IntCounter,
    /// `kubegate_connections_fallback_total`: connections sent to an alive, not-ready backend.
    pub fallback: IntCounter,
    /// `kubegate_connections_refused_total{reason}`: client connections closed unserved.
    refused: Counted<Refusal>,
    /// `kubegate_held`: connections and requests waiting for a ready backend now.
    pub holding: IntGauge,
    /// `kubegate_holds_total{outcome}`: waits for a ready backend, by how they ended (see
    /// [`HoldOutcome`]).
    holds: Counted<HoldOutcome>,
}

impl NetMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> NetMetrics {
        NetMetrics {
            accept_errors: Counted::new(r, "kubegate_accept_errors_total", "Failed accepts on the listeners, by reason (out_of_resources: descriptors or memory exhausted; aborted: the client left before the accept; other).", "reason"),
            client_connection_limit: gauge(r, "kubegate_client_connection_limit", "Client connections admitted at once: limits.max_client_connections, held to what the open-files limit leaves room for."),
            listener_clients: gauge_vec(r, "kubegate_listener_client_connections", "Client connections open on each listener, by its address and mode; together they count against kubegate_client_connection_limit.", &["listener", "mode"]),
            client_limit_closes: Counted::new(r, "kubegate_client_limit_closes_total", "Client connections kubegate closed to protect itself and its other clients, by limit (connections: limits.max_client_connections were open; rapid_reset: most HTTP/2 streams reset by the client at once).", "reason"),
            connect_errors: counter_vec(r, "kubegate_backend_connect_errors_total", "Failed connects to a backend by reason (refused, timeout, error).", &["backend", "reason"]),
            port_connect_errors: counter_vec(r, "kubegate_backend_port_connect_errors_total", "Failed connects to another port of a replica (a passthrough listener's backend_port: konnectivity, a supervisor) by port and reason (refused, timeout, error); the replica's apiserver is not blamed.", &["backend", "port", "reason"]),
            connect_retries: counter(r, "kubegate_connect_retries_total", "Client connections whose first backend connect failed and were retried on another backend."),
            fallback: counter(r, "kubegate_connections_fallback_total", "Client connections sent to an alive but not-ready backend because no backend was ready (no_ready_backend: alive)."),
            refused: Counted::new(r, "kubegate_connections_refused_total", "Client connections closed without a backend, by reason (no_ready_backend, connect_failed, out_of_resources).", "reason"),
            holding: gauge(r, "kubegate_held", "Client connections and requests waiting for a ready backend now, none of their cluster being ready, or before a read every replica failed on its storage is asked again (terminate.hold_when_none_ready, terminate.hold_reads_when_storage_fails)."),
            holds: Counted::new(r, "kubegate_holds_total", "Waits for a ready backend while none of the cluster was, and reads held through a storage outage (terminate.hold_reads_when_storage_fails), by how they ended (ready: a backend could take the work, or served the read; timed_out: none within it; over_limit: terminate.max_held_when_none_ready were waiting, not held).", "outcome"),
        }
    }

    pub(super) fn init_backend(&self, backend: &str) {
        for reason in ConnectError::ALL {
            self.connect_errors
                .with_label_values(&[backend, reason.as_str()]);
        }
    }

    pub(super) fn forget(&self, backend: &str) {
        forget_in(&[&self.connect_errors], backend);
    }

    /// Counts a client connection closed because it reached `limit`.
    pub fn limit_closed(&self, limit: ClientLimit) {
        self.client_limit_closes.count(limit);
    }

    /// Counts a wait for a ready backend that ended so.
    pub fn hold_ended(&self, outcome: HoldOutcome) {
        self.holds.count(outcome);
    }

    /// Counts a failed accept.
    pub fn accept_failed(&self, reason: AcceptError) {
        self.accept_errors.count(reason);
    }

    /// Counts a client turned away.
    pub fn refuse(&self, reason: Refusal) {
        self.refused.count(reason);
    }

    /// Counts a failed connect to `backend`'s other `port`.
    pub fn port_connect_error(&self, backend: &str, port: u16, reason: ConnectError) {
        self.port_connect_errors
            .with_label_values(&[backend, &port.to_string(), reason.as_str()])
            .inc();
    }

    /// Counts a failed connect to `backend`.
    pub fn connect_error(&self, backend: &str, reason: ConnectError) {
        self.connect_errors
            .with_label_values(&[backend, reason.as_str()])
            .inc();
    }
}
