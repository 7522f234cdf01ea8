//! What changed between the running configuration and a newly loaded one, cluster by cluster
//! (added, removed, changed and what in it): a file without `clusters:` is its one cluster
//! (`default`), on the same path as many.
//!
//! The gateway applies the list in one place (`reload`); here it is plain data so the rules are
//! tested without sockets. Backends are identified by `address`: a backend whose address stays
//! keeps its health state and its open connections across a reload.

use crate::schema::ClusterConfig;
use crate::schema::{BackendSpec, Config};

/// One difference between two configurations.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A backend address that was not configured before (within [`Change::ClusterChanged`],
    /// as are the next four).
    BackendAdded(BackendSpec),
    /// A backend address that is no longer configured: it is drained, then forgotten.
    BackendRemoved(BackendSpec),
    /// Same address, other name or health address.
    BackendUpdated {
        /// As it was.
        before: BackendSpec,
        /// As it is now.
        after: BackendSpec,
    },
    /// Probe settings changed: probers are rebuilt, states are kept.
    HealthChanged,
    /// Terminate mode's upstream TLS or identity changed: new upstream connections use it.
    UpstreamChanged,
    /// A setting read per connection or request (balance, connect, client_keepalive, drain,
    /// shutdown, no_ready_backend, terminate, limits; a cluster's dispatch) changed: it applies
    /// to the next connection or request with no further action. Names the key.
    Setting(&'static str),
    /// A cluster that was not configured before.
    ClusterAdded(Box<ClusterConfig>),
    /// A cluster no longer configured: its backends are drained, then it is forgotten.
    ClusterRemoved(String),
    /// A cluster kept by name, changed: what changed in it (backends, `HealthChanged`,
    /// `UpstreamChanged`, `Setting("dispatch")`), and its server names when they changed.
    ClusterChanged {
        /// Its name.
        name: String,
        /// Its server names now, when they changed.
        server_names: Option<Vec<String>>,
        /// What changed in it.
        changes: Vec<Change>,
    },
    /// A setting that only takes effect at start (listeners, admin, threads, upgrade,
    /// whether the file names clusters, a kept cluster's discovery or tls). Names the key. A
    /// reload that holds one is refused, so the running process never claims a state it is
    /// not in.
    NeedsRestart(&'static str),
}

/// What start-up applies: every cluster of `new` added to nothing, in `new`'s order (start-up
/// and a reload put a configuration in force by one path).
pub fn from_nothing(new: &Config) -> Vec<Change> {
    new.clusters()
        .iter()
        .map(|c| Change::ClusterAdded(Box::new(c.clone())))
        .collect()
}

/// Lists what `new` changes relative to `old`: its clusters first, in `new`'s order.
///
/// Both configurations are taken apart field by field, without `..`: a key added to [`Config`]
/// does not compile until it is sorted here into a change the gateway applies, a setting read
/// per connection, or one that needs a restart.
pub fn diff(old: &Config, new: &Config) -> Vec<Change> {
    let Config {
        listeners: old_listeners,
        // Compared cluster by cluster, as below.
        backends: _,
        health: _,
        balance: old_balance,
        no_ready_backend: old_no_ready_backend,
        connect: old_connect,
        client_keepalive: old_client_keepalive,
        limits: old_limits,
        drain: old_drain,
        shutdown: old_shutdown,
        admin: old_admin,
        threads: old_threads,
        terminate: old_terminate,
        upstream: _,
        upgrade: old_upgrade,
        discovery: _,
        dispatch: _,
        clusters: _,
        resolved: _,
    } = old;
    let Config {
        listeners,
        // What clusters are made of: compared cluster by cluster (`Config::clusters` carries
        // the top-level ones into the cluster of a file without `clusters:`, and what clusters
        // inherit into each that does).
        backends: _,
        health: _,
        upstream: _,
        discovery: _,
        dispatch: _,
        clusters: _,
        resolved: _,
        balance,
        no_ready_backend,
        connect,
        client_keepalive,
        limits,
        drain,
        shutdown,
        admin,
        threads,
        terminate,
        upgrade,
    } = new;
    let mut changes = Vec::new();
    if old.names_clusters() == new.names_clusters() {
        cluster_changes(
            old.clusters(),
            new.clusters(),
            new.names_clusters(),
            &mut changes,
        );
    } else {
        // From one cluster to named ones or back: every route changes.
        changes.push(Change::NeedsRestart("clusters"));
    }
    // Each top-level key: whether it changed; those a reload applies, then those it cannot.
    let settings = [
        ("balance", old_balance != balance),
        ("no_ready_backend", old_no_ready_backend != no_ready_backend),
        ("connect", old_connect != connect),
        ("client_keepalive", old_client_keepalive != client_keepalive),
        ("limits", old_limits != limits),
        ("drain", old_drain != drain),
        ("shutdown", old_shutdown != shutdown),
        ("terminate", old_terminate != terminate),
    ];
    let restart = [
        ("listeners", old_listeners != listeners),
        ("admin", old_admin != admin),
        ("threads", old_threads != threads),
        ("upgrade", old_upgrade != upgrade),
    ];
    changes.extend(
        settings
            .iter()
            .filter(|s| s.1)
            .map(|s| Change::Setting(s.0)),
    );
    changes.extend(
        restart
            .iter()
            .filter(|s| s.1)
            .map(|s| Change::NeedsRestart(s.0)),
    );
    changes
}

/// The backends of `new` against those of `old`, by address, in `new`'s order.
fn backend_changes(old: &[BackendSpec], new: &[BackendSpec], changes: &mut Vec<Change>) {
    for b in new {
        match old.iter().find(|o| o.address == b.address) {
            None => changes.push(Change::BackendAdded(b.clone())),
            Some(o) if o != b => changes.push(Change::BackendUpdated {
                before: o.clone(),
                after: b.clone(),
            }),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|b| b.address == o.address) {
            changes.push(Change::BackendRemoved(o.clone()));
        }
    }
}

/// The clusters of `new` against those of `old`, by name: added, removed, changed. A cluster
/// is added and removed with its discovery (a task following its EndpointSlices) and serving
/// certificate; a kept cluster's are not changed while running.
/// `named`: the files have `clusters:` (without, the key an operator wrote is the top level's).
fn cluster_changes(
    old: &[ClusterConfig],
    new: &[ClusterConfig],
    named: bool,
    changes: &mut Vec<Change>,
) {
    let discovery = |_: &ClusterConfig| match named {
        true => Change::NeedsRestart("clusters[].discovery"),
        false => Change::NeedsRestart("discovery"),
    };
    for c in new {
        let Some(o) = old.iter().find(|o| o.name == c.name) else {
            changes.push(Change::ClusterAdded(Box::new(c.clone())));
            continue;
        };
        if o == c {
            continue;
        }
        if o.discovery != c.discovery {
            changes.push(discovery(c));
        }
        if o.tls != c.tls {
            changes.push(Change::NeedsRestart("clusters[].tls"));
        }
        let mut inner = Vec::new();
        backend_changes(&o.backends, &c.backends, &mut inner);
        if o.health != c.health {
            inner.push(Change::HealthChanged);
        }
        if o.upstream != c.upstream {
            inner.push(Change::UpstreamChanged);
        }
        if o.dispatch != c.dispatch {
            inner.push(Change::Setting("dispatch"));
        }
        changes.push(Change::ClusterChanged {
            name: c.name.clone(),
            server_names: (o.server_names != c.server_names).then(|| c.server_names.clone()),
            changes: inner,
        });
    }
    for o in old {
        if !new.iter().any(|c| c.name == o.name) {
            changes.push(Change::ClusterRemoved(o.name.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::*;

    fn config(backends: &[&str]) -> Config {
        let backends = backends
            .iter()
            .map(|a| BackendSpec {
                name: None,
                address: a.parse().unwrap(),
                health_address: None,
                other_addresses: Vec::new(),
            })
            .collect();
        let listener = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        Config::new(vec![listener], backends)
    }

    #[test]
    fn same_config_has_no_changes() {
        let c = config(&["127.0.0.1:1", "127.0.0.1:2"]);
        assert!(diff(&c, &c).is_empty());
    }

    #[test]
    fn backends_are_matched_by_address_within_their_cluster() {
        let old = config(&["127.0.0.1:1", "127.0.0.1:2"]);
        let mut new = config(&["127.0.0.1:2", "127.0.0.1:3"]);
        new.backends[0].name = Some("b".into());
        new.health.interval = std::time::Duration::from_secs(7);
        let changes = diff(&old, &new);
        // A file without `clusters:` is its one cluster, on the path many take.
        let [Change::ClusterChanged {
            name,
            server_names: None,
            changes,
        }] = &changes[..]
        else {
            panic!("{changes:?}");
        };
        assert_eq!(name, crate::schema::IMPLICIT);
        assert_eq!(changes.len(), 4, "{changes:?}");
        assert!(
            matches!(&changes[0], Change::BackendUpdated { after, .. } if after.name.as_deref() == Some("b"))
        );
        assert!(matches!(&changes[1], Change::BackendAdded(b) if b.address.port() == 3));
        assert!(matches!(&changes[2], Change::BackendRemoved(b) if b.address.port() == 1));
        assert_eq!(changes[3], Change::HealthChanged);
    }

    #[test]
    fn the_one_clusters_discovery_is_named_as_written() {
        let old = config(&["127.0.0.1:1"]);
        let mut new = old.clone();
        new.discovery = Some(DiscoveryConfig {
            kubeconfig: "k".into(),
            state_file: None,
            debounce: std::time::Duration::from_secs(3),
        });
        let changes = diff(&old, &new);
        assert!(
            matches!(
                &changes[..],
                [
                    Change::NeedsRestart("discovery"),
                    Change::ClusterChanged { .. }
                ]
            ),
            "{changes:?}"
        );
    }

    #[test]
    fn listener_change_needs_a_restart_and_policy_change_does_not() {
        let old = config(&["127.0.0.1:1"]);
        let mut new = old.clone();
        new.listeners[0].address = "127.0.0.1:7443".parse().unwrap();
        new.balance = BalancePolicy::RoundRobin;
        assert_eq!(
            diff(&old, &new),
            vec![
                Change::Setting("balance"),
                Change::NeedsRestart("listeners")
            ]
        );
    }
}
