//! The status page (`/`): what an operator opens first. kubegate's phase and version, each
//! listener with its mode and clients, each backend's state and why (its failing `/readyz`
//! checks), its connections and requests, flap damping, the last transitions, and in terminate
//! mode who cost the apiservers what over the last minute or ten.
//!
//! Plain HTML and inline CSS, written here: no script (it reloads itself with a `refresh`
//! meta tag), nothing fetched from elsewhere, and every value from a client (user agents,
//! certificate names) escaped. Built only when asked for: nobody looking costs nothing.

use crate::control::admin::readyz::Check;
use crate::control::admin::respond::html;
use crate::control::admin::senders::{self, Asked};
use crate::control::admin::shed;
use crate::control::admin::views::{backends_view, BackendView};
use crate::state::Gateway;
use crate::telemetry::build;
use crate::telemetry::transitions::Recorded;
use crate::telemetry::WatchBreak;
use crate::terminate::TerminatePlane;
use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use kubegate_config::ListenerMode;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Seconds between the page's reloads.
const REFRESH_SECONDS: u32 = 5;
/// Transitions shown.
const TRANSITIONS: usize = 12;

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em 2em;color:#1d232a;background:#fafbfc}
h1{font-size:1.35em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.6em 0 .4em}
.meta{color:#555}.meta b{color:#1d232a}
table{border-collapse:collapse;background:#fff;box-shadow:0 0 0 1px #d8dde3}
th,td{padding:.3em .75em;text-align:left;border-bottom:1px solid #e6e9ed;vertical-align:top;white-space:nowrap}
th{background:#f0f2f5;font-weight:600;white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.state{display:inline-block;padding:0 .5em;border-radius:3px;font-weight:600;white-space:nowrap}
.ready,.serving,.pass{background:#d7f5dd;color:#14532d}
.not_ready,.draining,.starting,.stopping,.warn{background:#fdf0c4;color:#713f12}
.down,.fail{background:#fbd5d5;color:#7f1d1d}.unknown{background:#e6e9ed;color:#333}
.why{color:#7f1d1d;white-space:normal;min-width:12em;max-width:30em}.quiet{color:#888}
footer{margin-top:2em;color:#888}a{color:#2456a4}
";

/// The page, now, its cost tables as `asked`.
pub fn render((gw, plane): (&Gateway, &TerminatePlane), asked: Asked) -> Response<Full<Bytes>> {
    let config = gw.config().load();
    let backends = backends_view(gw, plane);
    let mut page = String::with_capacity(16 * 1024);
    let phase = gw.lifecycle().phase().as_str();
    let _ = write!(
        page,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta http-equiv=refresh content={REFRESH_SECONDS}>\
         <meta name=viewport content='width=device-width'>\
         <title>kubegate {phase}</title><style>{STYLE}</style></head><body>"
    );
    let _ = write!(
        page,
        "<h1>kubegate <span class='state {phase}'>{phase}</span></h1>\
         <div class=meta>version <b>{}</b> ({}) · up {} · configuration <b>{}</b>{}</div>",
        esc(build::VERSION),
        esc(build::COMMIT),
        elapsed(gw.started()),
        esc(&gw.config().path().display().to_string()),
        reload_note(gw),
    );
    readiness(&mut page, gw);
    listeners(&mut page, gw);
    // One table per cluster, each judged by its own health settings.
    for cluster in config.clusters() {
        let title = match config.names_clusters() {
            true => format!("Backends of cluster {}", esc(&cluster.name)),
            false => "Backends".to_string(),
        };
        let own: Vec<&BackendView> = backends
            .iter()
            .filter(|b| b.cluster == cluster.name)
            .collect();
        backends_table(&mut page, &title, &own, cluster.health.rise);
    }
    transitions(&mut page, &gw.transitions().newest());
    if gw
        .listeners()
        .iter()
        .any(|l| l.mode == ListenerMode::Terminate)
    {
        shed::section(&mut page, gw, esc);
        senders::tables(&mut page, gw, asked, esc);
    }
    let _ = write!(
        page,
        "<footer>Reloads every {REFRESH_SECONDS} s · \
         <a href=/readyz?verbose>/readyz</a> · <a href=/metrics>/metrics</a> · \
         <a href=/debug/backends>/debug/backends</a> · <a href=/debug/config>/debug/config</a>\
         </footer></body></html>"
    );
    html(page)
}

/// `/readyz`'s checks, one line each.
fn readiness(page: &mut String, gw: &Gateway) {
    page.push_str("<h2>Readiness</h2><table><tr><th>Check<th>Result</tr>");
    for check in Check::ALL {
        let (class, result) = match check.run(gw) {
            Ok(()) => ("pass", "ok".to_string()),
            Err(why) => ("fail", format!("failed: {why}")),
        };
        let _ = write!(
            page,
            "<tr><td>{}<td><span class='state {class}'>{}</span></tr>",
            check.name(),
            esc(&result)
        );
    }
    page.push_str("</table>");
}

fn listeners(page: &mut String, gw: &Gateway) {
    let open: usize = gw.listeners().iter().map(|l| l.open()).sum();
    let _ = write!(
        page,
        "<h2>Listeners</h2><table><tr><th>Address<th>Mode<th>Clients</tr>"
    );
    for l in gw.listeners() {
        let to = l
            .backend_port
            .map(|p| format!(" → replicas' port {p}"))
            .unwrap_or_default();
        let _ = write!(
            page,
            "<tr><td>{}<td>{}{to}<td class=n>{}</tr>",
            l.address,
            l.mode.as_str(),
            l.open()
        );
    }
    let watches = gw.metrics().terminate.watches_open.get();
    let _ = write!(
        page,
        "<tr><th>all<th><th class=n>{open} of {}</tr></table>",
        gw.client_limit()
    );
    let moved = gw.metrics().terminate.watches_resumed(WatchBreak::Moved);
    if watches > 0 || moved > 0 {
        let _ = write!(
            page,
            "<p class=meta>{watches} watches followed across replicas; {moved} moved live since the start, to even the share or off a drained replica</p>"
        );
    }
}

fn backends_table(page: &mut String, title: &str, backends: &[&BackendView], rise: u32) {
    let _ = write!(
        page,
        "<h2>{title}</h2><table><tr><th>Name<th>Address<th>State<th>Since<th>Why\
         <th>Connections<th>In flight<th>Long-running<th>Upstream conns<th>Version<th>Last probe</tr>",
    );
    if backends.is_empty() {
        page.push_str("<tr><td colspan=10 class=quiet>no backends</tr>");
    }
    for b in backends {
        let mut why = String::new();
        if !b.failing_checks.is_empty() {
            let _ = write!(why, "failing: {}", b.failing_checks.join(", "));
        } else if b.state != "ready" {
            why.push_str(b.last_probe_detail.as_deref().unwrap_or(""));
        }
        if b.shutting_down {
            why.push_str(if why.is_empty() { "" } else { "; " });
            why.push_str("shutting down");
        }
        if b.drained_by_operator {
            why.push_str(if why.is_empty() { "" } else { "; " });
            why.push_str("drained by the operator (kubegate undrain to return it)");
        }
        if b.ejected {
            why.push_str(if why.is_empty() { "" } else { "; " });
            why.push_str("skipped after a failed connect");
        }
        if b.passes_to_ready > rise {
            why.push_str(if why.is_empty() { "" } else { "; " });
            let _ = write!(
                why,
                "flapping: needs {} passing probes to return (rise {rise})",
                b.passes_to_ready
            );
        }
        for (level, left) in &b.rejecting_levels {
            why.push_str(if why.is_empty() { "" } else { "; " });
            let _ = write!(
                why,
                "flow control rejecting priority level {level} (for {left:.0} s more)"
            );
        }
        let probe = match (&b.last_probe_result, b.last_probe_latency_ms) {
            (Some(r), Some(ms)) => format!(
                "<span class='state {}'>{}</span> {ms:.1} ms",
                if r == "pass" { "pass" } else { "fail" },
                esc(r)
            ),
            _ => "<span class=quiet>none yet</span>".into(),
        };
        let since = humantime::parse_rfc3339(&b.since)
            .map(ago)
            .unwrap_or_else(|_| esc(&b.since));
        let source = if b.source == "discovered" {
            " <span class=quiet>(discovered)</span>"
        } else {
            ""
        };
        // The version, with the group-versions served as its tooltip.
        let version = match &b.version {
            Some(v) => format!(
                "<span title='{}'>{}</span>",
                esc(&b.group_versions.join(" ")),
                esc(v)
            ),
            None => "<span class=quiet>-</span>".into(),
        };
        let _ = write!(
            page,
            "<tr><td>{}{source}<td>{}<td><span class='state {}'>{}</span><td>{since}\
             <td class=why>{}<td class=n>{}<td class=n>{}<td class=n>{}<td class=n>{}<td>{version}<td>{probe}</tr>",
            esc(&b.name),
            esc(&b.address),
            esc(&b.state),
            esc(&b.state),
            esc(&why),
            b.active_connections,
            b.requests_in_flight,
            b.long_running_requests,
            b.upstream_connections,
        );
    }
    page.push_str("</table>");
}

fn transitions(page: &mut String, recorded: &[Recorded]) {
    page.push_str("<h2>Last transitions</h2><table><tr><th>When<th>Backend<th>From<th>To</tr>");
    if recorded.is_empty() {
        page.push_str("<tr><td colspan=4 class=quiet>none since start</tr>");
    }
    for t in recorded.iter().take(TRANSITIONS) {
        let _ = write!(
            page,
            "<tr><td>{}<td>{}<td><span class='state {}'>{}</span>\
             <td><span class='state {}'>{}</span></tr>",
            ago(t.at),
            esc(&t.backend),
            t.from.as_str(),
            t.from.as_str(),
            t.to.as_str(),
            t.to.as_str()
        );
    }
    page.push_str("</table>");
}

/// The last reload's outcome, when it did not succeed.
fn reload_note(gw: &Gateway) -> String {
    if gw.metrics().control.last_reload_ok.get() == 1 {
        return String::new();
    }
    " · <span class='state fail'>the last reload was refused: the previous configuration runs</span>"
        .to_string()
}

/// The time since `at`, to the second.
fn elapsed(at: SystemTime) -> String {
    let d = SystemTime::now().duration_since(at).unwrap_or_default();
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// How long ago `at` was, to the second.
fn ago(at: SystemTime) -> String {
    match elapsed(at).as_str() {
        "0s" => "just now".into(),
        e => format!("{e} ago"),
    }
}

/// `s` with HTML's special characters escaped (text and quoted attribute values).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_cannot_become_markup() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
