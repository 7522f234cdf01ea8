//! Passthrough relays: open connections, their bytes and lifetimes, per backend.

use crate::telemetry::metrics::register::{counter_vec, forget_in, gauge_vec, histogram_vec};
use prometheus::{
    Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0,
];

/// Recorded by passthrough relays, through [`RelayHandles`].
pub struct PassthroughMetrics {
    /// `kubegate_backend_connections{backend}`: open proxied connections.
    connections: IntGaugeVec,
    /// `kubegate_backend_connections_total{backend}`: connections established.
    connections_total: IntCounterVec,
    /// `kubegate_backend_bytes_total{backend,direction}`.
    bytes: IntCounterVec,
    /// `kubegate_backend_connection_duration_seconds{backend}`.
    connection_duration: HistogramVec,
}

impl PassthroughMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> PassthroughMetrics {
        PassthroughMetrics {
            connections: gauge_vec(
                r,
                "kubegate_backend_connections",
                "Open proxied connections per backend.",
                &["backend"],
            ),
            connections_total: counter_vec(
                r,
                "kubegate_backend_connections_total",
                "Proxied connections established per backend.",
                &["backend"],
            ),
            bytes: counter_vec(
                r,
                "kubegate_backend_bytes_total",
                "Bytes proxied per backend; direction is to_backend or to_client.",
                &["backend", "direction"],
            ),
            connection_duration: histogram_vec(
                r,
                "kubegate_backend_connection_duration_seconds",
                "Lifetime of proxied connections.",
                &["backend"],
                DURATION_BUCKETS,
            ),
        }
    }

    pub(super) fn forget(&self, backend: &str) {
        forget_in(
            &[
                &self.connections,
                &self.connections_total,
                &self.bytes,
                &self.connection_duration,
            ],
            backend,
        );
    }
}

/// Handles for the passthrough hot path: label lookups done once per backend, not per
/// connection.
pub struct RelayHandles {
    /// Open connections.
    pub connections: IntGauge,
    /// Connections established.
    pub connections_total: IntCounter,
    /// Bytes client → backend.
    pub bytes_to_backend: IntCounter,
    /// Bytes backend → client.
    pub bytes_to_client: IntCounter,
    /// Connection lifetimes.
    pub connection_duration: Histogram,
}

impl RelayHandles {
    /// Resolves the handles of `backend`.
    pub fn new(m: &PassthroughMetrics, backend: &str) -> RelayHandles {
        RelayHandles {
            connections: m.connections.with_label_values(&[backend]),
            connections_total: m.connections_total.with_label_values(&[backend]),
            bytes_to_backend: m.bytes.with_label_values(&[backend, "to_backend"]),
            bytes_to_client: m.bytes.with_label_values(&[backend, "to_client"]),
            connection_duration: m.connection_duration.with_label_values(&[backend]),
        }
    }
}
