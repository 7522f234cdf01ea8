//! Who may get new work. Rebuilt by the pool on every change of state or membership, read
//! lock-free by the data planes.

use crate::backend::Backend;
use kubegate_config::NoReadyBackendPolicy;
use std::sync::Arc;

/// The backends new work may go to.
pub struct RoutingTable<P> {
    /// `ready` backends.
    pub ready: Vec<Arc<Backend<P>>>,
    /// `not_ready` backends that still answer and are not shutting down: used only when
    /// `ready` is empty and `no_ready_backend: alive`.
    pub fallback: Vec<Arc<Backend<P>>>,
}

impl<P> Default for RoutingTable<P> {
    fn default() -> Self {
        RoutingTable {
            ready: Vec::new(),
            fallback: Vec::new(),
        }
    }
}

/// Where new work may go under a `no_ready_backend` policy.
pub enum Candidates<'a, P> {
    /// Ready backends.
    Ready(&'a [Arc<Backend<P>>]),
    /// No backend is ready; these answer and are not shutting down (`no_ready_backend: alive`).
    Fallback(&'a [Arc<Backend<P>>]),
    /// Nowhere: refuse the work.
    None,
}

impl<P> RoutingTable<P> {
    /// The candidates for new work under `policy`.
    pub fn candidates(&self, policy: NoReadyBackendPolicy) -> Candidates<'_, P> {
        if !self.ready.is_empty() {
            Candidates::Ready(&self.ready)
        } else if policy == NoReadyBackendPolicy::Alive && !self.fallback.is_empty() {
            Candidates::Fallback(&self.fallback)
        } else {
            Candidates::None
        }
    }
}
