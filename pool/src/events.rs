//! Where the pool reports what it decided, so that every decision has a metric. The pool logs
//! each decision itself; this receiver counts them.

use crate::orders::CloseReason;
use kubegate_health::{BackendState, ProbeRecord, Transition};

/// Receives the pool's decisions, by backend name. Called synchronously from the pool (probe
/// tasks, reloads): implementations only update counters and gauges.
pub trait PoolEvents: Send + Sync + 'static {
    /// A backend was added, in `state`.
    fn backend_added(&self, name: &str, state: BackendState);
    /// A kept backend was renamed; it is in `state`.
    fn backend_renamed(&self, old: &str, new: &str, state: BackendState);
    /// A probe finished (whether or not it ran).
    fn probed(&self, name: &str, record: &ProbeRecord);
    /// The failing readyz checks of a backend changed from `before` to `now`.
    fn failing_checks(&self, name: &str, before: &[String], now: &[String]);
    /// A backend changed state.
    fn state_changed(&self, name: &str, transition: Transition);
    /// A drain started with work open.
    fn drain_started(&self, name: &str);
    /// `count` pieces of work were closed for `reason`.
    fn closed(&self, name: &str, reason: CloseReason, count: usize);
    /// A removed backend was forgotten and no other backend has its name: drop its series.
    fn forgotten(&self, name: &str);
    /// The routing table was rebuilt with `ready` ready backends.
    fn routing_changed(&self, ready: usize);
}
