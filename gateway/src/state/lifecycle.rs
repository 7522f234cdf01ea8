//! The gateway's own phases: `starting → serving → stopping → draining`, then exit. Published
//! on a watch (the accept loops close their listeners on `draining`), as the
//! `kubegate_lifecycle_phase` gauge, and through `/readyz`.

use crate::telemetry::{set_one_hot, Metrics};
use std::sync::Arc;
use tokio::sync::watch;

/// Where the gateway process stands. Phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Listeners and health checks are starting.
    Starting,
    /// Accepting and forwarding.
    Serving,
    /// SIGTERM received: `/readyz` fails, listeners still accept for `shutdown.delay`.
    Stopping,
    /// Listeners closed; open work finishes until `shutdown.grace`.
    Draining,
}

impl Phase {
    const ALL: [Phase; 4] = [
        Phase::Starting,
        Phase::Serving,
        Phase::Stopping,
        Phase::Draining,
    ];

    /// Label in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Serving => "serving",
            Phase::Stopping => "stopping",
            Phase::Draining => "draining",
        }
    }
}

/// The current phase, and where an upgrade of kubegate itself stands.
pub struct Lifecycle {
    phase: watch::Sender<Phase>,
    /// The accept loops may accept: from the start, or for a process taking over from its
    /// predecessor, once it has a backend to send connections to.
    accepting: watch::Sender<bool>,
    /// This process handed its listening sockets to a successor (`upgrade.rs`).
    handed_over: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

impl Lifecycle {
    /// Starts in `starting`; `accepting` unless the process takes over from a predecessor.
    pub fn new(metrics: Arc<Metrics>, accepting: bool) -> Lifecycle {
        let l = Lifecycle {
            phase: watch::Sender::new(Phase::Starting),
            accepting: watch::Sender::new(accepting),
            handed_over: watch::Sender::new(false),
            metrics,
        };
        l.publish(Phase::Starting);
        l
    }

    /// Follows whether the accept loops may accept.
    pub fn accepting(&self) -> watch::Receiver<bool> {
        self.accepting.subscribe()
    }

    /// Lets the accept loops accept.
    pub fn start_accepting(&self) {
        self.accepting.send_replace(true);
    }

    /// Follows whether the sockets went to a successor.
    pub fn handed_over(&self) -> watch::Receiver<bool> {
        self.handed_over.subscribe()
    }

    /// The successor accepts now: this process stops accepting and drains (the shutdown
    /// sequence, without its delay).
    pub fn hand_over(&self) {
        self.handed_over.send_replace(true);
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Follows the phase (the accept loops close their listeners on `draining`).
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Moves forward to `next`; returns false (and changes nothing) if the gateway is already
    /// there or past it.
    pub fn advance(&self, next: Phase) -> bool {
        let moved = self.phase.send_if_modified(|current| {
            let forward = next > *current;
            if forward {
                *current = next;
            }
            forward
        });
        if moved {
            self.publish(next);
            tracing::info!(phase = next.as_str(), "gateway lifecycle");
        }
        moved
    }

    /// Whether the gateway takes traffic: serving, with `ready_backends` > 0. What `/readyz`
    /// answers and `kubegate_ready` shows.
    pub fn readiness(&self, ready_backends: usize) -> Result<(), &'static str> {
        match self.phase() {
            Phase::Starting => Err("starting"),
            Phase::Stopping | Phase::Draining => Err("shutting down"),
            Phase::Serving if ready_backends == 0 => Err("no ready backend"),
            Phase::Serving => Ok(()),
        }
    }

    fn publish(&self, current: Phase) {
        set_one_hot(
            &self.metrics.gateway.lifecycle_phase,
            &[],
            &Phase::ALL,
            current,
            Phase::as_str,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_only_move_forward_and_decide_readiness() {
        let l = Lifecycle::new(Arc::new(Metrics::new()), true);
        assert_eq!(l.readiness(3), Err("starting"));
        assert!(l.advance(Phase::Serving));
        assert_eq!(l.readiness(0), Err("no ready backend"));
        assert_eq!(l.readiness(1), Ok(()));
        assert!(l.advance(Phase::Draining));
        assert!(!l.advance(Phase::Stopping), "never back");
        assert_eq!(l.phase(), Phase::Draining);
        assert_eq!(l.readiness(3), Err("shutting down"));
    }

    #[test]
    fn the_phase_gauge_is_one_hot() {
        let m = Arc::new(Metrics::new());
        let l = Lifecycle::new(m.clone(), true);
        l.advance(Phase::Stopping);
        for p in Phase::ALL {
            let v = m
                .gateway
                .lifecycle_phase
                .with_label_values(&[p.as_str()])
                .get();
            assert_eq!(v, (p == Phase::Stopping) as i64, "{}", p.as_str());
        }
    }
}
