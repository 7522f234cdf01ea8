//! The gateway process itself: its build, lifecycle phase, readiness and heap.

use crate::telemetry::metrics::register::{gauge, gauge_vec};
use prometheus::{IntGauge, IntGaugeVec, Registry};

/// Recorded by start-up, the lifecycle and the allocator.
pub struct GatewayMetrics {
    /// `kubegate_build_info{version,revision,tree_state,rustc}`: always 1.
    build_info: IntGaugeVec,
    /// `kubegate_lifecycle_phase{phase}`: one-hot.
    pub lifecycle_phase: IntGaugeVec,
    /// `kubegate_ready`: 1 while the admin `/readyz` answers 200.
    pub ready: IntGauge,
    /// `kubegate_cluster_ready_backends{cluster}`: each cluster's ready backends.
    pub cluster_ready_backends: IntGaugeVec,
    /// `kubegate_heap_allocated_bytes`: held in allocations (set when scraped).
    pub heap_allocated: IntGauge,
    /// `kubegate_heap_resident_bytes`: the allocator's resident pages (set when scraped).
    pub heap_resident: IntGauge,
}

impl GatewayMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> GatewayMetrics {
        // process_cpu_seconds_total, process_open_fds, process_max_fds,
        // process_resident_memory_bytes, process_start_time_seconds, ...: the standard family,
        // which alert runbooks and dashboards expect by these names.
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("unique metric");
        GatewayMetrics {
            build_info: gauge_vec(r, "kubegate_build_info", "Always 1; labels carry the build: version, revision (commit), tree_state (clean, dirty), rustc.", &["version", "revision", "tree_state", "rustc"]),
            lifecycle_phase: gauge_vec(r, "kubegate_lifecycle_phase", "1 for the gateway's current lifecycle phase (starting, serving, stopping, draining).", &["phase"]),
            ready: gauge(r, "kubegate_ready", "1 while the gateway is serving with at least one ready backend (its /readyz answers 200)."),
            cluster_ready_backends: gauge_vec(r, "kubegate_cluster_ready_backends", "Ready backends of each cluster (default: the one cluster of a file without clusters:).", &["cluster"]),
            heap_allocated: gauge(r, "kubegate_heap_allocated_bytes", "Bytes kubegate holds in heap allocations (the allocator's count, when scraped)."),
            heap_resident: gauge(r, "kubegate_heap_resident_bytes", "Resident bytes of the allocator's pages: allocations, freed memory kept for reuse, metadata (when scraped)."),
        }
    }

    /// Publishes this binary's build.
    pub fn publish_build(&self) {
        use crate::telemetry::build;
        self.build_info
            .with_label_values(&[
                build::VERSION,
                build::COMMIT,
                build::TREE_STATE,
                build::RUSTC,
            ])
            .set(1);
    }

    /// Reads the allocator's figures now (they are only refreshed when scraped).
    pub(super) fn refresh_heap(&self) {
        if let Some(heap) = crate::telemetry::memory::heap() {
            self.heap_allocated.set(heap.allocated as i64);
            self.heap_resident.set(heap.resident as i64);
        }
    }
}
