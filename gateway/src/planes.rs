//! What kubegate's data planes keep per backend, and how they carry out the pool's orders.

use crate::connections::Connections;
use crate::metrics::Metrics;
use crate::terminate::{Gauges, Upstream};
use kubegate_pool::{CloseReason, DataPlanes};
use std::sync::Arc;

/// A backend of kubegate's pool.
pub type Backend = kubegate_pool::Backend<Planes>;

/// kubegate's pool.
pub type Pool = kubegate_pool::Pool<Planes>;

/// Per-backend state of each data plane.
pub struct Planes {
    /// Open passthrough connections.
    pub passthrough: Connections,
    /// Terminate mode's connections and requests.
    pub terminate: Upstream,
    metrics: Arc<Metrics>,
}

impl Planes {
    /// Nothing open yet on backend `name`.
    pub fn new(metrics: Arc<Metrics>, name: &str) -> Planes {
        Planes {
            passthrough: Connections::new(&metrics, name),
            terminate: Upstream::new(gauges(&metrics, name)),
            metrics,
        }
    }
}

fn gauges(m: &Metrics, name: &str) -> Gauges {
    Gauges {
        in_flight: m.requests_in_flight.with_label_values(&[name]),
        long_running: m.long_running.with_label_values(&[name]),
        connections: m.upstream_connections.with_label_values(&[name]),
    }
}

impl DataPlanes for Planes {
    fn open(&self) -> usize {
        self.passthrough.open() + self.terminate.in_flight()
    }

    /// Passthrough has nothing to do: its connections stay until the deadline, and new ones no
    /// longer pick the backend. Terminate mode stops using the backend's connections; each
    /// closes with GOAWAY once its requests are done.
    fn drain(&self) {
        self.terminate.drain();
    }

    fn close(&self, _reason: CloseReason) -> usize {
        self.passthrough.close_all() + self.terminate.close()
    }

    fn renamed(&self, name: &str) {
        self.passthrough.rename(&self.metrics, name);
        self.terminate.set_gauges(gauges(&self.metrics, name));
    }
}
