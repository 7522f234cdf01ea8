//! Every metric kubegate exports, registered in one place and grouped by who records them.
//! `docs/metrics.md` describes each.
//!
//! | group | recorded by |
//! |---|---|
//! | [`GatewayMetrics`] | the lifecycle, start-up, the allocator |
//! | [`BackendMetrics`] | the pool's decisions (`events.rs`): states, probes, drains, closes |
//! | [`NetMetrics`] | the network plumbing: accepts, admission, connects to backends |
//! | [`PassthroughMetrics`] | passthrough relays |
//! | [`TerminateMetrics`] | terminate mode: client connections, requests, watches |
//! | [`JoinMetrics`] | terminate mode's joined reads |
//! | [`ControlMetrics`] | reloads, certificates, the admin endpoint, discovery |
//! | [`SenderMetrics`] | the cost table, at each scrape: the costliest few senders by name |
//!
//! Label cardinality is bounded by the backend count (the sender families by their top few): per-backend series are removed when a
//! backend is forgotten, and readyz check names come from a fixed set in the apiserver.

mod backends;
mod control;
mod gateway;
mod joins;
mod net;
mod passthrough;
mod register;
mod senders;
mod terminate;

pub use backends::BackendMetrics;
pub use control::ControlMetrics;
pub use gateway::GatewayMetrics;
pub use joins::JoinMetrics;
pub use net::NetMetrics;
pub use passthrough::{PassthroughMetrics, RelayHandles};
pub use senders::SenderMetrics;
pub use terminate::TerminateMetrics;

use prometheus::{Encoder, IntGaugeVec, Registry, TextEncoder};

/// The process-wide metric families.
pub struct Metrics {
    registry: Registry,
    /// The gateway process: build, lifecycle, readiness, heap.
    pub gateway: GatewayMetrics,
    /// Backends' health and the pool's decisions.
    pub backends: BackendMetrics,
    /// Accepts, admission, connects.
    pub net: NetMetrics,
    /// Passthrough relays.
    pub passthrough: PassthroughMetrics,
    /// Terminate mode.
    pub terminate: TerminateMetrics,
    /// Terminate mode's joined reads.
    pub joins: JoinMetrics,
    /// Reloads, certificates, admin, discovery.
    pub control: ControlMetrics,
    /// The costliest senders.
    pub senders: SenderMetrics,
}

impl Metrics {
    /// Registers every family.
    pub fn new() -> Metrics {
        let r = Registry::new();
        Metrics {
            gateway: GatewayMetrics::new(&r),
            backends: BackendMetrics::new(&r),
            net: NetMetrics::new(&r),
            passthrough: PassthroughMetrics::new(&r),
            terminate: TerminateMetrics::new(&r),
            joins: JoinMetrics::new(&r),
            control: ControlMetrics::new(&r),
            senders: SenderMetrics::new(&r),
            registry: r,
        }
    }

    /// Creates a new backend's event series at 0.
    pub fn init_backend(&self, backend: &str) {
        self.backends.init_backend(backend);
        self.net.init_backend(backend);
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> Vec<u8> {
        self.gateway.refresh_heap();
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding does not fail");
        out
    }

    /// Drops every series of a forgotten backend, so cardinality follows the configuration.
    pub fn forget_backend(&self, name: &str) {
        self.backends.forget(name);
        self.net.forget(name);
        self.passthrough.forget(name);
        self.terminate.forget(name);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Sets a one-hot gauge family: the series of `current` to 1, those of every other value in
/// `all` to 0. `prefix` holds the labels before the one-hot label (the backend's name, or none).
pub fn set_one_hot<T: Copy + PartialEq>(
    family: &IntGaugeVec,
    prefix: &[&str],
    all: &[T],
    current: T,
    label: impl Fn(T) -> &'static str,
) {
    let mut labels: Vec<&str> = prefix.to_vec();
    labels.push("");
    for &value in all {
        *labels.last_mut().expect("one label") = label(value);
        family
            .with_label_values(&labels)
            .set((value == current) as i64);
    }
}
