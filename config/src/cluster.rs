//! Several control planes behind one kubegate: each cluster its own backends, health,
//! upstream, rules and serving certificate, chosen by the TLS server name a client sends.
//!
//! A file without `clusters:` is the one-cluster case: its top-level `backends`, `health`,
//! `upstream`, `dispatch` and `discovery` are that cluster ([`IMPLICIT`]), reached whatever
//! server name a client sends, as before clusters existed. With `clusters:`, those top-level
//! `health` and `upstream` are what a cluster that leaves them out gets; `backends`,
//! `dispatch` and `discovery` belong to each cluster alone.

use crate::parts::{resolve_file, resolve_path, validate_parts, Parts};
use crate::schema::{ClusterConfig, Config, IMPLICIT};
use std::collections::HashMap;
use std::path::Path;

impl Config {
    /// Every cluster, with what it inherits from the top level filled in, in file order:
    /// inheritance applied here alone, once per configuration.
    pub fn clusters(&self) -> &[ClusterConfig] {
        self.resolved.0.get_or_init(|| self.resolve_clusters())
    }

    fn resolve_clusters(&self) -> Vec<ClusterConfig> {
        if self.clusters.is_empty() {
            return vec![ClusterConfig {
                name: IMPLICIT.to_string(),
                server_names: Vec::new(),
                backends: self.backends.clone(),
                discovery: self.discovery.clone(),
                health: self.health.clone(),
                upstream: self.upstream.clone(),
                dispatch: self.dispatch.clone(),
                tls: None,
            }];
        }
        self.clusters
            .iter()
            .map(|c| ClusterConfig {
                name: c.name.clone(),
                server_names: c.server_names.clone(),
                backends: c.backends.clone(),
                discovery: c.discovery.clone(),
                health: c.health.clone().unwrap_or_else(|| self.health.clone()),
                upstream: c.upstream.clone().unwrap_or_else(|| self.upstream.clone()),
                dispatch: c.dispatch.clone(),
                tls: c.tls.clone(),
            })
            .collect()
    }

    /// Whether the file names its clusters (`clusters:`), so that listeners route by
    /// server name.
    pub fn names_clusters(&self) -> bool {
        !self.clusters.is_empty()
    }

    /// Whether a terminate-mode listener serves cluster `name` (one that lists no clusters
    /// serves every one): terminate mode keeps state, and a handshake, for those only.
    pub fn terminated(&self, name: &str) -> bool {
        self.listeners.iter().any(|l| {
            l.mode == crate::schema::ListenerMode::Terminate
                && l.clusters
                    .as_ref()
                    .is_none_or(|c| c.iter().any(|c| c == name))
        })
    }
}

/// Validates a file with `clusters:`: each cluster as the one-cluster file it would be (paths
/// under `clusters[i].`, or at the top level for what it inherits), then what ties them
/// together: names, server names, backends unique across clusters, and the listeners' clusters.
pub(crate) fn validate(
    config: &mut Config,
    terminating: bool,
    base_dir: &Path,
    bad: &mut impl FnMut(String, String),
) {
    for (key, written) in [
        ("backends", !config.backends.is_empty()),
        ("dispatch", !config.dispatch.is_empty()),
        ("discovery", config.discovery.is_some()),
    ] {
        if written {
            bad(
                key.into(),
                format!("with clusters:, each cluster has its own {key} (clusters[].{key})"),
            );
        }
    }
    // The clusters a terminate listener serves, and the first such listener.
    let mut terminated: HashMap<&str, usize> = HashMap::new();
    for (i, l) in config.listeners.iter().enumerate() {
        if l.mode != crate::schema::ListenerMode::Terminate {
            continue;
        }
        for c in &config.clusters {
            if l.clusters
                .as_ref()
                .is_none_or(|names| names.contains(&c.name))
            {
                terminated.entry(c.name.as_str()).or_insert(i);
            }
        }
    }
    let terminated: HashMap<String, usize> = terminated
        .into_iter()
        .map(|(name, i)| (name.to_string(), i))
        .collect();
    // What clusters inherit, as written: each validates its copy against its own health.
    let upstream_written = config.upstream.clone();
    let inherited = config.clusters.iter().any(|c| c.health.is_none());
    crate::parts::validate_health(bad, &mut config.health, base_dir, inherited);
    let top_health = config.health.clone();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut server_names: HashMap<String, String> = HashMap::new();
    let mut backend_names: HashMap<String, String> = HashMap::new();
    let mut backend_addresses: HashMap<std::net::SocketAddr, String> = HashMap::new();
    for (i, c) in config.clusters.iter_mut().enumerate() {
        let prefix = format!("clusters[{i}].");
        if !valid_cluster_name(&c.name) {
            bad(
                format!("{prefix}name"),
                format!(
                    "{:?} is not a cluster name: lower-case letters, digits and -, as a DNS label",
                    c.name
                ),
            );
        } else if names.insert(c.name.clone(), i).is_some() {
            bad(
                format!("{prefix}name"),
                format!("another cluster is named {:?}", c.name),
            );
        }
        if c.server_names.is_empty() {
            bad(
                format!("{prefix}server_names"),
                "a cluster needs the server names its clients send (exact, or *. and a suffix)"
                    .into(),
            );
        }
        for (j, written) in c.server_names.iter().enumerate() {
            let at = format!("{prefix}server_names[{j}]");
            if let Err(e) = ServerNamePattern::parse(written) {
                bad(at, e);
            } else if let Some(other) = server_names.insert(written.clone(), c.name.clone()) {
                bad(
                    at,
                    if other == c.name {
                        format!("{written:?} is written twice")
                    } else {
                        format!("{written:?} is also a server name of cluster {other:?}: a client's name must reach one cluster")
                    },
                );
            }
        }
        for (j, b) in c.backends.iter().enumerate() {
            let name = b.display_name();
            if let Some(other) = backend_names.insert(name.clone(), c.name.clone()) {
                if other != c.name {
                    bad(
                        format!("{prefix}backends[{j}].name"),
                        format!("backend name {name:?} is also in cluster {other:?}: names are unique across clusters (metrics, logs and kubegate drain name backends)"),
                    );
                }
            }
            if let Some(other) = backend_addresses.insert(b.address, c.name.clone()) {
                if other != c.name {
                    bad(
                        format!("{prefix}backends[{j}].address"),
                        format!("{} is also a backend of cluster {other:?}", b.address),
                    );
                }
            }
            for (k, address) in b.other_addresses.iter().enumerate() {
                if let Some(other) = backend_addresses.insert(*address, c.name.clone()) {
                    if other != c.name {
                        bad(
                            format!("{prefix}backends[{j}].other_addresses[{k}]"),
                            format!("{address} is also a backend of cluster {other:?}"),
                        );
                    }
                }
            }
        }
        if let (Some(l), None) = (terminated.get(&c.name), &c.tls) {
            bad(
                format!("{prefix}name"),
                format!("cluster {:?} is served by the terminate listener listeners[{l}]: it needs tls.cert_file and tls.key_file (the certificate its clients see)", c.name),
            );
        }
        // Its client CA verifies certificates kubegate then vouches for upstream.
        let verifies = c
            .tls
            .as_ref()
            .filter(|t| t.client_ca_file.is_some() && terminated.contains_key(&c.name))
            .map(|_| "tls.client_ca_file");
        let (own_health, own_upstream) = (c.health.is_some(), c.upstream.is_some());
        let mut under = |path: String, message: String| {
            let top = path.starts_with("listeners")
                || (!own_health && path.starts_with("health"))
                || (!own_upstream && path.starts_with("upstream"));
            bad(if top { path } else { format!("{prefix}{path}") }, message)
        };
        let health = c.health.get_or_insert_with(|| top_health.clone());
        let upstream = c.upstream.get_or_insert_with(|| upstream_written.clone());
        let mut parts = Parts {
            backends: &c.backends,
            discovery: &mut c.discovery,
            health,
            upstream,
            dispatch: &c.dispatch,
        };
        validate_parts(&mut under, &mut parts, terminating, verifies, base_dir);
        if let Some(tls) = &mut c.tls {
            resolve_path(&mut under, "tls.cert_file", &mut tls.cert_file, base_dir);
            resolve_path(&mut under, "tls.key_file", &mut tls.key_file, base_dir);
            resolve_file(
                &mut under,
                "tls.client_ca_file",
                &mut tls.client_ca_file,
                base_dir,
            );
        }
    }
    for (i, l) in config.listeners.iter().enumerate() {
        let mut listed = Vec::new();
        for (j, name) in l.clusters.iter().flatten().enumerate() {
            if !names.contains_key(name) {
                bad(
                    format!("listeners[{i}].clusters[{j}]"),
                    format!("no cluster is named {name:?}"),
                );
            } else if listed.contains(&name) {
                bad(
                    format!("listeners[{i}].clusters[{j}]"),
                    format!("{name:?} is listed twice"),
                );
            }
            listed.push(name);
        }
        if l.clusters.as_ref().is_some_and(Vec::is_empty) {
            bad(
                format!("listeners[{i}].clusters"),
                "an empty list serves no cluster; leave it out to serve every cluster".into(),
            );
        }
        if let Some(name) = &l.default_cluster {
            let at = format!("listeners[{i}].default_cluster");
            if !names.contains_key(name) {
                bad(at, format!("no cluster is named {name:?}"));
            } else if l.clusters.as_ref().is_some_and(|c| !c.contains(name)) {
                bad(
                    at,
                    format!("{name:?} is not among this listener's clusters"),
                );
            }
        }
    }
}

/// A server name a cluster answers, as written: exact or `*.suffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerNamePattern<'a> {
    /// This name only.
    Exact(&'a str),
    /// Any name ending in `.` and this suffix.
    Suffix(&'a str),
}

impl<'a> ServerNamePattern<'a> {
    /// Reads `written`, or says why it is not a server name a client can send.
    pub fn parse(written: &'a str) -> Result<ServerNamePattern<'a>, String> {
        let pattern = ServerNamePattern::checked(written);
        let name = match pattern {
            ServerNamePattern::Exact(n) | ServerNamePattern::Suffix(n) => n,
        };
        if name.parse::<std::net::IpAddr>().is_ok() {
            return Err(format!(
                "{written:?} is an IP address: a client never sends one as its server name (RFC 6066), so it cannot choose a cluster"
            ));
        }
        if !dns_name(name) {
            return Err(format!(
                "{written:?} is not a DNS name in lower case (exact, or *. and a suffix)"
            ));
        }
        Ok(pattern)
    }

    /// Reads `written`, a name of a configuration that was checked (`parse` accepted it):
    /// what routing does for every client, without checking it again.
    pub fn checked(written: &'a str) -> ServerNamePattern<'a> {
        match written.strip_prefix("*.") {
            Some(suffix) => ServerNamePattern::Suffix(suffix),
            None => ServerNamePattern::Exact(written),
        }
    }

    /// Whether `name` (lower case) matches.
    pub fn matches(self, name: &str) -> bool {
        match self {
            ServerNamePattern::Exact(exact) => name == exact,
            ServerNamePattern::Suffix(suffix) => name
                .strip_suffix(suffix)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// How specific a match is: an exact name beats any wildcard, a longer suffix a shorter.
    pub fn rank(self) -> (bool, usize) {
        match self {
            ServerNamePattern::Exact(n) => (true, n.len()),
            ServerNamePattern::Suffix(s) => (false, s.len()),
        }
    }
}

/// Lower-case DNS name: labels of letters, digits and `-`, not at a label's ends.
fn dns_name(name: &str) -> bool {
    crate::parts::dotted_name(name, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
    })
}

/// A cluster's name: a DNS label (it goes into metric labels and URLs).
pub(crate) fn valid_cluster_name(name: &str) -> bool {
    !name.contains('.') && dns_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, ConfigError};

    const TWO: &str = "\
listeners:
  - address: 127.0.0.1:6443
    clusters: [a, b]
    default_cluster: a
health:
  tls:
    ca_file: ca.crt
clusters:
  - name: a
    server_names: [a.example, \"*.a.example\"]
    backends:
      - { name: a1, address: 127.0.0.1:7001 }
  - name: b
    server_names: [b.example]
    backends:
      - { name: b1, address: 127.0.0.1:7002 }
    health:
      interval: 2s
      tls:
        ca_file: ca.crt
";

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        load_str(text, Path::new("kubegate.yaml"), dir.path())
    }

    /// Every problem, one per line, as `kubegate check` prints them.
    fn errors(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    /// Asserts that `text` is refused, and that its problems include one `saying` this.
    fn refused(text: &str, saying: &str) {
        let err = errors(text);
        assert!(err.contains(saying), "{saying}: {err}");
    }

    #[test]
    fn clusters_load_with_what_they_inherit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        let load = |text: &str| load_str(text, Path::new("kubegate.yaml"), dir.path());
        let c = load(TWO).unwrap();
        let clusters = c.clusters();
        let names: Vec<_> = clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let (a, b) = (&clusters[0], &clusters[1]);
        assert_eq!(a.backends[0].display_name(), "a1");
        assert_eq!(a.health, c.health, "a inherits the top-level health");
        assert!(a.health.tls.ca_file.as_ref().unwrap().is_absolute());
        assert_eq!(b.health.interval, std::time::Duration::from_secs(2));
        assert!(b.health.tls.ca_file.as_ref().unwrap().is_absolute());
        assert!(c.names_clusters());
        // Written out (paths resolved) and read back, the same.
        assert_eq!(load(&c.to_yaml()).unwrap(), c);
    }

    #[test]
    fn clusters_are_resolved_once_and_a_clone_resolves_its_own() {
        let text = "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls:\n    ca_file: ca.crt\n";
        let c = load(text).unwrap();
        let first = c.clusters().as_ptr();
        assert_eq!(c.clusters().as_ptr(), first, "resolved once");
        let mut copy = c.clone();
        assert_eq!(copy, c, "what was resolved is not compared");
        copy.backends.clear();
        assert!(
            copy.clusters()[0].backends.is_empty(),
            "a clone changed before use resolves its own"
        );
        assert_eq!(c.clusters()[0].backends.len(), 1);
    }

    #[test]
    fn a_file_without_clusters_is_the_one_implicit_cluster() {
        let text = "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls:\n    ca_file: ca.crt\n";
        let c = load(text).unwrap();
        let clusters = c.clusters();
        assert_eq!(clusters.len(), 1);
        assert_eq!(clusters[0].name, IMPLICIT);
        assert!(clusters[0].server_names.is_empty());
        assert_eq!(clusters[0].backends, c.backends);
        assert!(!c.names_clusters());
        refused(
            &text.replace(
                "127.0.0.1:6443\n",
                "127.0.0.1:6443\n    default_cluster: a\n",
            ),
            "kubegate.yaml:3:22: names clusters, but the file has no clusters:",
        );
    }

    #[test]
    fn a_server_name_of_two_clusters_is_refused_where_it_is_written_again() {
        refused(
            &TWO.replace("[b.example]", "[b.example, \"*.a.example\"]"),
            "kubegate.yaml:14:31: \"*.a.example\" is also a server name of cluster \"a\"",
        );
    }

    #[test]
    fn unknown_clusters_and_a_default_outside_the_list_are_refused_at_their_position() {
        refused(
            &TWO.replace("clusters: [a, b]", "clusters: [a, c]"),
            "kubegate.yaml:3:19: no cluster is named \"c\"",
        );
        refused(
            &TWO.replace("clusters: [a, b]", "clusters: [b]"),
            "kubegate.yaml:4:22: \"a\" is not among this listener's clusters",
        );
    }

    #[test]
    fn what_belongs_to_a_cluster_is_refused_at_the_top_level() {
        refused(
            &TWO.replace(
                "health:\n  tls:",
                "backends:\n  - address: 127.0.0.1:7009\nhealth:\n  tls:",
            ),
            "kubegate.yaml:6:3: with clusters:, each cluster has its own backends",
        );
    }

    #[test]
    fn backends_are_unique_across_clusters() {
        let err = errors(&TWO.replace(
            "name: b1, address: 127.0.0.1:7002",
            "name: a1, address: 127.0.0.1:7001",
        ));
        assert!(
            err.contains("backend name \"a1\" is also in cluster \"a\""),
            "{err}"
        );
        assert!(
            err.contains("127.0.0.1:7001 is also a backend of cluster \"a\""),
            "{err}"
        );
    }

    #[test]
    fn a_clusters_own_health_is_checked_under_its_path() {
        refused(
            &TWO.replace("      interval: 2s\n", "      interval: 0s\n"),
            "kubegate.yaml:18:17: health.interval must be greater than 0",
        );
    }

    #[test]
    fn the_top_level_health_needs_a_ca_only_when_a_cluster_inherits_it() {
        let own = "    health:\n      tls:\n        ca_file: ca.crt\n";
        let every_cluster_its_own = TWO
            .replace("health:\n  tls:\n    ca_file: ca.crt\n", "")
            .replace(
                "      - { name: a1, address: 127.0.0.1:7001 }\n",
                &format!("      - {{ name: a1, address: 127.0.0.1:7001 }}\n{own}"),
            );
        load(&every_cluster_its_own).unwrap();
        let a_inherits = TWO.replace("health:\n  tls:\n    ca_file: ca.crt\n", "");
        assert!(
            errors(&a_inherits).contains("health.tls.ca_file is required"),
            "{a_inherits}"
        );
    }

    #[test]
    fn a_terminate_listener_needs_each_of_its_clusters_certificate_and_no_own_tls() {
        let terminate = TWO.replace(
            "    default_cluster: a\n",
            "    default_cluster: a\n    mode: terminate\n",
        );
        let err = errors(&terminate);
        for name in ["a", "b"] {
            assert!(
                err.contains(&format!("cluster \"{name}\" is served by the terminate listener listeners[0]: it needs tls.cert_file and tls.key_file")),
                "{err}"
            );
        }
        let with_own = terminate.replace(
            "    mode: terminate\n",
            "    mode: terminate\n    tls: { cert_file: ca.crt, key_file: ca.crt }\n",
        );
        assert!(
            errors(&with_own).contains("kubegate.yaml:6:12: with clusters:, each cluster's tls"),
            "{}",
            errors(&with_own)
        );
        // Served only by a passthrough listener, a cluster needs no certificate.
        assert!(load(TWO).is_ok());
    }

    #[test]
    fn a_reload_lists_clusters_added_removed_and_changed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        let load = |text: &str| load_str(text, Path::new("kubegate.yaml"), dir.path()).unwrap();
        let before = load(TWO);
        let after = load(
            &TWO.replace("clusters: [a, b]", "clusters: [a, c]")
                .replace(
                    "      - { name: a1, address: 127.0.0.1:7001 }\n",
                    "      - { name: a1, address: 127.0.0.1:7001 }\n      - { name: a2, address: 127.0.0.1:7003 }\n",
                )
                .replace("[a.example, \"*.a.example\"]", "[a.example]")
                .replace("name: b\n", "name: c\n")
                .replace("[b.example]", "[c.example]"),
        );
        let changes = crate::diff(&before, &after);
        let names: Vec<String> = changes
            .iter()
            .map(|c| match c {
                crate::diff::Change::ClusterAdded(c) => format!("added {}", c.name),
                crate::diff::Change::ClusterRemoved(name) => format!("removed {name}"),
                crate::diff::Change::ClusterChanged {
                    name,
                    server_names,
                    changes,
                } => format!("changed {name} {server_names:?} {}", changes.len()),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "changed a Some([\"a.example\"]) 1",
                "added c",
                "removed b",
                "NeedsRestart(\"listeners\")"
            ]
        );
        // A cluster that discovers its replicas is added and removed by a reload as any other.
        let discovering = TWO.replace(
            "  - name: b\n",
            "  - name: b\n    discovery: { kubeconfig: ca.crt }\n",
        );
        let without_b = discovering.replace("clusters: [a, b]", "clusters: [a]");
        let cut = without_b.find("  - name: b\n").unwrap();
        let changes = crate::diff(&load(&discovering), &load(&without_b[..cut]));
        assert!(
            changes.contains(&crate::diff::Change::ClusterRemoved("b".into())),
            "{changes:?}"
        );
        assert!(
            !changes.contains(&crate::diff::Change::NeedsRestart("clusters[].discovery")),
            "{changes:?}"
        );
        let changes = crate::diff(&load(&without_b[..cut]), &load(&discovering));
        assert!(
            changes.iter().any(|c| matches!(c, crate::diff::Change::ClusterAdded(c) if c.name == "b" && c.discovery.is_some())),
            "{changes:?}"
        );
        // From the one-cluster form to clusters: every route changes, a restart.
        let one = "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls:\n    ca_file: ca.crt\n";
        let changes = crate::diff(&load(one), &after);
        assert!(changes.contains(&crate::diff::Change::NeedsRestart("clusters")));
    }

    #[test]
    fn an_older_release_is_told_of_clusters_where_they_are_written() {
        let found: Vec<_> = crate::keys_newer_than(TWO, (0, 2, 0))
            .into_iter()
            .map(|p| format!("{}:{} {}", p.line, p.column, p.message))
            .collect();
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("3:5 listeners[0].clusters was added in kubegate 0.3.0"),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("4:5 listeners[0].default_cluster"),
            "{found:#?}"
        );
        assert!(found[2].starts_with("8:1 clusters was added"), "{found:#?}");
    }

    #[test]
    fn exact_names_and_suffixes_match_as_written() {
        let exact = ServerNamePattern::parse("a.example").unwrap();
        assert!(exact.matches("a.example"));
        assert!(!exact.matches("x.a.example"));
        let wild = ServerNamePattern::parse("*.a.example").unwrap();
        assert!(wild.matches("x.a.example"));
        assert!(wild.matches("y.x.a.example"));
        assert!(!wild.matches("a.example"));
        assert!(!wild.matches("xa.example"));
        assert!(!wild.matches(".a.example"));
        assert!(exact.rank() > wild.rank());
        assert!(
            ServerNamePattern::parse("*.x.a.example").unwrap().rank() > wild.rank(),
            "the longer suffix is more specific"
        );
    }

    #[test]
    fn what_no_client_can_send_is_refused() {
        for bad in [
            "",
            "*.",
            "*",
            "a.*.example",
            "A.example",
            "10.0.0.1",
            "*.10.0.0.1",
            "::1",
            "a..example",
            "-a.example",
        ] {
            assert!(ServerNamePattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cluster_names_are_dns_labels() {
        assert!(valid_cluster_name("shoot-a1"));
        for bad in ["", "a.b", "A", "a_b", "-a"] {
            assert!(!valid_cluster_name(bad), "{bad:?}");
        }
    }
}
