//! A request's registration with its backend (terminate mode's share of `Backend::planes()`):
//! counted as in flight — the load signal, and what a drain waits for — and among its priority
//! level's requests on the backend (the tally `upstream::flow` keeps), until it drops; and what
//! the hold cost, charged to the request's sender (`telemetry::costs`).

use crate::state::{Backend, Gauges};
use crate::telemetry::costs::Payer;
use std::sync::Arc;
use std::time::Instant;

/// Counts a priority level's requests in flight on one replica: `upstream::flow`'s, named here
/// so that this stage need not know whose.
pub trait LevelTally: Send + Sync {
    /// A request of `level` starts: whether it is counted; a counted one ends with
    /// [`LevelTally::ended`].
    fn started(&self, level: &Arc<str>) -> bool;
    /// A counted request of `level` ended.
    fn ended(&self, level: &str);
}

/// One request in flight on a backend.
pub struct InFlight {
    backend: Arc<Backend>,
    gauges: Arc<Gauges>,
    long_running: bool,
    /// The backend's drain count when the request began.
    drains_seen: u64,
    /// Its priority level, where the backend's tally counts it among the level's.
    level: Option<(Arc<str>, Arc<dyn LevelTally>)>,
    /// Whom the hold is charged to, from when.
    payer: Option<(Arc<Payer>, Instant)>,
    /// Response body bytes the backend sent.
    bytes: u64,
}

impl InFlight {
    /// A request starts on `backend`, of priority `level` when known, counted in the backend's
    /// tally of it (a long-running one is not counted in its level: a watch holds no seat once
    /// it runs), charged to `payer`; dropping the guard ends it.
    pub fn begin(
        backend: &Arc<Backend>,
        long_running: bool,
        level: Option<(&Arc<str>, Arc<dyn LevelTally>)>,
        payer: Option<&Arc<Payer>>,
    ) -> InFlight {
        let (gauges, drains_seen) = backend.planes().terminate.request_started(long_running);
        let level = level
            .filter(|_| !long_running)
            .filter(|(l, tally)| tally.started(l))
            .map(|(l, tally)| (l.clone(), tally));
        if let (Some(payer), true) = (payer, long_running) {
            payer.watch_opened();
        }
        InFlight {
            backend: backend.clone(),
            gauges,
            long_running,
            drains_seen,
            level,
            payer: payer.map(|p| (p.clone(), Instant::now())),
            bytes: 0,
        }
    }

    /// The request is sent again on a new connection: its hold on the replica counts from
    /// now, not from the connect and handshake kubegate spent first.
    pub fn sent_again(&mut self) {
        if let Some((_, began)) = &mut self.payer {
            *began = Instant::now();
        }
    }

    /// The backend sent `bytes` more of the response's body.
    pub fn carried(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// Follows the backend's drains: changed if one began since the request did, or when
    /// the next one does.
    pub fn drains(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut rx = self.backend.planes().terminate.drains();
        if *rx.borrow() != self.drains_seen {
            rx.mark_changed();
        }
        rx
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((payer, began)) = &self.payer {
            if self.long_running {
                payer.watch_closed();
            }
            payer.held(
                self.level.as_ref().map(|(l, _)| &**l),
                (!self.long_running).then(|| began.elapsed()),
                self.bytes,
            );
        }
        if let Some((level, tally)) = &self.level {
            tally.ended(level);
        }
        let last = self
            .backend
            .planes()
            .terminate
            .request_ended(&self.gauges, self.long_running);
        if last {
            self.backend.work_ended();
        }
    }
}
