//! Certificates that follow their files: the serving certificates of terminate-mode listeners
//! and of the admin endpoint, the front-proxy certificate, and the client certificate probes
//! present (`health.tls.client_cert_file`). Checked every few seconds (size and modification
//! time, read off the async runtime); a changed pair is loaded and used for new connections.
//! Clients' open connections keep the serving certificate they saw; upstream connections that
//! present a replaced front-proxy certificate take no new request and are gone before it
//! expires ([`retire_presented`]), since the apiserver verifies a client certificate at every
//! request; probes open a connection each, so the next one presents the new certificate. A
//! pair that does not load (a rotation half done, a key that does not match) keeps the current
//! one in use, is logged and counted, and is tried again at the next change.

use crate::state::{pool_settings, probe_settings, Gateway, Kind, Retired};
use crate::telemetry::ReloadResult;
use crate::terminate::{TerminateMode, Upstreams};
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
    loop {
        tick.tick().await;
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
            if now == upstream_seen[i] {
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
                .map(|u| {
                    if let Some(replaced) = terminate.replace(u) {
                        retire_presented(terminate, replaced.expires);
                    }
                });
            record(
                &gw,
                files
                    .first()
                    .map(PathBuf::as_path)
                    .unwrap_or(Path::new("-")),
                result,
            );
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

/// Longest that connections presenting a replaced front-proxy certificate stay open: their
/// ordinary requests end within the apiserver's `--request-timeout` (1 min); watches move.
const MAX_RETIRED: Duration = Duration::from_secs(600);
/// How long before the replaced certificate expires its connections are closed at the latest.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long they stay when its expiry is not known.
const RETIRED_UNKNOWN_EXPIRY: Duration = Duration::from_secs(60);

/// After `terminate`'s front-proxy certificate was replaced: every upstream connection that
/// presents the old one (which expires at `expires`) takes no new stream and closes, with
/// GOAWAY, once its streams are done; those still open by [`close_within`] are closed (the
/// watches on them continue on connections that present the new one). The apiserver verifies
/// a client certificate at every request, so a busy connection — one carrying watches is
/// never idle — would otherwise answer 401 to everything from the old one's expiry.
fn retire_presented(terminate: &TerminateMode, expires: Option<SystemTime>) {
    let retired: Vec<Retired> = terminate
        .pool()
        .backends()
        .iter()
        .map(|b| b.planes().terminate.retire(Kind::WithIdentity))
        .filter(|r| !r.is_empty())
        .collect();
    let n: usize = retired.iter().map(Retired::len).sum();
    if n == 0 {
        return;
    }
    let within = close_within(expires, SystemTime::now());
    let cluster = terminate.cluster().name().to_string();
    tracing::info!(cluster = %cluster, connections = n, close_within_s = within.as_secs(), "front-proxy certificate replaced: upstream connections that present the old one take no new request, and those still open are closed before it expires");
    tokio::spawn(async move {
        tokio::time::sleep(within).await;
        let closed: usize = retired.iter().map(Retired::close).sum();
        if closed > 0 {
            tracing::info!(cluster = %cluster, connections = closed, "closed upstream connections that still presented the replaced front-proxy certificate");
        }
    });
}

/// How long connections that present a certificate expiring at `expires` may stay open after
/// it was replaced at `now`: until [`EXPIRY_MARGIN`] before its expiry, at most
/// [`MAX_RETIRED`].
fn close_within(expires: Option<SystemTime>, now: SystemTime) -> Duration {
    match expires {
        Some(at) => at
            .duration_since(now)
            .unwrap_or_default()
            .saturating_sub(EXPIRY_MARGIN)
            .min(MAX_RETIRED),
        None => RETIRED_UNKNOWN_EXPIRY,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_presenting_a_replaced_certificate_close_before_it_expires() {
        let now = SystemTime::now();
        let at = |s: u64| Some(now + Duration::from_secs(s));
        assert_eq!(close_within(at(90), now), Duration::from_secs(60));
        assert_eq!(close_within(at(20), now), Duration::ZERO);
        assert_eq!(
            close_within(Some(now - Duration::from_secs(5)), now),
            Duration::ZERO,
            "already expired: at once"
        );
        assert_eq!(close_within(at(30 * 86_400), now), MAX_RETIRED);
        assert_eq!(close_within(None, now), RETIRED_UNKNOWN_EXPIRY);
    }
}
