//! What each part of a configuration must hold — backends, health, upstream, the admin
//! endpoint, names and files — checked alike for the top level of a file and for each of its
//! clusters (`validate` and `cluster` both ask here). Each finding names the path of the
//! offending value, relative to where the part is written.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a cluster has of its own: the top level of a file without `clusters:`, or one of its
/// clusters (with what it inherits filled in).
pub(crate) struct Parts<'a> {
    pub backends: &'a [crate::schema::BackendSpec],
    pub discovery: &'a mut Option<crate::schema::DiscoveryConfig>,
    pub health: &'a mut crate::schema::HealthConfig,
    pub upstream: &'a mut crate::schema::UpstreamConfig,
    pub dispatch: &'a [crate::dispatch::DispatchRule],
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
        // A replica's other address is its own: no other backend, nor itself again.
        for (j, other) in b.other_addresses.iter().enumerate() {
            if !addresses.insert(*other) {
                bad(
                    format!("backends[{i}].other_addresses[{j}]"),
                    format!(
                        "{other} is already an address of a backend: each address is one replica's"
                    ),
                );
            } else if other.port() == 0 {
                bad(
                    format!("backends[{i}].other_addresses[{j}]"),
                    "backend port must not be 0".into(),
                );
            }
        }
        if b.health_address.is_some() && !b.other_addresses.is_empty() {
            bad(
                format!("backends[{i}].other_addresses"),
                "a backend probed at health_address has one address to move to: leave out one of the two".into(),
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
pub(crate) fn validate_admin(
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
pub(crate) fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

pub(crate) fn positive(bad: &mut impl FnMut(String, String), path: &str, d: Duration) {
    if d.is_zero() {
        bad(path.into(), format!("{path} must be greater than 0"));
    }
}

pub(crate) fn at_least_one(bad: &mut impl FnMut(String, String), path: &str, n: u32) {
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

pub(crate) fn valid_server_name(name: &str) -> bool {
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
