//! What held during the soak: the checks, the report (markdown and JSON) and the plot.

use super::faults::{FaultKind, Window};
use crate::client::{Client, ErrorClass};
use crate::control_plane::ControlPlane;
use crate::explain::{self, Explanation, Failure, FaultWindow};
use crate::leader::{LeaderReport, Leadership};
use crate::record::{Kind, Recorder};
use crate::sampler::Reading;
use crate::traffic::NAMESPACE;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Traffic runs this long after the last fault: as long as a failure can follow its fault
/// (`explain::AFTERMATH_MS`).
pub const AFTERMATH: Duration = Duration::from_millis(crate::explain::AFTERMATH_MS);

/// RSS may grow this much over its idle baseline and still count as bounded (buffers and
/// allocator pools a busy process keeps).
const RSS_ALLOWANCE_KIB: u64 = 64 * 1024;
/// Descriptors over the baseline once traffic stopped that still count as returned (a probe
/// or an upstream connection being replaced at that moment).
const FD_ALLOWANCE: u64 = 8;

/// Everything the verdict is drawn from.
pub struct Evidence<'a> {
    /// How long faults were injected.
    pub duration: Duration,
    /// The fault plan's seed.
    pub seed: u64,
    /// When traffic stopped, ms.
    pub end_ms: u64,
    /// The faults as they happened.
    pub windows: Vec<Window>,
    /// Each listener's recorder and leader election.
    pub recorders: &'a [(&'static str, Arc<Recorder>, Arc<Leadership>)],
    /// Configmap names in the store at the end.
    pub store: &'a HashSet<String>,
    /// kubegate's resources over time.
    pub samples: Vec<Reading>,
    /// Idle, before traffic.
    pub baseline: Reading,
    /// Descriptors kubegate keeps for good beyond the baseline: those of the backends the
    /// faults added.
    pub kept_fds: u64,
    /// After traffic stopped and descriptors settled (or 60 s).
    pub settled: Reading,
    /// kubegate is still the process it started as.
    pub still_running: bool,
    /// Its PID.
    pub pid: u32,
    /// Watches kubegate continued on another replica by itself, by cause (its metric at the
    /// end).
    pub watch_resumes_by_cause: BTreeMap<String, u64>,
}

/// One listener's traffic.
#[derive(Debug, Clone, Serialize)]
pub struct ListenerReport {
    /// `passthrough` or `terminate`.
    pub listener: String,
    /// Requests made.
    pub requests: u64,
    /// Requests whose first attempt failed.
    pub failed_first: u64,
    /// Requests that failed after client-go's retries (client-visible).
    pub failed: u64,
    /// Of those, ones no fault window explains: (start ms, error).
    pub unexplained: Vec<(u64, String)>,
    /// Watch streams that broke under their client.
    pub watch_breaks: u64,
    /// Watch breaks outside every fault window (ms).
    pub unexplained_watch_breaks: Vec<u64>,
    /// Watches that ended at the `timeoutSeconds` their client asked for (not breaks).
    pub watch_timeouts: u64,
    /// Watches kubegate continued on another replica, unseen by the client.
    pub gateway_watch_resumes: u64,
    /// Creates the client saw succeed.
    pub creates_acknowledged: u64,
    /// Of those, missing from the store at the end (lost).
    pub creates_lost: Vec<String>,
    /// Creates answered 409 although their name is unique: sent twice.
    pub creates_applied_twice: u64,
    /// Writes whose failure left their fate unknown to the client.
    pub ambiguous_writes: u64,
    /// The longest any request took, retries included, ms.
    pub longest_stall_ms: f64,
    /// Failed requests by the fault whose window explains them (the latest one).
    pub failed_by_fault: BTreeMap<String, u64>,
    /// Failed requests by request kind and error.
    pub failed_by_error: BTreeMap<String, u64>,
    /// Leader election through this listener.
    pub leader: LeaderReport,
    /// Every failure and break, attributed to its fault and mechanism.
    pub explanation: Explanation,
    /// Every failure and break where it happened, for the plot.
    pub marks: Vec<Mark>,
}

/// A failure or break on the plot.
#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    /// When, ms since the soak began.
    pub at_ms: u64,
    /// What kind.
    pub kind: MarkKind,
}

/// The kinds of failure the plot tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// A request's first attempt failed; client-go's retry made it good.
    FirstAttempt,
    /// A request failed after client-go's retries.
    Request,
    /// A watch broke under its client.
    WatchBreak,
    /// A leader's renewals failed past the renew deadline.
    LeadershipLost,
}

/// One check and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What must hold.
    pub what: String,
    /// Whether it did.
    pub passed: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The soak's report.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Faults were injected this long, s.
    pub duration_s: u64,
    /// The fault plan's seed.
    pub seed: u64,
    /// Faults, in order.
    pub faults: Vec<Window>,
    /// Faults by kind.
    pub fault_counts: BTreeMap<FaultKind, u64>,
    /// Per listener.
    pub listeners: Vec<ListenerReport>,
    /// kubegate's PID (the same from start to end when it never restarted).
    pub pid: u32,
    /// Idle, before traffic.
    pub baseline: Reading,
    /// The highest RSS and descriptor count seen.
    pub peak: Reading,
    /// After traffic stopped.
    pub settled: Reading,
    /// The checks.
    pub checks: Vec<Check>,
    /// kubegate's resources over time.
    pub samples: Vec<Reading>,
    /// When traffic stopped, ms.
    pub end_ms: u64,
    /// Watches kubegate continued on another replica by itself, by cause (`moved`: to even the
    /// share; `drained`: off a replica shutting down; ...).
    pub watch_resumes_by_cause: BTreeMap<String, u64>,
}

impl SoakReport {
    /// Every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// The soak's faults as the explainer sees them.
fn fault_windows(windows: &[Window]) -> Vec<FaultWindow> {
    windows
        .iter()
        .map(|w| FaultWindow {
            from_ms: w.from_ms,
            to_ms: w.to_ms,
            fault: match w.kind {
                FaultKind::GracefulRestart => explain::Fault::GracefulRestart,
                FaultKind::Crash => explain::Fault::Crash,
                FaultKind::Freeze => explain::Fault::Freeze,
                FaultKind::Flap | FaultKind::NotReady => explain::Fault::NotReady,
                FaultKind::ReloadValid
                | FaultKind::ReloadInvalid
                | FaultKind::SighupStorm
                | FaultKind::AddBackend
                | FaultKind::RemoveBackend => explain::Fault::Config,
            },
            label: w.fault.clone(),
        })
        .collect()
}

/// The latest fault whose window (its span, then [`AFTERMATH`]) overlaps `[from, to]`, if any.
fn explaining(windows: &[Window], from: u64, to: u64) -> Option<&Window> {
    let after = AFTERMATH.as_millis() as u64;
    windows
        .iter()
        .filter(|w| from <= w.to_ms + after && to >= w.from_ms)
        .max_by_key(|w| w.from_ms)
}

/// Names of the configmaps in the load-test namespace, read from a replica directly.
pub async fn store_names(cp: &ControlPlane) -> anyhow::Result<HashSet<String>> {
    for addr in cp.addresses() {
        let Ok(mut c) = Client::connect(addr, cp.tls(), true).await else {
            continue;
        };
        let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
        let r = c
            .send("GET", &path, None)
            .await
            .map_err(|e| anyhow::anyhow!("listing configmaps: {e:?}"))?;
        anyhow::ensure!(r.status == 200, "listing configmaps: status {}", r.status);
        let list: serde_json::Value = serde_json::from_slice(&r.body)?;
        return Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
            .collect());
    }
    anyhow::bail!("no replica answered to list the store")
}

/// Draws the verdict.
pub fn judge(e: Evidence<'_>) -> SoakReport {
    let mut listeners = Vec::new();
    let faults = fault_windows(&e.windows);
    for (name, rec, leadership) in e.recorders {
        // Requests started once traffic was being stopped are no part of the soak.
        let samples: Vec<_> = rec
            .samples()
            .into_iter()
            .filter(|s| s.at_ms <= e.end_ms)
            .collect();
        let mut l = ListenerReport {
            listener: name.to_string(),
            requests: samples.len() as u64,
            failed_first: samples.iter().filter(|s| s.first_error.is_some()).count() as u64,
            failed: 0,
            unexplained: Vec::new(),
            watch_breaks: 0,
            unexplained_watch_breaks: Vec::new(),
            watch_timeouts: rec
                .watch_timeouts
                .load(std::sync::atomic::Ordering::Relaxed),
            gateway_watch_resumes: rec.gateway_resumes().len() as u64,
            creates_acknowledged: 0,
            creates_lost: Vec::new(),
            creates_applied_twice: 0,
            ambiguous_writes: rec.ambiguous_writes(e.end_ms).len() as u64,
            longest_stall_ms: samples.iter().map(|s| s.latency_ms).fold(0.0, f64::max),
            failed_by_fault: BTreeMap::new(),
            failed_by_error: BTreeMap::new(),
            leader: LeaderReport::of(&leadership.log(), 0, e.end_ms),
            explanation: Explanation::default(),
            marks: Vec::new(),
        };
        let terminating = *name == "terminate";
        let attribute = |at, f| explain::attribute(at, f, &faults, terminating);
        let mut attributed = Vec::new();
        for s in &samples {
            let (failure, mark) = match (s.kind, s.first_error, s.final_error) {
                (Kind::Kubectl, _, Some(e)) => (Failure::Kubectl(e), MarkKind::Request),
                (_, _, Some(e)) => (Failure::Request(e), MarkKind::Request),
                (_, Some(e), None) => (Failure::FirstAttempt(e), MarkKind::FirstAttempt),
                _ => continue,
            };
            attributed.push(attribute(s.at_ms, failure));
            l.marks.push(Mark {
                at_ms: s.at_ms,
                kind: mark,
            });
        }
        for b in rec.watch_breaks() {
            attributed.push(attribute(b.at_ms, Failure::WatchBreak(b.how)));
            l.marks.push(Mark {
                at_ms: b.at_ms,
                kind: MarkKind::WatchBreak,
            });
        }
        for (at, _) in &l.leader.lost {
            attributed.push(attribute(*at, Failure::LeadershipLost));
            l.marks.push(Mark {
                at_ms: *at,
                kind: MarkKind::LeadershipLost,
            });
        }
        l.explanation = Explanation::of(attributed);
        for s in &samples {
            let Some(err) = s.final_error else { continue };
            l.failed += 1;
            *l.failed_by_error
                .entry(format!("{} {}", s.kind.as_str(), err.label()))
                .or_default() += 1;
            if s.kind == Kind::Create && err == ErrorClass::Http(409) {
                l.creates_applied_twice += 1;
            }
            let to = s.at_ms + s.latency_ms as u64;
            match explaining(&e.windows, s.at_ms, to) {
                Some(w) => *l.failed_by_fault.entry(w.fault.clone()).or_default() += 1,
                None => l
                    .unexplained
                    .push((s.at_ms, format!("{} {}", s.kind.as_str(), err.label()))),
            }
        }
        let breaks = rec.watch_breaks();
        l.watch_breaks = breaks.len() as u64;
        l.unexplained_watch_breaks = breaks
            .into_iter()
            .map(|b| b.at_ms)
            .filter(|at| explaining(&e.windows, *at, *at).is_none())
            .collect();
        let acknowledged = rec.acknowledged_creates();
        l.creates_acknowledged = acknowledged.len() as u64;
        l.creates_lost = acknowledged
            .into_iter()
            .filter(|n| !e.store.contains(n))
            .collect();
        listeners.push(l);
    }
    let peak = Reading {
        at_ms: 0,
        fds: e.samples.iter().map(|r| r.fds).max().unwrap_or(0),
        rss_kib: e.samples.iter().map(|r| r.rss_kib).max().unwrap_or(0),
        threads: e.samples.iter().map(|r| r.threads).max().unwrap_or(0),
        cpu_ms: e.samples.last().map_or(0, |r| r.cpu_ms),
    };
    let mut checks = Vec::new();
    let mut check = |what: &str, passed: bool, detail: String| {
        checks.push(Check {
            what: what.into(),
            passed,
            detail,
        })
    };
    let sum = |f: &dyn Fn(&ListenerReport) -> u64| listeners.iter().map(f).sum::<u64>();
    check(
        "every acknowledged create is in the store",
        sum(&|l| l.creates_lost.len() as u64) == 0,
        format!(
            "{} acknowledged, {} missing",
            sum(&|l| l.creates_acknowledged),
            sum(&|l| l.creates_lost.len() as u64)
        ),
    );
    check(
        "no create applied twice",
        sum(&|l| l.creates_applied_twice) == 0,
        format!(
            "{} answered 409 to a unique name",
            sum(&|l| l.creates_applied_twice)
        ),
    );
    check(
        "kubegate never restarted",
        e.still_running,
        format!(
            "PID {} {}",
            e.pid,
            if e.still_running {
                "running throughout"
            } else {
                "gone"
            }
        ),
    );
    check(
        "descriptors return to their baseline",
        e.settled.fds <= e.baseline.fds + e.kept_fds + FD_ALLOWANCE,
        format!(
            "baseline {} (+{} kept for backends added), peak {}, after load {}",
            e.baseline.fds, e.kept_fds, peak.fds, e.settled.fds
        ),
    );
    check(
        "RSS stays bounded",
        e.settled.rss_kib <= e.baseline.rss_kib + RSS_ALLOWANCE_KIB,
        format!(
            "baseline {} MiB, peak {} MiB, after load {} MiB",
            e.baseline.rss_kib / 1024,
            peak.rss_kib / 1024,
            e.settled.rss_kib / 1024
        ),
    );
    check(
        "client-visible failures only inside fault windows",
        sum(&|l| (l.unexplained.len() + l.unexplained_watch_breaks.len()) as u64) == 0,
        format!(
            "{} failed requests and {} watch breaks, {} and {} outside any fault's window",
            sum(&|l| l.failed),
            sum(&|l| l.watch_breaks),
            sum(&|l| l.unexplained.len() as u64),
            sum(&|l| l.unexplained_watch_breaks.len() as u64)
        ),
    );
    check(
        "every failure, break and lost leadership explained",
        sum(&|l| l.explanation.unexplained.len() as u64) == 0,
        format!(
            "{} explained, {} unexplained",
            sum(&|l| l.explanation.explained.values().sum::<u64>()),
            sum(&|l| l.explanation.unexplained.len() as u64)
        ),
    );
    check(
        "no leadership lost on the terminate listener",
        listeners
            .iter()
            .filter(|l| l.listener == "terminate")
            .all(|l| l.leader.lost.is_empty()),
        listeners
            .iter()
            .map(|l| {
                format!(
                    "{}: {} lost, longest renewal gap {:.1} s",
                    l.listener,
                    l.leader.lost.len(),
                    l.leader.longest_gap_ms as f64 / 1e3
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    );
    check(
        "every fault carried out",
        e.windows.iter().all(|w| w.problem.is_none()),
        e.windows
            .iter()
            .filter_map(|w| w.problem.as_ref().map(|p| format!("{}: {p}", w.fault)))
            .collect::<Vec<_>>()
            .join("; "),
    );
    let mut fault_counts = BTreeMap::new();
    for w in &e.windows {
        *fault_counts.entry(w.kind).or_default() += 1;
    }
    SoakReport {
        duration_s: e.duration.as_secs(),
        seed: e.seed,
        faults: e.windows,
        fault_counts,
        listeners,
        pid: e.pid,
        baseline: e.baseline,
        peak,
        settled: e.settled,
        checks,
        samples: e.samples,
        end_ms: e.end_ms,
        watch_resumes_by_cause: e.watch_resumes_by_cause,
    }
}

/// The report as markdown.
pub fn markdown(r: &SoakReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Soak: {} s of faults (seed {}), {} faults\n",
        r.duration_s,
        r.seed,
        r.faults.len()
    );
    let counts: Vec<String> = r
        .fault_counts
        .iter()
        .map(|(k, n)| {
            format!(
                "{} {n}",
                serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            )
        })
        .collect();
    let _ = writeln!(out, "Faults: {}\n", counts.join(", "));
    let _ = writeln!(
        out,
        "Watches kubegate continued by itself, by cause: {}\n",
        crate::resumes::by_label_line(&r.watch_resumes_by_cause)
    );
    let _ = writeln!(out, "| check | held | figures |\n|---|---|---|");
    for c in &r.checks {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            c.what,
            if c.passed { "yes" } else { "**NO**" },
            c.detail
        );
    }
    let _ = writeln!(
        out,
        "\n| listener | requests | first attempt failed | failed (client-visible) | unexplained | watch breaks | watches timed out as asked | resumed by kubegate | creates acknowledged | lost | applied twice | ambiguous writes | longest stall |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for l in &r.listeners {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s |",
            l.listener,
            l.requests,
            l.failed_first,
            l.failed,
            l.explanation.unexplained.len(),
            l.watch_breaks,
            l.watch_timeouts,
            l.gateway_watch_resumes,
            l.creates_acknowledged,
            l.creates_lost.len(),
            l.creates_applied_twice,
            l.ambiguous_writes,
            l.longest_stall_ms / 1e3
        );
    }
    for l in &r.listeners {
        if !l.failed_by_fault.is_empty() {
            let by: Vec<String> = l
                .failed_by_fault
                .iter()
                .map(|(f, n)| format!("{f}: {n}"))
                .collect();
            let _ = writeln!(out, "\n{} failures by fault: {}", l.listener, by.join("; "));
            let by: Vec<String> = l
                .failed_by_error
                .iter()
                .map(|(f, n)| format!("{f}: {n}"))
                .collect();
            let _ = writeln!(
                out,
                "\n{} failures by request and error: {}",
                l.listener,
                by.join("; ")
            );
        }
        for (what, n) in &l.explanation.explained {
            let _ = writeln!(out, "\n- {}: {what}: {n}", l.listener);
        }
        for u in &l.explanation.unexplained {
            let _ = writeln!(out, "\n- {}: **unexplained** {u}", l.listener);
        }
        for (at, what) in l.unexplained.iter().take(20) {
            let _ = writeln!(
                out,
                "\n- unexplained on {} at {:.1} s: {what}",
                l.listener,
                *at as f64 / 1e3
            );
        }
    }
    let _ = writeln!(
        out,
        "\nkubegate (PID {}): RSS {} → peak {} → {} MiB after load; descriptors {} → peak {} → {}; threads {} → peak {}; CPU {:.1} s",
        r.pid,
        r.baseline.rss_kib / 1024,
        r.peak.rss_kib / 1024,
        r.settled.rss_kib / 1024,
        r.baseline.fds,
        r.peak.fds,
        r.settled.fds,
        r.baseline.threads,
        r.peak.threads,
        r.peak.cpu_ms as f64 / 1e3
    );
    out
}

/// The plot: kubegate's RSS and descriptors over time, each listener's client-visible
/// failures, and the fault windows shaded.
pub fn svg(r: &SoakReport) -> String {
    let (w, left, right) = (1000.0, 70.0, 20.0);
    let lane = 120.0;
    let lanes = 2 + r.listeners.len();
    let h = 40.0 + lane * lanes as f64 + 90.0;
    let span = r.end_ms.max(1) as f64;
    let x = |ms: f64| left + (w - left - right) * ms / span;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"20\" font-size=\"14\">kubegate soak: {} s of faults, seed {}</text>\n",
        r.duration_s, r.seed
    );
    for f in &r.faults {
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"30\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" opacity=\"0.18\"><title>{}</title></rect>",
            x(f.from_ms as f64),
            (x(f.to_ms as f64) - x(f.from_ms as f64)).max(1.0),
            lane * lanes as f64,
            fault_color(f.kind),
            f.fault
        );
    }
    let series: [Series; 2] = [
        ("RSS (MiB)", |r| r.rss_kib as f64 / 1024.0),
        ("descriptors", |r| r.fds as f64),
    ];
    for (i, (label, value)) in series.iter().enumerate() {
        let top = 40.0 + lane * i as f64;
        let max = r.samples.iter().map(value).fold(1.0, f64::max) * 1.1;
        let y = |v: f64| top + lane - 20.0 - (lane - 30.0) * v / max;
        let points: Vec<String> = r
            .samples
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.at_ms as f64), y(value(p))))
            .collect();
        let _ = writeln!(
            s,
            "<text x=\"5\" y=\"{:.1}\">{label}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>\n<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>\n<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>",
            top + 12.0,
            left - 4.0,
            y(max / 1.1) + 4.0,
            max / 1.1,
            left - 4.0,
            y(0.0),
            w - right,
            y(0.0),
            y(0.0),
            points.join(" ")
        );
    }
    for (i, l) in r.listeners.iter().enumerate() {
        let top = 40.0 + lane * (2 + i) as f64;
        let _ = writeln!(
            s,
            "<text x=\"5\" y=\"{:.1}\">{} failures</text>\n<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>",
            top + 12.0,
            l.listener,
            w - right,
            top + lane - 20.0,
            top + lane - 20.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{left}\" y=\"{:.1}\">{} of {} requests failed after retries, {} first attempts retried; {} watch breaks; {} leaderships lost; {} unexplained</text>",
            top + 30.0,
            l.failed,
            l.requests,
            l.failed_first.saturating_sub(l.failed),
            l.watch_breaks,
            l.leader.lost.len(),
            l.explanation.unexplained.len()
        );
        // One row per kind of mark, so that marks never hide one another.
        for m in &l.marks {
            let (row, glyph, colour) = mark_style(m.kind);
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" fill=\"{colour}\">{glyph}</text>",
                x(m.at_ms as f64),
                top + 48.0 + 14.0 * row as f64
            );
        }
        for u in &l.explanation.unexplained {
            let _ = writeln!(
                s,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"red\" stroke-width=\"2\"><title>unexplained: {3}</title></line>",
                x(u.at_ms as f64),
                top + 36.0,
                top + lane - 20.0,
                u.failure
            );
        }
    }
    let axis = 40.0 + lane * lanes as f64 + 15.0;
    let step = nice_step(span / 1000.0);
    let mut t = 0.0;
    while t * 1000.0 <= span {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{axis:.1}\" text-anchor=\"middle\">{t:.0}</text>",
            x(t * 1000.0)
        );
        t += step;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (s); shaded: fault windows; red line: a failure nothing explains</text>",
        (left + w - right) / 2.0,
        axis + 18.0
    );
    // The legend: every fault's colour, every mark's glyph.
    let mut lx = left;
    let ly = axis + 38.0;
    for (label, kind) in [
        ("graceful restart", FaultKind::GracefulRestart),
        ("crash", FaultKind::Crash),
        ("freeze", FaultKind::Freeze),
        ("flap / not ready", FaultKind::NotReady),
        ("reload, SIGHUP", FaultKind::ReloadValid),
        ("backend added / removed", FaultKind::AddBackend),
    ] {
        let _ = writeln!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"10\" fill=\"{}\" opacity=\"0.35\"/><text x=\"{:.1}\" y=\"{ly:.1}\">{label}</text>",
            ly - 9.0,
            fault_color(kind),
            lx + 16.0
        );
        lx += 30.0 + label.len() as f64 * 6.0;
    }
    let mut lx = left;
    for (label, kind) in [
        ("first attempt failed, retried", MarkKind::FirstAttempt),
        ("failed after retries", MarkKind::Request),
        ("watch broke", MarkKind::WatchBreak),
        ("leadership lost", MarkKind::LeadershipLost),
    ] {
        let (_, glyph, colour) = mark_style(kind);
        let _ = writeln!(
            s,
            "<text x=\"{lx:.1}\" y=\"{:.1}\" fill=\"{colour}\">{glyph}</text><text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
            ly + 18.0,
            lx + 12.0,
            ly + 18.0
        );
        lx += 30.0 + label.len() as f64 * 6.0;
    }
    s.push_str("</svg>\n");
    s
}

/// A mark's row in its lane, glyph and colour.
fn mark_style(kind: MarkKind) -> (usize, &'static str, &'static str) {
    match kind {
        MarkKind::FirstAttempt => (0, "·", "#999"),
        MarkKind::Request => (1, "●", "#d62728"),
        MarkKind::WatchBreak => (2, "▼", "#ff7f0e"),
        MarkKind::LeadershipLost => (3, "✕", "#000"),
    }
}

/// A lane of the plot: its label and the value it draws from a reading.
type Series = (&'static str, fn(&Reading) -> f64);

fn nice_step(seconds: f64) -> f64 {
    [10.0, 30.0, 60.0, 120.0, 300.0, 600.0]
        .into_iter()
        .find(|s| seconds / s <= 12.0)
        .unwrap_or(900.0)
}

fn fault_color(k: FaultKind) -> &'static str {
    match k {
        FaultKind::GracefulRestart => "#2ca02c",
        FaultKind::Crash => "#d62728",
        FaultKind::Freeze => "#9467bd",
        FaultKind::Flap | FaultKind::NotReady => "#ff7f0e",
        FaultKind::ReloadValid | FaultKind::ReloadInvalid | FaultKind::SighupStorm => "#17becf",
        FaultKind::AddBackend | FaultKind::RemoveBackend => "#8c564b",
    }
}
