//! Checks that serde cannot express: uniqueness, cross-field rules, files that must exist.
//! Each finding names the path of the offending value; `load` turns that into LINE:COLUMN.

use crate::schema::{Config, ListenerMode};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    let t = &config.terminate;
    positive(&mut bad, "terminate.handshake_timeout", t.handshake_timeout);
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
    let tr = &t.token_review;
    positive(&mut bad, "terminate.token_review.ttl", tr.ttl);
    positive(
        &mut bad,
        "terminate.token_review.negative_ttl",
        tr.negative_ttl,
    );
    positive(&mut bad, "terminate.token_review.timeout", tr.timeout);
    at_least_one(
        &mut bad,
        "terminate.token_review.max_entries",
        tr.max_entries,
    );
    at_least_one(
        &mut bad,
        "terminate.token_review.max_in_flight",
        tr.max_in_flight,
    );
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

/// What a cluster has of its own: the top level of a file without `clusters:`, or one of its
/// clusters (with what it inherits filled in).
pub(crate) struct Parts<'a> {
    pub backends: &'a [crate::schema::BackendSpec],
    pub discovery: &'a mut Option<crate::schema::DiscoveryConfig>,
    pub health: &'a mut crate::schema::HealthConfig,
    pub upstream: &'a mut crate::schema::UpstreamConfig,
    pub dispatch: &'a [crate::DispatchRule],
}

/// Validates one cluster's parts; `bad` takes paths relative to where the parts are written.
pub(crate) fn validate_parts(
    bad: &mut impl FnMut(String, String),
    parts: &mut Parts<'_>,
    terminating: bool,
    verifies_client_certs: Option<&str>,
    base_dir: &Path,
) {
    if let Some(d) = &mut parts.discovery {
        resolve_path(bad, "discovery.kubeconfig", &mut d.kubeconfig, base_dir);
        if let Some(state) = &mut d.state_file {
            if state.is_relative() {
                *state = base_dir.join(&*state);
            }
            if !state.parent().is_some_and(Path::is_dir) {
                bad(
                    "discovery.state_file".into(),
                    format!("{}: its directory does not exist", state.display()),
                );
            }
        }
        positive(bad, "discovery.debounce", d.debounce);
    }
    if parts.backends.is_empty() {
        bad("backends".into(), "at least one backend is required".into());
    }
    let mut addresses = HashSet::new();
    let mut names = HashSet::new();
    for (i, b) in parts.backends.iter().enumerate() {
        if !addresses.insert(b.address) {
            bad(
                format!("backends[{i}].address"),
                format!("duplicate backend address {}", b.address),
            );
        }
        if let Some(name) = &b.name {
            if name.is_empty() || name.chars().any(|c| c.is_control()) {
                bad(
                    format!("backends[{i}].name"),
                    "backend name must be non-empty printable text".into(),
                );
            }
        }
        let name = b.display_name();
        // A defaulted name repeats only when the address does, which is reported above.
        if !names.insert(name.clone()) && b.name.is_some() {
            bad(
                format!("backends[{i}].name"),
                format!("duplicate backend name {name:?}"),
            );
        }
        if b.address.port() == 0 {
            bad(
                format!("backends[{i}].address"),
                "backend port must not be 0".into(),
            );
        }
    }

    validate_health(bad, parts.health, base_dir, true);
    if terminating {
        let health_tls = parts.health.tls.clone();
        validate_upstream(
            parts.upstream,
            &health_tls,
            verifies_client_certs,
            base_dir,
            bad,
        );
    }
    if !parts.dispatch.is_empty() && !terminating {
        bad(
            "dispatch".into(),
            "dispatch rules apply to requests, which only mode: terminate listeners see; no listener terminates".into(),
        );
    }
    // Discovered backends are named by the cluster: their names are not known yet.
    let names: Option<Vec<String>> = parts
        .discovery
        .is_none()
        .then(|| parts.backends.iter().map(|b| b.display_name()).collect());
    for (path, message) in crate::dispatch::validate(parts.dispatch, names.as_deref()) {
        bad(path, message);
    }
}

/// How a cluster's replicas are probed; `probes`: some cluster is probed with these settings
/// (the top-level ones, with `clusters:`, only serve as defaults a cluster may not take, and
/// then need no CA).
pub(crate) fn validate_health(
    bad: &mut impl FnMut(String, String),
    h: &mut crate::schema::HealthConfig,
    base_dir: &Path,
    probes: bool,
) {
    if !h.path.starts_with('/') || h.path.contains(['?', '#', ' ']) {
        bad(
            "health.path".into(),
            format!(
                "health path {:?} must start with / and hold no query (?verbose is added)",
                h.path
            ),
        );
    }
    positive(bad, "health.interval", h.interval);
    positive(bad, "health.timeout", h.timeout);
    at_least_one(bad, "health.rise", h.rise);
    at_least_one(bad, "health.fall", h.fall);
    positive(bad, "health.fast_interval", h.fast_interval);
    if h.fast_interval > h.interval {
        bad(
            "health.fast_interval".into(),
            format!(
                "fast_interval ({:?}) must not be longer than interval ({:?})",
                h.fast_interval, h.interval
            ),
        );
    }
    if !valid_server_name(&h.tls.server_name) {
        bad(
            "health.tls.server_name".into(),
            format!(
                "{:?} is neither a DNS name nor an IP address",
                h.tls.server_name
            ),
        );
    }
    match (&h.tls.ca_file, h.tls.insecure_skip_verify) {
        (None, false) if probes => bad(
            "health.tls".into(),
            "health.tls.ca_file is required (or set insecure_skip_verify: true, not for production)"
                .into(),
        ),
        (Some(_), true) => bad(
            "health.tls.insecure_skip_verify".into(),
            "ca_file and insecure_skip_verify exclude each other".into(),
        ),
        _ => {}
    }
    resolve_file(bad, "health.tls.ca_file", &mut h.tls.ca_file, base_dir);
    match (&h.tls.client_cert_file, &h.tls.client_key_file) {
        (Some(_), None) => bad(
            "health.tls.client_cert_file".into(),
            "client_cert_file needs client_key_file".into(),
        ),
        (None, Some(_)) => bad(
            "health.tls.client_key_file".into(),
            "client_key_file needs client_cert_file".into(),
        ),
        _ => {}
    }
    resolve_file(
        bad,
        "health.tls.client_cert_file",
        &mut h.tls.client_cert_file,
        base_dir,
    );
    resolve_file(
        bad,
        "health.tls.client_key_file",
        &mut h.tls.client_key_file,
        base_dir,
    );
    resolve_file(
        bad,
        "health.bearer_token_file",
        &mut h.bearer_token_file,
        base_dir,
    );
}

/// The admin endpoint: its TLS files, its token only over TLS.
fn validate_admin(
    bad: &mut impl FnMut(String, String),
    admin: &mut crate::schema::AdminConfig,
    base_dir: &Path,
) {
    if let Some(tls) = &mut admin.tls {
        resolve_path(bad, "admin.tls.cert_file", &mut tls.cert_file, base_dir);
        resolve_path(bad, "admin.tls.key_file", &mut tls.key_file, base_dir);
        resolve_file(
            bad,
            "admin.tls.client_ca_file",
            &mut tls.client_ca_file,
            base_dir,
        );
    }
    resolve_file(
        bad,
        "admin.bearer_token_file",
        &mut admin.bearer_token_file,
        base_dir,
    );
    if admin.bearer_token_file.is_some() && admin.tls.is_none() {
        bad(
            "admin.bearer_token_file".into(),
            "a bearer token needs admin.tls: over plain HTTP it can be read off the network".into(),
        );
    }
    for (i, p) in admin.public_paths.iter().enumerate() {
        if !p.starts_with('/') {
            bad(
                format!("admin.public_paths[{i}]"),
                format!("{p:?} must start with /"),
            );
        }
    }
    if admin.max_connections == 0 {
        bad(
            "admin.max_connections".into(),
            "at least one connection is needed".into(),
        );
    }
    positive(bad, "admin.header_read_timeout", admin.header_read_timeout);
}

/// Terminate mode's upstream: TLS defaults taken from `health.tls`, the front-proxy identity
/// required where client certificates are verified (`verifies_client_certs` names the first
/// listener that does).
pub(crate) fn validate_upstream(
    u: &mut crate::schema::UpstreamConfig,
    health_tls: &crate::schema::HealthTls,
    verifies_client_certs: Option<&str>,
    base_dir: &Path,
    bad: &mut impl FnMut(String, String),
) {
    if u.tls.server_name.is_none() {
        u.tls.server_name = Some(health_tls.server_name.clone());
    } else if let Some(name) = u
        .tls
        .server_name
        .as_deref()
        .filter(|n| !valid_server_name(n))
    {
        bad(
            "upstream.tls.server_name".into(),
            format!("{name:?} is neither a DNS name nor an IP address"),
        );
    }
    if u.tls.ca_file.is_some() {
        resolve_file(bad, "upstream.tls.ca_file", &mut u.tls.ca_file, base_dir);
    } else if health_tls.ca_file.is_some() {
        // Already resolved with health.tls.
        u.tls.ca_file = health_tls.ca_file.clone();
    } else {
        bad(
            "upstream.tls".into(),
            "terminate mode needs upstream.tls.ca_file (health.tls has none to share: it skips verification)".into(),
        );
    }
    match &mut u.front_proxy {
        Some(fp) => {
            resolve_path(
                bad,
                "upstream.front_proxy.cert_file",
                &mut fp.cert_file,
                base_dir,
            );
            resolve_path(
                bad,
                "upstream.front_proxy.key_file",
                &mut fp.key_file,
                base_dir,
            );
            // 0.1.0's single names become one-name lists; a file names each list one way.
            for (single, list, key, default, at_least_one) in [
                (
                    &mut fp.username_header,
                    &mut fp.username_headers,
                    "username_header",
                    "X-Remote-User",
                    true,
                ),
                (
                    &mut fp.group_header,
                    &mut fp.group_headers,
                    "group_header",
                    "X-Remote-Group",
                    true,
                ),
                (
                    &mut fp.extra_prefix,
                    &mut fp.extra_prefixes,
                    "extra_prefix",
                    "X-Remote-Extra-",
                    false,
                ),
                (
                    &mut fp.uid_header,
                    &mut fp.uid_headers,
                    "uid_header",
                    "X-Remote-Uid",
                    false,
                ),
            ] {
                let at = |i: usize| format!("upstream.front_proxy.{key}s[{i}]");
                let names: Vec<(String, String)> = match single.take() {
                    Some(name) => {
                        let at = format!("upstream.front_proxy.{key}");
                        if list.as_slice() != [default] {
                            bad(
                                at.clone(),
                                format!("{key} and {key}s both set: write the list only"),
                            );
                        }
                        *list = vec![name.clone()];
                        vec![(at, name)]
                    }
                    None => list
                        .iter()
                        .enumerate()
                        .map(|(i, n)| (at(i), n.clone()))
                        .collect(),
                };
                if at_least_one && names.is_empty() {
                    bad(
                        format!("upstream.front_proxy.{key}s"),
                        "needs at least one name: the first carries the identity".into(),
                    );
                }
                for (at, name) in names {
                    if !valid_header_name(&name) {
                        bad(at, format!("{name:?} is not an HTTP header name"));
                    }
                }
            }
        }
        None => {
            if let Some(at) = verifies_client_certs {
                bad(
                    at.to_string(),
                    "verifying client certificates needs upstream.front_proxy: kubegate passes the identity on with its front-proxy certificate".into(),
                );
            }
        }
    }
    at_least_one(
        bad,
        "upstream.max_streams_per_connection",
        u.max_streams_per_connection,
    );
}

/// An HTTP header name (RFC 9110 token).
fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

fn positive(bad: &mut impl FnMut(String, String), path: &str, d: Duration) {
    if d.is_zero() {
        bad(path.into(), format!("{path} must be greater than 0"));
    }
}

fn at_least_one(bad: &mut impl FnMut(String, String), path: &str, n: u32) {
    if n == 0 {
        bad(path.into(), format!("{path} must be at least 1"));
    }
}

/// Makes a relative path absolute against the config's directory and checks it can be read.
pub(crate) fn resolve_file(
    bad: &mut impl FnMut(String, String),
    path: &str,
    file: &mut Option<PathBuf>,
    base_dir: &Path,
) {
    if let Some(f) = file {
        resolve_path(bad, path, f, base_dir);
    }
}

/// [`resolve_file`] for a file that must be given.
pub(crate) fn resolve_path(
    bad: &mut impl FnMut(String, String),
    path: &str,
    file: &mut PathBuf,
    base_dir: &Path,
) {
    let resolved = if file.is_absolute() {
        file.clone()
    } else {
        base_dir.join(&*file)
    };
    if let Err(e) = std::fs::File::open(&resolved) {
        bad(path.into(), format!("{}: {e}", resolved.display()));
    }
    *file = resolved;
}

fn valid_server_name(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_ok()
        || dotted_name(name, |c| {
            c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
        })
}

/// A name of dot-separated labels (253 bytes at most, each label 1–63) of the bytes `allowed`
/// takes, no label starting or ending with `-`.
pub(crate) fn dotted_name(name: &str, allowed: impl Fn(u8) -> bool) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(&allowed)
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
