//! What a change of state means for the work open on a backend. Decided here, as a pure
//! function of the new state, so that every data plane gets the same orders and the rules are
//! tested as a table.
//!
//! | new state | order | why |
//! |---|---|---|
//! | `ready`, `unknown` | keep (a drain in progress is called off) | nothing is wrong with open work |
//! | `not_ready`, shutting down (`[-]shutdown`) | drain until `drain.timeout` | the apiserver finishes its work and ends connections itself |
//! | `not_ready`, another failing check | drain until `drain.failing_timeout` (0 s: at once), once the failure is shown to be its own | such an apiserver will not end them, and clients on them keep getting errors; but moving them to backends about to fail the same way only breaks them twice |
//! | `down` | close now | its connections are dead or hanging |
//! | `removed` | drain until `drain.timeout`, then forget | an operator took it out; it may be fine |
//!
//! The pool carries a drain out only while another backend is ready (it waits for one before
//! ordering it): draining moves work elsewhere, and with none ready there is no elsewhere. A
//! backend failing a check is drained only once another shows it passes what this one fails
//! (`own_failure.rs`).

use kubegate_config::DrainConfig;
use kubegate_health::BackendState;
use std::time::Duration;

/// Why kubegate itself closed work (connections, streams) open on a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The backend stopped answering probes: its connections are dead or hanging.
    BackendDown,
    /// The backend was not ready (or removed) for longer than its drain deadline.
    DrainTimeout,
    /// kubegate is shutting down and `shutdown.grace` ran out.
    ShutdownGrace,
}

impl CloseReason {
    /// Every reason, for zero-initialised metric series.
    pub const ALL: [CloseReason; 3] = [
        CloseReason::BackendDown,
        CloseReason::DrainTimeout,
        CloseReason::ShutdownGrace,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::BackendDown => "backend_down",
            CloseReason::DrainTimeout => "drain_timeout",
            CloseReason::ShutdownGrace => "shutdown_grace",
        }
    }
}

/// What a data plane must do with the work open on a backend after a change of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Leave it; a drain in progress is called off.
    Keep,
    /// No new work; open work may finish for `timeout`, then is closed
    /// ([`CloseReason::DrainTimeout`]).
    Drain {
        /// From now until open work is closed.
        timeout: Duration,
    },
    /// Close open work now.
    Close(CloseReason),
}

/// The order for a backend that just entered `to`; `shutting_down` is whether its last answer
/// said `[-]shutdown`.
pub fn order_for(to: BackendState, shutting_down: bool, drain: &DrainConfig) -> Order {
    match to {
        BackendState::Ready | BackendState::Unknown => Order::Keep,
        BackendState::NotReady if shutting_down => Order::Drain {
            timeout: drain.timeout,
        },
        BackendState::NotReady => Order::Drain {
            timeout: drain.failing_timeout,
        },
        BackendState::Down => Order::Close(CloseReason::BackendDown),
        BackendState::Removed => Order::Drain {
            timeout: drain.timeout,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BackendState::*;

    #[test]
    fn each_state_orders_what_the_table_says() {
        let drain = DrainConfig {
            timeout: Duration::from_secs(30),
            failing_timeout: Duration::from_secs(2),
        };
        let secs = |s| Order::Drain {
            timeout: Duration::from_secs(s),
        };
        let table = [
            // (new state, shutting down, order)
            (Ready, false, Order::Keep),
            (Unknown, false, Order::Keep),
            (NotReady, true, secs(30)),
            (NotReady, false, secs(2)),
            (Down, false, Order::Close(CloseReason::BackendDown)),
            (Down, true, Order::Close(CloseReason::BackendDown)),
            (Removed, false, secs(30)),
            (Removed, true, secs(30)),
        ];
        for (to, shutting_down, want) in table {
            assert_eq!(
                order_for(to, shutting_down, &drain),
                want,
                "{to} shutting_down={shutting_down}"
            );
        }
    }

    #[test]
    fn labels_are_distinct() {
        let mut labels: Vec<_> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.dedup();
        assert_eq!(labels.len(), CloseReason::ALL.len());
    }
}
