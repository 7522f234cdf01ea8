//! The probe loop of one backend.

use crate::outcome::ProbeRecord;
use crate::probe::Prober;
use crate::state::{HealthTracker, Transition};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Receives every probe of one backend, in order, from its checker task.
pub trait HealthObserver: Send + Sync + 'static {
    /// One probe finished. `transition` is `Some` exactly when the state changed; `tracker` holds
    /// the state after it.
    fn probed(&self, record: &ProbeRecord, transition: Option<Transition>, tracker: &HealthTracker);
}

/// A running checker. Dropping it stops the probes.
pub struct CheckerHandle {
    wake: Arc<Notify>,
    task: JoinHandle<HealthTracker>,
}

impl CheckerHandle {
    /// Probes again now instead of at the next interval (a passive failure was seen). Several
    /// calls before the probe starts make one probe.
    pub fn probe_soon(&self) {
        self.wake.notify_one();
    }
}

impl Drop for CheckerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How often a checker probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeIntervals {
    /// Between probes normally.
    pub interval: Duration,
    /// After a `ready` backend failed a probe, until `fall` is reached or a probe passes: a real
    /// failure is confirmed sooner, and a single lost probe still does not take a backend out.
    pub fast_interval: Duration,
}

/// Starts probing `addr` every `intervals.interval` (±10% jitter so that several gateways and
/// backends do not probe in lockstep). The first probe starts at once. The next one starts one
/// interval after the previous one started, or as soon as it ends when a probe took longer than
/// that.
pub fn spawn_checker(
    addr: SocketAddr,
    prober: Arc<Prober>,
    intervals: ProbeIntervals,
    mut tracker: HealthTracker,
    observer: Arc<dyn HealthObserver>,
) -> CheckerHandle {
    let wake = Arc::new(Notify::new());
    let woken = wake.clone();
    let task = tokio::spawn(async move {
        let mut next = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = woken.notified() => {}
            }
            let started = Instant::now();
            let record = prober.probe(addr).await;
            let transition = record.outcome.signal().and_then(|s| tracker.observe(s));
            observer.probed(&record, transition, &tracker);
            let pause = if tracker.confirming_failure() {
                intervals.fast_interval
            } else {
                intervals.interval
            };
            next = started + jittered(pause);
        }
    });
    CheckerHandle { wake, task }
}

fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(0.9 + fastrand::f64() * 0.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        let base = Duration::from_secs(1);
        for _ in 0..1000 {
            let j = jittered(base);
            assert!(j >= Duration::from_millis(900) && j <= Duration::from_millis(1100));
        }
    }
}
