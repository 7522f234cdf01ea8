//! From samples to numbers: per scenario and gateway, what failed (first attempt and
//! client-go view), how long clients stalled, what watches went through, how long until
//! everything was fine again. Rendered as Markdown, JSON and an SVG timeline.

use crate::record::{Kind, Sample};
use serde::Serialize;
use std::collections::BTreeMap;

/// Width of a timeline bucket.
pub const BUCKET_MS: u64 = 100;
/// A request slower than this counts as a stall when measuring recovery.
const STALL_MS: f64 = 1000.0;

/// Watch counters of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchReport {
    /// Streams that broke.
    pub interruptions: u64,
    /// Re-opened from the last resourceVersion.
    pub resumes: u64,
    /// Relisted after 410.
    pub relists: u64,
    /// Events received.
    pub events: u64,
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
    /// First-attempt failures by error class.
    pub first_attempt_failures: BTreeMap<String, u64>,
    /// Failures a client-go client would have returned, by error class.
    pub client_go_failures: BTreeMap<String, u64>,
    /// Failed real kubectl runs (a `get --watch` that ended counts as one), apart from the maps above.
    pub kubectl_failures: u64,
    /// Real kubectl runs.
    pub kubectl_runs: u64,
    /// Longest time one request took until its final answer, ms.
    pub longest_stall_ms: f64,
    /// Watch counters.
    pub watch: WatchReport,
    /// From the first fault to the end of the last failure or stall, ms.
    pub recovery_ms: Option<u64>,
    /// Latency of successful requests, ms.
    pub p50_ms: f64,
    /// Latency of successful requests, ms.
    pub p99_ms: f64,
    /// Fault events (ms, what).
    pub events: Vec<(u64, String)>,
    /// Per 100 ms: successes and first-attempt failures.
    pub timeline: Vec<(u64, u64)>,
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
            kubectl_failures: 0,
            kubectl_runs: 0,
            longest_stall_ms: 0.0,
            watch: WatchReport::default(),
            recovery_ms: None,
            p50_ms: 0.0,
            p99_ms: 0.0,
            events: Vec::new(),
            timeline: Vec::new(),
        }
    }

    /// Computes the numbers from what the clients recorded.
    pub fn from_samples(
        scenario: &str,
        gateway: &str,
        samples: &[Sample],
        watch: WatchReport,
        events: Vec<(u64, String)>,
        end_ms: u64,
    ) -> RunReport {
        let mut r = RunReport::unavailable(scenario, gateway, "ok".into());
        let mut ok_latencies = Vec::new();
        let buckets = (end_ms / BUCKET_MS + 1) as usize;
        r.timeline = vec![(0, 0); buckets];
        for s in samples {
            *r.requests.entry(s.kind.as_str().into()).or_default() += 1;
            if s.kind == Kind::Kubectl {
                // Real kubectl processes are reported on their own: they are not client-go
                // clients that re-watch, and their runs are not single requests.
                r.kubectl_runs += 1;
                r.kubectl_failures += s.final_error.is_some() as u64;
                continue;
            }
            if let Some(e) = s.first_error {
                *r.first_attempt_failures
                    .entry(e.as_str().into())
                    .or_default() += 1;
            }
            if let Some(e) = s.final_error {
                *r.client_go_failures.entry(e.as_str().into()).or_default() += 1;
            } else {
                ok_latencies.push(s.latency_ms);
            }
            r.longest_stall_ms = r.longest_stall_ms.max(s.latency_ms);
            let done = ((s.at_ms as f64 + s.latency_ms) as u64 / BUCKET_MS) as usize;
            if let Some(b) = r.timeline.get_mut(done.min(buckets - 1)) {
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
        r.watch = watch;
        r.events = events;
        r
    }

    /// client-go-view failures, all classes.
    pub fn client_go_failed(&self) -> u64 {
        self.client_go_failures.values().sum()
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
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

/// The Markdown table of all runs.
pub fn markdown(runs: &[RunReport]) -> String {
    let mut out = String::from(
        "| scenario | gateway | requests | failed, first attempt | failed, client-go view | kubectl failed | longest stall | watch breaks / resumes / relists | recovery | p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        if r.status != "ok" {
            out.push_str(&format!(
                "| {} | {} | {} | | | | | | | |\n",
                r.scenario, r.gateway, r.status
            ));
            continue;
        }
        let total: u64 = r.requests.values().sum();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {}/{} | {:.1} s | {} / {} / {} | {} | {:.1} / {:.1} ms |\n",
            r.scenario,
            r.gateway,
            total,
            classes(&r.first_attempt_failures),
            classes(&r.client_go_failures),
            r.kubectl_failures,
            r.kubectl_runs,
            r.longest_stall_ms / 1e3,
            r.watch.interruptions,
            r.watch.resumes,
            r.watch.relists,
            r.recovery_ms
                .map(|m| format!("{:.1} s", m as f64 / 1e3))
                .unwrap_or_else(|| "-".into()),
            r.p50_ms,
            r.p99_ms
        ));
    }
    out
}

/// An SVG timeline: one row per run, successes up in green and first-attempt failures down in
/// red per 100 ms, fault events as labelled vertical lines.
pub fn svg(runs: &[RunReport]) -> String {
    let runs: Vec<&RunReport> = runs.iter().filter(|r| r.status == "ok").collect();
    let (left, width, row_h, top) = (190.0, 900.0, 110.0, 30.0);
    let longest = runs
        .iter()
        .map(|r| r.timeline.len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let height = top + row_h * runs.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" viewBox=\"0 0 {} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">Requests per 100 ms: completed (green, up) and failed on first attempt (red, down); dashed lines are faults</text>\n",
        left + width + 20.0,
        left + width + 20.0
    );
    for (row, r) in runs.iter().enumerate() {
        let y0 = top + row as f64 * row_h;
        let mid = y0 + row_h * 0.6;
        let peak = r
            .timeline
            .iter()
            .map(|(ok, bad)| (*ok).max(*bad))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let scale = row_h * 0.45 / peak;
        let bar = width / longest;
        s.push_str(&format!(
            "<text x=\"10\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n<text x=\"10\" y=\"{:.1}\">{}</text>\n<text x=\"10\" y=\"{:.1}\" fill=\"#b00\">client-go failures: {}</text>\n",
            mid - 14.0, xml(&r.gateway), mid, xml(&r.scenario), mid + 14.0, r.client_go_failed()
        ));
        s.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{mid:.1}\" x2=\"{:.1}\" y2=\"{mid:.1}\" stroke=\"#999\" stroke-width=\"0.5\"/>\n",
            left + width
        ));
        for (i, (ok, bad)) in r.timeline.iter().enumerate() {
            let x = left + i as f64 * bar;
            if *ok > 0 {
                let h = *ok as f64 * scale;
                s.push_str(&format!("<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"#2a2\"/>\n", mid - h, bar.max(0.5)));
            }
            if *bad > 0 {
                let h = (*bad as f64 * scale).max(2.0);
                s.push_str(&format!("<rect x=\"{x:.1}\" y=\"{mid:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"#d22\"/>\n", bar.max(1.0)));
            }
        }
        for (n, (at, what)) in r.events.iter().enumerate() {
            let x = left + (*at / BUCKET_MS) as f64 * bar;
            s.push_str(&format!(
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#36c\" stroke-dasharray=\"3,2\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#36c\" font-size=\"9\">{}</text>\n",
                y0 + 4.0, y0 + row_h - 6.0, x + 2.0, y0 + 12.0 + (n % 3) as f64 * 10.0, xml(what)
            ));
        }
    }
    s.push_str(&format!(
        "<text x=\"{left}\" y=\"{:.1}\">0 s</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0} s</text>\n</svg>\n",
        height - 10.0,
        left + width,
        height - 10.0,
        longest * BUCKET_MS as f64 / 1e3
    ));
    s
}

fn xml(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
