//! Reloading the configuration on SIGHUP or when the file changes: backends, probes and
//! terminate mode's upstream and rules; with `clusters:`, clusters added (a new pool, and in
//! terminate mode its handshake and state), removed (its pool retired: its backends drain,
//! then it is forgotten) and changed, the others untouched.
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
use crate::terminate::{
    ClusterFiles, Rules, TerminateMode, TerminatedClusters, UpstreamFiles, Upstreams,
};
use kubegate_config::{diff, load_str_with, Change, Config};
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
    /// New probe settings, when `health` changed (a file without `clusters:`).
    probes: Option<ProbeSettings>,
    /// Probe settings of each cluster added, or whose health changed.
    cluster_probes: HashMap<String, ProbeSettings>,
    /// New upstream TLS and identity for terminate mode, when `upstream` changed.
    upstreams: Option<Upstreams>,
    /// With `clusters:` and a terminate listener: the files of each cluster added.
    added_files: HashMap<String, ClusterFiles>,
    /// ... and the upstream files of each cluster whose `upstream` changed.
    changed_upstreams: HashMap<String, UpstreamFiles>,
}

/// Loads `text` (the file at `path`) against the `running` configuration (`terminating`: the
/// cluster its terminate-mode listeners serve). Blocking: reads the files the configuration
/// names.
fn prepare(
    text: &[u8],
    path: &Path,
    running: &Config,
    terminating: Option<Arc<Cluster>>,
) -> Result<Prepared, String> {
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
    // Terminate mode's state of each cluster by name: what an added cluster and a changed
    // upstream read from files, read now.
    let mut added_files = HashMap::new();
    let mut changed_upstreams = HashMap::new();
    if terminating_listener(&config) && config.names_clusters() {
        for spec in config.clusters() {
            let added = changes
                .iter()
                .any(|c| matches!(c, Change::ClusterAdded(a) if a.name == spec.name));
            let upstream_changed = changes.iter().any(|c| match c {
                Change::ClusterChanged { name, changes, .. } => {
                    *name == spec.name && changes.contains(&Change::UpstreamChanged)
                }
                _ => false,
            });
            match &spec.tls {
                Some(tls) if added => {
                    added_files.insert(
                        spec.name.clone(),
                        ClusterFiles::load(&spec.name, tls, &spec.upstream)?,
                    );
                }
                Some(_) if upstream_changed => {
                    let files = UpstreamFiles::load(&spec.upstream)
                        .map_err(|e| format!("cluster {}: upstream: {e}", spec.name))?;
                    changed_upstreams.insert(spec.name.clone(), files);
                }
                _ => {}
            }
        }
    }
    let probes = if changes.contains(&Change::HealthChanged) {
        Some(probe_settings(&config.health).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let mut cluster_probes = HashMap::new();
    for spec in config.clusters() {
        let probed = changes.iter().any(|c| match c {
            Change::ClusterAdded(added) => added.name == spec.name,
            Change::ClusterChanged { name, changes, .. } => {
                *name == spec.name && changes.contains(&Change::HealthChanged)
            }
            _ => false,
        });
        if probed {
            let p = probe_settings(&spec.health)
                .map_err(|e| format!("cluster {}: health: {e}", spec.name))?;
            cluster_probes.insert(spec.name, p);
        }
    }
    let upstreams = match terminating {
        Some(cluster) if changes.contains(&Change::UpstreamChanged) => {
            Some(Upstreams::load(&config.upstream, cluster).map_err(|e| format!("upstream: {e}"))?)
        }
        _ => None,
    };
    Ok(Prepared {
        config,
        changes,
        probes,
        cluster_probes,
        upstreams,
        added_files,
        changed_upstreams,
    })
}

/// Puts a prepared configuration in force.
fn apply(
    gw: &Arc<Gateway>,
    terminate: Option<&TerminateMode>,
    by_name: &TerminatedClusters,
    p: Prepared,
) -> Vec<Change> {
    if p.config.health.tls.insecure_skip_verify {
        tracing::warn!(
            "health.tls.insecure_skip_verify is set: backend certificates are not verified"
        );
    }
    if let (Some(terminate), Some(upstreams)) = (terminate, p.upstreams) {
        terminate.replace(upstreams);
    }
    if let Some(terminate) = terminate {
        if p.changes.contains(&Change::Setting("dispatch")) {
            terminate.replace_rules(&p.config.dispatch, &gw.metrics().terminate);
        }
    }
    let specs = p.config.clusters();
    let configured: usize = specs.iter().map(|c| c.backends.len()).sum();
    let running = gw.clusters();
    let named = p.config.names_clusters();
    let drain = p.config.drain.clone();
    let (mut probes, mut cluster_probes) = (p.probes, p.cluster_probes);
    let (mut added_files, mut changed_upstreams) = (p.added_files, p.changed_upstreams);
    gw.config().replace(p.config);
    let mut kept: HashMap<String, Arc<Cluster>> = running
        .all()
        .iter()
        .map(|c| (c.name().to_string(), c.clone()))
        .collect();
    for change in &p.changes {
        match change {
            Change::ClusterAdded(spec) => {
                let Some(probes) = cluster_probes.remove(&spec.name) else {
                    continue;
                };
                let cluster = gw.new_cluster((**spec).clone(), &drain, probes);
                for b in &spec.backends {
                    cluster.pool().add(b);
                }
                if let Some(files) = added_files.remove(&spec.name) {
                    let metrics = &gw.metrics().terminate;
                    let rules = Rules::compile(&spec.name, &spec.dispatch, metrics);
                    metrics.cluster_served(&spec.name);
                    let terminated = by_name.insert(cluster.clone(), files, rules);
                    terminated::follow(gw, &terminated);
                }
                tracing::info!(
                    cluster = spec.name,
                    backends = spec.backends.len(),
                    "cluster added"
                );
                kept.insert(spec.name.clone(), cluster);
            }
            Change::ClusterRemoved(name) => {
                by_name.remove(name);
                gw.metrics().terminate.forget_cluster(name);
                if let Some(cluster) = kept.remove(name) {
                    retire(gw, cluster);
                }
            }
            Change::ClusterChanged {
                name,
                server_names,
                changes,
            } => {
                let Some(cluster) = kept.get(name).cloned() else {
                    continue;
                };
                apply_backends(cluster.pool(), changes);
                if let Some(terminated) = by_name.get(name) {
                    let mode = terminated.mode();
                    if let Some(files) = changed_upstreams.remove(name) {
                        mode.replace(files.of(mode.cluster().clone()));
                    }
                    if changes.contains(&Change::Setting("dispatch")) {
                        let spec = specs.iter().find(|s| s.name == *name);
                        let dispatch = spec.map_or(&[][..], |s| &s.dispatch[..]);
                        mode.replace_rules(dispatch, &gw.metrics().terminate);
                    }
                }
                if let Some(names) = server_names {
                    // The same pool, reached by the new names from now on.
                    let renamed = Cluster::new(name.clone(), names.clone(), cluster.pool().clone());
                    kept.insert(name.clone(), Arc::new(renamed));
                }
            }
            // A file without `clusters:`: its one cluster's backends.
            Change::BackendAdded(_) | Change::BackendRemoved(_) | Change::BackendUpdated { .. } => {
                if let Some(cluster) = running.all().first() {
                    apply_backends(cluster.pool(), std::slice::from_ref(change));
                }
            }
            Change::HealthChanged
            | Change::UpstreamChanged
            | Change::Setting(_)
            | Change::NeedsRestart(_) => {}
        }
    }
    // Every pool takes the drain settings; each its cluster's health, and new probes where
    // its health changed.
    let mut list = Vec::with_capacity(specs.len());
    for spec in &specs {
        let Some(cluster) = kept.remove(&spec.name) else {
            continue;
        };
        let new_probes = match named {
            true => cluster_probes.remove(&spec.name),
            false => probes.take(),
        };
        cluster
            .pool()
            .reconfigure(pool_settings(&spec.health, &drain), new_probes);
        list.push(cluster);
    }
    gw.replace_clusters(Clusters::new(list, named));
    gw.metrics()
        .control
        .backends_configured
        .set(configured as i64);
    gw.publish_client_limit();
    for cluster in gw.clusters().all() {
        cluster.pool().rebuild_routing();
    }
    p.changes
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

/// Whether `config` has a terminate-mode listener.
fn terminating_listener(config: &Config) -> bool {
    config
        .listeners
        .iter()
        .any(|l| l.mode == kubegate_config::ListenerMode::Terminate)
}

/// Loads `text` and applies it if it can be applied whole.
async fn try_reload(
    gw: &Arc<Gateway>,
    terminate: Option<&TerminateMode>,
    by_name: &TerminatedClusters,
    text: Vec<u8>,
) -> Result<Vec<Change>, String> {
    let path: PathBuf = gw.config().path().to_path_buf();
    let running = gw.config().load_full();
    let terminating = terminate.map(|t| t.cluster().clone());
    notify::reloading();
    let prepared =
        tokio::task::spawn_blocking(move || prepare(&text, &path, &running, terminating))
            .await
            .map_err(|e| format!("reload task failed: {e}"))?;
    let result = prepared.map(|p| apply(gw, terminate, by_name, p));
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

/// Reloads on SIGHUP and whenever the file's content changes (with `terminate`, terminate
/// mode's upstream settings of a file without `clusters:` too; `by_name`, terminate mode's
/// clusters of a file with them). Runs until the process ends.
pub async fn watch(
    gw: Arc<Gateway>,
    terminate: Option<Arc<TerminateMode>>,
    by_name: Arc<TerminatedClusters>,
) {
    let terminate = terminate.as_deref();
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
                        let result = try_reload(&gw, terminate, &by_name, text.clone()).await;
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
                let result = try_reload(&gw, terminate, &by_name, now.clone()).await;
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
