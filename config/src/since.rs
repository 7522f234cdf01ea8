//! When each configuration key was added, so that a file can be checked against an older
//! release before a rollback: keys are only ever added (never renamed or removed), and an
//! older kubegate refuses a key it does not know (unknown keys are errors). `kubegate check
//! --compat VERSION` names every key a file uses that VERSION does not know.
//!
//! A key not listed here is in every release, unless a key it sits under is listed: the keys
//! under `clusters` came with it. `keys_of_0_1_0.txt` (beside this file) lists
//! the keys of 0.1.0, and a test fails for a key in the schema that is in neither, so a new key
//! cannot be added without its release here.

use crate::error::Problem;
use crate::locate::PathIndex;

/// A release, as (major, minor, patch).
pub type Version = (u32, u32, u32);

/// Keys added after 0.1.0, by path (`[]` stands for any list index), with the release that
/// added them.
pub const ADDED: &[(&str, Version)] = &[
    ("upstream.front_proxy.username_headers", (0, 2, 0)),
    ("upstream.front_proxy.group_headers", (0, 2, 0)),
    ("upstream.front_proxy.extra_prefixes", (0, 2, 0)),
    ("upstream.front_proxy.uid_headers", (0, 2, 0)),
    ("terminate.trusted_proxies", (0, 2, 0)),
    ("terminate.access_log", (0, 2, 0)),
    ("terminate.access_log.format", (0, 2, 0)),
    ("terminate.access_log.max_per_second", (0, 2, 0)),
    ("terminate.version_skew", (0, 2, 0)),
    ("terminate.version_skew.routing", (0, 2, 0)),
    ("terminate.version_skew.refresh", (0, 2, 0)),
    ("listeners[].tls.min_version", (0, 2, 0)),
    ("listeners[].tls.cipher_suites", (0, 2, 0)),
    ("admin.tls.min_version", (0, 2, 0)),
    ("admin.tls.cipher_suites", (0, 2, 0)),
    ("upstream.tls.min_version", (0, 2, 0)),
    ("upstream.tls.cipher_suites", (0, 2, 0)),
    ("health.tls.min_version", (0, 2, 0)),
    ("health.tls.cipher_suites", (0, 2, 0)),
    ("dispatch", (0, 2, 0)),
    ("dispatch[].name", (0, 2, 0)),
    ("dispatch[].match", (0, 2, 0)),
    ("dispatch[].match.verbs", (0, 2, 0)),
    ("dispatch[].match.api_groups", (0, 2, 0)),
    ("dispatch[].match.resources", (0, 2, 0)),
    ("dispatch[].match.namespaces", (0, 2, 0)),
    ("dispatch[].match.users", (0, 2, 0)),
    ("dispatch[].match.groups", (0, 2, 0)),
    ("dispatch[].match.service_accounts", (0, 2, 0)),
    ("dispatch[].match.non_resource_urls", (0, 2, 0)),
    ("dispatch[].backends", (0, 2, 0)),
    ("dispatch[].fallback", (0, 2, 0)),
    ("dispatch[].limit", (0, 2, 0)),
    ("dispatch[].limit.max_in_flight", (0, 2, 0)),
    ("dispatch[].limit.rate", (0, 2, 0)),
    ("dispatch[].limit.burst", (0, 2, 0)),
    ("terminate.max_request_body_bytes_per_connection", (0, 3, 0)),
    ("terminate.max_request_body_bytes_in_total", (0, 3, 0)),
    ("terminate.request_body_timeout", (0, 3, 0)),
    ("terminate.min_request_timeout", (0, 3, 0)),
    ("terminate.watch_moves_per_second", (0, 3, 0)),
    ("terminate.token_review", (0, 3, 0)),
    ("terminate.token_review.enabled", (0, 3, 0)),
    ("terminate.token_review.ttl", (0, 3, 0)),
    ("terminate.token_review.negative_ttl", (0, 3, 0)),
    ("terminate.token_review.max_entries", (0, 3, 0)),
    ("terminate.token_review.timeout", (0, 3, 0)),
    ("terminate.token_review.max_in_flight", (0, 3, 0)),
    // Every key under `clusters` came with it.
    ("clusters", (0, 3, 0)),
    ("listeners[].clusters", (0, 3, 0)),
    ("listeners[].default_cluster", (0, 3, 0)),
    ("listeners[].proxy_protocol", (0, 3, 0)),
    ("listeners[].backend_port", (0, 3, 0)),
    ("listeners[].backend_probe", (0, 3, 0)),
    ("dispatch[].match.kubectl_commands", (0, 3, 0)),
    ("dispatch[].match.kubectl_sessions", (0, 3, 0)),
    ("dispatch[].reject", (0, 3, 0)),
    ("dispatch[].reject.retry_after", (0, 3, 0)),
    ("dispatch[].expires", (0, 3, 0)),
    ("backends[].other_addresses", (0, 3, 0)),
    ("terminate.shed_state_file", (0, 3, 0)),
    ("terminate.shed_object", (0, 3, 0)),
    ("terminate.auto_shed", (0, 3, 0)),
    ("terminate.auto_shed.enabled", (0, 3, 0)),
    ("terminate.auto_shed.factor", (0, 3, 0)),
    ("terminate.auto_shed.min_share_percent", (0, 3, 0)),
    ("terminate.auto_shed.latency_bound", (0, 3, 0)),
    ("terminate.auto_shed.max_senders", (0, 3, 0)),
    ("terminate.auto_shed.lasts", (0, 3, 0)),
    ("terminate.auto_shed.retry_after", (0, 3, 0)),
    ("terminate.hold_when_none_ready", (0, 3, 0)),
    ("terminate.max_held_when_none_ready", (0, 3, 0)),
    ("terminate.hold_reads_when_storage_fails", (0, 3, 0)),
    ("terminate.join_reads", (0, 3, 0)),
    ("terminate.join_reads.enabled", (0, 3, 0)),
    ("terminate.join_reads.max_answer_bytes", (0, 3, 0)),
    ("terminate.join_reads.max_held_bytes", (0, 3, 0)),
    ("terminate.join_reads.secrets", (0, 3, 0)),
    ("terminate.shared_watches", (0, 3, 0)),
    ("terminate.shared_watches.enabled", (0, 3, 0)),
    ("terminate.shared_watches.window_events", (0, 3, 0)),
    ("terminate.shared_watches.window_bytes", (0, 3, 0)),
    ("terminate.shared_watches.max_held_bytes", (0, 3, 0)),
    ("terminate.shared_watches.max_lag_events", (0, 3, 0)),
    ("terminate.shared_watches.secrets", (0, 3, 0)),
    ("terminate.join_reads.across_senders", (0, 3, 0)),
    ("terminate.shared_watches.across_senders", (0, 3, 0)),
    ("terminate.access_review", (0, 3, 0)),
    ("terminate.access_review.ttl", (0, 3, 0)),
    ("terminate.access_review.negative_ttl", (0, 3, 0)),
    ("terminate.access_review.max_entries", (0, 3, 0)),
    ("terminate.access_review.timeout", (0, 3, 0)),
    ("terminate.access_review.max_in_flight", (0, 3, 0)),
    ("terminate.client_ping_interval", (0, 3, 0)),
    ("terminate.client_ping_timeout", (0, 3, 0)),
    ("terminate.slow_watch_timeout", (0, 3, 0)),
];

/// Reads `1.2.3` (a leading `v` allowed).
pub fn parse_version(text: &str) -> Result<Version, String> {
    let parts: Vec<u32> = text
        .trim()
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{text:?} is not a version (write e.g. 0.1.0)"))?;
    match parts[..] {
        [major, minor, patch] => Ok((major, minor, patch)),
        [major, minor] => Ok((major, minor, 0)),
        _ => Err(format!("{text:?} is not a version (write e.g. 0.1.0)")),
    }
}

/// The written form of `v`.
pub fn version_text(v: Version) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

/// `listeners[2].tls.min_version` → `listeners[].tls.min_version`.
fn pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// Every key of `text` that release `older` does not know, in file order, with its position.
pub fn keys_newer_than(text: &str, older: Version) -> Vec<Problem> {
    let index = PathIndex::build(text);
    let mut found: Vec<Problem> = index
        .keys()
        .filter_map(|(path, (line, column))| {
            let added = ADDED
                .iter()
                .find(|(p, _)| *p == pattern(path))
                .map(|(_, v)| *v)?;
            (added > older).then(|| Problem {
                line,
                column,
                message: format!(
                    "{path} was added in kubegate {}; kubegate {} refuses the file",
                    version_text(added),
                    version_text(older)
                ),
            })
        })
        .collect();
    found.sort_by_key(|p| (p.line, p.column));
    found
}

/// Every key path of a configuration with every optional part present, as patterns.
#[cfg(test)]
pub(crate) fn schema_keys() -> std::collections::BTreeSet<String> {
    let c = crate::schema::tests_support::every_part();
    PathIndex::build(&c.to_yaml())
        .keys()
        .map(|(p, _)| pattern(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_the_schema_is_in_0_1_0_or_has_its_release() {
        let old: std::collections::BTreeSet<&str> = include_str!("keys_of_0_1_0.txt")
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let added_with = |key: &str| {
            ADDED.iter().any(|(p, _)| {
                key == *p || key.starts_with(&format!("{p}.")) || key.starts_with(&format!("{p}[]"))
            })
        };
        for key in schema_keys() {
            assert!(
                old.contains(key.as_str()) || added_with(&key),
                "{key} is new: add it to since::ADDED with the release that adds it"
            );
        }
        for (key, _) in ADDED {
            assert!(!old.contains(key), "{key} is in 0.1.0");
        }
    }

    /// Prints the schema's keys (to write a release's key list): `cargo test -p
    /// kubegate-config print_schema_keys -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_schema_keys() {
        for k in schema_keys() {
            println!("{k}");
        }
    }

    #[test]
    fn versions_read_and_compare() {
        assert_eq!(parse_version("0.1.0"), Ok((0, 1, 0)));
        assert_eq!(parse_version("v0.2"), Ok((0, 2, 0)));
        assert!(parse_version("latest").is_err());
        assert!((0, 2, 0) > (0, 1, 9));
        assert_eq!(
            pattern("listeners[12].tls.cert_file"),
            "listeners[].tls.cert_file"
        );
    }
}
