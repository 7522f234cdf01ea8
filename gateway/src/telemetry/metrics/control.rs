//! The control side: configuration reloads, certificates that follow their files, the admin
//! endpoint, discovery.

use crate::telemetry::labels::{AdminRefusal, ReloadResult};
use crate::telemetry::metrics::register::{counter, counter_vec, gauge, gauge_vec, Counted};
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

/// Recorded by the control plane.
pub struct ControlMetrics {
    /// `kubegate_backends_configured`.
    pub backends_configured: IntGauge,
    /// `kubegate_config_reloads_total{result}`.
    reloads: Counted<ReloadResult>,
    /// `kubegate_config_last_reload_successful`.
    pub last_reload_ok: IntGauge,
    /// `kubegate_config_last_reload_success_timestamp_seconds`.
    pub last_reload_success_time: Gauge,
    /// `kubegate_config_file_differs`: 1 while the configuration file holds something else than
    /// the configuration in force (a reload was refused).
    pub config_file_differs: IntGauge,
    /// `kubegate_config_file_stale`: 1 while the file kubegate reads has been unlinked — it was
    /// replaced (renamed over) or removed on the host while a single-file bind mount keeps
    /// showing the old one, so edits never arrive.
    pub config_file_stale: IntGauge,
    /// `kubegate_certificate_reloads_total{result}`: serving and front-proxy certificates read
    /// again after their files changed.
    certificate_reloads: Counted<ReloadResult>,
    /// `kubegate_certificate_reload_failing{file}`: 1 while the last attempt to load a changed
    /// certificate failed (the previous one is still served), 0 once one succeeded.
    pub certificate_reload_failing: IntGaugeVec,
    /// `kubegate_certificate_expiry_timestamp_seconds{file}`: the earliest `notAfter` of each
    /// certificate file kubegate reads (serving, client, CA bundles).
    pub certificate_expiry: IntGaugeVec,
    /// `kubegate_admin_refused_total{reason}`: admin connections and requests turned away.
    admin_refused: Counted<AdminRefusal>,
    /// `kubegate_discovered_backends`: backends in use that came from the endpoint slices.
    pub discovered_backends: IntGauge,
    /// `kubegate_discovery_errors_total`: failed attempts to read the endpoint slices.
    pub discovery_errors: IntCounter,
    /// `kubegate_shed_object_rules{cluster}`: rules read from each cluster's shed object and in
    /// force.
    pub shed_object_rules: IntGaugeVec,
    /// `kubegate_shed_object_refused_rules{cluster}`: entries of the shed object as last read
    /// that are not rules kubegate puts in force (unreadable, no sender, no expiry, more than
    /// reject).
    pub shed_object_refused: IntGaugeVec,
    /// `kubegate_shed_object_errors_total{cluster}`: failed attempts to read or watch it.
    pub shed_object_errors: IntCounterVec,
}

impl ControlMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> ControlMetrics {
        let last_reload_success_time = Gauge::new(
            "kubegate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load.",
        )
        .expect("valid metric");
        r.register(Box::new(last_reload_success_time.clone()))
            .expect("unique metric");
        ControlMetrics {
            backends_configured: gauge(r, "kubegate_backends_configured", "Backends in the running configuration."),
            reloads: Counted::new(r, "kubegate_config_reloads_total", "Configuration reloads by result (success, failure).", "result"),
            last_reload_ok: gauge(r, "kubegate_config_last_reload_successful", "1 if the last configuration (re)load succeeded, 0 if it was refused."),
            last_reload_success_time,
            config_file_differs: gauge(r, "kubegate_config_file_differs", "1 while the configuration file holds something else than the configuration in force (a reload was refused); 0 when they agree."),
            config_file_stale: gauge(r, "kubegate_config_file_stale", "1 while the configuration file kubegate reads has been unlinked: replaced or removed behind a single-file bind mount, which keeps showing the old file (mount its folder instead)."),
            certificate_reloads: Counted::new(r, "kubegate_certificate_reloads_total", "Serving and front-proxy certificates read again after their files changed, by result.", "result"),
            certificate_reload_failing: gauge_vec(r, "kubegate_certificate_reload_failing", "1 while the last load of a changed certificate file failed and the previous certificate is still in use; 0 once one loads.", &["file"]),
            certificate_expiry: gauge_vec(r, "kubegate_certificate_expiry_timestamp_seconds", "Unix time when the first certificate in each certificate file kubegate reads expires (serving and client certificates, CA bundles).", &["file"]),
            admin_refused: Counted::new(r, "kubegate_admin_refused_total", "Admin endpoint connections and requests turned away, by reason (evicted, timeout, too_large, unauthorized).", "reason"),
            discovered_backends: gauge(r, "kubegate_discovered_backends", "Backends in use that came from the default/kubernetes EndpointSlices (not in the static list)."),
            discovery_errors: counter(r, "kubegate_discovery_errors_total", "Failed attempts to list or watch the endpoint slices on a backend."),
            shed_object_rules: gauge_vec(r, "kubegate_shed_object_rules", "Rules read from the cluster's shed object (terminate.shed_object) and in force.", &["cluster"]),
            shed_object_refused: gauge_vec(r, "kubegate_shed_object_refused_rules", "Entries of the cluster's shed object, as last read, that kubegate does not put in force (see its log).", &["cluster"]),
            shed_object_errors: counter_vec(r, "kubegate_shed_object_errors_total", "Failed attempts to read or watch the cluster's shed object.", &["cluster"]),
        }
    }

    /// Counts a configuration reload.
    pub fn reload(&self, result: ReloadResult) {
        self.reloads.count(result);
    }

    /// Counts a certificate read again.
    pub fn certificate_reload(&self, result: ReloadResult) {
        self.certificate_reloads.count(result);
    }

    /// Counts an admin connection or request turned away.
    pub fn admin_refused(&self, reason: AdminRefusal) {
        self.admin_refused.count(reason);
    }
}
