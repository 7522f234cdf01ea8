//! Health of apiserver backends: a `/readyz?verbose` prober over TLS, a parser for the verbose
//! body, and the per-backend state machine (`unknown`, `ready`, `not_ready`, `down`, `removed`).
//!
//! The gateway owns what to *do* with a state; this crate only decides the state. Each probe is
//! reported to a [`HealthObserver`] together with the transition it caused, so every change is
//! logged and counted exactly once by the observer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod checker;
mod outcome;
mod probe;
mod state;
mod tls;
mod verbose;

pub use checker::{spawn_checker, CheckerHandle, HealthObserver, ProbeIntervals};
pub use outcome::{ProbeOutcome, ProbeRecord, TlsProblem, UnreachableReason};
pub use probe::{out_of_resources, Prober, ProberError};
pub use state::{BackendState, HealthTracker, ProbeSignal, Thresholds, Transition};
pub use verbose::{parse_verbose, ReadyzReport};
