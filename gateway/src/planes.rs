//! What kubegate's data planes keep per backend, and how they carry out the pool's orders.

use crate::connections::Connections;
use crate::metrics::Metrics;
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
    metrics: Arc<Metrics>,
}

impl Planes {
    /// Nothing open yet on backend `name`.
    pub fn new(metrics: Arc<Metrics>, name: &str) -> Planes {
        Planes {
            passthrough: Connections::new(&metrics, name),
            metrics,
        }
    }
}

impl DataPlanes for Planes {
    fn open(&self) -> usize {
        self.passthrough.open()
    }

    // Passthrough has nothing to do when a drain starts: its connections stay until the
    // deadline, and new ones no longer pick the backend.

    fn close(&self, _reason: CloseReason) -> usize {
        self.passthrough.close_all()
    }

    fn renamed(&self, name: &str) {
        self.passthrough.rename(&self.metrics, name);
    }
}
