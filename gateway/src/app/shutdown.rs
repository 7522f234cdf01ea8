//! The shutdown sequence, run as pingora's shutdown signal so that pingora's own order (stop
//! accepting at once, then sleep a fixed grace period) never applies:
//!
//! SIGTERM or SIGINT → `stopping`: `/readyz` fails at once, listeners still accept →
//! after `shutdown.delay`, `draining`: the accept loops close their listeners → open work may
//! finish until `shutdown.grace`, waited on as an event (the pool's work dropping to none),
//! then the client connections until they have written their last bytes and closed →
//! the rest is closed and counted → pingora is told to stop at once and `main` returns 0.
//! A second SIGTERM or SIGINT during the sequence ends it at once: `main` returns 1.
//! A handover to a successor (`upgrade.rs`) starts the same sequence without the delay.

use crate::control::notify;
use crate::state::{Gateway, Phase};
use async_trait::async_trait;
use kubegate_pool::CloseReason;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// After closing what the grace period left open, how long the closed work may take to record
/// its end before the process exits anyway.
const SETTLE: Duration = Duration::from_secs(1);

/// How often the end of the shutdown looks whether every client connection has closed: a
/// count, read lock-free, for the few milliseconds connections take to write their last bytes.
const CLIENT_CLOSE_POLL: Duration = Duration::from_millis(10);

/// The shutdown signal pingora waits on.
pub struct ShutdownSequence {
    gateway: Arc<Gateway>,
    exit_code: Arc<AtomicU8>,
}

impl ShutdownSequence {
    /// Drives `gateway`'s shutdown; the process's exit status is left in `exit_code`.
    pub fn new(gateway: Arc<Gateway>, exit_code: Arc<AtomicU8>) -> ShutdownSequence {
        ShutdownSequence { gateway, exit_code }
    }
}

#[async_trait]
impl ShutdownSignalWatch for ShutdownSequence {
    async fn recv(&self) -> ShutdownSignal {
        let gw = &self.gateway;
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let mut handed_over = gw.lifecycle().handed_over();
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = handed_over.wait_for(|h| *h) => "upgrade",
        };
        let shutdown = gw.config().load().shutdown.clone();
        // After a handover the successor already accepts on the same sockets: nothing to
        // wait for before draining.
        let delay = if name == "upgrade" {
            Duration::ZERO
        } else {
            shutdown.delay
        };
        tracing::info!(
            signal = name,
            ?delay,
            grace = ?shutdown.grace,
            "shutting down: readyz fails now, listeners close after the delay"
        );
        gw.advance(Phase::Stopping);
        // After a handover the service goes on in the successor: not a stop to systemd.
        if name != "upgrade" {
            notify::stopping();
        }
        let sequence = async {
            tokio::time::sleep(delay).await;
            gw.advance(Phase::Draining);
            drain(gw, shutdown.grace).await;
        };
        tokio::select! {
            _ = sequence => {
                tracing::info!("shutdown complete");
                self.exit_code.store(0, Ordering::Release);
            }
            _ = term.recv() => self.second_signal(),
            _ = int.recv() => self.second_signal(),
        }
        // Everything is closed: pingora only has to stop its runtimes.
        ShutdownSignal::FastShutdown
    }
}

impl ShutdownSequence {
    fn second_signal(&self) {
        tracing::warn!("second signal: exiting at once");
        self.exit_code.store(1, Ordering::Release);
    }
}

/// Lets open work finish until `grace`, then closes the rest.
async fn drain(gw: &Gateway, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    let pools: Vec<_> = gw
        .clusters()
        .all()
        .iter()
        .map(|c| c.pool().clone())
        .collect();
    // Draining: no pool takes new work, so one idle stays idle while the next is awaited.
    let idle = || async {
        for pool in &pools {
            pool.idle().await;
        }
    };
    if tokio::time::timeout(grace, idle()).await.is_ok() {
        clients_closed(gw, deadline).await;
        return;
    }
    let left: usize = pools.iter().map(|p| p.open()).sum();
    tracing::warn!(open = left, "shutdown grace ran out: closing open work");
    for pool in &pools {
        pool.close_all(CloseReason::ShutdownGrace);
    }
    // Closed relays deregister as their tasks are dropped; let them count their end.
    let _ = tokio::time::timeout(SETTLE, idle()).await;
}

/// Waits, until `deadline`, for every client connection to have closed. A request leaves its
/// pool once its response's last bytes are handed to its client connection, which may not
/// have written them yet; told to go away as draining began, the connection closes once it
/// has. Exiting before lost those bytes: a loaded run saw a request answered 8 s after the
/// signal reach its client as a connection closed without TLS `close_notify`.
async fn clients_closed(gw: &Gateway, deadline: tokio::time::Instant) {
    let open = || gw.listeners().iter().map(|l| l.open()).sum::<usize>();
    while open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(CLIENT_CLOSE_POLL).await;
    }
}
