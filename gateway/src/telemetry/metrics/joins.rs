//! Joined reads and shared watches (`terminate::join`): requests answered from another's
//! upstream request, the answer bytes held for them, and watches fed from a shared one.

use crate::telemetry::labels::{AccessReviewResult, JoinMiss};
use crate::telemetry::metrics::register::{
    counter, counter_vec, gauge, histogram, Counted, Forget,
};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use std::collections::HashMap;
use std::time::Duration;

const LAG_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Recorded by the joined-reads table and the shared watches (cheap to clone: a feed's tasks
/// keep their own).
#[derive(Clone)]
pub struct JoinMetrics {
    /// `kubegate_reads_joined_total{cluster}`: reads answered from another request's upstream
    /// answer, each an upstream request saved.
    joined: IntCounterVec,
    /// `kubegate_reads_leading_total{cluster}`: upstream requests whose answer others joined.
    leading: IntCounterVec,
    /// `kubegate_reads_join_missed_total{reason}` (a leading read keeps its `abandoned`
    /// series).
    missed: Counted<JoinMiss>,
    /// `kubegate_access_reviews_total{result}`.
    access_reviews: Counted<AccessReviewResult>,
    /// `kubegate_access_review_cache_entries`: access decisions kubegate remembers.
    pub access_review_cache_entries: IntGauge,
    /// `kubegate_join_held_bytes`: answer bytes held for joined reads now.
    pub held_bytes: IntGauge,
    /// `kubegate_shared_watch_feeds`: upstream watches feeding shared watches now.
    pub watch_feeds: IntGauge,
    /// `kubegate_shared_watches`: client watches fed from a shared one now.
    pub fed_watches: IntGauge,
    /// `kubegate_shared_watch_held_bytes`: event bytes the shared watches hold (windows, and
    /// channels for clients behind).
    pub watch_held_bytes: IntGauge,
    /// `kubegate_shared_watches_cut_total`: clients cut for falling too far behind.
    fed_cut: IntCounter,
    /// `kubegate_shared_watches_revoked_total`: fed clients ended because the apiserver
    /// refused their bearer token since they joined.
    pub fed_watches_revoked: IntCounter,
    /// `kubegate_shared_watch_lag_seconds`: from a feed receiving an event to a client's
    /// stream taking it.
    fed_lag: Histogram,
}

impl JoinMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> JoinMetrics {
        JoinMetrics {
            access_reviews: Counted::new(r, "kubegate_access_reviews_total", "SubjectAccessReviews kubegate sent before sharing another sender's read or watch, by result (allowed, denied, failed; skipped: not sent, too many in flight).", "result"),
            access_review_cache_entries: gauge(r, "kubegate_access_review_cache_entries", "Access decisions (sender and attributes, allowed or not) kubegate remembers."),
            joined: counter_vec(r, "kubegate_reads_joined_total", "Terminate-mode reads answered from an identical read's upstream request (each an upstream request saved), by cluster.", &["cluster"]),
            leading: counter_vec(r, "kubegate_reads_leading_total", "Upstream reads whose answer identical reads joined, by cluster.", &["cluster"]),
            missed: Counted::new(r, "kubegate_reads_join_missed_total", "Answers reads waited on but did not get (each waiting read was then sent on its own), by reason (too_large, over_held, status, broken, abandoned).", "reason"),
            held_bytes: gauge(r, "kubegate_join_held_bytes", "Answer bytes kubegate holds for joined reads now, over every cluster (terminate.join_reads.max_held_bytes bounds it)."),
            watch_feeds: gauge(r, "kubegate_shared_watch_feeds", "Upstream watches feeding shared watches now (terminate.shared_watches)."),
            fed_watches: gauge(r, "kubegate_shared_watches", "Client watches fed from a shared upstream watch now."),
            watch_held_bytes: gauge(r, "kubegate_shared_watch_held_bytes", "Event bytes the shared watches hold now (their windows, and their channels for clients behind), over every cluster (terminate.shared_watches.max_held_bytes bounds it)."),
            fed_cut: counter(r, "kubegate_shared_watches_cut_total", "Client watches fed from a shared one that were ended for falling more than terminate.shared_watches.max_lag_events behind (each watches again from its last position)."),
            fed_watches_revoked: counter(r, "kubegate_shared_watches_revoked_total", "Client watches fed from a shared one that were ended because the apiserver answered 401 for their bearer token since (each watches again, and the apiserver authorizes it)."),
            fed_lag: histogram(r, "kubegate_shared_watch_lag_seconds", "From a shared watch receiving an event to a client's stream taking it.", LAG_BUCKETS),
        }
    }

    /// Makes `cluster`'s series, which a dashboard should show as 0 rather than nothing.
    pub fn cluster_served(&self, cluster: &str) {
        self.joined.with_label_values(&[cluster]);
        self.leading.with_label_values(&[cluster]);
    }

    /// Forgets the series of a cluster no longer served.
    pub fn forget_cluster(&self, cluster: &str) {
        let of_cluster = |labels: &HashMap<&str, &str>| labels.get("cluster") == Some(&cluster);
        self.joined.forget_where(&of_cluster);
        self.leading.forget_where(&of_cluster);
    }

    /// An upstream read of `cluster` had its answer shared with the reads that joined it.
    pub fn led(&self, cluster: &str) {
        self.leading.with_label_values(&[cluster]).inc();
    }

    /// A read of `cluster` was answered from another's upstream request (counted when it
    /// takes the answer: a read of another sender does not take a 403).
    pub fn joined(&self, cluster: &str) {
        self.joined.with_label_values(&[cluster]).inc();
    }

    /// A SubjectAccessReview ended as `result`.
    pub fn access_reviewed(&self, result: AccessReviewResult) {
        self.access_reviews.count(result);
    }

    /// An answer waited on was not shared, for `why`.
    pub fn missed(&self, why: JoinMiss) {
        self.missed.count(why);
    }

    /// A client of a shared watch was cut for falling too far behind.
    pub fn fed_watch_cut(&self) {
        self.fed_cut.inc();
    }

    /// A fed client was ended: its bearer token was refused since it joined.
    pub fn fed_watch_revoked(&self) {
        self.fed_watches_revoked.inc();
    }

    /// A client's stream took an event `lag` after its feed received it.
    pub fn observe_fed_lag(&self, lag: Duration) {
        self.fed_lag.observe(lag.as_secs_f64());
    }

    /// The series counting answers not shared for `why`.
    pub fn missed_series(&self, why: JoinMiss) -> IntCounter {
        self.missed.of(why).clone()
    }
}
