//! A relay's registration with its backend (passthrough's share of `Backend::planes()`): the
//! backend counts it as open work until the guard drops, and can close it by aborting its task.

use crate::state::{Backend, ClientSlot, Registered};
use crate::telemetry::RelayHandles;
use std::sync::Arc;

/// One registered connection. Dropping it deregisters the connection and records its lifetime.
pub struct ConnectionGuard {
    backend: Arc<Backend>,
    registered: Registered,
}

impl ConnectionGuard {
    /// Registers a new connection to `backend`, admitted with `slot` (which frees with the
    /// registration). Give the connection's task to the backend's registry (`Relays::attach`
    /// with [`ConnectionGuard::id`]) once it is spawned.
    pub fn register(backend: &Arc<Backend>, slot: ClientSlot) -> ConnectionGuard {
        ConnectionGuard {
            registered: backend.planes().passthrough.register(slot),
            backend: backend.clone(),
        }
    }

    /// The connection's key in its backend's registry.
    pub fn id(&self) -> u64 {
        self.registered.id
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// Metric handles (as they were when the connection opened).
    pub fn metrics(&self) -> &RelayHandles {
        &self.registered.metrics
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if self
            .backend
            .planes()
            .passthrough
            .deregister(&self.registered)
        {
            self.backend.work_ended();
        }
    }
}
