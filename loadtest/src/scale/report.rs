//! The scale run's report: one row per gateway and size, the gateway's cost at each size, and
//! the cost curve as SVG.

use crate::sampler::Reading;
use serde::Serialize;
use std::collections::BTreeMap;

/// One gateway at one size.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRun {
    /// Gateway.
    pub gateway: String,
    /// Client connections.
    pub connections: usize,
    /// Watches in all.
    pub watches: usize,
    /// `ok`, or why the run did not finish.
    pub status: String,
    /// Seconds from the start until every watch was open.
    pub all_open_s: f64,
    /// Watches the clients saw break (ended early or failed to open) from the restart on.
    pub breaks: u64,
    /// Watches the gateway continued on another replica by itself (kubegate's counter).
    pub gateway_resumes: u64,
    /// Positions kubegate brought up to date before a move, by how (its counter:
    /// `next_event`, `bookmark`).
    pub gateway_freshened: BTreeMap<String, u64>,
    /// Watches kubegate ended, by reason (its counter): `expired` is a 410 no replica could
    /// take back.
    pub gateway_watches_ended: BTreeMap<String, u64>,
    /// LISTs the informers sent after a break.
    pub relists: u64,
    /// 410s that reached the informers (ERROR events or answers).
    pub expired: u64,
    /// 429s that reached the informers.
    pub throttled: u64,
    /// Writes that succeeded whose event an informer never heard.
    pub gaps: u64,
    /// Events an informer heard twice.
    pub duplicates: u64,
    /// Watches that were quiet (bookmarks only).
    pub quiet_watches: usize,
    /// Watches of the custom resource.
    pub custom_watches: usize,
    /// LIST requests the replicas received from the restart until everything settled.
    pub lists_at_replicas: u64,
    /// WATCH requests the replicas received in the same time.
    pub watches_at_replicas: u64,
    /// The longest time a watch the client saw break took to be open again, ms.
    pub longest_reopen_ms: u64,
    /// The longest silence (no event, no bookmark) any informer heard once all were open, ms.
    pub longest_silence_ms: u64,
    /// The 99th percentile over informers of each one's longest silence, ms.
    pub p99_silence_ms: u64,
    /// Open watches per replica before the restart.
    pub share_before: Vec<i64>,
    /// And at the end of the settle period.
    pub share_after: Vec<i64>,
    /// The busiest replica's watches over the mean at the end (1.0: even).
    pub share_over_mean: f64,
    /// Seconds from the last replica's return until the share was even (busiest ≤ 1.2 × the
    /// mean) and stayed so; `None`: not within the settle period.
    pub share_even_after_s: Option<f64>,
    /// Events and bookmarks the informers received.
    pub events: u64,
    /// Writes that succeeded.
    pub writes_ok: u64,
    /// Writes that failed.
    pub writes_failed: u64,
    /// The gateway before any client.
    pub idle: Reading,
    /// The gateway with every watch open, at the end of the rest period.
    pub rest: Reading,
    /// Its largest RSS during the run, KiB.
    pub peak_rss_kib: u64,
    /// The gateway after every client left.
    pub settled: Reading,
    /// Its CPU seconds per second with every watch open and nothing failing.
    pub cpu_rest_per_s: f64,
    /// And during the rolling restart.
    pub cpu_restart_per_s: f64,
    /// The restart's events (ms since the run began).
    pub fault_events: Vec<(u64, String)>,
}

impl ScaleRun {
    /// A run that did not finish.
    pub fn failed(gateway: &str, connections: usize, watches: usize, why: String) -> ScaleRun {
        ScaleRun {
            gateway: gateway.to_string(),
            connections,
            watches,
            status: why,
            all_open_s: 0.0,
            breaks: 0,
            gateway_resumes: 0,
            gateway_freshened: BTreeMap::new(),
            gateway_watches_ended: BTreeMap::new(),
            relists: 0,
            expired: 0,
            throttled: 0,
            gaps: 0,
            duplicates: 0,
            quiet_watches: 0,
            custom_watches: 0,
            lists_at_replicas: 0,
            watches_at_replicas: 0,
            longest_reopen_ms: 0,
            longest_silence_ms: 0,
            p99_silence_ms: 0,
            share_before: Vec::new(),
            share_after: Vec::new(),
            share_over_mean: 0.0,
            share_even_after_s: None,
            events: 0,
            writes_ok: 0,
            writes_failed: 0,
            idle: Reading::default(),
            rest: Reading::default(),
            peak_rss_kib: 0,
            settled: Reading::default(),
            cpu_rest_per_s: 0.0,
            cpu_restart_per_s: 0.0,
            fault_events: Vec::new(),
        }
    }

    /// The gateway's memory per open watch, KiB: RSS at rest over RSS idle.
    pub fn kib_per_watch(&self) -> f64 {
        self.rest.rss_kib.saturating_sub(self.idle.rss_kib) as f64 / self.watches.max(1) as f64
    }
}

fn share(v: &[i64]) -> String {
    v.iter()
        .map(|n| if *n < 0 { "-".into() } else { n.to_string() })
        .collect::<Vec<_>>()
        .join("/")
}

/// The two Markdown tables: what the restart cost, and what the gateway cost.
pub fn markdown(runs: &[ScaleRun]) -> String {
    let mut out = String::from(
        "| watches (connections; quiet, custom) | gateway | watch breaks seen | resumed by gateway | relists | 410s to clients | 429s to clients | LISTs at replicas | WATCHes at replicas | events missed (twice) | longest reopen | longest silence (p99) | watches per replica before → after | busiest/mean at the end (even after) | writes ok (failed) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        if r.status != "ok" {
            out.push_str(&format!(
                "| {} ({}) | {} | {} | | | | | | | | | | | | |\n",
                r.watches, r.connections, r.gateway, r.status
            ));
            continue;
        }
        let even_after = match r.share_even_after_s {
            Some(s) => format!("{s:.0} s"),
            None => "not within the run".into(),
        };
        out.push_str(&format!(
            "| {} ({}; {}, {}) | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {:.1} s | {:.1} s ({:.1} s) | {} → {} | {:.2} ({even_after}) | {} ({}) |\n",
            r.watches,
            r.connections,
            r.quiet_watches,
            r.custom_watches,
            r.gateway,
            r.breaks,
            r.gateway_resumes,
            r.relists,
            r.expired,
            r.throttled,
            r.lists_at_replicas,
            r.watches_at_replicas,
            r.gaps,
            r.duplicates,
            r.longest_reopen_ms as f64 / 1e3,
            r.longest_silence_ms as f64 / 1e3,
            r.p99_silence_ms as f64 / 1e3,
            share(&r.share_before),
            share(&r.share_after),
            r.share_over_mean,
            r.writes_ok,
            r.writes_failed,
        ));
    }
    out.push_str(
        "\n| watches (connections) | gateway | RSS idle → at rest (peak) | KiB per watch | CPU at rest | CPU in the restart | descriptors idle → at rest → after |\n|---|---|---|---|---|---|---|\n",
    );
    for r in runs.iter().filter(|r| r.status == "ok") {
        out.push_str(&format!(
            "| {} ({}) | {} | {:.1} → {:.1} MiB ({:.1}) | {:.1} | {:.2} s/s | {:.2} s/s | {} → {} → {} |\n",
            r.watches,
            r.connections,
            r.gateway,
            r.idle.rss_kib as f64 / 1024.0,
            r.rest.rss_kib as f64 / 1024.0,
            r.peak_rss_kib as f64 / 1024.0,
            r.kib_per_watch(),
            r.cpu_rest_per_s,
            r.cpu_restart_per_s,
            r.idle.fds,
            r.rest.fds,
            r.settled.fds,
        ));
    }
    for r in runs.iter().filter(|r| r.gateway_resumes > 0) {
        out.push_str(&format!(
            "\n{} at {} watches: positions freshened before a move, by how: {}; watches it ended, by reason: {}\n",
            r.gateway,
            r.watches,
            crate::resumes::by_label_line(&r.gateway_freshened),
            crate::resumes::by_label_line(&r.gateway_watches_ended)
        ));
    }
    out
}

/// A size as the axis shows it: `500`, `1k`, `2.5k`, `20k`.
fn size_label(watches: usize) -> String {
    if watches >= 1000 && watches.is_multiple_of(100) {
        let k = watches as f64 / 1000.0;
        if watches.is_multiple_of(1000) {
            format!("{k:.0}k")
        } else {
            format!("{k:.1}k")
        }
    } else {
        watches.to_string()
    }
}

/// The cost curve: RSS at rest and CPU (at rest, in the restart) against watches, one line per
/// gateway.
pub fn svg(runs: &[ScaleRun]) -> String {
    let mut by_gateway: BTreeMap<&str, Vec<&ScaleRun>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.status == "ok") {
        by_gateway.entry(&r.gateway).or_default().push(r);
    }
    let max_w = runs.iter().map(|r| r.watches).max().unwrap_or(1).max(1) as f64;
    let sizes: std::collections::BTreeSet<usize> = runs
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| r.watches)
        .collect();
    let max_rss = runs
        .iter()
        .map(|r| r.rest.rss_kib as f64 / 1024.0)
        .fold(1.0, f64::max);
    let max_cpu = runs
        .iter()
        .map(|r| r.cpu_restart_per_s.max(r.cpu_rest_per_s))
        .fold(0.1, f64::max);
    const COLOURS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    let (w, h, left, top) = (360.0, 220.0, 60.0, 60.0);
    let mut body = String::new();
    for (panel, (title, value, max)) in [
        (
            "RSS at rest, MiB",
            (|r: &ScaleRun| r.rest.rss_kib as f64 / 1024.0) as fn(&ScaleRun) -> f64,
            max_rss,
        ),
        (
            "CPU in the restart, s/s (dashed: at rest)",
            |r: &ScaleRun| r.cpu_restart_per_s,
            max_cpu,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let x0 = left + panel as f64 * (w + 80.0);
        body.push_str(&format!(
            "<text x=\"{x0}\" y=\"{}\" font-weight=\"bold\">{title}</text>\n<line x1=\"{x0}\" y1=\"{}\" x2=\"{x0}\" y2=\"{}\" stroke=\"#333\"/>\n<line x1=\"{x0}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{max:.1}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#555\">watches</text>\n",
            top - 10.0,
            top,
            top + h,
            top + h,
            x0 + w,
            top + h,
            x0 - 4.0,
            top + 4.0,
            x0 - 4.0,
            top + h,
            x0 - 4.0,
            top + h + 14.0,
        ));
        // Each size measured, ticked and labelled where it lies on the axis; a label that
        // would run into the one before is left to the tick's tooltip.
        let mut label_end = f64::MIN;
        for &size in &sizes {
            let x = x0 + size as f64 / max_w * w;
            let label = size_label(size);
            let half = label.len() as f64 * 3.5;
            let shown = x - half >= label_end;
            body.push_str(&format!(
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#333\"><title>{size} watches</title></line>\n",
                top + h,
                top + h + 4.0
            ));
            if shown {
                body.push_str(&format!(
                    "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>\n",
                    top + h + 14.0
                ));
                label_end = x + half + 4.0;
            }
        }
        let point = |r: &ScaleRun, v: f64| {
            (
                x0 + r.watches as f64 / max_w * w,
                top + h - (v / max).min(1.0) * h,
            )
        };
        for (g, (gateway, rs)) in by_gateway.iter().enumerate() {
            let colour = COLOURS[g % COLOURS.len()];
            let mut rs = rs.clone();
            rs.sort_by_key(|r| r.watches);
            let line = |f: &dyn Fn(&ScaleRun) -> f64| {
                rs.iter()
                    .map(|r| {
                        let (x, y) = point(r, f(r));
                        format!("{x:.1},{y:.1}")
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            body.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
                line(&value)
            ));
            for r in &rs {
                let (x, y) = point(r, value(r));
                body.push_str(&format!(
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"><title>{gateway}, {} watches: {:.2}</title></circle>\n",
                    r.watches,
                    value(r)
                ));
            }
            if panel == 1 {
                body.push_str(&format!(
                    "<polyline fill=\"none\" stroke=\"{colour}\" stroke-dasharray=\"4 3\" points=\"{}\"/>\n",
                    line(&|r: &ScaleRun| r.cpu_rest_per_s)
                ));
            }
            if panel == 0 {
                body.push_str(&format!(
                    "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{gateway}</text>\n",
                    left + g as f64 * 140.0,
                    top + h + 34.0,
                    left + g as f64 * 140.0 + 14.0,
                    top + h + 43.0
                ));
            }
        }
    }
    let total_w = left + 2.0 * w + 100.0;
    let total_h = top + h + 60.0;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{total_w}\" height=\"{total_h}\" viewBox=\"0 0 {total_w} {total_h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">What a gateway costs as watches grow (kubegate-loadtest scale)</text>\n{body}</svg>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_measured_is_labelled_where_it_lies_on_the_axis() {
        let runs: Vec<ScaleRun> = [1_000, 5_000, 10_000, 20_000]
            .into_iter()
            .map(|w| ScaleRun {
                status: "ok".into(),
                ..ScaleRun::failed("kubegate-l7", 10, w, String::new())
            })
            .collect();
        let svg = svg(&runs);
        let x_of = |label: &str| -> Vec<f64> {
            svg.lines()
                .filter(|l| {
                    l.ends_with(&format!(">{label}</text>")) && l.contains("text-anchor=\"middle\"")
                })
                .map(|l| {
                    let start = l.find("x=\"").unwrap() + 3;
                    l[start..start + l[start..].find('"').unwrap()]
                        .parse()
                        .unwrap()
                })
                .collect()
        };
        // Two panels, each with its own axis: 20k at the end, 10k halfway, 5k a quarter.
        let (w, left) = (360.0, 60.0);
        for (label, at) in [("20k", 1.0), ("10k", 0.5), ("5k", 0.25), ("1k", 0.05)] {
            let xs = x_of(label);
            assert_eq!(xs.len(), 2, "{label}: {xs:?}");
            assert!(
                (xs[0] - (left + at * w)).abs() < 0.1,
                "{label} at {}",
                xs[0]
            );
        }
        assert_eq!(size_label(2_500), "2.5k");
        assert_eq!(size_label(500), "500");
    }
}
