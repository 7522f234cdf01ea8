//! Reloading the configuration on SIGHUP or when the file changes.
//!
//! A reload is all or nothing: the new file is loaded and validated, the changes are listed
//! (`kubegate_config::diff`), and only if every change can be applied is anything applied. A
//! refused reload leaves the running configuration as it was, logs why and counts a failure.

use crate::gateway::Gateway;
use crate::notify;
use kubegate_config::{diff, load_file, Change};
use kubegate_health::Prober;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::signal::unix::{signal, SignalKind};

/// How often the config file is checked for changes.
const POLL: Duration = Duration::from_secs(1);

/// Applies the file as it is now. Returns the changes applied, or why nothing was.
pub fn reload(gw: &Gateway, trigger: &str) -> Result<Vec<Change>, String> {
    notify::reloading();
    let result = try_reload(gw);
    notify::reloaded();
    match &result {
        Ok(changes) => {
            gw.metrics.reloads.with_label_values(&["success"]).inc();
            gw.metrics.last_reload_ok.set(1);
            gw.metrics.last_reload_success_time.set(unix_now());
            tracing::info!(trigger, changes = ?changes, "configuration reloaded");
        }
        Err(why) => {
            gw.metrics.reloads.with_label_values(&["failure"]).inc();
            gw.metrics.last_reload_ok.set(0);
            tracing::error!(trigger, error = %why, "configuration reload refused; the running configuration stays");
        }
    }
    result
}

fn try_reload(gw: &Gateway) -> Result<Vec<Change>, String> {
    let new = load_file(&gw.config_path).map_err(|e| e.to_string())?;
    let old = gw.config.load_full();
    let changes = diff(&old, &new);
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
    let health_changed = changes.contains(&Change::HealthChanged);
    let prober = if health_changed {
        Some(Prober::new(&new.health).map_err(|e| e.to_string())?)
    } else {
        None
    };
    if new.health.tls.insecure_skip_verify {
        tracing::warn!(
            "health.tls.insecure_skip_verify is set: backend certificates are not verified"
        );
    }
    let backends_configured = new.backends.len() as i64;
    gw.config.store(Arc::new(new));
    if let Some(p) = prober {
        gw.set_prober(p);
        gw.restart_checkers();
    }
    for change in &changes {
        match change {
            Change::BackendAdded(spec) => gw.add_backend(spec),
            Change::BackendRemoved(spec) => gw.remove_backend(spec),
            Change::BackendUpdated { before, after } => gw.update_backend(before, after),
            Change::HealthChanged | Change::Setting(_) | Change::NeedsRestart(_) => {}
        }
    }
    gw.metrics.backends_configured.set(backends_configured);
    gw.rebuild_routing();
    gw.reloads.send_modify(|n| *n += 1);
    Ok(changes)
}

/// Reloads on SIGHUP and whenever the file's content changes. Runs until the process ends.
pub async fn watch(gw: Arc<Gateway>) {
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    // Only content that differs from the last attempt triggers a reload, so a broken file is
    // reported once, not every second.
    let mut last_seen = std::fs::read(&gw.config_path).ok();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                last_seen = std::fs::read(&gw.config_path).ok();
                let _ = reload(&gw, "SIGHUP");
            }
            _ = tick.tick() => {
                let now = std::fs::read(&gw.config_path).ok();
                if now.is_some() && now != last_seen {
                    last_seen = now;
                    let _ = reload(&gw, "file changed");
                }
            }
        }
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
    gw.metrics.last_reload_ok.set(1);
    gw.metrics.last_reload_success_time.set(unix_now());
}
