//! Certificates that follow their files: the serving certificates of terminate-mode listeners
//! and of the admin endpoint, and the front-proxy certificate. Checked every few seconds (size
//! and modification time, read off the async runtime); a changed pair is loaded and used for new
//! connections, open ones keep theirs. A pair that does not load (a rotation half done, a key
//! that does not match) keeps the current one in use, is logged and counted, and is tried again
//! at the next change.

use crate::gateway::Gateway;
use crate::labels::ReloadResult;
use crate::terminate::Upstreams;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A serving certificate read from files that can be read again.
pub trait Reloadable: Send + Sync {
    /// The files it is read from, the certificate first.
    fn files(&self) -> Vec<PathBuf>;
    /// Reads them again; on failure the current certificate stays.
    fn reload(&self) -> Result<(), String>;
}

/// How often certificate files are checked.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What identifies a file's content cheaply: size and modification time.
type Stamp = Option<(u64, SystemTime)>;

async fn stamp(paths: &[PathBuf]) -> Vec<Stamp> {
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

/// Watches every certificate kubegate serves or presents until the process ends: `serving`
/// (terminate-mode listeners, the admin endpoint) and terminate mode's front-proxy certificate.
pub async fn watch_certificates(gw: Arc<Gateway>, serving: Vec<Arc<dyn Reloadable>>) {
    if serving.is_empty() && gw.terminate().is_none() {
        return;
    }
    let mut serving_seen = Vec::new();
    for s in &serving {
        serving_seen.push(stamp(&s.files()).await);
    }
    let mut upstream_seen = stamp(&front_proxy_files(&gw)).await;
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        for (i, s) in serving.iter().enumerate() {
            let files = s.files();
            let now = stamp(&files).await;
            if now == serving_seen[i] {
                continue;
            }
            serving_seen[i] = now;
            let s = s.clone();
            let result = tokio::task::spawn_blocking(move || s.reload())
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            record(&gw, &files[0], result);
        }
        let Some(terminate) = gw.terminate() else {
            continue;
        };
        let files = front_proxy_files(&gw);
        let now = stamp(&files).await;
        if now != upstream_seen {
            upstream_seen = now;
            let upstream = gw.config().load().upstream.clone();
            let result = tokio::task::spawn_blocking(move || Upstreams::load(&upstream))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
                .map(|u| terminate.replace(u));
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

fn front_proxy_files(gw: &Gateway) -> Vec<PathBuf> {
    gw.config()
        .load()
        .upstream
        .front_proxy
        .as_ref()
        .map(|fp| vec![fp.cert_file.clone(), fp.key_file.clone()])
        .unwrap_or_default()
}

fn record(gw: &Gateway, file: &Path, result: Result<(), String>) {
    let label = match &result {
        Ok(()) => ReloadResult::Success,
        Err(_) => ReloadResult::Failure,
    };
    gw.metrics()
        .certificate_reloads
        .with_label_values(&[label.as_str()])
        .inc();
    match result {
        Ok(()) => {
            tracing::info!(file = %file.display(), "certificate reloaded: new connections use it")
        }
        Err(e) => {
            tracing::error!(file = %file.display(), error = %e, "certificate reload failed; the current one stays")
        }
    }
}
