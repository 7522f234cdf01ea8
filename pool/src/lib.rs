//! The backend pool every data plane shares: which apiserver replicas exist, what state each is
//! in, who may get new work, which one gets it, and what a change of state orders.
//!
//! ```text
//! checker task ──probe──▶ Pool::observe ──HealthTracker──▶ Transition ──order_for──▶ Order
//!                              │                                                    │
//!                              ▼                                                    ▼
//!                      RoutingTable (ArcSwap) ◀──pick(Load)── data plane   DataPlanes::{drain, close}
//! ```
//!
//! - One place changes a backend's state: [`Pool`] feeding the backend's single
//!   [`HealthTracker`](kubegate_health::HealthTracker) (probe results, removal). The state atomics
//!   on [`Backend`] are that tracker's published value, written only there, read lock-free.
//! - One place decides what a state means for open work: [`order_for`], a pure function.
//! - One place picks a backend for new work: [`pick`], over any [`Load`] signal (open
//!   connections for passthrough, in-flight requests for terminate mode).
//! - The pool knows nothing of connections vs requests: each data plane keeps its per-backend
//!   state in its own type `P:` [`DataPlanes`] and carries out the orders its own way (abort
//!   relays; GOAWAY and stream draining).
//! - Every decision is reported to [`PoolEvents`] (metrics) and logged once.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod events;
mod orders;
mod own_failure;
mod pick;
mod planes;
mod pool;
mod routing;
#[cfg(test)]
mod test_support;

pub use backend::{Backend, BackendInfo, BackendSource, Failures};
pub use events::PoolEvents;
pub use orders::{order_for, CloseReason, Order};
pub use pick::{pick, Load};
pub use planes::DataPlanes;
pub use pool::{Pool, PoolSettings};
pub use routing::{Candidates, RoutingTable};
