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
//! bounded and a real outage still shows: past either, the work is not held. Each share is
//! bounded too ([`HeldBy`]): one client connection holds at most a tenth of the bound
//! (HTTP/2 lets one connection send a thousand requests at once), and where the gateway
//! serves several clusters, one cluster holds at most three quarters of it. A held client that
//! goes away gives its place back at once.
//!
//! A read held through a storage outage is asked again at a pace: the retries of all the reads
//! a cluster holds take turns at [`crate::state::HELD_RETRIES_PER_SECOND`] a second, so that a thousand held
//! reads do not ask a failing apiserver a thousand times a second each; the moment one of the
//! cluster's reads is answered from storage again, every held read is asked again at once.

use crate::state::{Cluster, Gateway, Generation};
use crate::telemetry::HoldOutcome;
use kubegate_config::NoReadyBackendPolicy;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whose shares a piece of held work counts in, besides the gateway's bound.
#[derive(Clone, Copy)]
pub struct HeldBy<'a> {
    /// Its cluster.
    pub cluster: &'a Cluster,
    /// Its client connection's count, when a connection carries many pieces (terminate mode).
    pub connection: Option<&'a AtomicUsize>,
}

/// The first pause of a read held through a storage outage; each next one is twice as long,
/// up to [`MAX_STORAGE_PAUSE`].
const FIRST_STORAGE_PAUSE: Duration = Duration::from_millis(200);
/// The longest pause between two tries of a read held through a storage outage: how late it
/// may be answered after etcd is back.
const MAX_STORAGE_PAUSE: Duration = Duration::from_secs(1);

/// Waits, when no backend of `pool` is ready (`net::place` looks first, so that work that finds
/// one pays nothing for this future), up to `terminate.hold_when_none_ready` (and to
/// `client_waits`, what the work's client said it waits), for the first that becomes ready.
/// Returns at once when holding is off, or when `terminate.max_held_when_none_ready` are
/// waiting already.
pub async fn until_ready(
    gw: &Gateway,
    generation: &Generation,
    held_by: HeldBy<'_>,
    client_waits: Option<Duration>,
) {
    let pool = held_by.cluster.pool();
    let (up_to, max_held, no_ready) = {
        let c = &generation.config;
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
    let Some(_place) = Place::take(gw, generation, max_held, held_by) else {
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
    /// The read's generation: the settings it is held under.
    generation: &'a Generation,
    held_by: HeldBy<'a>,
    until: Instant,
    pause: Duration,
    ended: Option<HoldOutcome>,
    /// Changes when one of the cluster's reads is answered from storage again.
    recovered: tokio::sync::watch::Receiver<u64>,
}

impl<'a> StorageOutage<'a> {
    /// The hold of a read that arrived at `arrived`, whose client waits `client_waits` from
    /// then, counted in `held_by`'s shares; `None` when holding is off or its time is already
    /// up.
    pub fn begin(
        gw: &'a Gateway,
        generation: &'a Generation,
        held_by: HeldBy<'a>,
        arrived: Instant,
        client_waits: Option<Duration>,
    ) -> Option<StorageOutage<'a>> {
        let up_to = generation.config.terminate.hold_reads_when_storage_fails;
        let until = arrived + client_waits.map_or(up_to, |c| up_to.min(c));
        (until > Instant::now()).then(|| StorageOutage {
            gw,
            generation,
            held_by,
            until,
            pause: FIRST_STORAGE_PAUSE,
            ended: None,
            recovered: held_by.cluster.holds().read_held(),
        })
    }

    /// How much longer the read may be held.
    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// Waits before the read is asked again — its pause, then its turn among the cluster's
    /// held reads' retries, or at once when one of the cluster's reads was answered from
    /// storage meanwhile: `false`, and it is answered as it was, when its time is up or its
    /// shares of the holds are taken.
    pub async fn pause(&mut self) -> bool {
        let left = self.left();
        if left.is_zero() {
            self.ended = Some(HoldOutcome::TimedOut);
            return false;
        }
        let max_held = self.generation.config.terminate.max_held_when_none_ready;
        let Some(_place) = Place::take(self.gw, self.generation, max_held, self.held_by) else {
            self.ended = Some(HoldOutcome::OverLimit);
            return false;
        };
        tracing::debug!(
            pause_ms = self.pause.min(left).as_millis() as u64,
            "every replica failed a read on its storage: asked again after a pause"
        );
        let until = tokio::time::Instant::from_std(self.until);
        let recovered = tokio::select! {
            () = tokio::time::sleep(self.pause.min(left)) => false,
            changed = self.recovered.changed() => changed.is_ok(),
        };
        self.pause = (self.pause * 2).min(MAX_STORAGE_PAUSE);
        if recovered {
            return true;
        }
        // Its turn among the cluster's retries.
        loop {
            let wait = match self.held_by.cluster.holds().take_retry(Instant::now()) {
                Ok(()) => return true,
                Err(wait) => wait,
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                changed = self.recovered.changed() => {
                    if changed.is_ok() {
                        return true;
                    }
                }
                () = tokio::time::sleep_until(until) => {
                    self.ended = Some(HoldOutcome::TimedOut);
                    return false;
                }
            }
        }
    }
}

impl Drop for StorageOutage<'_> {
    fn drop(&mut self) {
        self.held_by.cluster.holds().read_released();
        // Not stopped by its bounds: a replica answered, or the client went away.
        let outcome = self.ended.unwrap_or(HoldOutcome::Ready);
        self.gw.metrics().net.hold_ended(outcome);
    }
}

/// One held connection or request's place among the most held at once, and in its shares;
/// given back when dropped (the wait ended, or its client went away).
struct Place<'a> {
    gw: &'a Gateway,
    held_by: HeldBy<'a>,
}

/// The shares of `max_held` one client connection, and one cluster of `clusters`, may hold.
fn shares(max_held: usize, clusters: usize) -> (usize, usize) {
    let connection = (max_held / 10).max(1);
    let cluster = if clusters > 1 {
        (max_held * 3 / 4).max(1)
    } else {
        max_held
    };
    (connection, cluster)
}

impl<'a> Place<'a> {
    fn take(
        gw: &'a Gateway,
        generation: &Generation,
        max_held: usize,
        held_by: HeldBy<'a>,
    ) -> Option<Place<'a>> {
        let clusters = generation.clusters.all().len();
        let (per_connection, per_cluster) = shares(max_held, clusters);
        let cluster = &held_by.cluster.holds().held;
        let counts: [(Option<&AtomicUsize>, usize); 3] = [
            (Some(gw.held()), max_held),
            (Some(cluster), per_cluster),
            (held_by.connection, per_connection),
        ];
        for (i, (count, max)) in counts.iter().enumerate() {
            let Some(count) = count else { continue };
            let took = count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < *max).then_some(n + 1)
                })
                .is_ok();
            if !took {
                for taken in counts[..i].iter().filter_map(|(c, _)| *c) {
                    taken.fetch_sub(1, Ordering::AcqRel);
                }
                return None;
            }
        }
        gw.metrics().net.holding.inc();
        Some(Place { gw, held_by })
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.gw.held().fetch_sub(1, Ordering::AcqRel);
        self.held_by
            .cluster
            .holds()
            .held
            .fetch_sub(1, Ordering::AcqRel);
        if let Some(c) = self.held_by.connection {
            c.fetch_sub(1, Ordering::AcqRel);
        }
        self.gw.metrics().net.holding.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_holds_a_tenth_and_a_cluster_among_several_three_quarters() {
        assert_eq!(shares(1000, 1), (100, 1000));
        assert_eq!(shares(1000, 3), (100, 750));
        assert_eq!(shares(5, 2), (1, 3));
        assert_eq!(shares(1, 1), (1, 1));
    }
}
