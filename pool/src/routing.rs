//! Who may get new work. Rebuilt by the pool on every change of state or membership, read
//! lock-free by the data planes.

use crate::backend::Backend;
use kubegate_config::NoReadyBackendPolicy;
use std::sync::Arc;

/// The backends new work may go to.
pub struct RoutingTable<P> {
    /// `ready` backends.
    pub ready: Vec<Arc<Backend<P>>>,
    /// Of those, the ones the operator has not drained (`kubegate drain`): new work goes
    /// here, and to a drained one only when every ready backend is drained.
    pub undrained: Vec<Arc<Backend<P>>>,
    /// `not_ready` backends that still answer and are not shutting down: used only when
    /// `ready` is empty and `no_ready_backend: alive`.
    pub fallback: Vec<Arc<Backend<P>>>,
    /// `not_ready` backends that are shutting down but still answer: an apiserver keeps
    /// serving through its shutdown delay, so when every one is shutting down at once they
    /// are better than nothing. Used only when `ready` and `fallback` are both empty and
    /// `no_ready_backend: alive`.
    pub shutting_down: Vec<Arc<Backend<P>>>,
}

impl<P> Default for RoutingTable<P> {
    fn default() -> Self {
        RoutingTable {
            ready: Vec::new(),
            undrained: Vec::new(),
            fallback: Vec::new(),
            shutting_down: Vec::new(),
        }
    }
}

/// Where new work may go under a `no_ready_backend` policy.
pub enum Candidates<'a, P> {
    /// Ready backends.
    Ready(&'a [Arc<Backend<P>>]),
    /// No backend is ready; these answer (`no_ready_backend: alive`): the ones not shutting
    /// down, or, when every one that answers is shutting down, those.
    Fallback(&'a [Arc<Backend<P>>]),
    /// Nowhere: refuse the work.
    None,
}

impl<P> RoutingTable<P> {
    /// The candidates for new work under `policy`.
    pub fn candidates(&self, policy: NoReadyBackendPolicy) -> Candidates<'_, P> {
        if !self.undrained.is_empty() {
            Candidates::Ready(&self.undrained)
        } else if !self.ready.is_empty() {
            Candidates::Ready(&self.ready)
        } else if policy == NoReadyBackendPolicy::Refuse {
            Candidates::None
        } else if !self.fallback.is_empty() {
            Candidates::Fallback(&self.fallback)
        } else if !self.shutting_down.is_empty() {
            Candidates::Fallback(&self.shutting_down)
        } else {
            Candidates::None
        }
    }
}
