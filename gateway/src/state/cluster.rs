//! One control plane behind kubegate (its name, its backends — the pool's probes, states and
//! routing table — and the control tasks that follow it), and the table of every cluster with
//! the TLS server names that reach each: the one registry both planes route by. A file without
//! `clusters:` has one cluster, reached by every name. A reload swaps the table whole (with
//! the configuration, `running`): clusters added, removed and renamed come in force together,
//! and a kept cluster is the same `Cluster`. What terminate mode keeps per cluster is its own
//! (`terminate::TerminatePlane`).

use crate::state::backends::{Backend, Pool};
use kubegate_config::{ListenerSpec, ServerNamePattern};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;

/// Retries of reads held through a storage outage one cluster sends, per second, at most.
pub const HELD_RETRIES_PER_SECOND: f64 = 10.0;

/// What one cluster holds while it cannot serve (`net::hold`): its share of the gateway's
/// holds, the pace of the retries of reads held through a storage outage, and the signal that
/// its storage answers again.
pub struct ClusterHolds {
    /// Connections and requests of the cluster held now.
    pub held: AtomicUsize,
    /// Reads held through a storage outage now: while there are some, a read answered from
    /// storage says the outage is over.
    reads_held: AtomicUsize,
    /// Retries the held reads may send now, and when that was counted.
    pace: Mutex<(f64, Instant)>,
    /// Bumped when a read of the cluster was answered from storage while reads were held.
    recovered: tokio::sync::watch::Sender<u64>,
}

impl Default for ClusterHolds {
    fn default() -> ClusterHolds {
        ClusterHolds {
            held: AtomicUsize::new(0),
            reads_held: AtomicUsize::new(0),
            pace: Mutex::new((HELD_RETRIES_PER_SECOND, Instant::now())),
            recovered: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl ClusterHolds {
    /// A read starts being held through a storage outage; it is released by
    /// [`Self::read_released`].
    pub fn read_held(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reads_held.fetch_add(1, Ordering::AcqRel);
        self.recovered.subscribe()
    }

    /// A read held through a storage outage ended.
    pub fn read_released(&self) {
        self.reads_held.fetch_sub(1, Ordering::AcqRel);
    }

    /// A read of the cluster was answered from storage: the reads held through an outage, if
    /// any, are asked again now.
    pub fn storage_answered(&self) {
        if self.reads_held.load(Ordering::Acquire) > 0 {
            self.recovered.send_modify(|n| *n += 1);
        }
    }

    /// Takes one retry of a held read from the cluster's pace, or says how long until one is
    /// there.
    pub fn take_retry(&self, now: Instant) -> Result<(), Duration> {
        let mut pace = self.pace.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = *pace;
        let tokens = (tokens
            + now.saturating_duration_since(at).as_secs_f64() * HELD_RETRIES_PER_SECOND)
            .min(HELD_RETRIES_PER_SECOND);
        if tokens >= 1.0 {
            *pace = (tokens - 1.0, now);
            return Ok(());
        }
        *pace = (tokens, now);
        Err(Duration::from_secs_f64(
            (1.0 - tokens) / HELD_RETRIES_PER_SECOND,
        ))
    }
}

/// One cluster's share of the gateway, matched by name across generations: a kept cluster
/// is the same `Cluster`, its pool, holds and control tasks with it.
pub struct Cluster {
    name: String,
    pool: Arc<Pool>,
    /// What it holds while it cannot serve.
    holds: ClusterHolds,
    /// The control tasks that follow it (its discovery; where terminate mode serves it, its
    /// replicas' versions, its share of long-running requests, its certificate files): ended
    /// when a reload removes it.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Cluster {
    /// Cluster `name`, its backends in `pool`.
    pub fn new(name: String, pool: Arc<Pool>) -> Cluster {
        Cluster {
            name,
            pool,
            holds: ClusterHolds::default(),
            tasks: Mutex::default(),
        }
    }

    /// Ends `task` when the cluster is removed.
    pub fn keep_task(&self, task: AbortHandle) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    /// A reload removed the cluster: its control tasks end (its discovery adds no backend to
    /// the retired pool).
    pub fn end_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            task.abort();
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its backends.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// What it holds while it cannot serve.
    pub fn holds(&self) -> &ClusterHolds {
        &self.holds
    }
}

/// How specifically `name` (lower case) reaches a cluster with `server_names` (as written,
/// each parses: the configuration was checked), if it does.
fn matches(server_names: &[String], name: &str) -> Option<(bool, usize)> {
    server_names
        .iter()
        .map(|w| ServerNamePattern::checked(w))
        .filter(|p| p.matches(name))
        .map(ServerNamePattern::rank)
        .max()
}

/// Where a client connection goes, by the server name it sent.
pub enum Route {
    /// To this cluster.
    To(Arc<Cluster>),
    /// It sent no server name and its listener has no `default_cluster`.
    NoServerName,
    /// No cluster its listener serves answers the name it sent.
    UnknownServerName,
}

/// Every cluster, in configuration order, and how a client finds one.
pub struct Clusters {
    list: Vec<Arc<Cluster>>,
    /// Each cluster's server names, as `list` orders them.
    server_names: Vec<Vec<String>>,
    /// Whether the file names its clusters: without, the one cluster takes every client.
    named: bool,
}

impl Clusters {
    /// Each cluster of `list` with its server names; `named` when the file has `clusters:`.
    pub fn new(list: Vec<(Arc<Cluster>, Vec<String>)>, named: bool) -> Clusters {
        let (list, server_names) = list.into_iter().unzip();
        Clusters {
            list,
            server_names,
            named,
        }
    }

    /// Whether clients are routed by the server name they send (the file names clusters).
    pub fn by_server_name(&self) -> bool {
        self.named
    }

    /// Every cluster.
    pub fn all(&self) -> &[Arc<Cluster>] {
        &self.list
    }

    /// The cluster named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<Cluster>> {
        self.list.iter().find(|c| c.name == name)
    }

    /// Every backend of every cluster.
    pub fn backends(&self) -> Vec<Arc<Backend>> {
        self.list.iter().flat_map(|c| c.pool.backends()).collect()
    }

    /// Ready backends over every cluster.
    pub fn ready(&self) -> usize {
        self.list.iter().map(|c| c.pool.routing().ready.len()).sum()
    }

    /// Where a client of `listener` that sent `server_name` goes: the most specific match
    /// among the listener's clusters (an exact name over a wildcard, a longer suffix over a
    /// shorter); without a name, the listener's `default_cluster`.
    pub fn route(&self, listener: &ListenerSpec, server_name: Option<&str>) -> Route {
        if !self.named {
            // None before start-up put its cluster in force.
            return match self.list.first() {
                Some(one) => Route::To(one.clone()),
                None => Route::UnknownServerName,
            };
        }
        let serves = |c: &&Arc<Cluster>| {
            listener
                .clusters
                .as_ref()
                .is_none_or(|names| names.contains(&c.name))
        };
        let Some(name) = server_name else {
            return match listener
                .default_cluster
                .as_deref()
                .and_then(|d| self.named(d))
            {
                Some(c) => Route::To(c.clone()),
                None => Route::NoServerName,
            };
        };
        let name = name.to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        self.list
            .iter()
            .zip(&self.server_names)
            .filter(|(c, _)| serves(c))
            .filter_map(|(c, names)| Some((matches(names, name)?, c)))
            .max_by_key(|(rank, _)| *rank)
            .map_or(Route::UnknownServerName, |(_, c)| Route::To(c.clone()))
    }
}

/// The host a request's authority (`:authority`, or HTTP/1.1 `Host`) names, as a server name
/// is compared: its port and a trailing dot stripped, in lower case; `None` for an IP literal
/// (clients send no server name for those, RFC 6066 §3) or no authority at all.
pub fn authority_host(authority: &str) -> Option<String> {
    let host = match authority.strip_prefix('[') {
        // An IPv6 literal, `[::1]:6443`.
        Some(_) => return None,
        None => authority
            .rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(authority, |(host, _)| host),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || host.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    Some(host.to_ascii_lowercase())
}

impl Clusters {
    /// Whether a request on a connection of `listener` that reached cluster `cluster` may
    /// name `authority`: a name (see [`authority_host`]) must route to that same cluster, as
    /// a new connection sending it as its server name would — another cluster's name, or one
    /// no cluster serves, may not ride this connection. An IP literal (or no authority)
    /// names no cluster and is served by the connection's: clients that dial an address
    /// and set the server name apart (kubeconfig's `tls-server-name`) send the address as
    /// their authority. A file without `clusters:` has one cluster: every authority is its.
    pub fn authority_reaches(
        &self,
        listener: &ListenerSpec,
        cluster: &str,
        authority: Option<&str>,
    ) -> bool {
        if !self.named {
            return true;
        }
        let Some(host) = authority.and_then(authority_host) else {
            return true;
        };
        match self.route(listener, Some(&host)) {
            Route::To(c) => c.name == cluster,
            Route::NoServerName | Route::UnknownServerName => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::backends::Planes;
    use crate::state::settings::pool_settings;
    use crate::telemetry::transitions::Transitions;
    use crate::telemetry::{MetricEvents, Metrics};
    use kubegate_config::{DrainConfig, HealthConfig};

    fn cluster(name: &str, server_names: &[&str]) -> (Arc<Cluster>, Vec<String>) {
        let metrics = Arc::new(Metrics::new());
        let events = Arc::new(MetricEvents::new(
            name,
            metrics.clone(),
            Box::new(|| false),
            Arc::new(Transitions::default()),
        ));
        let pool = Pool::new(
            pool_settings(&HealthConfig::default(), &DrainConfig::default()),
            None,
            events,
            move |n| Planes::new(metrics.clone(), n),
        );
        let names = server_names.iter().map(|s| s.to_string()).collect();
        (Arc::new(Cluster::new(name.into(), pool)), names)
    }

    fn reached(route: Route) -> String {
        match route {
            Route::To(c) => c.name().to_string(),
            Route::NoServerName => "no server name".into(),
            Route::UnknownServerName => "unknown".into(),
        }
    }

    #[test]
    fn the_most_specific_name_of_the_listeners_clusters_decides() {
        let clusters = Clusters::new(
            vec![
                cluster("a", &["a.example", "*.a.example"]),
                cluster("b", &["b.example", "*.x.a.example"]),
            ],
            true,
        );
        let mut l = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        let to = |l: &ListenerSpec, name: Option<&str>| reached(clusters.route(l, name));
        assert_eq!(to(&l, Some("a.example")), "a");
        assert_eq!(
            to(&l, Some("API.A.Example")),
            "a",
            "names compare in lower case"
        );
        assert_eq!(to(&l, Some("y.a.example")), "a");
        assert_eq!(to(&l, Some("y.x.a.example")), "b", "the longer suffix");
        assert_eq!(to(&l, Some("b.example")), "b");
        assert_eq!(to(&l, Some("c.example")), "unknown");
        assert_eq!(to(&l, None), "no server name");
        l.default_cluster = Some("b".into());
        assert_eq!(to(&l, None), "b");
        // A listener serves only its clusters: another's names are unknown there.
        l.clusters = Some(vec!["b".into()]);
        assert_eq!(to(&l, Some("a.example")), "unknown");
        assert_eq!(to(&l, Some("y.x.a.example")), "b");
    }

    #[test]
    fn a_request_may_name_only_its_connections_cluster() {
        let clusters = Clusters::new(
            vec![
                cluster("a", &["a.example", "*.a.example"]),
                cluster("b", &["b.example"]),
            ],
            true,
        );
        let mut l = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        let reaches =
            |l: &ListenerSpec, c: &str, a: Option<&str>| clusters.authority_reaches(l, c, a);
        assert!(reaches(&l, "a", Some("a.example")));
        assert!(
            reaches(&l, "a", Some("A.Example.:6443")),
            "port, trailing dot and case"
        );
        assert!(reaches(&l, "a", Some("x.a.example")));
        assert!(
            !reaches(&l, "a", Some("b.example")),
            "another cluster's name"
        );
        assert!(!reaches(&l, "a", Some("b.example:443")));
        assert!(
            !reaches(&l, "a", Some("c.example")),
            "a name no cluster serves"
        );
        assert!(
            reaches(&l, "a", Some("127.0.0.1:6443")),
            "an IP names no cluster"
        );
        assert!(reaches(&l, "b", Some("[::1]:6443")));
        assert!(reaches(&l, "a", None));
        l.default_cluster = Some("b".into());
        assert!(
            !reaches(&l, "a", Some("b.example")),
            "the default cluster's name"
        );
        assert!(reaches(&l, "b", Some("b.example")));
        assert!(!reaches(&l, "b", Some("a.example")));
        // A listener that does not serve a: its name is no name there.
        l.clusters = Some(vec!["b".into()]);
        assert!(!reaches(&l, "b", Some("a.example")));
        let one = Clusters::new(vec![cluster("default", &[])], false);
        assert!(one.authority_reaches(&l, "default", Some("anything.example")));
    }

    #[test]
    fn an_authority_is_read_as_a_server_name() {
        assert_eq!(
            authority_host("A.Example:6443").as_deref(),
            Some("a.example")
        );
        assert_eq!(authority_host("a.example.").as_deref(), Some("a.example"));
        assert_eq!(authority_host("a.example"), Some("a.example".into()));
        assert_eq!(authority_host("10.0.0.1:6443"), None);
        assert_eq!(authority_host("10.0.0.1"), None);
        assert_eq!(authority_host("[::1]:6443"), None);
        assert_eq!(authority_host(""), None);
        assert_eq!(authority_host(":6443"), None);
    }

    #[tokio::test]
    async fn control_tasks_go_with_their_cluster_and_end_when_it_is_removed() {
        let (a, _) = cluster("a", &["a.example"]);
        let task = tokio::spawn(std::future::pending::<()>());
        a.keep_task(task.abort_handle());
        // Renamed: a new table, the same cluster, its tasks with it.
        let renamed = Clusters::new(vec![(a.clone(), vec!["b.example".into()])], true);
        let l = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        let Route::To(found) = renamed.route(&l, Some("b.example")) else {
            panic!("the new name routes to a");
        };
        assert!(Arc::ptr_eq(&found, &a));
        assert!(!task.is_finished());
        found.end_tasks();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), task)
            .await
            .expect("the task ends");
        assert!(ended.unwrap_err().is_cancelled());
    }

    #[test]
    fn a_file_without_clusters_routes_nowhere_before_its_cluster_is_in_force() {
        let clusters = Clusters::new(Vec::new(), false);
        let l = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        assert!(matches!(clusters.route(&l, None), Route::UnknownServerName));
    }

    #[test]
    fn the_one_cluster_of_a_file_without_clusters_takes_every_client() {
        let clusters = Clusters::new(vec![cluster("default", &[])], false);
        let l = ListenerSpec::passthrough("127.0.0.1:6443".parse().unwrap());
        for name in [None, Some("anything.example")] {
            assert_eq!(reached(clusters.route(&l, name)), "default");
        }
        assert!(!clusters.by_server_name());
    }
}
