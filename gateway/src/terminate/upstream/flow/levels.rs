//! What terminate mode knows of one replica's priority levels (APF; `Flows` keeps one per
//! replica): the levels it is rejecting —
//! each whose requests it answered with APF's 429 lately, until that answer's `Retry-After`
//! has passed — and, for each level, its requests in flight on it and its response latency.
//! Terminate mode places a level's requests on another replica while this one rejects the
//! level, and a request's first attempt on another while this one holds more of the level's
//! requests than another (its flow control queues them).
//!
//! Levels are known by their UIDs (what the `X-Kubernetes-PF-PriorityLevel-UID` header says);
//! an apiserver has about ten, and a replica keeps at most [`MAX_LEVELS`] of each kind here.

use crate::terminate::exchange::in_flight::LevelTally;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most levels kept per replica; a rejection of another is not remembered, nor are its
/// requests counted.
pub const MAX_LEVELS: usize = 64;

/// One replica's priority levels.
#[derive(Default)]
pub struct PriorityLevels {
    /// Each level it rejects and when it may be sent requests again.
    until: Mutex<Vec<(Arc<str>, Instant)>>,
    /// The latest of those, in ms on [`clock_ms`] (0: none): most requests find it passed and
    /// read no further.
    latest_ms: AtomicU64,
    /// Requests of each level in flight on it (not long-running ones); a level leaves when
    /// none is.
    in_flight: Mutex<Vec<(Arc<str>, u32)>>,
    /// Each level's response latency on it, a moving average in µs (its last eight answers,
    /// about): what its queues add. Shown to the operator; placement goes by `in_flight`,
    /// which a replica that gets none of a level's requests cannot leave stale.
    latency_us: Mutex<Vec<(Arc<str>, u64)>>,
}

impl PriorityLevels {
    /// A request of `level` starts on the replica: whether it is counted (not when
    /// [`MAX_LEVELS`] others are); a counted one must end with [`PriorityLevels::ended`].
    pub fn started(&self, level: &Arc<str>) -> bool {
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = counts.iter_mut().find(|(l, _)| l == level) {
            *n += 1;
        } else if counts.len() < MAX_LEVELS {
            counts.push((level.clone(), 1));
        } else {
            return false;
        }
        true
    }

    /// A counted request of `level` ended.
    pub fn ended(&self, level: &str) {
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = counts.iter().position(|(l, _)| &**l == level) {
            counts[i].1 -= 1;
            if counts[i].1 == 0 {
                counts.swap_remove(i);
            }
        }
    }

    /// A request of `level` was answered (its headers) after `took`.
    pub fn observed(&self, level: &Arc<str>, took: Duration) {
        let sample = took.as_micros().min(u128::from(u64::MAX)) as u64;
        let mut latencies = self.latency_us.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, average)) = latencies.iter_mut().find(|(l, _)| l == level) {
            *average = *average - *average / 8 + sample / 8;
        } else if latencies.len() < MAX_LEVELS {
            latencies.push((level.clone(), sample));
        }
    }

    /// Each level's response latency on the replica, as [`PriorityLevels::observed`] averaged it.
    pub fn latencies(&self) -> Vec<(Arc<str>, Duration)> {
        let latencies = self.latency_us.lock().unwrap_or_else(|e| e.into_inner());
        latencies
            .iter()
            .map(|(l, us)| (l.clone(), Duration::from_micros(*us)))
            .collect()
    }

    /// Each level with requests in flight on the replica now, and how many.
    pub fn all_in_flight(&self) -> Vec<(Arc<str>, u32)> {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests of `level` in flight on the replica now.
    pub fn in_flight(&self, level: &str) -> u32 {
        let counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .find(|(l, _)| &**l == level)
            .map_or(0, |(_, n)| *n)
    }

    /// The replica rejected a request of `level`, asking for `retry_after` before the next.
    pub fn rejected(&self, level: &Arc<str>, retry_after: Duration) {
        let now = Instant::now();
        let until = now + retry_after;
        let mut levels = self.until.lock().unwrap_or_else(|e| e.into_inner());
        levels.retain(|(_, u)| *u > now);
        if let Some((_, u)) = levels.iter_mut().find(|(l, _)| l == level) {
            *u = (*u).max(until);
        } else if levels.len() < MAX_LEVELS {
            levels.push((level.clone(), until));
        }
        let latest = clock_ms() + retry_after.as_millis() as u64;
        self.latest_ms.fetch_max(latest, Ordering::Relaxed);
    }

    /// Whether the replica is rejecting `level` now.
    pub fn rejects(&self, level: &str) -> bool {
        if self.latest_ms.load(Ordering::Relaxed) <= clock_ms() {
            return false;
        }
        let now = Instant::now();
        let levels = self.until.lock().unwrap_or_else(|e| e.into_inner());
        levels.iter().any(|(l, u)| &**l == level && *u > now)
    }

    /// The levels it is rejecting now, with the time left for each.
    pub fn now(&self) -> Vec<(Arc<str>, Duration)> {
        let now = Instant::now();
        let levels = self.until.lock().unwrap_or_else(|e| e.into_inner());
        levels
            .iter()
            .filter(|(_, u)| *u > now)
            .map(|(l, u)| (l.clone(), *u - now))
            .collect()
    }
}

impl LevelTally for PriorityLevels {
    fn started(&self, level: &Arc<str>) -> bool {
        PriorityLevels::started(self, level)
    }

    fn ended(&self, level: &str) {
        PriorityLevels::ended(self, level)
    }
}

/// Milliseconds since the first call.
fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_rejected_until_its_retry_after_has_passed() {
        let t = PriorityLevels::default();
        let low: Arc<str> = "low".into();
        assert!(!t.rejects("low"));
        t.rejected(&low, Duration::from_secs(60));
        assert!(t.rejects("low"));
        assert!(!t.rejects("high"));
        assert_eq!(t.now().len(), 1);
        t.rejected(&"high".into(), Duration::ZERO);
        assert!(!t.rejects("high"), "a Retry-After of 0 is already over");
        assert!(t.rejects("low"));
    }

    #[test]
    fn a_levels_requests_are_counted_while_in_flight_and_the_level_leaves_with_the_last() {
        let t = PriorityLevels::default();
        let low: Arc<str> = "low".into();
        assert_eq!(t.in_flight("low"), 0);
        assert!(t.started(&low));
        assert!(t.started(&low));
        assert_eq!(t.in_flight("low"), 2);
        assert_eq!(t.in_flight("high"), 0);
        t.ended("low");
        t.ended("low");
        assert_eq!(t.in_flight("low"), 0);
        assert!(t.in_flight.lock().unwrap().is_empty());
        for i in 0..MAX_LEVELS {
            assert!(t.started(&format!("level-{i}").into()));
        }
        assert!(!t.started(&low), "one more level is not counted");
    }

    #[test]
    fn a_levels_latency_is_a_moving_average_of_its_answers() {
        let t = PriorityLevels::default();
        let low: Arc<str> = "low".into();
        t.observed(&low, Duration::from_millis(8));
        assert_eq!(t.latencies(), [(low.clone(), Duration::from_millis(8))]);
        for _ in 0..50 {
            t.observed(&low, Duration::from_millis(2000));
        }
        let (_, average) = t.latencies()[0].clone();
        assert!(average > Duration::from_millis(1900), "{average:?}");
        for i in 0..MAX_LEVELS + 5 {
            t.observed(&format!("level-{i}").into(), Duration::from_millis(1));
        }
        assert_eq!(t.latencies().len(), MAX_LEVELS);
    }

    #[test]
    fn at_most_max_levels_are_kept() {
        let t = PriorityLevels::default();
        for i in 0..MAX_LEVELS + 10 {
            t.rejected(&format!("level-{i}").into(), Duration::from_secs(60));
        }
        assert_eq!(t.now().len(), MAX_LEVELS);
        assert!(!t.rejects(&format!("level-{}", MAX_LEVELS + 1)));
    }
}
