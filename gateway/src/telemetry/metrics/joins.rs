//! Joined reads (`terminate::join`): requests answered from another's upstream request, and
//! the answer bytes held for them.

use crate::telemetry::labels::JoinMiss;
use crate::telemetry::metrics::register::{count, counter_vec, gauge, zero_series};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

/// Recorded by the joined-reads table.
pub struct JoinMetrics {
    /// `kubegate_reads_joined_total{cluster}`: reads answered from another request's upstream
    /// answer, each an upstream request saved.
    joined: IntCounterVec,
    /// `kubegate_reads_leading_total{cluster}`: upstream requests whose answer others joined.
    leading: IntCounterVec,
    /// `kubegate_reads_join_missed_total{reason}`: answers waited on but not shared.
    missed: IntCounterVec,
    /// `kubegate_join_held_bytes`: answer bytes held for joined reads now.
    pub held_bytes: IntGauge,
}

impl JoinMetrics {
    /// Registers the group's families in `r`.
    pub fn new(r: &Registry) -> JoinMetrics {
        let m = JoinMetrics {
            joined: counter_vec(r, "kubegate_reads_joined_total", "Terminate-mode reads answered from an identical read's upstream request (each an upstream request saved), by cluster.", &["cluster"]),
            leading: counter_vec(r, "kubegate_reads_leading_total", "Upstream reads whose answer identical reads joined, by cluster.", &["cluster"]),
            missed: counter_vec(r, "kubegate_reads_join_missed_total", "Answers reads waited on but did not get (each waiting read was then sent on its own), by reason (too_large, over_held, status, broken, abandoned).", &["reason"]),
            held_bytes: gauge(r, "kubegate_join_held_bytes", "Answer bytes kubegate holds for joined reads now, over every cluster (terminate.join_reads.max_held_bytes bounds it)."),
        };
        zero_series::<JoinMiss, _>(&m.missed);
        m
    }

    /// `cluster`'s series, at 0 from the start.
    pub fn cluster_served(&self, cluster: &str) {
        self.joined.with_label_values(&[cluster]);
        self.leading.with_label_values(&[cluster]);
    }

    /// `followers` reads of `cluster` were answered from one upstream request.
    pub fn shared(&self, cluster: &str, followers: usize) {
        self.joined
            .with_label_values(&[cluster])
            .inc_by(followers as u64);
        self.leading.with_label_values(&[cluster]).inc();
    }

    /// An answer waited on was not shared, for `why`.
    pub fn missed(&self, why: JoinMiss) {
        count(&self.missed, why);
    }

    /// The series counting answers not shared for `why`.
    pub fn missed_series(&self, why: JoinMiss) -> IntCounter {
        self.missed.with_label_values(&[why.as_str()])
    }
}
