//! The gateway's own lifecycle: `starting → serving → stopping → draining → exit`.
//!
//! pingora shuts its services down (kubegate's accept loops close their listeners) the moment
//! its shutdown signal resolves and then sleeps; kubegate drives it through
//! [`ShutdownSequence`] so the order is: SIGTERM → `/readyz` fails at once
//! (stopping) → listeners keep accepting for `shutdown.delay` → pingora is told to stop
//! accepting (draining) → open connections may finish until `shutdown.grace` → the rest are
//! closed and counted → exit 0. A second SIGTERM or SIGINT exits at once with status 1.

use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::notify;
use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

/// Where the gateway process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Listeners and health checks are starting.
    Starting = 0,
    /// Accepting and forwarding.
    Serving = 1,
    /// SIGTERM received: `/readyz` fails, listeners still accept for `shutdown.delay`.
    Stopping = 2,
    /// Listeners closed; open connections finish until `shutdown.grace`.
    Draining = 3,
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

/// The current phase, readable from anywhere without a lock.
pub struct Lifecycle {
    phase: AtomicU8,
}

impl Lifecycle {
    /// Starts in `starting`.
    pub fn new(metrics: &Metrics) -> Lifecycle {
        let l = Lifecycle {
            phase: AtomicU8::new(Phase::Starting as u8),
        };
        l.publish(Phase::Starting, metrics);
        l
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        Phase::ALL[self.phase.load(Ordering::Acquire) as usize]
    }

    /// Moves forward to `next`; phases never go back.
    pub fn advance(&self, next: Phase, metrics: &Metrics) {
        let prev = self.phase.fetch_max(next as u8, Ordering::AcqRel);
        if prev < next as u8 {
            self.publish(next, metrics);
            tracing::info!(phase = next.as_str(), "gateway lifecycle");
        }
    }

    fn publish(&self, current: Phase, metrics: &Metrics) {
        for p in Phase::ALL {
            metrics
                .lifecycle_phase
                .with_label_values(&[p.as_str()])
                .set((p == current) as i64);
        }
    }
}

/// The shutdown signal pingora waits on.
pub struct ShutdownSequence {
    /// The gateway whose lifecycle is driven.
    pub gateway: Arc<Gateway>,
}

#[async_trait]
impl ShutdownSignalWatch for ShutdownSequence {
    async fn recv(&self) -> ShutdownSignal {
        let gw = &self.gateway;
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        let shutdown = gw.config.load().shutdown.clone();
        tracing::info!(
            signal = name,
            delay = ?shutdown.delay,
            grace = ?shutdown.grace,
            "shutting down: readyz fails now, listeners close after the delay"
        );
        gw.lifecycle.advance(Phase::Stopping, &gw.metrics);
        gw.publish_ready();
        notify::stopping();
        // From here on a second signal ends the process at once.
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal: exiting at once");
            std::process::exit(1);
        });
        tokio::time::sleep(shutdown.delay).await;
        gw.lifecycle.advance(Phase::Draining, &gw.metrics);
        let gw = gw.clone();
        // A thread of its own: pingora blocks its main thread after this returns, and the exit
        // must not depend on any runtime's scheduling.
        std::thread::spawn(move || drain_and_exit(&gw, shutdown.grace));
        ShutdownSignal::GracefulTerminate
    }
}

/// Waits for open connections to finish until `grace`, closes the rest, exits 0.
fn drain_and_exit(gw: &Gateway, grace: Duration) {
    let deadline = Instant::now() + grace;
    while gw.open_connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = gw.open_connections();
    if left > 0 {
        tracing::warn!(
            connections = left,
            "shutdown grace ran out: closing open connections"
        );
        gw.close_for_shutdown();
        // Let the connection tasks record their close before the process ends.
        let settle = Instant::now() + Duration::from_secs(1);
        while gw.open_connections() > 0 && Instant::now() < settle {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    tracing::info!("shutdown complete");
    std::process::exit(0);
}
