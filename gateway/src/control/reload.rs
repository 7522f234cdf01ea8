//! Reloading the configuration on SIGHUP or when the file changes: the next generation made
//! from the one in force (`generation`), cluster by cluster (a file without `clusters:` is its
//! one cluster): clusters added, removed and changed, the others untouched.
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

use crate::control::generation::{self, Plan};
use crate::control::notify;
use crate::state::Gateway;
use crate::telemetry::ReloadResult;
use crate::terminate::TerminatePlane;
use kubegate_config::Change;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::signal::unix::{signal, SignalKind};

/// How often the config file is checked for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Loads `text` and applies it if it can be applied whole.
async fn try_reload(
    gw: &Arc<Gateway>,
    terminate: &Arc<TerminatePlane>,
    text: Vec<u8>,
) -> Result<Vec<Change>, String> {
    let path: PathBuf = gw.config().path().to_path_buf();
    let running = gw.config().load_full();
    notify::reloading();
    let plan = tokio::task::spawn_blocking(move || Plan::next(&text, &path, &running))
        .await
        .map_err(|e| format!("reload task failed: {e}"))?;
    let result = plan.map(|p| generation::apply(gw, terminate, p));
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
