//! What a data plane keeps per backend, and how it carries out the pool's orders.

use crate::orders::CloseReason;

/// The per-backend state of the data planes (passthrough relays, terminate-mode upstream
/// connections), created by the pool's factory when a backend is added. The pool decides *what*
/// happens to a backend's work ([`crate::Order`]); this decides *how*.
///
/// Implementations call [`crate::Backend::work_ended`] whenever their open work on the backend
/// drops to none, so that drains and shutdown wait on an event instead of polling.
pub trait DataPlanes: Send + Sync + 'static {
    /// Work open on the backend that a drain deadline would close (proxied connections,
    /// requests in flight).
    fn open(&self) -> usize;

    /// The backend gets no new work from now on (it left the routing table); open work may
    /// finish until the drain deadline. Passthrough has nothing to do; terminate mode sends
    /// GOAWAY on idle upstream connections.
    fn drain(&self) {}

    /// Closes the work open now; returns how much there was.
    fn close(&self, reason: CloseReason) -> usize;

    /// The backend was renamed (metric handles follow the name).
    fn renamed(&self, _name: &str) {}

    /// The backend's new work goes to another of its addresses: what is open to the old one
    /// takes no new work (passthrough's connections go on; terminate mode's upstream
    /// connections take no new stream and close once their streams are done).
    fn moved(&self) {}

    /// The backend was just probed (every health interval): housekeeping that needs a clock
    /// but not a task of its own — terminate mode gives back upstream connections left idle.
    fn probed(&self) {}
}
