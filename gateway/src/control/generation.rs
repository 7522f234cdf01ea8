//! The one path by which a configuration comes in force, at start-up and at each reload: the
//! next generation is made from the one in force and the new configuration. What changed is
//! listed (`kubegate_config::diff`; at start-up, every cluster added to nothing), everything
//! that can fail is read first ([`Plan`]: probe settings, certificate files, discovery
//! credentials), and only then is anything changed ([`apply`]).
//!
//! A cluster is matched by name across generations: a kept one keeps its pool, holds,
//! terminate state (tokens, access decisions, joins, feeds, flow control) and control tasks; an
//! added one is made with its pool, discovery, terminate state and control tasks; a removed
//! one's tasks end and its pool is retired (its backends drain, then it is forgotten).

use crate::control::discovery::{self, Credentials};
use crate::control::files::{check_files_and_tls, log_warnings};
use crate::control::terminated;
use crate::state::{pool_settings, probe_settings, Cluster, Clusters, Gateway, Generation, Pool};
use crate::terminate::{ClusterFiles, Rules, TerminatePlane, TerminatedCluster, UpstreamFiles};
use kubegate_config::{diff, load_str_with, Change, ClusterConfig, Config, DiscoveryConfig};
use kubegate_health::ProbeSettings;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A configuration checked and ready to apply: nothing about it can fail any more.
pub struct Plan {
    config: Config,
    changes: Vec<Change>,
    /// What each cluster added or changed read from files, by cluster name.
    clusters: HashMap<String, ClusterPlan>,
}

/// What one cluster's change needs, read before anything changes.
#[derive(Default)]
struct ClusterPlan {
    /// Probe settings: the cluster is added, or its health changed.
    probes: Option<ProbeSettings>,
    /// An added cluster discovers its replicas: with these settings and credentials.
    discovery: Option<(DiscoveryConfig, Credentials)>,
    /// Terminate mode serves an added cluster: its handshake and upstream files.
    added: Option<ClusterFiles>,
    /// Terminate mode serves a cluster whose upstream changed: its upstream files.
    upstream: Option<UpstreamFiles>,
}

impl ClusterPlan {
    /// Reads what `spec` needs, `added`, or changed by `changes`, in `config`.
    fn load(
        config: &Config,
        spec: &ClusterConfig,
        added: bool,
        changes: &[Change],
    ) -> Result<ClusterPlan, String> {
        let name = &spec.name;
        let mut plan = ClusterPlan::default();
        if added || changes.contains(&Change::HealthChanged) {
            let probes =
                probe_settings(&spec.health).map_err(|e| format!("cluster {name}: health: {e}"))?;
            plan.probes = Some(probes);
        }
        if let (true, Some(settings)) = (added, &spec.discovery) {
            let credentials = discovery::load_credentials(
                &settings.kubeconfig,
                spec.health.tls.ca_file.as_deref(),
            )
            .map_err(|e| format!("cluster {name}: discovery.kubeconfig: {e}"))?;
            plan.discovery = Some((settings.clone(), credentials));
        }
        if !config.terminated(name) {
            return Ok(plan);
        }
        if added {
            plan.added = Some(ClusterFiles::load(name, spec.tls.as_ref(), &spec.upstream)?);
        } else if changes.contains(&Change::UpstreamChanged) {
            let files = UpstreamFiles::load(&spec.upstream)
                .map_err(|e| format!("cluster {name}: upstream: {e}"))?;
            plan.upstream = Some(files);
        }
        Ok(plan)
    }
}

impl Plan {
    /// Start-up: `config`'s clusters, each added to nothing. Blocking: reads the files the
    /// configuration names.
    pub fn first(config: Config) -> Result<Plan, String> {
        let changes = kubegate_config::from_nothing(&config);
        Plan::with(config, changes)
    }

    /// A reload: `text` (the file at `path`) after the `running` configuration. Blocking:
    /// reads the files the configuration names.
    pub fn next(text: &[u8], path: &Path, running: &Config) -> Result<Plan, String> {
        let text =
            std::str::from_utf8(text).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let config =
            load_str_with(text, path, base, &check_files_and_tls).map_err(|e| e.to_string())?;
        log_warnings(path, text, &config);
        let changes = diff(running, &config);
        let restart: Vec<&str> = changes
            .iter()
            .filter_map(|c| match c {
                Change::NeedsRestart(key) => Some(*key),
                _ => None,
            })
            .collect();
        if !restart.is_empty() {
            return Err(format!(
                "{} cannot change while running; restart kubegate to apply",
                restart.join(", ")
            ));
        }
        Plan::with(config, changes)
    }

    /// `changes` to reach `config`, with what each cluster's change reads from files.
    fn with(config: Config, changes: Vec<Change>) -> Result<Plan, String> {
        let specs = config.clusters();
        let mut clusters = HashMap::new();
        for change in &changes {
            let (name, added, inner) = match change {
                Change::ClusterAdded(spec) => (&spec.name, true, &[][..]),
                Change::ClusterChanged { name, changes, .. } => (name, false, &changes[..]),
                _ => continue,
            };
            let Some(spec) = specs.iter().find(|s| s.name == *name) else {
                continue;
            };
            clusters.insert(
                name.clone(),
                ClusterPlan::load(&config, spec, added, inner)?,
            );
        }
        Ok(Plan {
            config,
            changes,
            clusters,
        })
    }
}

/// Puts the generation `plan` makes in force: the gateway's configuration and clusters, and
/// terminate mode's state for those a terminate listener serves; then starts the control tasks
/// of the clusters added. Runs on the control runtime (pools start their probes on it).
pub fn apply(gw: &Arc<Gateway>, terminate: &Arc<TerminatePlane>, plan: Plan) -> Vec<Change> {
    let Plan {
        config,
        changes,
        clusters: mut plans,
    } = plan;
    let running = gw.clusters();
    let config = Arc::new(config);
    let drain = config.drain.clone();
    let specs = config.clusters();
    for spec in specs {
        let probed = plans.get(&spec.name).is_some_and(|p| p.probes.is_some());
        if probed && spec.health.tls.insecure_skip_verify {
            tracing::warn!(
                cluster = spec.name,
                "health.tls.insecure_skip_verify is set: backend certificates are not verified"
            );
        }
    }
    let configured: usize = specs.iter().map(|c| c.backends.len()).sum();
    let mut kept: HashMap<String, Arc<Cluster>> = running
        .all()
        .iter()
        .map(|c| (c.name().to_string(), c.clone()))
        .collect();
    let mut served: HashMap<String, (Arc<TerminatedCluster>, Arc<Rules>)> = terminate
        .served()
        .clusters()
        .iter()
        .map(|(name, c)| (name.clone(), (c.terminated.clone(), c.rules.clone())))
        .collect();
    // Started once the generation is in force: they read it.
    let mut started = Vec::new();
    let metrics = &gw.metrics().terminate;
    for change in &changes {
        match change {
            Change::ClusterAdded(spec) => {
                let plan = plans.remove(&spec.name).unwrap_or_default();
                let Some(probes) = plan.probes else {
                    continue;
                };
                let cluster = gw.new_cluster(spec, &drain, probes);
                for b in &spec.backends {
                    cluster.pool().add(b);
                }
                let terminated = plan.added.map(|files| {
                    let made = terminate.make(&cluster, files, &spec.dispatch, gw.metrics());
                    served.insert(spec.name.clone(), made.clone());
                    made.0
                });
                tracing::info!(
                    cluster = spec.name,
                    backends = spec.backends.len(),
                    "cluster added"
                );
                kept.insert(spec.name.clone(), cluster.clone());
                started.push(Added {
                    cluster,
                    discovery: plan.discovery,
                    server_name: spec.health.tls.server_name.clone(),
                    terminated,
                });
            }
            Change::ClusterRemoved(name) => {
                metrics.forget_cluster(name);
                gw.metrics().joins.forget_cluster(name);
                served.remove(name);
                if let Some(cluster) = kept.remove(name) {
                    cluster.end_tasks();
                    retire(gw, cluster);
                }
            }
            Change::ClusterChanged { name, changes, .. } => {
                let Some(cluster) = kept.get(name) else {
                    continue;
                };
                apply_backends(cluster.pool(), changes);
                let Some((terminated, rules)) = served.get_mut(name) else {
                    continue;
                };
                if let Some(files) = plans.get_mut(name).and_then(|p| p.upstream.take()) {
                    terminated.mode().replace(files.of(cluster.clone()));
                }
                if changes.contains(&Change::Setting("dispatch")) {
                    let spec = specs.iter().find(|s| s.name == *name);
                    let dispatch = spec.map_or(&[][..], |s| &s.dispatch[..]);
                    *rules = terminate.compile_rules(name, dispatch, gw.metrics());
                }
            }
            // What clusters are made of changes within `ClusterChanged`; settings read per
            // connection or request apply with no further action; a restart was refused.
            Change::BackendAdded(_)
            | Change::BackendRemoved(_)
            | Change::BackendUpdated { .. }
            | Change::HealthChanged
            | Change::UpstreamChanged
            | Change::Setting(_)
            | Change::NeedsRestart(_) => {}
        }
    }
    // Every pool takes the drain settings; each its cluster's health, and new probes where
    // its health changed. The table swaps whole, with the configuration: a cluster's new
    // server names and the clusters added and removed come in force together.
    let mut list = Vec::with_capacity(specs.len());
    for spec in specs {
        let Some(cluster) = kept.remove(&spec.name) else {
            continue;
        };
        let probes = plans.get_mut(&spec.name).and_then(|p| p.probes.take());
        cluster
            .pool()
            .reconfigure(pool_settings(&spec.health, &drain), probes);
        list.push((cluster, spec.server_names.clone()));
    }
    let clusters = Arc::new(Clusters::new(list, config.names_clusters()));
    let generation = Arc::new(Generation {
        config: config.clone(),
        clusters: clusters.clone(),
    });
    // Terminate mode's table first: the gateway's generation is what the accept loops wait
    // for at start-up, and a client they accept finds its cluster in the table.
    terminate.put(generation.clone(), served);
    gw.config().put(generation);
    gw.metrics()
        .control
        .backends_configured
        .set(configured as i64);
    gw.publish_client_limit();
    for cluster in clusters.all() {
        cluster.pool().rebuild_routing();
    }
    for added in started {
        added.start(gw, terminate);
    }
    // What the removed clusters' discovery found is no longer counted.
    discovery::publish_discovered(gw);
    changes
}

/// A cluster just added, whose control tasks start once its generation is in force.
struct Added {
    cluster: Arc<Cluster>,
    discovery: Option<(DiscoveryConfig, Credentials)>,
    /// The name its replicas' certificates are verified for when the discovery kubeconfig
    /// names none (`health.tls.server_name`).
    server_name: String,
    terminated: Option<Arc<TerminatedCluster>>,
}

impl Added {
    /// Starts its discovery and, where terminate mode serves it, what follows its terminate
    /// state; each ends when a reload removes the cluster.
    fn start(self, gw: &Arc<Gateway>, terminate: &Arc<TerminatePlane>) {
        if let Some((settings, credentials)) = self.discovery {
            let task = tokio::spawn(discovery::run(
                gw.clone(),
                self.cluster.clone(),
                settings,
                credentials,
                self.server_name,
            ));
            self.cluster.keep_task(task.abort_handle());
        }
        if let Some(served) = &self.terminated {
            terminated::follow(gw, terminate, &self.cluster, served);
        }
    }
}

/// Applies backend changes (`BackendAdded`, `BackendRemoved`, `BackendUpdated`) to `pool`.
fn apply_backends(pool: &Pool, changes: &[Change]) {
    for change in changes {
        match change {
            // Already there when discovery found it first: it is kept, now configured.
            Change::BackendAdded(spec) if pool.configured(spec.address).is_some() => {
                pool.update(spec)
            }
            Change::BackendAdded(spec) => pool.add(spec),
            Change::BackendRemoved(spec) => pool.remove(spec),
            Change::BackendUpdated { after, .. } => pool.update(after),
            _ => {}
        }
    }
}

/// A cluster no longer configured: new clients no longer reach it (the caller puts the
/// clusters without it in force); its backends drain like removed ones, their open work kept
/// until the drain deadline, and the pool lives until the last is forgotten.
fn retire(gw: &Gateway, cluster: Arc<Cluster>) {
    tracing::info!(
        cluster = cluster.name(),
        "cluster removed; draining its backends"
    );
    let pool = cluster.pool().clone();
    pool.retire();
    // Its shed object's rules go with it: a cluster added later under its name is another.
    crate::control::shed::set_cluster(gw, cluster.name(), Vec::new());
    gw.shed().set_auto(cluster.name(), Vec::new());
    let control = &gw.metrics().control;
    for gauge in [&control.shed_object_rules, &control.shed_object_refused] {
        let _ = gauge.remove_label_values(&[cluster.name()]);
    }
    let metrics = gw.metrics_shared();
    let name = cluster.name().to_string();
    tokio::spawn(async move {
        while !pool.backends().is_empty() {
            pool.idle().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = metrics
            .gateway
            .cluster_ready_backends
            .remove_label_values(&[&name]);
        tracing::info!(cluster = name, "removed cluster forgotten");
    });
}
