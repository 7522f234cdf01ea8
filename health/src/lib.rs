//! Health of apiserver backends: a `/readyz?verbose` prober over TLS, a parser for the verbose
//! body, and the per-backend state machine (`unknown`, `ready`, `not_ready`, `down`, `removed`).
//!
//! This crate decides states and knows nothing of what a state means for traffic (the pool
//! decides that). A checker task only probes and hands each result to its [`HealthObserver`],
//! which runs the backend's [`HealthTracker`] and answers with the [`Pace`] of the next probe.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod checker;
mod outcome;
mod probe;
mod state;
mod tls;
mod verbose;

pub use checker::{spawn_checker, CheckerHandle, HealthObserver, ProbeIntervals, ProbeSettings};
pub use outcome::{ProbeOutcome, ProbeRecord, TlsProblem, UnreachableReason};
pub use probe::{Prober, ProberError};
pub use state::{BackendState, HealthTracker, Pace, ProbeSignal, Thresholds, Transition};
pub use verbose::{parse_verbose, ReadyzReport};
