//! Terminate mode: client connections, requests and how they were answered, upstream
//! connections and requests in flight per backend, followed watches.

use crate::telemetry::labels::{
    code_class, AttemptFailure, ClientProtocol, ContinuePage, Freshened, HandshakeFailure,
    Identity, RequestFailure, TokenReviewResult, WatchBreak, WatchEnd,
};
use crate::telemetry::metrics::register::{
    counter, counter_vec, forget_in, gauge, gauge_vec, histogram_vec, zero_series, Counted, Forget,
};
use kubegate_wire::classify::Verb;
use prometheus::{
    Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Recorded by the terminate plane.
pub struct TerminateMetrics {
    /// `kubegate_requests_total{backend,verb,code}` (`code` is the class).
    requests: IntCounterVec,
    /// `kubegate_request_duration_seconds{verb}`: until response headers, not long-running.
    request_duration: HistogramVec,
    /// `request_duration`'s series by `Verb as usize`, each made on first use.
    duration_series: [OnceLock<Histogram>; Verb::ALL.len()],
    /// `kubegate_request_retries_total{reason}`: attempts sent to another backend, by the
    /// failure before.
    request_retries: Counted<AttemptFailure>,
    /// `kubegate_requests_failed_total{reason}`: requests kubegate answered itself.
    requests_failed: Counted<RequestFailure>,
    /// `kubegate_requests_by_identity_total{identity}`: counted for every request.
    requests_by_identity: Counted<Identity>,
    /// `kubegate_identity_headers_stripped_total`: identity headers clients sent, removed.
    pub identity_headers_stripped: IntCounter,
    /// `kubegate_backend_requests_in_flight{backend}`.
    pub requests_in_flight: IntGaugeVec,
    /// `kubegate_backend_long_running_requests{backend}`.
    pub long_running: IntGaugeVec,
    /// `kubegate_backend_upstream_connections{backend}`: HTTP/2 connections open for requests.
    pub upstream_connections: IntGaugeVec,
    /// `kubegate_client_connections{protocol}`: open terminate-mode client connections.
    client_connections: IntGaugeVec,
    /// `kubegate_tls_handshake_failures_total{reason}` (terminate-mode clients).
    tls_handshake_failures: Counted<HandshakeFailure>,
    /// `kubegate_watches_open`: terminate-mode watches kubegate follows across backends.
    pub watches_open: IntGauge,
    /// `kubegate_continue_pages_total{to}`: LIST continue pages answered, by the replica that
    /// answered against the one that answered the first page.
    continue_pages: Counted<ContinuePage>,
    /// `kubegate_watch_resumes_total{cause}`: watches continued on another backend, by what
    /// stopped the one before.
    watch_resumes: Counted<WatchBreak>,
    /// `kubegate_watch_positions_freshened_total{by}`: positions brought up to date on the
    /// replica a watch left, before it moved.
    watch_positions_freshened: Counted<Freshened>,
    /// `kubegate_watches_ended_total{reason}`.
    watches_ended: Counted<WatchEnd>,
    /// `kubegate_access_log_dropped_total`: access log lines over `max_per_second` or that
    /// found the writer's queue full.
    pub access_log_dropped: IntCounter,
    /// `kubegate_dispatch_requests_total{cluster,rule}`: requests each `dispatch` rule took.
    pub dispatch_requests: IntCounterVec,
    /// `kubegate_dispatch_limited_total{cluster,rule,limit}`: requests a rule's limit
    /// answered 429, by the limit (`in_flight`, `rate`; `rejected`: a rule that rejects).
    pub dispatch_limited: IntCounterVec,
    /// `kubegate_dispatch_in_flight{cluster,rule}`: requests of each rule in flight
    /// (long-running ones until their response starts).
    pub dispatch_in_flight: IntGaugeVec,
    /// `kubegate_dispatch_fallback_total{cluster,rule}`: requests sent to the whole pool
    /// because none of their rule's backends was ready.
    pub dispatch_fallback: IntCounterVec,
    /// `kubegate_shed_cut_off_total{cluster}`: reads waiting for their answer that a run-time
    /// rule, put in force meanwhile, turned away.
    pub shed_cut_off: IntCounterVec,
    /// `kubegate_auto_shed_senders{cluster}`: senders held back now (`terminate.auto_shed`).
    pub auto_shed_senders: IntGaugeVec,
    /// `kubegate_auto_shed_held_back_total{cluster}`: senders held back, each time one began.
    pub auto_shed_held_back: IntCounterVec,
    /// `kubegate_auto_shed_rejected_total{cluster}`: requests answered 429 by it.
    pub auto_shed_rejected: IntCounterVec,
    /// `kubegate_version_skew_routed_total{cluster,group_version}`: requests kept off ready
    /// replicas that do not serve their group-version (`discovery`: discovery requests kept on
    /// the newest version's replicas).
    pub skew_routed: IntCounterVec,
    /// `kubegate_backend_version_info{backend,version}`: 1 for each replica's learned version.
    pub backend_version: IntGaugeVec,
    /// `kubegate_backend_serves{backend,group_version}`: 1 for each group-version a replica
    /// serves.
    pub backend_serves: IntGaugeVec,
    /// `kubegate_backend_discovery_failures_total{backend}`: reads of a replica's version or
    /// discovery that failed.
    pub backend_discovery_failures: IntCounterVec,
    /// `kubegate_token_reviews_total{result}`.
    token_reviews: Counted<TokenReviewResult>,
    /// `kubegate_token_review_cache_entries`: bearer tokens whose review kubegate remembers.
    pub token_review_cache_entries: IntGauge,
    /// `kubegate_request_body_bytes_held`: request body bytes kubegate holds now (read, or
    /// held for a retry), all clients together.
    pub request_body_bytes_held: IntGauge,
    /// `kubegate_apf_rejections_total{backend,priority_level}`: APF's 429s each replica
    /// answered, by the level's UID (levels seen, at most 64 per cluster).
    apf_rejections: IntCounterVec,
    /// `kubegate_apf_steered_total{priority_level}`: requests placed away from replicas
    /// rejecting their level or holding more of its requests than another.
    apf_steered: IntCounterVec,
    /// `kubegate_apf_retries_over_budget_total`: APF rejections not tried on another replica
    /// because the retry budget was spent (the client got the 429).
    pub apf_over_budget: IntCounter,
}

impl TerminateMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> TerminateMetrics {
        let m = TerminateMetrics {
            requests: counter_vec(r, "kubegate_requests_total", "Terminate-mode requests answered by a backend, by verb and status class.", &["backend", "verb", "code"]),
            request_duration: histogram_vec(r, "kubegate_request_duration_seconds", "Terminate mode: time from sending a request to a backend to its response headers (requests that are not long-running).", &["verb"], REQUEST_BUCKETS),
            duration_series: Default::default(),
            request_retries: Counted::new(r, "kubegate_request_retries_total", "Terminate-mode requests sent to another backend, by what failed before (connect_failed, unsent, refused_stream, goaway, shutting_down, reset).", "reason"),
            requests_failed: Counted::new(r, "kubegate_requests_failed_total", "Terminate-mode requests kubegate answered itself, by reason (no_ready_backend, unavailable, broken, body_too_large, bad_request).", "reason"),
            requests_by_identity: Counted::new(r, "kubegate_requests_by_identity_total", "Terminate-mode requests by the identity passed on (client_certificate, bearer_token, anonymous).", "identity"),
            identity_headers_stripped: counter(r, "kubegate_identity_headers_stripped_total", "Identity headers (X-Remote-*) clients sent, removed before forwarding."),
            requests_in_flight: gauge_vec(r, "kubegate_backend_requests_in_flight", "Terminate-mode requests in flight per backend, long-running ones included.", &["backend"]),
            long_running: gauge_vec(r, "kubegate_backend_long_running_requests", "Terminate-mode long-running requests (watches, exec, logs) open per backend.", &["backend"]),
            upstream_connections: gauge_vec(r, "kubegate_backend_upstream_connections", "Terminate mode's HTTP/2 connections to each backend open for new requests.", &["backend"]),
            client_connections: gauge_vec(r, "kubegate_client_connections", "Open terminate-mode client connections, by protocol (h2, http/1.1).", &["protocol"]),
            tls_handshake_failures: Counted::new(r, "kubegate_tls_handshake_failures_total", "Terminate-mode client TLS handshakes that failed (error) or did not finish in time (timeout).", "reason"),
            watches_open: gauge(r, "kubegate_watches_open", "Terminate-mode watches kubegate follows across backends."),
            continue_pages: Counted::new(r, "kubegate_continue_pages_total", "LIST continue pages answered, by where against the replica that answered the first page on the same client connection (first_page_replica, another_replica, unknown).", "to"),
            watch_resumes: Counted::new(r, "kubegate_watch_resumes_total", "Watches continued on another backend from their last position, by what stopped the upstream stream (ended, failed, drained, expired, moved, cache_behind).", "cause"),
            watch_positions_freshened: Counted::new(r, "kubegate_watch_positions_freshened_total", "Watch positions brought up to date on the replica the watch left, before it moved to a replica that came back after its position: by its next event (next_event) or a bookmark asked of that replica (bookmark).", "by"),
            access_log_dropped: counter(r, "kubegate_access_log_dropped_total", "Access log lines not written: over terminate.access_log.max_per_second, or the writer's queue was full."),
            dispatch_requests: counter_vec(r, "kubegate_dispatch_requests_total", "Terminate-mode requests each dispatch rule took, by cluster and rule.", &["cluster", "rule"]),
            dispatch_limited: counter_vec(r, "kubegate_dispatch_limited_total", "Requests a dispatch rule's limit answered 429, by cluster, rule and limit (in_flight, rate; rejected: a rule that rejects).", &["cluster", "rule", "limit"]),
            dispatch_in_flight: gauge_vec(r, "kubegate_dispatch_in_flight", "Requests of each dispatch rule in flight (long-running ones until their response starts).", &["cluster", "rule"]),
            dispatch_fallback: counter_vec(r, "kubegate_dispatch_fallback_total", "Requests of a dispatch rule sent to the whole pool because none of the rule's backends was ready.", &["cluster", "rule"]),
            shed_cut_off: counter_vec(r, "kubegate_shed_cut_off_total", "Reads waiting for their answer that a run-time rule (kubegate shed), put in force meanwhile, turned away: their upstream streams reset, the clients answered 429.", &["cluster"]),
            auto_shed_senders: gauge_vec(r, "kubegate_auto_shed_senders", "Senders terminate.auto_shed holds back now: a share of their requests of a troubled priority level answered 429.", &["cluster"]),
            auto_shed_held_back: counter_vec(r, "kubegate_auto_shed_held_back_total", "Senders terminate.auto_shed began to hold back.", &["cluster"]),
            auto_shed_rejected: counter_vec(r, "kubegate_auto_shed_rejected_total", "Requests terminate.auto_shed answered 429.", &["cluster"]),
            skew_routed: counter_vec(r, "kubegate_version_skew_routed_total", "Terminate-mode requests kept off ready replicas that do not serve their group-version (discovery: discovery requests kept on the newest version's replicas).", &["cluster", "group_version"]),
            backend_version: gauge_vec(r, "kubegate_backend_version_info", "1 for the version each ready replica reports (/version), as terminate mode learned it.", &["backend", "version"]),
            backend_serves: gauge_vec(r, "kubegate_backend_serves", "1 for each API group-version a ready replica serves (its /api and /apis).", &["backend", "group_version"]),
            backend_discovery_failures: counter_vec(r, "kubegate_backend_discovery_failures_total", "Reads of a replica's /version or discovery that failed.", &["backend"]),
            token_reviews: Counted::new(r, "kubegate_token_reviews_total", "TokenReviews kubegate sent to name bearer-token clients, by result (named, rejected, failed; skipped: not sent, too many in flight).", "result"),
            token_review_cache_entries: gauge(r, "kubegate_token_review_cache_entries", "Bearer tokens whose review (named or not) kubegate remembers."),
            request_body_bytes_held: gauge(r, "kubegate_request_body_bytes_held", "Terminate-mode request body bytes kubegate holds now (being read, or held for a retry), all clients together."),
            apf_rejections: counter_vec(r, "kubegate_apf_rejections_total", "429s a replica's API Priority and Fairness answered (rejected before any handler ran), by backend and priority level UID.", &["backend", "priority_level"]),
            apf_steered: counter_vec(r, "kubegate_apf_steered_total", "Terminate-mode requests placed away from replicas rejecting their priority level (by its UID, until the rejections' Retry-After passed), or holding more of the level's requests in flight than another replica.", &["priority_level"]),
            apf_over_budget: counter(r, "kubegate_apf_retries_over_budget_total", "APF rejections not tried on another replica because the retry budget (a tenth of the requests sent) was spent: the client got the 429."),
            watches_ended: Counted::new(r, "kubegate_watches_ended_total", "Followed watches that ended, by reason (client, timeout, expired, error, not_resumable_*, malformed).", "reason"),
        };
        zero_series::<ClientProtocol, _>(&m.client_connections);
        m
    }

    /// Makes `cluster`'s series that a dashboard should show as 0 rather than nothing.
    pub fn cluster_served(&self, cluster: &str) {
        self.skew_routed.with_label_values(&[cluster, "discovery"]);
    }

    /// Forgets the series of a cluster no longer served.
    pub fn forget_cluster(&self, cluster: &str) {
        let of_cluster = |labels: &HashMap<&str, &str>| labels.get("cluster") == Some(&cluster);
        for family in self.dispatch_families() {
            family.forget_where(&of_cluster);
        }
        self.skew_routed.forget_where(&of_cluster);
        let _ = self.shed_cut_off.remove_label_values(&[cluster]);
        let _ = self.auto_shed_senders.remove_label_values(&[cluster]);
        let _ = self.auto_shed_held_back.remove_label_values(&[cluster]);
        let _ = self.auto_shed_rejected.remove_label_values(&[cluster]);
    }

    /// Forgets the dispatch series of `cluster`'s rules not named in `kept` (a rule kept keeps
    /// counting in its series).
    pub fn forget_rules(&self, cluster: &str, kept: &[&str]) {
        let dropped = |labels: &HashMap<&str, &str>| {
            labels.get("cluster") == Some(&cluster)
                && labels.get("rule").is_some_and(|r| !kept.contains(r))
        };
        for family in self.dispatch_families() {
            family.forget_where(&dropped);
        }
    }

    /// The dispatch rules' families (each labelled by cluster and rule).
    fn dispatch_families(&self) -> [&dyn Forget; 4] {
        [
            &self.dispatch_requests,
            &self.dispatch_limited,
            &self.dispatch_in_flight,
            &self.dispatch_fallback,
        ]
    }

    pub(super) fn forget(&self, backend: &str) {
        forget_in(
            &[
                &self.requests,
                &self.requests_in_flight,
                &self.long_running,
                &self.upstream_connections,
                &self.apf_rejections,
            ],
            backend,
        );
    }

    /// Counts an APF rejection of a request of `level` by `backend`.
    pub fn apf_rejected(&self, backend: &str, level: &str) {
        self.apf_rejections
            .with_label_values(&[backend, level])
            .inc();
    }

    /// Makes `backend`'s series of rejections of `level` (a level the cluster's answers named
    /// for the first time), at 0.
    pub fn apf_level_seen(&self, backend: &str, level: &str) {
        self.apf_rejections.with_label_values(&[backend, level]);
    }

    /// Counts a LIST continue page answered `to` a replica.
    pub fn continue_page(&self, to: ContinuePage) {
        self.continue_pages.count(to);
    }

    /// Counts a request of `level` placed away from replicas rejecting it.
    pub fn apf_steered(&self, level: &str) {
        self.apf_steered.with_label_values(&[level]).inc();
    }

    /// Counts a token review that ended as `result`.
    pub fn token_reviewed(&self, result: TokenReviewResult) {
        self.token_reviews.count(result);
    }

    /// Counts a request by the identity passed on for it.
    pub fn count_identity(&self, identity: Identity) {
        self.requests_by_identity.count(identity);
    }

    /// Observes the time a backend took to send a `verb` request's response headers.
    pub fn observe_request_duration(&self, verb: Verb, took: Duration) {
        self.duration_series[verb as usize]
            .get_or_init(|| self.request_duration.with_label_values(&[verb.as_str()]))
            .observe(took.as_secs_f64());
    }

    /// Counts a request a backend answered with `code`.
    pub fn count_request(&self, backend: &str, verb: Verb, code: http::StatusCode) {
        self.requests
            .with_label_values(&[backend, verb.as_str(), code_class(code)])
            .inc();
    }

    /// Counts a request sent to another backend after `failure`.
    pub fn request_retry(&self, failure: AttemptFailure) {
        self.request_retries.count(failure);
    }

    /// Counts a request kubegate answered itself.
    pub fn request_failed(&self, reason: RequestFailure) {
        self.requests_failed.count(reason);
    }

    /// The open client connections gauge of `protocol`.
    pub fn client_connections(&self, protocol: ClientProtocol) -> IntGauge {
        self.client_connections
            .with_label_values(&[protocol.as_str()])
    }

    /// Counts a client TLS handshake that failed.
    pub fn handshake_failed(&self, reason: HandshakeFailure) {
        self.tls_handshake_failures.count(reason);
    }

    /// Counts a watch continued on another backend after `cause`.
    pub fn watch_resumed(&self, cause: WatchBreak) {
        self.watch_resumes.count(cause);
    }

    /// Watches continued on another backend after `cause` since the start.
    pub fn watches_resumed(&self, cause: WatchBreak) -> u64 {
        self.watch_resumes.get(cause)
    }

    /// Counts a watch position brought up to date before a move, `by` how.
    pub fn watch_freshened(&self, by: Freshened) {
        self.watch_positions_freshened.count(by);
    }

    /// Counts a followed watch that ended.
    pub fn watch_ended(&self, reason: WatchEnd) {
        self.watches_ended.count(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Series are indexed by discriminant (`duration_series`, and [`Label::index`] in every
    /// `Counted`): each `ALL` must list its enum in declaration order.
    #[test]
    fn series_arrays_are_indexed_in_declaration_order() {
        for (i, identity) in Identity::ALL.into_iter().enumerate() {
            assert_eq!(identity as usize, i, "{identity:?}");
        }
        for (i, verb) in Verb::ALL.into_iter().enumerate() {
            assert_eq!(verb as usize, i, "{verb:?}");
        }
        for (i, result) in TokenReviewResult::ALL.into_iter().enumerate() {
            assert_eq!(result as usize, i, "{result:?}");
        }
        let r = Registry::new();
        let m = TerminateMetrics::new(&r);
        m.count_identity(Identity::BearerToken);
        m.observe_request_duration(Verb::List, Duration::from_millis(3));
        let mut out = Vec::new();
        use prometheus::Encoder;
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
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
