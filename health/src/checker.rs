//! The probe loop of one backend. It only probes: what a result means is decided by whoever
//! observes it (the pool runs the backend's [`HealthTracker`](crate::HealthTracker)), which also
//! says how soon the next probe should come.

use crate::outcome::{ProbeOutcome, ProbeRecord};
use crate::probe::Prober;
use crate::state::Pace;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Receives every probe of one backend, in order, from its checker task.
pub trait HealthObserver: Send + Sync + 'static {
    /// One probe finished; the answer sets the pace of the next one.
    fn probed(&self, record: &ProbeRecord) -> Pace;

    /// The backend's address `to` passed where the one in use was unreachable: it takes the
    /// backend's new work.
    fn moved_to(&self, _to: SocketAddr) {}
}

/// What every checker probes with. Shared and swapped whole on a reload, so a change of probe
/// settings reaches running checkers at their next probe without restarting them.
pub struct ProbeSettings {
    /// Probes backends (TLS, path, timeout).
    pub prober: Prober,
    /// How often.
    pub intervals: ProbeIntervals,
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

impl ProbeIntervals {
    /// The pause before the next probe at `pace`, before jitter.
    pub fn at(&self, pace: Pace) -> Duration {
        match pace {
            Pace::Normal => self.interval,
            Pace::Fast => self.fast_interval,
        }
    }
}

/// A running checker. Dropping it stops the probes.
pub struct CheckerHandle {
    wake: Arc<Notify>,
    task: JoinHandle<()>,
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

/// Starts probing the backend at `addrs` (its addresses, the one in use first) with the
/// current `settings`, the next probe one interval (±10% jitter, so that several gateways and
/// backends do not probe in lockstep) after the previous one started, or as soon as it ends
/// when a probe took longer than that. The first probe starts at once.
///
/// A backend is one replica however many addresses it has (a dual-stack host): a probe that
/// finds the address in use unreachable is followed at once by one of each other address in
/// turn, and the first that passes is the backend's probe (and its address from then on:
/// [`HealthObserver::moved_to`]); when none passes, the address in use's is. An answer other
/// than 200 is the replica's own (every address reaches the same process): nothing else is
/// tried.
pub fn spawn_checker(
    addrs: Vec<SocketAddr>,
    settings: Arc<ArcSwap<ProbeSettings>>,
    observer: Arc<dyn HealthObserver>,
) -> CheckerHandle {
    let wake = Arc::new(Notify::new());
    let woken = wake.clone();
    let task = tokio::spawn(async move {
        let mut next = Instant::now();
        let mut in_use = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = woken.notified() => {}
            }
            let started = Instant::now();
            let current = settings.load_full();
            let mut record = current.prober.probe(addrs[in_use]).await;
            if matches!(record.outcome, ProbeOutcome::Unreachable(..)) {
                for other in (0..addrs.len()).filter(|i| *i != in_use) {
                    let tried = current.prober.probe(addrs[other]).await;
                    if tried.outcome.passed() {
                        in_use = other;
                        observer.moved_to(addrs[other]);
                        record = tried;
                        break;
                    }
                }
            }
            let pace = observer.probed(&record);
            next = started + jittered(current.intervals.at(pace));
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

    #[test]
    fn the_pace_picks_the_interval() {
        let i = ProbeIntervals {
            interval: Duration::from_secs(1),
            fast_interval: Duration::from_millis(250),
        };
        assert_eq!(i.at(Pace::Normal), Duration::from_secs(1));
        assert_eq!(i.at(Pace::Fast), Duration::from_millis(250));
    }
}
