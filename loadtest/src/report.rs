//! From samples to numbers: per scenario and gateway, what failed (first attempt and
//! client-go view), which writes were left ambiguous, how long clients stalled, what watches
//! went through, how requests spread over replicas, how long until everything was fine again.
//! Rendered as Markdown and JSON; the timeline plot is `plot.rs`.

use crate::explain::{self, Explanation, Failure};
use crate::leader::LeaderReport;
use crate::record::{Kind, Sample, WatchBreak};
use crate::verify::AmbiguousWrites;
use serde::Serialize;
use std::collections::BTreeMap;

/// Width of a timeline bucket.
pub const BUCKET_MS: u64 = 100;
/// Width of a replica-share bucket.
pub const SHARE_BUCKET_MS: u64 = 1000;
/// How long replica shares are counted.
pub const SHARE_WINDOW_MS: u64 = 10_000;
/// Replica shares are counted from this long after the last fault event: every gateway here
/// takes a ready replica back after two passing checks 1 s apart, and the share measures where
/// requests go once it could have, not how fast checks are.
pub const SHARE_DELAY_MS: u64 = 3_000;
/// A request slower than this counts as a stall when measuring recovery.
const STALL_MS: f64 = 1000.0;

/// Watch counters of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchReport {
    /// Watch streams that ended or failed under their clients (informers and `kubectl get
    /// --watch`): when and how.
    pub breaks: Vec<WatchBreak>,
    /// Informer watches re-opened from their last resourceVersion.
    pub resumes: u64,
    /// Relisted after 410.
    pub relists: u64,
    /// Ended at the `timeoutSeconds` the client asked for (not breaks).
    pub timeouts: u64,
    /// Events received.
    pub events: u64,
    /// Watches the gateway continued on another replica itself, unseen by their clients (ms;
    /// kubegate's terminate mode only).
    pub gateway_resumes: Vec<u64>,
}

/// How requests spread over replicas in the 10 s from 3 s after the last fault event.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaShare {
    /// Successful requests answered by each replica.
    pub requests: Vec<u64>,
    /// Most over least; 1.0 is perfect, none when a replica served nothing.
    pub max_over_min: Option<f64>,
}

/// The upstream attempts of kubegate's terminate mode over a run: what its replicas answered,
/// and what it sent again to another replica, by what failed before.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamAttempts {
    /// Attempts a replica answered (`kubegate_requests_total`).
    pub answered: u64,
    /// Attempts sent to another replica (`kubegate_request_retries_total`), by reason; reasons
    /// that never happened left out.
    pub retried: BTreeMap<String, u64>,
}

impl UpstreamAttempts {
    /// Attempts retried, as a share of those answered.
    pub fn extra(&self) -> f64 {
        self.retried.values().sum::<u64>() as f64 / self.answered.max(1) as f64
    }
}

/// One scenario against one gateway.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Scenario.
    pub scenario: String,
    /// Gateway.
    pub gateway: String,
    /// `ok`, `not installed: ...` or `failed: ...`.
    pub status: String,
    /// Requests by kind.
    pub requests: BTreeMap<String, u64>,
    /// First-attempt failures by error class, ambiguous writes apart.
    pub first_attempt_failures: BTreeMap<String, u64>,
    /// Failures a client-go client would have returned, by error class, ambiguous writes
    /// apart.
    pub client_go_failures: BTreeMap<String, u64>,
    /// The same failures by kind of request (`get`, `list`, `create`, ...): which of them
    /// were reads.
    pub client_go_failures_by_kind: BTreeMap<String, u64>,
    /// Writes that failed without saying whether they were applied, checked in the store.
    pub ambiguous_writes: AmbiguousWrites,
    /// Failed real kubectl runs (a `get --watch` that ended counts as one), ambiguous creates
    /// included, apart from the maps above.
    pub kubectl_failures: u64,
    /// Real kubectl runs.
    pub kubectl_runs: u64,
    /// Longest time one request took until its final answer, ms.
    pub longest_stall_ms: f64,
    /// Watch counters.
    pub watch: WatchReport,
    /// Leader election through the gateway.
    pub leader: LeaderReport,
    /// Every failure and break, attributed to its fault and mechanism.
    pub explanation: Explanation,
    /// From the first fault to the end of the last failure or stall, ms.
    pub recovery_ms: Option<u64>,
    /// `all-down`, `etcd-down` and `blackout`: from the first replica ready again to the first
    /// request completed after it, ms (negative: the gateway served before that).
    pub served_again_ms: Option<i64>,
    /// Requests per replica after the last fault event.
    pub replica_share: Option<ReplicaShare>,
    /// Latency of successful requests, ms.
    pub p50_ms: f64,
    /// Latency of successful requests, ms.
    pub p99_ms: f64,
    /// Fault events (ms, what).
    pub events: Vec<(u64, String)>,
    /// Per 100 ms: successes and first-attempt failures.
    pub timeline: Vec<(u64, u64)>,
    /// What a gateway that terminates TLS sent its replicas, from its own metrics at the end
    /// of the run (kubegate's terminate mode; none for the peers).
    pub upstream: Option<UpstreamAttempts>,
    /// Per second: successful requests answered by each replica.
    pub replica_timeline: Vec<Vec<u64>>,
}

impl RunReport {
    /// A run that did not happen.
    pub fn unavailable(scenario: &str, gateway: &str, status: String) -> RunReport {
        RunReport {
            scenario: scenario.into(),
            gateway: gateway.into(),
            status,
            requests: BTreeMap::new(),
            first_attempt_failures: BTreeMap::new(),
            client_go_failures: BTreeMap::new(),
            client_go_failures_by_kind: BTreeMap::new(),
            ambiguous_writes: AmbiguousWrites::default(),
            kubectl_failures: 0,
            kubectl_runs: 0,
            longest_stall_ms: 0.0,
            watch: WatchReport::default(),
            leader: LeaderReport::default(),
            explanation: Explanation::default(),
            recovery_ms: None,
            served_again_ms: None,
            replica_share: None,
            p50_ms: 0.0,
            p99_ms: 0.0,
            events: Vec::new(),
            timeline: Vec::new(),
            replica_timeline: Vec::new(),
            upstream: None,
        }
    }

    /// Computes the numbers from what the clients recorded.
    pub fn from_samples(run: Run<'_>) -> RunReport {
        let Run {
            scenario,
            gateway,
            samples,
            replicas,
            watch,
            ambiguous_writes,
            events,
            end_ms,
            leader,
        } = run;
        let mut r = RunReport::unavailable(scenario, gateway, "ok".into());
        let mut ok_latencies = Vec::new();
        let buckets = (end_ms / BUCKET_MS + 1) as usize;
        r.timeline = vec![(0, 0); buckets];
        r.replica_timeline = vec![vec![0; replicas]; (end_ms / SHARE_BUCKET_MS + 1) as usize];
        for s in samples {
            *r.requests.entry(s.kind.as_str().into()).or_default() += 1;
            let done_ms = (s.at_ms as f64 + s.latency_ms) as u64;
            if let (None, Some(i)) = (s.final_error, s.replica) {
                let b = (done_ms / SHARE_BUCKET_MS) as usize;
                if let Some(n) = r.replica_timeline.get_mut(b).and_then(|row| row.get_mut(i)) {
                    *n += 1;
                }
            }
            if s.kind == Kind::Kubectl {
                // Real kubectl processes are reported on their own: they are not client-go
                // clients that re-watch, and their runs are not single requests.
                r.kubectl_runs += 1;
                r.kubectl_failures += s.final_error.is_some() as u64;
                continue;
            }
            if !s.ambiguous {
                if let Some(e) = s.first_error {
                    *r.first_attempt_failures.entry(e.label()).or_default() += 1;
                }
                if let Some(e) = s.final_error {
                    *r.client_go_failures.entry(e.label()).or_default() += 1;
                    *r.client_go_failures_by_kind
                        .entry(s.kind.as_str().into())
                        .or_default() += 1;
                }
            }
            if s.final_error.is_none() {
                ok_latencies.push(s.latency_ms);
            }
            r.longest_stall_ms = r.longest_stall_ms.max(s.latency_ms);
            if let Some(b) = r
                .timeline
                .get_mut(((done_ms / BUCKET_MS) as usize).min(buckets - 1))
            {
                if s.first_error.is_some() {
                    b.1 += 1;
                } else {
                    b.0 += 1;
                }
            }
        }
        ok_latencies.sort_by(|a, b| a.total_cmp(b));
        r.p50_ms = percentile(&ok_latencies, 0.50);
        r.p99_ms = percentile(&ok_latencies, 0.99);
        if let Some(&(fault, _)) = events.first() {
            let last_bad = samples
                .iter()
                .filter(|s| {
                    s.kind != Kind::Kubectl && s.at_ms as f64 + s.latency_ms >= fault as f64
                })
                .filter(|s| s.first_error.is_some() || s.latency_ms > STALL_MS)
                .map(|s| (s.at_ms as f64 + s.latency_ms) as u64)
                .max();
            r.recovery_ms = Some(last_bad.map(|t| t.saturating_sub(fault)).unwrap_or(0));
        }
        r.served_again_ms = served_again(scenario, samples, &events);
        r.replica_share = replica_share(samples, replicas, &events);
        r.ambiguous_writes = ambiguous_writes;
        r.explanation = explain_run(scenario, gateway, samples, &watch, &leader, &events);
        r.watch = watch;
        r.leader = leader;
        r.events = events;
        r
    }

    /// client-go-view failures, all classes, ambiguous writes apart.
    pub fn client_go_failed(&self) -> u64 {
        self.client_go_failures.values().sum()
    }
}

/// What one run recorded, for [`RunReport::from_samples`].
pub struct Run<'a> {
    /// Scenario.
    pub scenario: &'a str,
    /// Gateway.
    pub gateway: &'a str,
    /// Every request the clients made.
    pub samples: &'a [Sample],
    /// Replicas in the control plane.
    pub replicas: usize,
    /// Watch counters.
    pub watch: WatchReport,
    /// Ambiguous writes as checked in the store.
    pub ambiguous_writes: AmbiguousWrites,
    /// Fault events (ms, what).
    pub events: Vec<(u64, String)>,
    /// When traffic stopped, ms.
    pub end_ms: u64,
    /// Leader election's figures.
    pub leader: LeaderReport,
}

/// Every failure of a run, attributed to the scenario's fault and a mechanism.
fn explain_run(
    scenario: &str,
    gateway: &str,
    samples: &[Sample],
    watch: &WatchReport,
    leader: &LeaderReport,
    events: &[(u64, String)],
) -> Explanation {
    let windows = explain::scenario_window(scenario, events);
    let terminating = gateway.ends_with("-l7") || gateway.contains("-l7-");
    let attribute = |at, f| explain::attribute(at, f, &windows, terminating);
    let requests = samples.iter().filter_map(|s| {
        let failure = match (s.kind, s.first_error, s.final_error) {
            (Kind::Kubectl, _, Some(e)) => Failure::Kubectl(e),
            (Kind::Kubectl, _, None) => return None,
            (_, _, Some(e)) => Failure::Request(e),
            (_, Some(e), None) => Failure::FirstAttempt(e),
            (_, None, None) => return None,
        };
        Some(attribute(s.at_ms, failure))
    });
    let breaks = watch
        .breaks
        .iter()
        .map(|b| attribute(b.at_ms, Failure::WatchBreak(b.how)));
    let lost = leader
        .lost
        .iter()
        .map(|(at, _)| attribute(*at, Failure::LeadershipLost));
    Explanation::of(requests.chain(breaks).chain(lost))
}

/// After every replica was down (`all-down`, or etcd gone in `etcd-down` and `blackout`): from
/// the first `... ready` event to the first request that completed successfully after it.
fn served_again(scenario: &str, samples: &[Sample], events: &[(u64, String)]) -> Option<i64> {
    if !["all-down", "etcd-down", "blackout"].contains(&scenario) {
        return None;
    }
    let first_ready = events
        .iter()
        .position(|(_, what)| what.ends_with(" ready"))?;
    let ready = events[first_ready].0;
    // Serving can only begin again after the event before it: every replica exited, or
    // etcd started.
    let after = events[first_ready.checked_sub(1)?].0;
    let first_ok = samples
        .iter()
        .filter(|s| s.kind != Kind::Kubectl && s.final_error.is_none())
        .map(|s| (s.at_ms as f64 + s.latency_ms) as u64)
        .filter(|&done| done > after)
        .min()?;
    Some(first_ok as i64 - ready as i64)
}

/// Requests per replica in the 10 s from 3 s after the last fault event.
fn replica_share(
    samples: &[Sample],
    replicas: usize,
    events: &[(u64, String)],
) -> Option<ReplicaShare> {
    let from = events.last()?.0 + SHARE_DELAY_MS;
    let mut requests = vec![0u64; replicas];
    for s in samples {
        let done = (s.at_ms as f64 + s.latency_ms) as u64;
        if s.final_error.is_some() || done < from || done > from + SHARE_WINDOW_MS {
            continue;
        }
        if let Some(n) = s.replica.and_then(|i| requests.get_mut(i)) {
            *n += 1;
        }
    }
    let max = *requests.iter().max()?;
    let min = *requests.iter().min()?;
    Some(ReplicaShare {
        max_over_min: (min > 0).then(|| max as f64 / min as f64),
        requests,
    })
}

pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn classes(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "0".into();
    }
    let total: u64 = m.values().sum();
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!("{total} ({})", parts.join(", "))
}

fn share(s: &Option<ReplicaShare>) -> String {
    match s {
        None => "-".into(),
        Some(s) => {
            let counts: Vec<String> = s.requests.iter().map(u64::to_string).collect();
            match s.max_over_min {
                Some(r) => format!("{r:.2} ({})", counts.join("/")),
                None => format!("∞ ({})", counts.join("/")),
            }
        }
    }
}

/// The Markdown table of all runs, and one of the outages' recoveries when there were any.
pub fn markdown(runs: &[RunReport]) -> String {
    let mut out = String::from(
        "| scenario | gateway | requests | failed, first attempt | failed, client-go view | ambiguous writes (applied) | kubectl failed | watch breaks seen / resumed by gateway / relists | leaderships lost (leader changes) | longest renewal gap | longest stall | recovery | replica share | p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        if r.status != "ok" {
            out.push_str(&format!(
                "| {} | {} | {} | | | | | | | | | | | |\n",
                r.scenario, r.gateway, r.status
            ));
            continue;
        }
        let total: u64 = r.requests.values().sum();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} ({}) | {}/{} | {} / {} / {} | {} ({}) | {:.1} s | {:.1} s | {} | {} | {:.1} / {:.1} ms |\n",
            r.scenario,
            r.gateway,
            total,
            classes(&r.first_attempt_failures),
            classes(&r.client_go_failures),
            r.ambiguous_writes.total,
            r.ambiguous_writes.applied,
            r.kubectl_failures,
            r.kubectl_runs,
            r.watch.breaks.len(),
            r.watch.gateway_resumes.len(),
            r.watch.relists,
            r.leader.lost.len(),
            r.leader.changes,
            r.leader.longest_gap_ms as f64 / 1e3,
            r.longest_stall_ms / 1e3,
            r.recovery_ms
                .map(|m| format!("{:.1} s", m as f64 / 1e3))
                .unwrap_or_else(|| "-".into()),
            share(&r.replica_share),
            r.p50_ms,
            r.p99_ms
        ));
    }
    let explained: Vec<&RunReport> = runs
        .iter()
        .filter(|r| !r.explanation.explained.is_empty() || !r.explanation.unexplained.is_empty())
        .collect();
    if !explained.is_empty() {
        out.push_str(
            "\n| scenario | gateway | what failed, and why | count |\n|---|---|---|---|\n",
        );
        for r in explained {
            for (what, n) in &r.explanation.explained {
                out.push_str(&format!(
                    "| {} | {} | {what} | {n} |\n",
                    r.scenario, r.gateway
                ));
            }
            for u in &r.explanation.unexplained {
                out.push_str(&format!(
                    "| {} | {} | **unexplained**: {u} | 1 |\n",
                    r.scenario, r.gateway
                ));
            }
        }
    }
    let upstream: Vec<(&RunReport, &UpstreamAttempts)> = runs
        .iter()
        .filter_map(|r| Some((r, r.upstream.as_ref()?)))
        .filter(|(_, u)| !u.retried.is_empty())
        .collect();
    if !upstream.is_empty() {
        out.push_str("\n| scenario | gateway | upstream attempts answered | sent again to another replica |\n|---|---|---|---|\n");
        for (r, u) in upstream {
            out.push_str(&format!(
                "| {} | {} | {} | {} ({:.1} %: {}) |\n",
                r.scenario,
                r.gateway,
                u.answered,
                u.retried.values().sum::<u64>(),
                u.extra() * 100.0,
                crate::resumes::by_label_line(&u.retried)
            ));
        }
    }
    let outages: Vec<&RunReport> = runs
        .iter()
        .filter(|r| r.served_again_ms.is_some())
        .collect();
    if !outages.is_empty() {
        out.push_str("\n| scenario | gateway | first request served after the first replica was ready again |\n|---|---|---|\n");
        for r in outages {
            let ms = r.served_again_ms.unwrap_or_default();
            out.push_str(&format!(
                "| {} | {} | {}{:.2} s |\n",
                r.scenario,
                r.gateway,
                if ms < 0 { "−" } else { "" },
                ms.unsigned_abs() as f64 / 1e3
            ));
        }
    }
    out
}
