//! Holding new work while no backend of its cluster is ready (`terminate.hold_when_none_ready`,
//! which passthrough connections follow too): a passthrough connection before its dial, a
//! terminate-mode request before it is sent, a watch kubegate continues before it is asked
//! again. It waits for the first backend that becomes ready — or, where not-ready backends may
//! take work (`no_ready_backend: alive`), the first whose probe passes again — so that a brief
//! outage (an etcd leader election failing every `/readyz` for a few seconds, every replica
//! restarted at once) is a wait rather than a failure; the `no_ready_backend` policy decides
//! afterwards, as it does at once without a hold.
//!
//! The replicas' `/readyz` only fails some seconds into such an outage: meanwhile they are
//! ready, and answer every read that needs etcd with a storage failure (and so do not-ready
//! replicas under `no_ready_backend: alive`). A read that every replica tried answered so is
//! held too (`terminate.hold_reads_when_storage_fails`, [`StorageOutage`]) and asked again after
//! short pauses, so that it is answered within a second of etcd coming back, not failed.
//!
//! Bounded in time (and by the client's own `?timeout=`) and in count over every cluster
//! (`terminate.max_held_when_none_ready`), so that what clients can make kubegate hold stays
//! bounded and a real outage still shows: past either, the work is not held. A held client
//! that goes away gives its place back at once.

use crate::state::{Gateway, Pool};
use crate::telemetry::HoldOutcome;
use kubegate_config::NoReadyBackendPolicy;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The first pause of a read held through a storage outage; each next one is twice as long,
/// up to [`MAX_STORAGE_PAUSE`].
const FIRST_STORAGE_PAUSE: Duration = Duration::from_millis(200);
/// The longest pause between two tries of a read held through a storage outage: how late it
/// may be answered after etcd is back.
const MAX_STORAGE_PAUSE: Duration = Duration::from_secs(1);

/// Waits while no backend of `pool` is ready, up to `terminate.hold_when_none_ready` (and to
/// `client_waits`, what the work's client said it waits), for the first that becomes ready.
/// Returns at once when one is ready, when holding is off, or when
/// `terminate.max_held_when_none_ready` are waiting already.
pub async fn until_ready(gw: &Gateway, pool: &Pool, client_waits: Option<Duration>) {
    if !pool.routing().ready.is_empty() {
        return;
    }
    let (up_to, max_held, no_ready) = {
        let c = gw.config().load();
        let t = &c.terminate;
        (
            t.hold_when_none_ready,
            t.max_held_when_none_ready,
            c.no_ready_backend,
        )
    };
    // Past its client's own timeout nobody waits for the answer any more.
    let up_to = client_waits.map_or(up_to, |c| up_to.min(c));
    if up_to.is_zero() {
        return;
    }
    let metrics = &gw.metrics().net;
    let Some(_place) = Place::take(gw, max_held) else {
        metrics.hold_ended(HoldOutcome::OverLimit);
        return;
    };
    // Where not-ready backends may take work (`no_ready_backend: alive`), the first that
    // answers its probe again ends the wait: waiting on for `rise` passes (a second or more)
    // held a leader's renewal past its deadline in the `blackout` load test. Otherwise only a
    // ready backend can take the work.
    let released = async {
        match no_ready {
            NoReadyBackendPolicy::Alive => pool.some_passing().await,
            NoReadyBackendPolicy::Refuse => pool.some_ready().await,
        }
    };
    let outcome = match tokio::time::timeout(up_to, released).await {
        Ok(()) => HoldOutcome::Ready,
        Err(_) => HoldOutcome::TimedOut,
    };
    metrics.hold_ended(outcome);
}

/// A read every replica tried answered with a storage failure, held and asked again while
/// the outage lasts: up to `terminate.hold_reads_when_storage_fails` after it arrived, never
/// past its client's own timeout (a replica that took long to fail leaves little or nothing
/// of that). Counted in `kubegate_holds_total` once, when it ends.
pub struct StorageOutage<'a> {
    gw: &'a Gateway,
    until: Instant,
    pause: Duration,
    ended: Option<HoldOutcome>,
}

impl<'a> StorageOutage<'a> {
    /// The hold of a read that arrived at `arrived`, whose client waits `client_waits` from
    /// then; `None` when holding is off or its time is already up.
    pub fn begin(
        gw: &'a Gateway,
        arrived: Instant,
        client_waits: Option<Duration>,
    ) -> Option<StorageOutage<'a>> {
        let up_to = gw.config().load().terminate.hold_reads_when_storage_fails;
        let until = arrived + client_waits.map_or(up_to, |c| up_to.min(c));
        (until > Instant::now()).then_some(StorageOutage {
            gw,
            until,
            pause: FIRST_STORAGE_PAUSE,
            ended: None,
        })
    }

    /// How much longer the read may be held.
    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// Waits before the read is asked again: `false`, and it is answered as it was, when its
    /// time is up or `terminate.max_held_when_none_ready` are waiting already.
    pub async fn pause(&mut self) -> bool {
        let left = self.left();
        if left.is_zero() {
            self.ended = Some(HoldOutcome::TimedOut);
            return false;
        }
        let max_held = self.gw.config().load().terminate.max_held_when_none_ready;
        let Some(_place) = Place::take(self.gw, max_held) else {
            self.ended = Some(HoldOutcome::OverLimit);
            return false;
        };
        tracing::debug!(
            pause_ms = self.pause.min(left).as_millis() as u64,
            "every replica failed a read on its storage: asked again after a pause"
        );
        tokio::time::sleep(self.pause.min(left)).await;
        self.pause = (self.pause * 2).min(MAX_STORAGE_PAUSE);
        true
    }
}

impl Drop for StorageOutage<'_> {
    fn drop(&mut self) {
        // Not stopped by its bounds: a replica answered, or the client went away.
        let outcome = self.ended.unwrap_or(HoldOutcome::Ready);
        self.gw.metrics().net.hold_ended(outcome);
    }
}

/// One held connection or request's place among the most held at once; given back when
/// dropped (the wait ended, or its client went away).
struct Place<'a> {
    gw: &'a Gateway,
}

impl<'a> Place<'a> {
    fn take(gw: &'a Gateway, max_held: usize) -> Option<Place<'a>> {
        gw.held()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_held).then_some(n + 1)
            })
            .ok()?;
        gw.metrics().net.holding.inc();
        Some(Place { gw })
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.gw.held().fetch_sub(1, Ordering::AcqRel);
        self.gw.metrics().net.holding.dec();
    }
}
