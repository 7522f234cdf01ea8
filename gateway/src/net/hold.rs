//! Holding new work while no backend of its cluster is ready (`terminate.hold_when_none_ready`,
//! which passthrough connections follow too): a passthrough connection before its dial, a
//! terminate-mode request before it is sent, a watch kubegate continues before it is asked
//! again. It waits for the first backend that becomes ready — or, where not-ready backends may
//! take work (`no_ready_backend: alive`), the first whose probe passes again — so that a brief
//! outage (an etcd leader election failing every `/readyz` for a few seconds, every replica
//! restarted at once) is a wait rather than a failure; the `no_ready_backend` policy decides
//! afterwards, as it does at once without a hold.
//!
//! Bounded in time (and by the client's own `?timeout=`) and in count over every cluster
//! (`terminate.max_held_when_none_ready`), so that what clients can make kubegate hold stays
//! bounded and a real outage still shows: past either, the work is not held. A held client
//! that goes away gives its place back at once.

use crate::state::{Gateway, Pool};
use crate::telemetry::HoldOutcome;
use kubegate_config::NoReadyBackendPolicy;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
