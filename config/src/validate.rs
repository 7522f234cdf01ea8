//! Checks that serde cannot express: uniqueness, cross-field rules, files that must exist.
//! Each finding names the path of the offending value; `load` turns that into LINE:COLUMN.

use crate::parts::{
    at_least_one, positive, resolve_file, resolve_path, validate_admin, validate_parts, Parts,
};
use crate::schema::{Config, ListenerMode};
use std::collections::HashSet;
use std::path::Path;

/// The longest `proxy_protocol.timeout`: a balancer writes its header with the connection's
/// first bytes, and every connection waiting for one holds an admission slot.
const MAX_PROXY_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One finding: the path of the value (`backends[1].address`) and what is wrong with it.
pub type Finding = (String, String);

/// Validates `config`, resolving relative file paths against `base_dir` in place.
pub fn validate(config: &mut Config, base_dir: &Path) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut bad = |path: String, message: String| findings.push((path, message));

    if config.listeners.is_empty() {
        bad(
            "listeners".into(),
            "at least one listener is required".into(),
        );
    }
    let mut seen = HashSet::new();
    let mut verifies_client_certs = None;
    // With clusters, each cluster's `tls` serves a terminate listener's clients.
    let named = !config.clusters.is_empty();
    for (i, l) in config.listeners.iter_mut().enumerate() {
        if !seen.insert(l.address) {
            bad(
                format!("listeners[{i}].address"),
                format!("duplicate listener address {}", l.address),
            );
        }
        if l.address == config.admin.address {
            bad(
                "admin.address".into(),
                format!("admin address {} is also a listener", l.address),
            );
        }
        match (l.mode, &mut l.tls) {
            (ListenerMode::Passthrough, Some(_)) => bad(
                format!("listeners[{i}].tls"),
                "tls is for mode: terminate; in passthrough the apiserver's own TLS reaches the client".into(),
            ),
            (ListenerMode::Terminate, None) if !named => bad(
                format!("listeners[{i}].mode"),
                "mode: terminate needs tls.cert_file and tls.key_file (the certificate clients see)".into(),
            ),
            (ListenerMode::Terminate, Some(_)) if named => bad(
                format!("listeners[{i}].tls"),
                "with clusters:, each cluster's tls (clusters[].tls) is what its clients see; a listener has none".into(),
            ),
            (ListenerMode::Terminate, Some(tls)) => {
                let at = |key: &str| format!("listeners[{i}].tls.{key}");
                resolve_path(&mut bad, &at("cert_file"), &mut tls.cert_file, base_dir);
                resolve_path(&mut bad, &at("key_file"), &mut tls.key_file, base_dir);
                resolve_file(&mut bad, &at("client_ca_file"), &mut tls.client_ca_file, base_dir);
                if tls.client_ca_file.is_some() && verifies_client_certs.is_none() {
                    verifies_client_certs = Some(at("client_ca_file"));
                }
            }
            (_, None) => {}
        }
        if l.backend_port.is_some() && l.mode != ListenerMode::Passthrough {
            bad(
                format!("listeners[{i}].backend_port"),
                "another port of the replicas is forwarded by a passthrough listener only (terminate mode speaks the apiserver's HTTP)".into(),
            );
        }
        if l.backend_port == Some(0) {
            bad(
                format!("listeners[{i}].backend_port"),
                "port 0 is no port: name the replicas' port (konnectivity-server's is 8132)".into(),
            );
        }
        if l.backend_probe.is_some() && l.backend_port.is_none() {
            bad(
                format!("listeners[{i}].backend_probe"),
                "probes a listener's backend_port: without one the replica's own readiness decides"
                    .into(),
            );
        }
        if let Some(p) = &l.proxy_protocol {
            if p.trusted.is_empty() {
                bad(
                    format!("listeners[{i}].proxy_protocol.trusted"),
                    "names no balancer: list the addresses or ranges that send PROXY headers"
                        .into(),
                );
            }
            if p.timeout.is_zero() || p.timeout > MAX_PROXY_HEADER_TIMEOUT {
                bad(
                    format!("listeners[{i}].proxy_protocol.timeout"),
                    format!(
                        "must be more than 0s (a header needs time to arrive) and at most {}s (a silent connection holds its place until then)",
                        MAX_PROXY_HEADER_TIMEOUT.as_secs()
                    ),
                );
            }
        }
    }
    let terminating = config
        .listeners
        .iter()
        .any(|l| l.mode == ListenerMode::Terminate);
    validate_admin(&mut bad, &mut config.admin, base_dir);
    if let Some(u) = &mut config.upgrade {
        // The socket need not exist (kubegate creates it), its directory must.
        if u.socket.is_relative() {
            u.socket = base_dir.join(&u.socket);
        }
        match u.socket.parent() {
            Some(dir) if dir.is_dir() => {}
            _ => bad(
                "upgrade.socket".into(),
                format!("{}: its directory does not exist", u.socket.display()),
            ),
        }
    }

    if config.clusters.is_empty() {
        let mut parts = Parts {
            backends: &config.backends,
            discovery: &mut config.discovery,
            health: &mut config.health,
            upstream: &mut config.upstream,
            dispatch: &config.dispatch,
        };
        validate_parts(
            &mut bad,
            &mut parts,
            terminating,
            verifies_client_certs.as_deref(),
            base_dir,
        );
        for (i, l) in config.listeners.iter().enumerate() {
            for (key, set) in [
                ("clusters", l.clusters.is_some()),
                ("default_cluster", l.default_cluster.is_some()),
            ] {
                if set {
                    bad(
                        format!("listeners[{i}].{key}"),
                        "names clusters, but the file has no clusters: (its top-level backends are the one cluster)".into(),
                    );
                }
            }
        }
    } else {
        crate::cluster::validate(config, terminating, base_dir, &mut bad);
    }
    if let Some(state) = &mut config.terminate.shed_state_file {
        if state.is_relative() {
            *state = base_dir.join(&*state);
        }
        if !state.parent().is_some_and(Path::is_dir) {
            bad(
                "terminate.shed_state_file".into(),
                format!("{}: its directory does not exist", state.display()),
            );
        }
    }
    if let Some(object) = &config.terminate.shed_object {
        if let Err(why) = crate::object::ObjectName::parse(object) {
            bad("terminate.shed_object".into(), why);
        }
    }
    let a = &config.terminate.auto_shed;
    for (key, ok, why) in [
        (
            "factor",
            a.factor >= 2,
            "at least 2: a runaway costs several times its peers",
        ),
        (
            "min_share_percent",
            (1..=100).contains(&a.min_share_percent),
            "from 1 to 100",
        ),
        (
            "max_senders",
            (1..=32).contains(&a.max_senders),
            "from 1 to 32",
        ),
        (
            "lasts",
            (10..=3600).contains(&a.lasts.as_secs()),
            "from 10s to 1h",
        ),
        (
            "retry_after",
            (1..=3600).contains(&a.retry_after.as_secs()),
            "from 1s to 1h",
        ),
        (
            "latency_bound",
            a.latency_bound
                .is_none_or(|d| d >= std::time::Duration::from_millis(100)),
            "at least 100ms: an apiserver answers few requests faster",
        ),
    ] {
        if !ok {
            bad(
                format!("terminate.auto_shed.{key}"),
                format!("terminate.auto_shed.{key} must be {why}"),
            );
        }
    }
    let t = &config.terminate;
    if !t.hold_when_none_ready.is_zero() && t.max_held_when_none_ready == 0 {
        bad(
            "terminate.max_held_when_none_ready".into(),
            "terminate.max_held_when_none_ready must be at least 1 when terminate.hold_when_none_ready is set".into(),
        );
    }
    let k = &config.client_keepalive;
    // The kernel takes whole seconds, at most 32767 (TCP_KEEPIDLE, TCP_KEEPINTVL), and at most
    // 127 probes (TCP_KEEPCNT).
    for (path, d) in [
        ("client_keepalive.idle", k.idle),
        ("client_keepalive.interval", k.interval),
    ] {
        if d.subsec_nanos() != 0 || !(1..=32767).contains(&d.as_secs()) {
            bad(
                path.into(),
                format!("{path} must be whole seconds from 1s to 32767s, not {d:?}"),
            );
        }
    }
    if !(1..=127).contains(&k.count) {
        bad(
            "client_keepalive.count".into(),
            format!("client_keepalive.count must be 1..=127, not {}", k.count),
        );
    }
    positive(&mut bad, "terminate.handshake_timeout", t.handshake_timeout);
    // `0s` would cut every client at its first PING, or every watch at its first full stream
    // (`client_ping_interval: 0s` is how the PINGs are turned off).
    positive(
        &mut bad,
        "terminate.client_ping_timeout",
        t.client_ping_timeout,
    );
    positive(
        &mut bad,
        "terminate.slow_watch_timeout",
        t.slow_watch_timeout,
    );
    positive(
        &mut bad,
        "terminate.version_skew.refresh",
        t.version_skew.refresh,
    );
    positive(
        &mut bad,
        "terminate.header_read_timeout",
        t.header_read_timeout,
    );
    at_least_one(
        &mut bad,
        "terminate.max_concurrent_streams",
        t.max_concurrent_streams,
    );
    if t.max_header_list_bytes < 1024 {
        bad(
            "terminate.max_header_list_bytes".into(),
            format!(
                "terminate.max_header_list_bytes must be at least 1024, not {}",
                t.max_header_list_bytes
            ),
        );
    }
    if config.limits.max_client_connections == 0 {
        bad(
            "limits.max_client_connections".into(),
            "limits.max_client_connections must be at least 1".into(),
        );
    }
    if t.max_request_body_bytes == 0 {
        bad(
            "terminate.max_request_body_bytes".into(),
            "terminate.max_request_body_bytes must be at least 1".into(),
        );
    }
    // Each wider bound must hold one request's largest body, or such a request could never
    // be read.
    for (key, value) in [
        (
            "terminate.max_request_body_bytes_per_connection",
            t.max_request_body_bytes_per_connection,
        ),
        (
            "terminate.max_request_body_bytes_in_total",
            t.max_request_body_bytes_in_total,
        ),
    ] {
        if value < t.max_request_body_bytes {
            bad(
                key.into(),
                format!(
                    "{key} ({value}) must hold at least one largest body (terminate.max_request_body_bytes, {})",
                    t.max_request_body_bytes
                ),
            );
        }
    }
    positive(
        &mut bad,
        "terminate.request_body_timeout",
        t.request_body_timeout,
    );
    positive(
        &mut bad,
        "terminate.min_request_timeout",
        t.min_request_timeout,
    );
    let jr = &t.join_reads;
    if jr.enabled && jr.max_held_bytes < jr.max_answer_bytes {
        bad(
            "terminate.join_reads.max_held_bytes".into(),
            format!(
                "terminate.join_reads.max_held_bytes ({}) must hold at least one largest answer (terminate.join_reads.max_answer_bytes, {})",
                jr.max_held_bytes, jr.max_answer_bytes
            ),
        );
    }
    let sw = &t.shared_watches;
    if sw.enabled {
        at_least_one(
            &mut bad,
            "terminate.shared_watches.window_events",
            sw.window_events,
        );
        at_least_one(
            &mut bad,
            "terminate.shared_watches.max_lag_events",
            sw.max_lag_events,
        );
        if sw.max_held_bytes < sw.window_bytes {
            bad(
                "terminate.shared_watches.max_held_bytes".into(),
                format!(
                    "terminate.shared_watches.max_held_bytes ({}) must hold at least one window (terminate.shared_watches.window_bytes, {})",
                    sw.max_held_bytes, sw.window_bytes
                ),
            );
        }
    }
    // The two review caches have the same settings, checked alike.
    let (tr, ar) = (&t.token_review, &t.access_review);
    for (section, times, bounds) in [
        (
            "terminate.token_review",
            [tr.ttl, tr.negative_ttl, tr.timeout],
            [tr.max_entries, tr.max_in_flight],
        ),
        (
            "terminate.access_review",
            [ar.ttl, ar.negative_ttl, ar.timeout],
            [ar.max_entries, ar.max_in_flight],
        ),
    ] {
        for (name, d) in ["ttl", "negative_ttl", "timeout"].into_iter().zip(times) {
            positive(&mut bad, &format!("{section}.{name}"), d);
        }
        for (name, n) in ["max_entries", "max_in_flight"].into_iter().zip(bounds) {
            at_least_one(&mut bad, &format!("{section}.{name}"), n);
        }
    }
    positive(&mut bad, "connect.timeout", config.connect.timeout);
    at_least_one(&mut bad, "connect.attempts", config.connect.attempts);
    if config.threads == 0 || config.threads > 256 {
        bad(
            "threads".into(),
            format!("threads must be 1..=256, not {}", config.threads),
        );
    }
    // Clusters that inherit the top-level health or upstream each report its problems.
    let mut seen = HashSet::new();
    findings.retain(|f| seen.insert(f.clone()));
    findings
}
