//! A request's registration with its backend (terminate mode's share of `Backend::planes()`):
//! counted as in flight — the load signal, and what a drain waits for — until it drops.

use crate::state::{Backend, Gauges};
use std::sync::Arc;

/// One request in flight on a backend.
pub struct InFlight {
    backend: Arc<Backend>,
    gauges: Arc<Gauges>,
    long_running: bool,
    /// The backend's drain count when the request began.
    drains_seen: u64,
}

impl InFlight {
    /// A request starts on `backend`; dropping the guard ends it.
    pub fn begin(backend: &Arc<Backend>, long_running: bool) -> InFlight {
        let (gauges, drains_seen) = backend.planes().terminate.request_started(long_running);
        InFlight {
            backend: backend.clone(),
            gauges,
            long_running,
            drains_seen,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// Follows the backend's drains: changed if one began since the request did, or when
    /// the next one does.
    pub fn drains(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut rx = self.backend.planes().terminate.drains();
        if *rx.borrow() != self.drains_seen {
            rx.mark_changed();
        }
        rx
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let last = self
            .backend
            .planes()
            .terminate
            .request_ended(&self.gauges, self.long_running);
        if last {
            self.backend.work_ended();
        }
    }
}
