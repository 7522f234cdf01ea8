//! Whether a backend's failure is its own, or one every backend is about to share.
//!
//! A backend that fails `/readyz` for a reason other than shutting down (etcd lost, a stuck
//! hook, an untrusted certificate) loses its clients to the other backends. That only helps if
//! the others do not fail the same way a moment later: when etcd goes away, every apiserver's
//! `etcd` check fails within about a second of the others', and moving clients from the first
//! to fail onto the next ones breaks their watches and requests again and again, for nothing
//! (the load test's `etcd-down` row, where L4 balancers that never move anyone did better).
//!
//! So the move waits for a witness: another backend that is `ready`, whose last probe passed
//! and started at least one probe interval after this backend's first failed one (by then a
//! shared failure has reached it too), and that has not failed a probe since this backend
//! began failing (a backend recovering from the same failure is no witness: it shows the
//! failure is ending, not that it is this backend's alone).
//!
//! The cost: a backend that fails alone keeps its clients about one probe interval longer than
//! if it were drained at once (the checker asks the witnesses for a probe as soon as one can
//! count). docs/architecture.md weighs it.

use std::time::{Duration, SystemTime};

/// One backend's last probe: when it started, and whether it passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastProbe {
    /// When it started.
    pub at: SystemTime,
    /// It passed every check.
    pub passed: bool,
}

/// What another backend shows about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witness {
    /// Its last probe.
    pub last: LastProbe,
    /// When its last failed probe started, if it ever failed one.
    pub last_failed: Option<SystemTime>,
}

/// When a witness's passing probe can count for a failure that began at `failing_since`.
pub fn witness_due(failing_since: SystemTime, interval: Duration) -> SystemTime {
    failing_since + interval
}

/// Whether the failure of a backend that first failed at `failing_since` and whose last probe
/// is `failing_last` is its own, as the backends that are ready now (`ready_others`) show it,
/// with probes `interval` apart.
pub fn failure_is_own(
    failing_since: SystemTime,
    failing_last: LastProbe,
    ready_others: impl IntoIterator<Item = Witness>,
    interval: Duration,
) -> bool {
    if failing_last.passed {
        return false;
    }
    let due = witness_due(failing_since, interval);
    ready_others.into_iter().any(|w| {
        w.last.passed && w.last.at >= due && w.last_failed.is_none_or(|f| f < failing_since)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_own_only_with_a_witness_that_passed_late_enough_and_never_failed_since() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let s = |secs: f64| {
            let d = Duration::from_secs_f64(secs.abs());
            if secs < 0.0 {
                t0 - d
            } else {
                t0 + d
            }
        };
        let i = Duration::from_secs(1);
        let failing = LastProbe {
            at: s(1.5),
            passed: false,
        };
        let w = |at: f64, passed: bool, last_failed: Option<f64>| Witness {
            last: LastProbe { at: s(at), passed },
            last_failed: last_failed.map(s),
        };
        // (the failing backend's last probe, the ready others, own?)
        let table: &[(LastProbe, &[Witness], bool)] = &[
            // Another passed 1.2 s after the first failure, never failed: a witness.
            (failing, &[w(1.2, true, None)], true),
            // Its failures before this one began do not matter.
            (failing, &[w(1.2, true, Some(-30.0))], true),
            // Nobody else ready.
            (failing, &[], false),
            // The pass is too soon after the failure: a shared one may not show there yet.
            (failing, &[w(0.6, true, None)], false),
            // It failed after this failure began: recovering from the same thing.
            (failing, &[w(1.2, true, Some(0.4))], false),
            // Its last probe failed.
            (failing, &[w(1.2, false, Some(1.2))], false),
            // This backend passes now.
            (
                LastProbe {
                    at: s(1.5),
                    passed: true,
                },
                &[w(1.2, true, None)],
                false,
            ),
            // One witness among others is enough.
            (
                failing,
                &[w(1.2, true, Some(0.3)), w(1.1, true, None)],
                true,
            ),
        ];
        for (last, others, want) in table {
            assert_eq!(
                failure_is_own(t0, *last, others.iter().copied(), i),
                *want,
                "{last:?} {others:?}"
            );
        }
    }
}
