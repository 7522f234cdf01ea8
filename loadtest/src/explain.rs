//! Every failure and break a client saw, attributed to the fault that caused it and to the
//! mechanism by which it did: a request that failed (first attempt or after client-go's
//! retries), a watch that broke, a kubectl run that failed, a leadership lost. One that no
//! fault's window covers, or whose fault has no known mechanism for it, is *unexplained*; the
//! soak fails its check when there is one.
//!
//! The mechanisms are what each fault does to a client, whatever the gateway: a SIGKILLed
//! replica cuts its connections with requests in flight; a frozen one holds them until
//! something gives up on it; a replica without etcd answers storage requests 500 until it is
//! taken out; a replica shutting down answers 429/503 and closes its connections. A gateway
//! decides how many clients meet each, which is what the report compares.

use crate::client::ErrorClass;
use crate::record::WatchEndSeen;
use serde::Serialize;
use std::collections::BTreeMap;

/// How long after a fault's window ends what the clients see can still be its doing: the
/// longest a client-go client can take to notice a fault that happened under it (a frozen
/// replica's request runs into its timeout) and retry.
pub const AFTERMATH_MS: u64 = 20_000;

/// What a fault does to the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGTERM: `/readyz` fails, serving continues for the shutdown delay, then 429/503 and
    /// closed connections, and the process exits (and is started again).
    GracefulRestart,
    /// SIGKILL: the process and its connections are gone at once.
    Crash,
    /// SIGSTOP: the process answers nothing, its connections stay open.
    Freeze,
    /// A replica's etcd check fails: `/readyz` fails, storage requests answer 500.
    NotReady,
    /// Every replica is SIGTERMed at once.
    AllDown,
    /// etcd is stopped under every replica.
    EtcdDown,
    /// One replica's priority level is saturated by traffic the gateway does not see: its
    /// requests of that level get priority and fairness's 429.
    Throttled,
    /// kubegate's configuration changes (a reload, a backend added or removed).
    Config,
    /// A rolling upgrade: each replica restarted gracefully as a version that serves other
    /// group-versions.
    Upgrade,
}

impl Fault {
    /// The fault of a matrix scenario.
    pub fn of_scenario(scenario: &str) -> Option<Fault> {
        Some(match scenario {
            "rolling-restart" | "rolling-restart-goaway" | "slow-start" => Fault::GracefulRestart,
            "crash" | "crash-writes" => Fault::Crash,
            "freeze" | "freeze-leader" => Fault::Freeze,
            "flap" | "not-ready" => Fault::NotReady,
            "all-down" => Fault::AllDown,
            "etcd-down" | "blackout" => Fault::EtcdDown,
            "upgrade" => Fault::Upgrade,
            "apf-hot" => Fault::Throttled,
            _ => return None,
        })
    }
}

/// A fault and when it held, ms since the run began.
#[derive(Debug, Clone)]
pub struct FaultWindow {
    /// When it began.
    pub from_ms: u64,
    /// When it was over (the replica ready again, thawed, ...).
    pub to_ms: u64,
    /// What it does.
    pub fault: Fault,
    /// How the report names it.
    pub label: String,
}

/// The one window of a matrix run: from its first fault event to its last.
pub fn scenario_window(scenario: &str, events: &[(u64, String)]) -> Vec<FaultWindow> {
    match (Fault::of_scenario(scenario), events.first(), events.last()) {
        (Some(fault), Some(first), Some(last)) => vec![FaultWindow {
            from_ms: first.0,
            to_ms: last.0,
            fault,
            label: scenario.to_string(),
        }],
        _ => Vec::new(),
    }
}

/// Something a client saw fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A request's first attempt failed (client-go may have retried it).
    FirstAttempt(ErrorClass),
    /// A request failed after client-go's retries.
    Request(ErrorClass),
    /// A watch ended under its client.
    WatchBreak(WatchEndSeen),
    /// A kubectl run failed.
    Kubectl(ErrorClass),
    /// A leader's renewals failed past the renew deadline.
    LeadershipLost,
}

impl Failure {
    /// How the report names it.
    pub fn label(self) -> String {
        match self {
            Failure::FirstAttempt(e) => format!("first attempt {}", e.label()),
            Failure::Request(e) => format!("request {}", e.label()),
            Failure::WatchBreak(how) => format!("watch {}", how.label()),
            Failure::Kubectl(e) => format!("kubectl {}", e.label()),
            Failure::LeadershipLost => "leadership lost".into(),
        }
    }
}

/// How `fault` makes a client see `failure`; `None` when it does not explain it.
/// `terminating`: the gateway terminates TLS and answers some failures itself.
pub fn mechanism(fault: Fault, failure: Failure, terminating: bool) -> Option<&'static str> {
    use ErrorClass as E;
    use Fault as F;
    use WatchEndSeen as W;
    let error = match failure {
        Failure::FirstAttempt(e) | Failure::Request(e) | Failure::Kubectl(e) => Some(e),
        _ => None,
    };
    if fault == F::Upgrade {
        // An upgrade is a graceful restart, and version skew besides.
        if error == Some(E::Http(404)) {
            return Some("404: a replica that does not serve the group-version discovery showed (version skew)");
        }
        return mechanism(F::GracefulRestart, failure, terminating);
    }
    if let Failure::WatchBreak(W::Expired) = failure {
        return Some("410: the replica's watch cache no longer held the watch's resourceVersion; the client relists");
    }
    if let Failure::LeadershipLost = failure {
        return Some(match fault {
            F::Freeze => "renewals stuck on the frozen replica past the renew deadline: client-go keeps a connection until its ping times out (45 s)",
            F::Crash => "renewals failed while the leader's replica was killed",
            F::GracefulRestart => "renewals failed while the leader's replica shut down",
            F::NotReady => "renewals answered 500 by the replica without etcd",
            F::EtcdDown => "no replica could write the Lease without etcd",
            F::AllDown => "no replica could write the Lease while every one restarted",
            F::Throttled => "renewals rejected 429 by the saturated replica's priority and fairness",
            F::Config | F::Upgrade => return None,
        });
    }
    if let Failure::WatchBreak(how) = failure {
        return match (fault, how) {
            (F::GracefulRestart, W::Ended) => Some("the replica ended its watches as it shut down"),
            (F::GracefulRestart, _) => Some("the replica's connections closed as it exited"),
            (F::Crash, _) => Some("the watch's connection was cut by the replica's SIGKILL"),
            (F::Freeze, _) => Some("the watch's connection to the frozen replica was closed"),
            (F::NotReady, _) => Some(
                "the watch's connection to the replica without etcd was closed when it was drained",
            ),
            (F::EtcdDown, _) => Some("the watch ended while no replica had etcd"),
            (F::AllDown, _) => Some("every replica exited"),
            (F::Config, W::Failed | W::KubectlExited | W::Ended) => {
                Some("the watch's connection to a removed backend was closed at its drain deadline")
            }
            (F::Config | F::Upgrade | F::Throttled, _) => None,
        };
    }
    let e = error?;
    match (fault, e) {
        (F::GracefulRestart, E::Reset) => {
            Some("the replica closed its connections at the end of its shutdown")
        }
        (F::GracefulRestart, E::Http429 | E::Http5xx) => {
            Some("429/503 from the replica shutting down")
        }
        (F::GracefulRestart, E::Refused) => Some("the replica's listener closed as it exited"),
        (F::Crash, E::Reset) => Some("the request's connection was cut by the replica's SIGKILL"),
        (F::Crash, E::Http5xx) if terminating => Some(
            "502 from the gateway: the killed replica held the write, which may have been applied",
        ),
        (F::Crash, E::Refused) => Some("the killed replica refused connections until it restarted"),
        (F::Freeze, E::Timeout) => Some("the request waited on the frozen replica"),
        (F::Freeze, E::Reset) => Some("the connection to the frozen replica was closed"),
        (F::Freeze, E::Http5xx) if terminating => Some(
            "502 from the gateway: the frozen replica held the write, which may have been applied",
        ),
        (F::NotReady, E::Http5xx) => {
            Some("500 from the replica without etcd, before it was taken out")
        }
        (F::NotReady, E::Reset) => {
            Some("the connection to the replica without etcd was closed when it was drained")
        }
        (F::EtcdDown, E::Http5xx | E::Timeout) => Some("500: no replica can reach etcd"),
        (F::EtcdDown, E::Reset) => Some("the connection was closed while no replica had etcd"),
        (F::AllDown, E::Refused | E::Reset | E::Http5xx | E::Http429 | E::Timeout) => {
            Some("every replica was shutting down or gone")
        }
        (F::Throttled, E::Http429) => {
            Some("429 from the saturated replica's priority and fairness, before any handler ran")
        }
        (F::Config, E::Reset) => {
            Some("the connection to a removed backend was closed at its drain deadline")
        }
        _ => None,
    }
}

/// One failure with what explains it.
#[derive(Debug, Clone, Serialize)]
pub struct Attributed {
    /// When, ms since the run began.
    pub at_ms: u64,
    /// What failed.
    pub failure: String,
    /// The fault whose window covers it.
    pub fault: Option<String>,
    /// How that fault caused it.
    pub mechanism: Option<String>,
}

impl Attributed {
    /// Neither a fault nor a mechanism explains it.
    pub fn unexplained(&self) -> bool {
        self.mechanism.is_none()
    }
}

/// As reports list it: what failed, when, and the fault whose window it fell in.
impl std::fmt::Display for Attributed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {:.1} s", self.failure, self.at_ms as f64 / 1e3)?;
        match &self.fault {
            Some(fault) => write!(f, " (during {fault})"),
            None => Ok(()),
        }
    }
}

/// Attributes `failure` at `at_ms` to a fault whose window (and aftermath) covers it and
/// whose mechanism explains it, the latest first: windows overlap (a crash during another
/// replica's etcd loss), and the failure is the doing of the one that can cause it.
pub fn attribute(
    at_ms: u64,
    failure: Failure,
    windows: &[FaultWindow],
    terminating: bool,
) -> Attributed {
    let mut covering: Vec<&FaultWindow> = windows
        .iter()
        .filter(|w| at_ms + 500 >= w.from_ms && at_ms <= w.to_ms + AFTERMATH_MS)
        .collect();
    covering.sort_by_key(|w| std::cmp::Reverse(w.from_ms));
    let explained = covering
        .iter()
        .find_map(|w| mechanism(w.fault, failure, terminating).map(|m| (*w, m)));
    let (window, mechanism) = match explained {
        Some((w, m)) => (Some(w), Some(m.to_string())),
        None => (covering.first().copied(), None),
    };
    Attributed {
        at_ms,
        failure: failure.label(),
        fault: window.map(|w| w.label.clone()),
        mechanism,
    }
}

/// A run's failures, explained: counts by fault, failure and mechanism, and the unexplained
/// ones one by one.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Explanation {
    /// (fault, failure, mechanism) → count.
    pub explained: BTreeMap<String, u64>,
    /// Those nothing explains.
    pub unexplained: Vec<Attributed>,
}

impl Explanation {
    /// Collects `attributed`.
    pub fn of(attributed: impl IntoIterator<Item = Attributed>) -> Explanation {
        let mut e = Explanation::default();
        for a in attributed {
            if a.unexplained() {
                e.unexplained.push(a);
                continue;
            }
            let f = a.fault.as_deref().unwrap_or("-");
            let m = a.mechanism.as_deref().unwrap_or("-");
            *e.explained
                .entry(format!("{f} · {} · {m}", a.failure))
                .or_default() += 1;
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(fault: Fault) -> Vec<FaultWindow> {
        vec![FaultWindow {
            from_ms: 10_000,
            to_ms: 20_000,
            fault,
            label: "a fault".into(),
        }]
    }

    const RESET: Failure = Failure::Request(ErrorClass::Reset);

    /// [`attribute`] of a failure at `at_ms` with one window of `fault` (10–20 s).
    fn in_window(at_ms: u64, failure: Failure, fault: Fault, terminating: bool) -> Attributed {
        attribute(at_ms, failure, &window(fault), terminating)
    }

    #[test]
    fn a_failure_inside_a_window_with_a_mechanism_is_explained() {
        let a = in_window(12_000, RESET, Fault::Crash, false);
        assert_eq!(a.fault.as_deref(), Some("a fault"));
        assert!(a.mechanism.unwrap().contains("SIGKILL"));
        // Within the aftermath too.
        let a = in_window(
            24_000,
            Failure::WatchBreak(WatchEndSeen::Failed),
            Fault::Freeze,
            true,
        );
        assert!(!a.unexplained());
    }

    #[test]
    fn outside_every_window_or_without_a_mechanism_is_unexplained() {
        // The window (10–20 s) and its aftermath end at 40 s.
        let outside = in_window(40_001, RESET, Fault::Crash, false);
        assert!(outside.unexplained() && outside.fault.is_none());
        // A freeze does not refuse connections: a refused request during one is not its doing.
        let unrelated = in_window(
            12_000,
            Failure::Request(ErrorClass::Refused),
            Fault::Freeze,
            false,
        );
        assert!(unrelated.unexplained() && unrelated.fault.is_some());
        let e = Explanation::of([outside, unrelated]);
        assert_eq!(e.unexplained.len(), 2);
        assert!(e.explained.is_empty());
    }

    #[test]
    fn of_overlapping_windows_the_one_that_can_cause_it_explains_it() {
        let windows = vec![
            FaultWindow {
                from_ms: 10_000,
                to_ms: 20_000,
                fault: Fault::NotReady,
                label: "not ready".into(),
            },
            FaultWindow {
                from_ms: 15_000,
                to_ms: 16_000,
                fault: Fault::Freeze,
                label: "freeze".into(),
            },
        ];
        let during_both = |error| attribute(15_500, Failure::Request(error), &windows, false);
        // A 500 during the freeze: a replica without etcd answers 500, a frozen one does not.
        let a = during_both(ErrorClass::Http5xx);
        assert_eq!(a.fault.as_deref(), Some("not ready"));
        assert!(!a.unexplained());
        // A timeout: the freeze's.
        assert_eq!(
            during_both(ErrorClass::Timeout).fault.as_deref(),
            Some("freeze")
        );
    }
}
