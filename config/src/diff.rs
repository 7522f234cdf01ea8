//! What changed between the running configuration and a newly loaded one: with `clusters:`,
//! cluster by cluster (added, removed, changed and what in it).
//!
//! The gateway applies the list in one place (`reload`); here it is plain data so the rules are
//! tested without sockets. Backends are identified by `address`: a backend whose address stays
//! keeps its health state and its open connections across a reload.

use crate::cluster::ClusterConfig;
use crate::schema::{BackendSpec, Config};

/// One difference between two configurations.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A backend address that was not configured before.
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
    /// shutdown, no_ready_backend, terminate, limits, dispatch) changed: it applies to the next connection with no further action.
    /// Names the key.
    Setting(&'static str),
    /// A cluster that was not configured before (a file with `clusters:`).
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
    /// discovery, whether the file names clusters, a cluster's discovery or tls). Names the
    /// key. A
    /// reload that holds one is refused, so the running process never claims a state it is not in.
    NeedsRestart(&'static str),
}

/// Lists what `new` changes relative to `old`, backends first, in `new`'s order.
///
/// Both configurations are taken apart field by field, without `..`: a key added to [`Config`]
/// does not compile until it is sorted here into a change the gateway applies, a setting read
/// per connection, or one that needs a restart.
pub fn diff(old: &Config, new: &Config) -> Vec<Change> {
    let Config {
        listeners: old_listeners,
        backends: old_backends,
        health: old_health,
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
        upstream: old_upstream,
        upgrade: old_upgrade,
        discovery: old_discovery,
        dispatch: old_dispatch,
        clusters: old_clusters,
    } = old;
    let Config {
        listeners,
        backends,
        health,
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
        upstream,
        upgrade,
        discovery,
        dispatch,
        clusters,
    } = new;
    let mut changes = Vec::new();
    // With clusters, the top-level health and upstream are what clusters inherit: their
    // changes show in each cluster that inherits them (`Config::clusters`).
    let named = (!old_clusters.is_empty(), !clusters.is_empty());
    match named {
        (false, false) => {
            backend_changes(old_backends, backends, &mut changes);
            if old_health != health {
                changes.push(Change::HealthChanged);
            }
            if old_upstream != upstream {
                changes.push(Change::UpstreamChanged);
            }
        }
        (true, true) => cluster_changes(&old.clusters(), &new.clusters(), &mut changes),
        // From one cluster to named ones or back: every route changes.
        _ => changes.push(Change::NeedsRestart("clusters")),
    }
    let settings = [
        ("balance", old_balance != balance),
        ("no_ready_backend", old_no_ready_backend != no_ready_backend),
        ("connect", old_connect != connect),
        ("client_keepalive", old_client_keepalive != client_keepalive),
        ("limits", old_limits != limits),
        ("drain", old_drain != drain),
        ("shutdown", old_shutdown != shutdown),
        ("terminate", old_terminate != terminate),
        ("dispatch", old_dispatch != dispatch),
    ];
    changes.extend(
        settings
            .into_iter()
            .filter(|(_, changed)| *changed)
            .map(|(key, _)| Change::Setting(key)),
    );
    let restart = [
        ("listeners", old_listeners != listeners),
        ("admin", old_admin != admin),
        ("threads", old_threads != threads),
        ("upgrade", old_upgrade != upgrade),
        ("discovery", old_discovery != discovery),
    ];
    changes.extend(
        restart
            .into_iter()
            .filter(|(_, changed)| *changed)
            .map(|(key, _)| Change::NeedsRestart(key)),
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

/// The clusters of `new` against those of `old`, by name: added, removed, changed. A
/// cluster's discovery (a task following its EndpointSlices) and serving certificate are
/// set up at start, so a cluster with discovery is neither added nor removed by a reload.
fn cluster_changes(old: &[ClusterConfig], new: &[ClusterConfig], changes: &mut Vec<Change>) {
    for c in new {
        let Some(o) = old.iter().find(|o| o.name == c.name) else {
            if c.discovery.is_some() {
                changes.push(Change::NeedsRestart("clusters[].discovery"));
            }
            changes.push(Change::ClusterAdded(Box::new(c.clone())));
            continue;
        };
        if o == c {
            continue;
        }
        if o.discovery != c.discovery {
            changes.push(Change::NeedsRestart("clusters[].discovery"));
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
            if o.discovery.is_some() {
                changes.push(Change::NeedsRestart("clusters[].discovery"));
            }
            changes.push(Change::ClusterRemoved(o.name.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::*;

    fn config(backends: &[&str]) -> Config {
        Config {
            listeners: vec![ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap())],
            backends: backends
                .iter()
                .map(|a| BackendSpec {
                    name: None,
                    address: a.parse().unwrap(),
                    health_address: None,
                })
                .collect(),
            health: HealthConfig::default(),
            balance: BalancePolicy::default(),
            no_ready_backend: NoReadyBackendPolicy::default(),
            connect: ConnectConfig::default(),
            client_keepalive: KeepaliveConfig::default(),
            limits: LimitsConfig::default(),
            drain: DrainConfig::default(),
            shutdown: ShutdownConfig::default(),
            admin: AdminConfig::default(),
            threads: 1,
            terminate: TerminateConfig::default(),
            upstream: UpstreamConfig::default(),
            upgrade: None,
            discovery: None,
            dispatch: Vec::new(),
            clusters: Vec::new(),
        }
    }

    #[test]
    fn same_config_has_no_changes() {
        let c = config(&["127.0.0.1:1", "127.0.0.1:2"]);
        assert!(diff(&c, &c).is_empty());
    }

    #[test]
    fn backends_are_matched_by_address() {
        let old = config(&["127.0.0.1:1", "127.0.0.1:2"]);
        let mut new = config(&["127.0.0.1:2", "127.0.0.1:3"]);
        new.backends[0].name = Some("b".into());
        let changes = diff(&old, &new);
        assert_eq!(changes.len(), 3);
        assert!(
            matches!(&changes[0], Change::BackendUpdated { after, .. } if after.name.as_deref() == Some("b"))
        );
        assert!(matches!(&changes[1], Change::BackendAdded(b) if b.address.port() == 3));
        assert!(matches!(&changes[2], Change::BackendRemoved(b) if b.address.port() == 1));
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
