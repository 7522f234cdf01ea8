//! Certificate expiry, exported: every certificate file the running configuration names
//! (serving certificates, the front-proxy and probe client certificates, CA bundles) is read
//! at start and every minute, and its earliest `notAfter` published as
//! `kubegate_certificate_expiry_timestamp_seconds{file}`, so an alert fires before any of them
//! lapses. Files no longer configured lose their series; a file that cannot be read keeps its
//! last value (the reload watcher reports the failure).

use crate::state::Gateway;
use kubegate_config::Config;
use kubegate_net::tls::earliest_expiry;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// How often the files are read.
const EVERY: Duration = Duration::from_secs(60);

/// Every certificate file `config` names.
pub fn certificate_files(config: &Config) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    let listener_tls = config
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .chain(config.admin.tls.as_ref());
    for tls in listener_tls {
        files.insert(tls.cert_file.clone());
        files.extend(tls.client_ca_file.clone());
    }
    if let Some(fp) = &config.upstream.front_proxy {
        files.insert(fp.cert_file.clone());
    }
    files.extend(config.upstream.tls.ca_file.clone());
    files.extend(config.health.tls.ca_file.clone());
    files.extend(config.health.tls.client_cert_file.clone());
    files
}

/// Publishes the expiry of every certificate file until the process ends.
pub async fn publish_expiry(gw: Arc<Gateway>) {
    let mut published: BTreeSet<PathBuf> = BTreeSet::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let files = certificate_files(&gw.config().load());
        let read = {
            let files = files.clone();
            tokio::task::spawn_blocking(move || {
                files
                    .into_iter()
                    .map(|f| {
                        let at = earliest_expiry(&f);
                        (f, at)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default()
        };
        let family = &gw.metrics().control.certificate_expiry;
        for gone in published.difference(&files) {
            let _ = family.remove_label_values(&[&gone.display().to_string()]);
        }
        for (file, at) in read {
            match at {
                Ok(at) => {
                    let seconds = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
                    family
                        .with_label_values(&[&file.display().to_string()])
                        .set(i64::try_from(seconds).unwrap_or(i64::MAX));
                }
                Err(e) => tracing::warn!(error = %e, "cannot read a certificate's expiry"),
            }
        }
        published = files;
    }
}
