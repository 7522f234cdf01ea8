//! The backends as the admin endpoint shows them: `/debug/backends` (JSON, which
//! `kubegate status` reads) and the status page.

use crate::state::Gateway;
use crate::terminate::{ReplicaServed as Served, TerminatePlane};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// One row of `/debug/backends`; `kubegate status` reads the same shape.
#[derive(Serialize, serde::Deserialize, Debug)]
pub struct BackendView {
    /// Name in logs and metrics.
    pub name: String,
    /// The cluster it belongs to (`default` for a file without `clusters:`).
    #[serde(default)]
    pub cluster: String,
    /// Where connections go.
    pub address: String,
    /// Where probes go.
    pub probe_address: String,
    /// A replica of several addresses (`other_addresses`): the one its new work goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_in_use: Option<String>,
    /// Where it came from: `static` (the configuration) or `discovered`.
    #[serde(default)]
    pub source: String,
    /// Health state.
    pub state: String,
    /// When the state began (RFC 3339).
    pub since: String,
    /// Result label of the last probe (`pass`, `fail`, `tls_error`, `timeout`, ...).
    pub last_probe_result: Option<String>,
    /// What the last probe found, in words.
    pub last_probe_detail: Option<String>,
    /// Duration of the last probe in milliseconds.
    pub last_probe_latency_ms: Option<f64>,
    /// When the last probe started (RFC 3339).
    pub last_probe_at: Option<String>,
    /// Failing readyz checks in the last verbose answer.
    pub failing_checks: Vec<String>,
    /// The last answer said `[-]shutdown`.
    pub shutting_down: bool,
    /// Skipped after a failed connect until the next probe.
    pub ejected: bool,
    /// The operator drained it (`kubegate drain`): new work goes elsewhere while another
    /// ready backend is undrained, and its watches move.
    #[serde(default)]
    pub drained_by_operator: bool,
    /// Passing probes in a row it needs to (re)enter `ready`: `health.rise`, or more while it
    /// flaps (`health.flap_damping`).
    pub passes_to_ready: u32,
    /// Open proxied connections.
    pub active_connections: i64,
    /// Terminate-mode requests in flight (long-running ones included).
    #[serde(default)]
    pub requests_in_flight: usize,
    /// Of those, long-running ones: watches, logs, exec, attach, port-forward.
    #[serde(default)]
    pub long_running_requests: usize,
    /// Terminate mode's HTTP/2 connections open for new requests.
    #[serde(default)]
    pub upstream_connections: usize,
    /// The version the replica reports, once terminate mode learned it.
    #[serde(default)]
    pub version: Option<String>,
    /// The API group-versions it serves, once learned.
    #[serde(default)]
    pub group_versions: Vec<String>,
    /// What terminate mode knows of them: `learned`, `unknown` (not learned yet, or not
    /// ready) or `unreadable: WHY`.
    #[serde(default)]
    pub apis: String,
    /// The priority levels (UIDs) its flow control is rejecting now, with the seconds left
    /// of their `Retry-After`: terminate mode sends their requests elsewhere meanwhile.
    #[serde(default)]
    pub rejecting_levels: Vec<(String, f64)>,
    /// Requests of each priority level (UID) in flight on it now, long-running ones left out:
    /// a request goes where fewest of its level are.
    #[serde(default)]
    pub level_requests_in_flight: Vec<(String, u32)>,
    /// Each priority level's response latency on it, ms (a moving average of its last
    /// answers): what the replica's queues for the level add.
    #[serde(default)]
    pub level_latency_ms: Vec<(String, f64)>,
}

pub fn backends_view(gw: &Gateway, plane: &TerminatePlane) -> Vec<BackendView> {
    let upstreams = plane.upstreams();
    gw.clusters()
        .all()
        .iter()
        .flat_map(|c| c.pool().backends().into_iter().map(move |b| (c, b)))
        .map(|(cluster, b)| {
            let info = b.info();
            let probe = b.last_probe();
            // What terminate mode knows of the replica, if it serves the cluster.
            let known = upstreams.get(cluster.name());
            let served = known
                .and_then(|u| u.served.known(b.address))
                .map(|apis| Arc::clone(&apis.get()));
            let levels = known.and_then(|u| u.flows.known(b.address));
            // One snapshot of what it serves, so the three fields agree.
            let (version, group_versions, apis) =
                match served.as_deref().unwrap_or(&Served::Unknown) {
                    Served::Learned(set, _) => (
                        Some(set.version.clone()),
                        set.names().collect(),
                        "learned".to_string(),
                    ),
                    Served::Unknown => (None, Vec::new(), "unknown".to_string()),
                    Served::Unreadable(why, _) => (None, Vec::new(), format!("unreadable: {why}")),
                };
            BackendView {
                name: info.name.clone(),
                cluster: cluster.name().to_string(),
                address: b.address.to_string(),
                // Probed where its work goes unless a health address is set.
                probe_address: match info.probe_address == b.address {
                    true => b.connect_address().to_string(),
                    false => info.probe_address.to_string(),
                },
                address_in_use: (info.addresses.len() > 1).then(|| b.connect_address().to_string()),
                source: info.source.as_str().into(),
                state: b.state().as_str().into(),
                since: humantime::format_rfc3339_millis(
                    UNIX_EPOCH + Duration::from_millis(b.since_unix_ms()),
                )
                .to_string(),
                last_probe_result: probe.as_ref().map(|p| p.outcome.result_label().into()),
                last_probe_detail: probe.as_ref().map(|p| p.outcome.describe()),
                last_probe_latency_ms: probe.as_ref().map(|p| p.latency.as_secs_f64() * 1e3),
                last_probe_at: probe
                    .as_ref()
                    .map(|p| humantime::format_rfc3339_millis(p.at).to_string()),
                failing_checks: probe
                    .as_ref()
                    .map(|p| p.outcome.failing_checks().to_vec())
                    .unwrap_or_default(),
                shutting_down: b.shutting_down(),
                ejected: b.ejected(),
                drained_by_operator: b.drained_by_operator(),
                passes_to_ready: b.passes_to_ready(),
                active_connections: b.planes().passthrough.open() as i64,
                requests_in_flight: b.planes().terminate.in_flight(),
                long_running_requests: b.planes().terminate.long_running(),
                upstream_connections: b.planes().terminate.connections(),
                version,
                group_versions,
                apis,
                rejecting_levels: levels
                    .iter()
                    .flat_map(|l| l.now())
                    .map(|(level, left)| (level.to_string(), left.as_secs_f64()))
                    .collect(),
                level_requests_in_flight: levels
                    .iter()
                    .flat_map(|l| l.all_in_flight())
                    .map(|(level, n)| (level.to_string(), n))
                    .collect(),
                level_latency_ms: levels
                    .iter()
                    .flat_map(|l| l.latencies())
                    .map(|(level, took)| (level.to_string(), took.as_secs_f64() * 1000.0))
                    .collect(),
            }
        })
        .collect()
}
