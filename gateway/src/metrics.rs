//! Every metric kubegate exports, registered in one place. `docs/metrics.md` describes each.
//!
//! Label cardinality is bounded by the backend count: per-backend series are removed when a
//! backend is forgotten, and readyz check names come from a fixed set in the apiserver.

use crate::labels::{
    code_class, AdminRefusal, ConnectError, Identity, Refusal, ReloadResult, RequestFailure,
};
use crate::terminate::{Failure, Verb};
use kubegate_pool::CloseReason;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::OnceLock;
use std::time::Duration;

/// The process-wide metric families.
pub struct Metrics {
    registry: Registry,
    /// `kubegate_heap_allocated_bytes`: held in allocations (set when scraped).
    pub heap_allocated: IntGauge,
    /// `kubegate_heap_resident_bytes`: the allocator's resident pages (set when scraped).
    pub heap_resident: IntGauge,
    /// `kubegate_build_info{version}`: always 1.
    pub build_info: IntGaugeVec,
    /// `kubegate_lifecycle_phase{phase}`: one-hot.
    pub lifecycle_phase: IntGaugeVec,
    /// `kubegate_ready`: 1 while the admin `/readyz` answers 200.
    pub ready: IntGauge,
    /// `kubegate_backends_configured`.
    pub backends_configured: IntGauge,
    /// `kubegate_backend_state{backend,state}`: one-hot per backend.
    pub backend_state: IntGaugeVec,
    /// `kubegate_backend_state_transitions_total{backend,from,to}`.
    pub state_transitions: IntCounterVec,
    /// `kubegate_backend_probes_total{backend,result}`.
    pub probes: IntCounterVec,
    /// `kubegate_backend_probe_duration_seconds{backend}`.
    pub probe_duration: HistogramVec,
    /// `kubegate_backend_readyz_check_failing{backend,check}`: 1 while the check fails.
    pub readyz_check_failing: IntGaugeVec,
    /// `kubegate_backend_connections{backend}`: open proxied connections.
    pub connections: IntGaugeVec,
    /// `kubegate_backend_connections_total{backend}`: connections established.
    pub connections_total: IntCounterVec,
    /// `kubegate_backend_connect_errors_total{backend,reason}`.
    pub connect_errors: IntCounterVec,
    /// `kubegate_accept_errors_total`: failed accepts on the listeners (descriptors or memory
    /// exhausted, connections aborted before they were accepted).
    pub accept_errors: IntCounter,
    /// `kubegate_connect_retries_total`: client connections that needed another backend.
    pub connect_retries: IntCounter,
    /// `kubegate_backend_bytes_total{backend,direction}`.
    pub bytes: IntCounterVec,
    /// `kubegate_backend_connection_duration_seconds{backend}`.
    pub connection_duration: HistogramVec,
    /// `kubegate_backend_drains_total{backend}`: drains started with connections open.
    pub drains: IntCounterVec,
    /// `kubegate_backend_connections_closed_total{backend,reason}`: connections kubegate closed.
    pub forced_closes: IntCounterVec,
    /// `kubegate_connections_refused_total{reason}`: client connections closed unserved.
    pub refused: IntCounterVec,
    /// `kubegate_discovered_backends`: backends in use that came from the endpoint slices.
    pub discovered_backends: IntGauge,
    /// `kubegate_discovery_errors_total`: failed attempts to read the endpoint slices.
    pub discovery_errors: IntCounter,
    /// `kubegate_admin_refused_total{reason}`: admin connections and requests turned away.
    pub admin_refused: IntCounterVec,
    /// `kubegate_connections_fallback_total`: connections sent to an alive, not-ready backend.
    pub fallback: IntCounter,
    /// `kubegate_config_reloads_total{result}`.
    pub reloads: IntCounterVec,
    /// `kubegate_config_last_reload_successful`.
    pub last_reload_ok: IntGauge,
    /// `kubegate_config_last_reload_success_timestamp_seconds`.
    pub last_reload_success_time: prometheus::Gauge,
    /// `kubegate_requests_total{backend,verb,code}` (terminate mode; `code` is the class).
    pub requests: IntCounterVec,
    /// `kubegate_request_duration_seconds{verb}`: until response headers, not long-running.
    pub request_duration: HistogramVec,
    /// `kubegate_request_retries_total{reason}`: attempts sent to another backend, by the
    /// failure before.
    pub request_retries: IntCounterVec,
    /// `kubegate_requests_failed_total{reason}`: requests kubegate answered itself.
    pub requests_failed: IntCounterVec,
    /// `kubegate_requests_by_identity_total{identity}`'s series by `Identity as usize`: counted
    /// for every request, without a label lookup.
    identity_series: [IntCounter; Identity::ALL.len()],
    /// `request_duration`'s series by `Verb as usize`, each made on first use.
    duration_series: [OnceLock<Histogram>; Verb::ALL.len()],
    /// `kubegate_identity_headers_stripped_total`: identity headers clients sent, removed.
    pub identity_headers_stripped: IntCounter,
    /// `kubegate_backend_requests_in_flight{backend}`.
    pub requests_in_flight: IntGaugeVec,
    /// `kubegate_backend_long_running_requests{backend}`.
    pub long_running: IntGaugeVec,
    /// `kubegate_backend_upstream_connections{backend}`: HTTP/2 connections open for requests.
    pub upstream_connections: IntGaugeVec,
    /// `kubegate_client_connections{protocol}`: open terminate-mode client connections.
    pub client_connections: IntGaugeVec,
    /// `kubegate_tls_handshake_failures_total{reason}` (terminate-mode clients).
    pub tls_handshake_failures: IntCounterVec,
    /// `kubegate_client_limit_closes_total{reason}`: client connections closed because they
    /// reached a limit (see [`crate::labels::ClientLimit`]).
    pub client_limit_closes: IntCounterVec,
    /// `kubegate_certificate_reloads_total{result}`: serving and front-proxy certificates read
    /// again after their files changed.
    pub certificate_reloads: IntCounterVec,
    /// `kubegate_watches_open`: terminate-mode watches kubegate follows across backends.
    pub watches_open: IntGauge,
    /// `kubegate_watch_resumes_total{cause}`: watches continued on another backend, by what
    /// stopped the one before.
    pub watch_resumes: IntCounterVec,
    /// `kubegate_watches_ended_total{reason}`.
    pub watches_ended: IntCounterVec,
}

const PROBE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0,
];

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    let m = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

impl Metrics {
    /// Registers every family.
    pub fn new() -> Metrics {
        let r = Registry::new();
        let counter = |name: &str, help: &str| {
            let m = IntCounter::new(name, help).expect("valid metric");
            r.register(Box::new(m.clone())).expect("unique metric");
            m
        };
        let accept_errors = counter(
            "kubegate_accept_errors_total",
            "Failed accepts on the listeners (descriptors or memory exhausted, connections aborted before they were accepted).",
        );
        let connect_retries = counter(
            "kubegate_connect_retries_total",
            "Client connections whose first backend connect failed and were retried on another backend.",
        );
        let requests_by_identity = counter_vec(&r, "kubegate_requests_by_identity_total", "Terminate-mode requests by the identity passed on (client_certificate, bearer_token, anonymous).", &["identity"]);
        let fallback = counter(
            "kubegate_connections_fallback_total",
            "Client connections sent to an alive but not-ready backend because no backend was ready (no_ready_backend: alive).",
        );
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            r.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let backends_configured = gauge(
            "kubegate_backends_configured",
            "Backends in the running configuration.",
        );
        let ready = gauge(
            "kubegate_ready",
            "1 while the gateway is serving with at least one ready backend (its /readyz answers 200).",
        );
        let last_reload_ok = gauge(
            "kubegate_config_last_reload_successful",
            "1 if the last configuration (re)load succeeded, 0 if it was refused.",
        );
        let last_reload_success_time = prometheus::Gauge::new(
            "kubegate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load.",
        )
        .expect("valid metric");
        r.register(Box::new(last_reload_success_time.clone()))
            .expect("unique metric");
        let heap_allocated = gauge(
            "kubegate_heap_allocated_bytes",
            "Bytes kubegate holds in heap allocations (the allocator's count, when scraped).",
        );
        let heap_resident = gauge(
            "kubegate_heap_resident_bytes",
            "Resident bytes of the allocator's pages: allocations, freed memory kept for reuse, metadata (when scraped).",
        );
        let m = Metrics {
            heap_allocated,
            heap_resident,
            build_info: gauge_vec(&r, "kubegate_build_info", "Always 1; labels carry the build.", &["version"]),
            lifecycle_phase: gauge_vec(&r, "kubegate_lifecycle_phase", "1 for the gateway's current lifecycle phase (starting, serving, stopping, draining).", &["phase"]),
            ready,
            backends_configured,
            backend_state: gauge_vec(&r, "kubegate_backend_state", "1 for each backend's current health state (unknown, ready, not_ready, down, removed).", &["backend", "state"]),
            state_transitions: counter_vec(&r, "kubegate_backend_state_transitions_total", "Backend health state changes.", &["backend", "from", "to"]),
            probes: counter_vec(&r, "kubegate_backend_probes_total", "Readiness probes by result (pass, fail, tls_error, refused, timeout, reset, error, not_run).", &["backend", "result"]),
            probe_duration: histogram_vec(&r, "kubegate_backend_probe_duration_seconds", "Time for one readiness probe: connect, TLS handshake and response.", &["backend"], PROBE_BUCKETS),
            readyz_check_failing: gauge_vec(&r, "kubegate_backend_readyz_check_failing", "1 while the named readyz check of the backend fails in its verbose answer.", &["backend", "check"]),
            connections: gauge_vec(&r, "kubegate_backend_connections", "Open proxied connections per backend.", &["backend"]),
            connections_total: counter_vec(&r, "kubegate_backend_connections_total", "Proxied connections established per backend.", &["backend"]),
            connect_errors: counter_vec(&r, "kubegate_backend_connect_errors_total", "Failed connects to a backend by reason (refused, timeout, error).", &["backend", "reason"]),
            accept_errors,
            connect_retries,
            bytes: counter_vec(&r, "kubegate_backend_bytes_total", "Bytes proxied per backend; direction is to_backend or to_client.", &["backend", "direction"]),
            connection_duration: histogram_vec(&r, "kubegate_backend_connection_duration_seconds", "Lifetime of proxied connections.", &["backend"], DURATION_BUCKETS),
            drains: counter_vec(&r, "kubegate_backend_drains_total", "Drains started: a backend with open connections stopped being ready or was removed.", &["backend"]),
            forced_closes: counter_vec(&r, "kubegate_backend_connections_closed_total", "Connections kubegate closed itself, by reason (backend_down, drain_timeout, shutdown_grace).", &["backend", "reason"]),
            refused: counter_vec(&r, "kubegate_connections_refused_total", "Client connections closed without a backend, by reason (no_ready_backend, connect_failed, out_of_resources).", &["reason"]),
            discovered_backends: {
                let m = IntGauge::new("kubegate_discovered_backends", "Backends in use that came from the default/kubernetes EndpointSlices (not in the static list).").expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            discovery_errors: {
                let m = IntCounter::new("kubegate_discovery_errors_total", "Failed attempts to list or watch the endpoint slices on a backend.").expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            admin_refused: counter_vec(&r, "kubegate_admin_refused_total", "Admin endpoint connections and requests turned away, by reason (evicted, timeout, too_large, unauthorized).", &["reason"]),
            fallback,
            reloads: counter_vec(&r, "kubegate_config_reloads_total", "Configuration reloads by result (success, failure).", &["result"]),
            last_reload_ok,
            last_reload_success_time,
            requests: counter_vec(&r, "kubegate_requests_total", "Terminate-mode requests answered by a backend, by verb and status class.", &["backend", "verb", "code"]),
            request_duration: histogram_vec(&r, "kubegate_request_duration_seconds", "Terminate mode: time from sending a request to a backend to its response headers (requests that are not long-running).", &["verb"], REQUEST_BUCKETS),
            request_retries: counter_vec(&r, "kubegate_request_retries_total", "Terminate-mode requests sent to another backend, by what failed before (connect_failed, unsent, refused_stream, goaway, shutting_down, reset).", &["reason"]),
            requests_failed: counter_vec(&r, "kubegate_requests_failed_total", "Terminate-mode requests kubegate answered itself, by reason (no_ready_backend, unavailable, broken, body_too_large, bad_request).", &["reason"]),
            identity_series: Identity::ALL.map(|i| requests_by_identity.with_label_values(&[i.as_str()])),
            duration_series: Default::default(),
            identity_headers_stripped: {
                let m = IntCounter::new("kubegate_identity_headers_stripped_total", "Identity headers (X-Remote-*) clients sent, removed before forwarding.").expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            requests_in_flight: gauge_vec(&r, "kubegate_backend_requests_in_flight", "Terminate-mode requests in flight per backend, long-running ones included.", &["backend"]),
            long_running: gauge_vec(&r, "kubegate_backend_long_running_requests", "Terminate-mode long-running requests (watches, exec, logs) open per backend.", &["backend"]),
            upstream_connections: gauge_vec(&r, "kubegate_backend_upstream_connections", "Terminate mode's HTTP/2 connections to each backend open for new requests.", &["backend"]),
            client_connections: gauge_vec(&r, "kubegate_client_connections", "Open terminate-mode client connections, by protocol (h2, http/1.1).", &["protocol"]),
            tls_handshake_failures: counter_vec(&r, "kubegate_tls_handshake_failures_total", "Terminate-mode client TLS handshakes that failed (error) or did not finish in time (timeout).", &["reason"]),
            client_limit_closes: counter_vec(&r, "kubegate_client_limit_closes_total", "Client connections kubegate closed to protect itself and its other clients, by limit (connections: limits.max_client_connections were open; rapid_reset: most HTTP/2 streams reset by the client at once).", &["reason"]),
            certificate_reloads: counter_vec(&r, "kubegate_certificate_reloads_total", "Serving and front-proxy certificates read again after their files changed, by result.", &["result"]),
            watches_open: {
                let m = IntGauge::new("kubegate_watches_open", "Terminate-mode watches kubegate follows across backends.").expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            watch_resumes: counter_vec(&r, "kubegate_watch_resumes_total", "Watches continued on another backend from their last position, by what stopped the upstream stream (ended, failed, drained).", &["cause"]),
            watches_ended: counter_vec(&r, "kubegate_watches_ended_total", "Followed watches that ended, by reason (client, timeout, expired, error, not_resumable_*, malformed).", &["reason"]),
            registry: r,
        };
        // Series that dashboards and alerts read exist from the start, at 0, instead of
        // appearing with the first event.
        for reason in Refusal::ALL {
            m.refused.with_label_values(&[reason.as_str()]);
        }
        for reason in AdminRefusal::ALL {
            m.admin_refused.with_label_values(&[reason.as_str()]);
        }
        for result in ReloadResult::ALL {
            m.reloads.with_label_values(&[result.as_str()]);
            m.certificate_reloads.with_label_values(&[result.as_str()]);
        }
        for failure in Failure::ALL {
            m.request_retries.with_label_values(&[failure.as_str()]);
        }
        for reason in RequestFailure::ALL {
            m.requests_failed.with_label_values(&[reason.as_str()]);
        }
        for reason in ["error", "timeout"] {
            m.tls_handshake_failures.with_label_values(&[reason]);
        }
        for limit in crate::labels::ClientLimit::ALL {
            m.client_limit_closes.with_label_values(&[limit.as_str()]);
        }
        for protocol in ["h2", "http/1.1"] {
            m.client_connections.with_label_values(&[protocol]);
        }
        for cause in crate::terminate::Break::ALL {
            m.watch_resumes.with_label_values(&[cause.as_str()]);
        }
        for reason in crate::terminate::Ended::ALL {
            m.watches_ended.with_label_values(&[reason.as_str()]);
        }
        m
    }

    /// Counts a request by the identity passed on for it.
    pub fn count_identity(&self, identity: Identity) {
        self.identity_series[identity as usize].inc();
    }

    /// Observes the time a backend took to send a `verb` request's response headers.
    pub fn observe_request_duration(&self, verb: Verb, took: Duration) {
        self.duration_series[verb as usize]
            .get_or_init(|| self.request_duration.with_label_values(&[verb.as_str()]))
            .observe(took.as_secs_f64());
    }

    /// Counts a request a backend answered with `code`.
    pub fn count_request(
        &self,
        backend: &str,
        verb: crate::terminate::Verb,
        code: http::StatusCode,
    ) {
        self.requests
            .with_label_values(&[backend, verb.as_str(), code_class(code)])
            .inc();
    }

    /// Counts a request sent to another backend after `failure`.
    pub fn request_retry(&self, failure: Failure) {
        self.request_retries
            .with_label_values(&[failure.as_str()])
            .inc();
    }

    /// Counts a request kubegate answered itself.
    pub fn request_failed(&self, reason: RequestFailure) {
        self.requests_failed
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// Creates a new backend's event series at 0.
    pub fn init_backend(&self, backend: &str) {
        for reason in ConnectError::ALL {
            self.connect_errors
                .with_label_values(&[backend, reason.as_str()]);
        }
        for reason in CloseReason::ALL {
            self.forced_closes
                .with_label_values(&[backend, reason.as_str()]);
        }
        self.drains.with_label_values(&[backend]);
    }

    /// Counts an admin connection or request turned away.
    pub fn admin_refused(&self, reason: AdminRefusal) {
        self.admin_refused
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// Counts a client turned away.
    pub fn refuse(&self, reason: Refusal) {
        self.refused.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts a failed connect to `backend`.
    pub fn connect_error(&self, backend: &str, reason: ConnectError) {
        self.connect_errors
            .with_label_values(&[backend, reason.as_str()])
            .inc();
    }

    /// Counts a reload.
    pub fn reload(&self, result: ReloadResult) {
        self.reloads.with_label_values(&[result.as_str()]).inc();
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> Vec<u8> {
        if let Some(heap) = crate::memory::heap() {
            self.heap_allocated.set(heap.allocated as i64);
            self.heap_resident.set(heap.resident as i64);
        }
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding does not fail");
        out
    }

    /// Drops every series of a forgotten backend, so cardinality follows the configuration.
    pub fn forget_backend(&self, name: &str) {
        let drop_matching = |families: &[&dyn Forget]| {
            for f in families {
                f.forget(name);
            }
        };
        drop_matching(&[
            &self.backend_state,
            &self.state_transitions,
            &self.probes,
            &self.probe_duration,
            &self.readyz_check_failing,
            &self.connections,
            &self.connections_total,
            &self.connect_errors,
            &self.bytes,
            &self.connection_duration,
            &self.drains,
            &self.forced_closes,
            &self.requests,
            &self.requests_in_flight,
            &self.long_running,
            &self.upstream_connections,
        ]);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Removes every series whose `backend` label is the given name.
trait Forget {
    fn forget(&self, backend: &str);
}

impl<T: prometheus::core::MetricVecBuilder> Forget for prometheus::core::MetricVec<T> {
    fn forget(&self, backend: &str) {
        use prometheus::core::Collector;
        for family in self.collect() {
            for metric in family.get_metric() {
                let labels: std::collections::HashMap<&str, &str> = metric
                    .get_label()
                    .iter()
                    .map(|l| (l.name(), l.value()))
                    .collect();
                if labels.get("backend") == Some(&backend) {
                    let _ = self.remove(&labels);
                }
            }
        }
    }
}

/// Sets a one-hot gauge family: the series of `current` to 1, those of every other value in
/// `all` to 0. `prefix` holds the labels before the one-hot label (the backend's name, or none).
pub fn set_one_hot<T: Copy + PartialEq>(
    family: &IntGaugeVec,
    prefix: &[&str],
    all: &[T],
    current: T,
    label: impl Fn(T) -> &'static str,
) {
    let mut labels: Vec<&str> = prefix.to_vec();
    labels.push("");
    for &value in all {
        *labels.last_mut().expect("one label") = label(value);
        family
            .with_label_values(&labels)
            .set((value == current) as i64);
    }
}

/// Handles for the passthrough hot path: label lookups done once per backend, not per
/// connection.
pub struct BackendMetrics {
    /// Open connections.
    pub connections: IntGauge,
    /// Connections established.
    pub connections_total: IntCounter,
    /// Bytes client → backend.
    pub bytes_to_backend: IntCounter,
    /// Bytes backend → client.
    pub bytes_to_client: IntCounter,
    /// Connection lifetimes.
    pub connection_duration: Histogram,
}

impl BackendMetrics {
    /// Resolves the handles of `backend`.
    pub fn new(m: &Metrics, backend: &str) -> BackendMetrics {
        BackendMetrics {
            connections: m.connections.with_label_values(&[backend]),
            connections_total: m.connections_total.with_label_values(&[backend]),
            bytes_to_backend: m.bytes.with_label_values(&[backend, "to_backend"]),
            bytes_to_client: m.bytes.with_label_values(&[backend, "to_client"]),
            connection_duration: m.connection_duration.with_label_values(&[backend]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series arrays are indexed by discriminant: each `ALL` must list its enum in
    /// declaration order.
    #[test]
    fn series_arrays_are_indexed_in_declaration_order() {
        for (i, identity) in Identity::ALL.into_iter().enumerate() {
            assert_eq!(identity as usize, i, "{identity:?}");
        }
        for (i, verb) in Verb::ALL.into_iter().enumerate() {
            assert_eq!(verb as usize, i, "{verb:?}");
        }
        let m = Metrics::new();
        m.count_identity(Identity::BearerToken);
        m.observe_request_duration(Verb::List, Duration::from_millis(3));
        let text = String::from_utf8(m.render()).unwrap();
        assert!(
            text.contains("kubegate_requests_by_identity_total{identity=\"bearer_token\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kubegate_request_duration_seconds_count{verb=\"list\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("verb=\"get\""),
            "a verb's series appears with its first request"
        );
    }
}
