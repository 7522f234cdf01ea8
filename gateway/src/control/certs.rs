//! Certificates that follow their files: the serving certificates of terminate-mode listeners
//! and of the admin endpoint, the front-proxy certificate, and the client certificate probes
//! present (`health.tls.client_cert_file`). Checked every few seconds (size and modification
//! time, read off the async runtime); a changed pair is loaded and used for new connections.
//! Clients' open connections keep the serving certificate they saw; upstream connections that
//! present a replaced front-proxy certificate take no new request and are gone before it
//! expires (`terminate::upstream::rotation`), since the apiserver verifies a client
//! certificate at every request; probes open a connection each, so the next one presents the new certificate. A
//! pair that does not load (a rotation half done, a key that does not match) keeps the current
//! one in use, is logged and counted, and is tried again at the next change.

use crate::state::{pool_settings, probe_settings, Gateway};
use crate::telemetry::ReloadResult;
use crate::terminate::{TerminateMode, TerminatePlane, Upstreams};
use kubegate_config::UpstreamConfig;
use kubegate_net::tls::ServingCert;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often certificate files are checked.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What identifies a file's content cheaply: size and modification time.
type Stamp = Option<(u64, SystemTime)>;

/// The certificates to follow.
pub struct Watched {
    /// Serving certificates (terminate-mode listeners, the admin endpoint).
    pub serving: Vec<Arc<ServingCert>>,
    /// Terminate mode's state of each cluster, whose front-proxy certificate
    /// (`upstream.front_proxy`) is followed.
    pub terminate: Vec<Arc<TerminateMode>>,
    /// The plane that serves them, which puts a renewed certificate in force.
    pub plane: Option<Arc<TerminatePlane>>,
    /// Follow the probes' client certificate of every cluster configured, as clusters come
    /// and go (one watcher does).
    pub probes: bool,
}

async fn stamp(paths: &[&Path]) -> Vec<Stamp> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        out.push(
            tokio::fs::metadata(p)
                .await
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?))),
        );
    }
    out
}

/// Watches every certificate kubegate serves or presents until the process ends.
pub async fn watch_certificates(gw: Arc<Gateway>, watched: Watched) {
    let Watched {
        serving,
        terminate,
        plane,
        probes,
    } = watched;
    if serving.is_empty() && terminate.is_empty() && !probes {
        return;
    }
    let mut probes_seen: HashMap<String, Vec<Stamp>> = HashMap::new();
    // Every followed certificate has its series from the start: loaded, not failing.
    let failing = &gw.metrics().control.certificate_reload_failing;
    let front_proxies: Vec<PathBuf> = terminate
        .iter()
        .filter_map(|t| front_proxy_files(&gw, t).into_iter().next())
        .collect();
    for file in serving
        .iter()
        .map(|s| s.files()[0])
        .chain(front_proxies.iter().map(PathBuf::as_path))
    {
        failing
            .with_label_values(&[&file.display().to_string()])
            .set(0);
    }
    let mut serving_seen = Vec::new();
    for s in &serving {
        serving_seen.push(stamp(&s.files()).await);
    }
    let mut upstream_seen = Vec::new();
    for t in &terminate {
        upstream_seen.push(stamp(&paths(&front_proxy_files(&gw, t))).await);
    }
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // A reload puts upstream settings it read from the files before it applied them, and may
    // fall between a renewal's read and its store: after each, the front-proxy certificate
    // is read again, so that the newest files and the configuration in force win.
    let mut generations = gw.config().subscribe();
    loop {
        tick.tick().await;
        let reloaded = generations.has_changed().unwrap_or(false);
        if reloaded {
            generations.borrow_and_update();
        }
        if probes {
            follow_probe_certificates(&gw, &mut probes_seen).await;
        }
        for (i, s) in serving.iter().enumerate() {
            let now = stamp(&s.files()).await;
            if now == serving_seen[i] {
                continue;
            }
            serving_seen[i] = now;
            let cert = s.clone();
            let result = tokio::task::spawn_blocking(move || cert.reload())
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            record(&gw, s.files()[0], result);
        }
        // Each cluster's front-proxy certificate, for terminate mode's state of that cluster.
        for (i, terminate) in terminate.iter().enumerate() {
            let files = front_proxy_files(&gw, terminate);
            let now = stamp(&paths(&files)).await;
            let changed = now != upstream_seen[i];
            if !changed && !reloaded {
                continue;
            }
            upstream_seen[i] = now;
            let Some(upstream) = upstream_of(&gw, terminate) else {
                continue;
            };
            let cluster = terminate.cluster().clone();
            let result = tokio::task::spawn_blocking(move || Upstreams::load(&upstream, cluster))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
                .map(|u| match &plane {
                    Some(plane) => plane.renew_upstreams(terminate, u),
                    None => terminate.replace(u),
                });
            let file = files
                .first()
                .map(PathBuf::as_path)
                .unwrap_or(Path::new("-"));
            match (changed, result) {
                (true, result) => record(&gw, file, result),
                // Read again after a reload, the files as they were: nothing to tell.
                (false, Ok(())) => {}
                (false, Err(e)) => {
                    tracing::debug!(file = %file.display(), error = %e, "front-proxy certificate not read again after a reload")
                }
            }
        }
    }
}

/// Loads the probes' client certificate of each configured cluster whose files changed since
/// `seen` (a cluster seen for the first time is only noted: its probes loaded it), so that the
/// next probe of each backend presents it.
async fn follow_probe_certificates(gw: &Gateway, seen: &mut HashMap<String, Vec<Stamp>>) {
    let config = gw.config().load_full();
    let clusters = gw.clusters();
    let mut configured = Vec::new();
    for spec in config.clusters() {
        let tls = &spec.health.tls;
        let (Some(cert), Some(key)) = (&tls.client_cert_file, &tls.client_key_file) else {
            continue;
        };
        configured.push(spec.name.clone());
        let now = stamp(&[cert.as_path(), key.as_path()]).await;
        let before = seen.insert(spec.name.clone(), now.clone());
        if before.is_none_or(|b| b == now) {
            continue;
        }
        let Some(cluster) = clusters.named(&spec.name).cloned() else {
            continue;
        };
        let (health, drain) = (spec.health.clone(), config.drain.clone());
        let loaded = tokio::task::spawn_blocking(move || {
            probe_settings(&health)
                .map(|p| (p, health))
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let result = loaded.map(|(probes, health)| {
            cluster
                .pool()
                .reconfigure(pool_settings(&health, &drain), Some(probes))
        });
        record(gw, cert, result);
    }
    seen.retain(|name, _| configured.contains(name));
}

/// The `upstream` of the cluster `terminate` serves, as configured now.
fn upstream_of(gw: &Gateway, terminate: &TerminateMode) -> Option<UpstreamConfig> {
    gw.config()
        .load()
        .clusters()
        .iter()
        .find(|c| c.name == terminate.cluster().name())
        .map(|c| c.upstream.clone())
}

fn front_proxy_files(gw: &Gateway, terminate: &TerminateMode) -> Vec<PathBuf> {
    upstream_of(gw, terminate)
        .and_then(|u| u.front_proxy)
        .map(|fp| vec![fp.cert_file, fp.key_file])
        .unwrap_or_default()
}

fn paths(files: &[PathBuf]) -> Vec<&Path> {
    files.iter().map(PathBuf::as_path).collect()
}

fn record(gw: &Gateway, file: &Path, result: Result<(), String>) {
    let label = match &result {
        Ok(()) => ReloadResult::Success,
        Err(_) => ReloadResult::Failure,
    };
    let m = &gw.metrics().control;
    m.certificate_reload(label);
    m.certificate_reload_failing
        .with_label_values(&[&file.display().to_string()])
        .set(i64::from(result.is_err()));
    match result {
        Ok(()) => {
            tracing::info!(file = %file.display(), "certificate reloaded: new connections use it")
        }
        Err(e) => {
            tracing::error!(file = %file.display(), error = %e, "certificate reload failed; the current one stays")
        }
    }
}
