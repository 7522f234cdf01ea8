//! Reloading the configuration on SIGHUP or when the file changes, cluster by cluster (a file
//! without `clusters:` is its one cluster): clusters added (a new pool, and where terminate
//! mode serves it its handshake and state), removed (its pool retired: its backends drain,
//! then it is forgotten) and changed (backends, probes, terminate mode's upstream and rules),
//! the others untouched.
//!
//! A reload is all or nothing: the new file is loaded and validated, the changes are listed
//! (`kubegate_config::diff`), and only if every change can be applied is anything applied. A
//! refused reload leaves the running configuration as it was, logs why and counts a failure.
//!
//! Files are read off the async runtime (the configuration with `tokio::fs`, the files it names
//! in a blocking task). An editor that rewrites the file in place can be caught half-way; a
//! changed file that does not load is therefore read once more at the next check and refused
//! only if it is still the same: the operator sees one refusal for a broken file, none for a
//! write in progress.

use crate::control::files::{check_files_and_tls, log_warnings};
use crate::control::notify;
use crate::control::terminated;
use crate::state::{pool_settings, probe_settings, Cluster, Clusters, Gateway, Pool};
use crate::telemetry::ReloadResult;
use crate::terminate::{ClusterFiles, TerminatePlane, TerminatedCluster, UpstreamFiles};
use kubegate_config::{diff, load_str_with, Change, ClusterConfig, Config};
use kubegate_health::ProbeSettings;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::signal::unix::{signal, SignalKind};

/// How often the config file is checked for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A new configuration, checked and ready to apply: nothing about it can fail any more.
struct Prepared {
    config: Config,
    changes: Vec<Change>,
    /// What each cluster added or changed read from files, by cluster name.
    plans: HashMap<String, ClusterPlan>,
}

/// What one cluster's change needs, read before anything changes.
#[derive(Default)]
struct ClusterPlan {
    /// Probe settings: the cluster is added, or its health changed.
    probes: Option<ProbeSettings>,
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

/// Loads `text` (the file at `path`) against the `running` configuration. Blocking: reads
/// the files the configuration names.
fn prepare(text: &[u8], path: &Path, running: &Config) -> Result<Prepared, String> {
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
    let specs = config.clusters();
    let mut plans = HashMap::new();
    for change in &changes {
        let (name, added, inner) = match change {
            Change::ClusterAdded(spec) => (&spec.name, true, &[][..]),
            Change::ClusterChanged { name, changes, .. } => (name, false, &changes[..]),
            _ => continue,
        };
        let Some(spec) = specs.iter().find(|s| s.name == *name) else {
            continue;
        };
        plans.insert(
            name.clone(),
            ClusterPlan::load(&config, spec, added, inner)?,
        );
    }
    Ok(Prepared {
        config,
        changes,
        plans,
    })
}

/// Puts a prepared configuration in force (a cluster added is served by `terminate` where a
/// terminate listener serves it).
fn apply(gw: &Arc<Gateway>, terminate: &TerminatePlane, p: Prepared) -> Vec<Change> {
    let Prepared {
        config,
        changes,
        mut plans,
    } = p;
    let running = gw.clusters();
    let drain = config.drain.clone();
    // Its clusters were resolved in `prepare`; the configuration moves in whole.
    gw.config().replace(config);
    let config = gw.config().load_full();
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
                if let Some(files) = plan.added {
                    let served = terminate.serve(&cluster, files, &spec.dispatch, gw.metrics());
                    terminated::follow(gw, &served);
                }
                tracing::info!(
                    cluster = spec.name,
                    backends = spec.backends.len(),
                    "cluster added"
                );
                kept.insert(spec.name.clone(), cluster);
            }
            Change::ClusterRemoved(name) => {
                metrics.forget_cluster(name);
                gw.metrics().joins.forget_cluster(name);
                if let Some(cluster) = kept.remove(name) {
                    // Its control tasks end with its terminate state.
                    cluster.forget_terminated();
                    retire(gw, cluster);
                }
            }
            Change::ClusterChanged { name, changes, .. } => {
                let Some(cluster) = kept.get(name) else {
                    continue;
                };
                apply_backends(cluster.pool(), changes);
                let Some(served) = cluster.terminated::<TerminatedCluster>() else {
                    continue;
                };
                let mode = served.mode();
                if let Some(files) = plans.get_mut(name).and_then(|p| p.upstream.take()) {
                    mode.replace(files.of(cluster.clone()));
                }
                if changes.contains(&Change::Setting("dispatch")) {
                    let spec = specs.iter().find(|s| s.name == *name);
                    let dispatch = spec.map_or(&[][..], |s| &s.dispatch[..]);
                    mode.replace_rules(dispatch, metrics);
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
    // its health changed. The table swaps whole: a cluster's new server names and the
    // clusters added and removed come in force together.
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
    gw.replace_clusters(Clusters::new(list, running.by_server_name()));
    gw.metrics()
        .control
        .backends_configured
        .set(configured as i64);
    gw.publish_client_limit();
    for cluster in gw.clusters().all() {
        cluster.pool().rebuild_routing();
    }
    changes
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

/// Loads `text` and applies it if it can be applied whole.
async fn try_reload(
    gw: &Arc<Gateway>,
    terminate: &TerminatePlane,
    text: Vec<u8>,
) -> Result<Vec<Change>, String> {
    let path: PathBuf = gw.config().path().to_path_buf();
    let running = gw.config().load_full();
    notify::reloading();
    let prepared = tokio::task::spawn_blocking(move || prepare(&text, &path, &running))
        .await
        .map_err(|e| format!("reload task failed: {e}"))?;
    let result = prepared.map(|p| apply(gw, terminate, p));
    notify::reloaded();
    result
}

fn record(gw: &Gateway, trigger: &str, result: &Result<Vec<Change>, String>) {
    let m = &gw.metrics().control;
    match result {
        Ok(changes) => {
            m.reload(ReloadResult::Success);
            m.last_reload_ok.set(1);
            m.last_reload_success_time.set(unix_now());
            tracing::info!(trigger, changes = ?changes, "configuration reloaded");
        }
        Err(why) => {
            m.reload(ReloadResult::Failure);
            m.last_reload_ok.set(0);
            tracing::error!(trigger, error = %why, "configuration reload refused; the running configuration stays");
        }
    }
}

/// Reloads on SIGHUP and whenever the file's content changes (clusters added are served by
/// `terminate` where a terminate listener serves them). Runs until the process ends.
pub async fn watch(gw: Arc<Gateway>, terminate: Arc<TerminatePlane>) {
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    let path = gw.config().path().to_path_buf();
    // The content last acted on: a change from it triggers a reload, so a broken file is
    // reported once, not every second.
    let mut settled = tokio::fs::read(&path).await.ok();
    // The content in force: what the file is compared with for `kubegate_config_file_differs`.
    let mut in_force = settled.clone();
    let mut stale = Stale::default();
    // A changed content that did not load, waiting for a second look.
    let mut unsettled: Option<Vec<u8>> = None;
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                unsettled = None;
                match tokio::fs::read(&path).await {
                    Ok(text) => {
                        settled = Some(text.clone());
                        let result = try_reload(&gw, &terminate, text.clone()).await;
                        if result.is_ok() {
                            in_force = Some(text);
                        }
                        record(&gw, "SIGHUP", &result);
                    }
                    Err(e) => record(&gw, "SIGHUP", &Err(format!("{}: {e}", path.display()))),
                }
            }
            _ = tick.tick() => {
                stale.check(&gw, &path);
                let Ok(now) = tokio::fs::read(&path).await else { continue };
                gw.metrics()
                    .control
                    .config_file_differs
                    .set(i64::from(Some(&now) != in_force.as_ref()));
                if Some(&now) == settled.as_ref() {
                    unsettled = None;
                    continue;
                }
                let second_look = unsettled.as_ref() == Some(&now);
                let result = try_reload(&gw, &terminate, now.clone()).await;
                if result.is_err() && !second_look {
                    // Possibly caught mid-write: look again at the next check.
                    unsettled = Some(now);
                    continue;
                }
                record(&gw, "file changed", &result);
                if result.is_ok() {
                    in_force = Some(now.clone());
                }
                gw.metrics()
                    .control
                    .config_file_differs
                    .set(i64::from(result.is_err()));
                settled = Some(now);
                unsettled = None;
            }
        }
    }
}

/// Whether the configuration file kubegate reads has been unlinked: a file replaced by rename
/// (`sed -i`, editors, Ansible) or removed on the host, seen through a single-file bind mount
/// (a container's `hostPath` of `type: File`), which keeps the old inode — so no edit ever
/// arrives. Said once in the log, and as `kubegate_config_file_stale` while it lasts.
#[derive(Default)]
struct Stale {
    said: bool,
}

impl Stale {
    fn check(&mut self, gw: &Gateway, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        let stale = std::fs::metadata(path).is_ok_and(|m| m.nlink() == 0);
        gw.metrics().control.config_file_stale.set(i64::from(stale));
        if stale && !self.said {
            tracing::warn!(path = %path.display(), "the configuration file was replaced or removed, but this view of it still shows the old one (a single-file bind mount keeps the file it was given): edits will not arrive; mount the file's folder instead, and restart");
        }
        self.said = stale;
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Records the initial load as a successful one.
pub fn record_initial_load(gw: &Gateway) {
    let m = &gw.metrics().control;
    m.last_reload_ok.set(1);
    m.last_reload_success_time.set(unix_now());
}
