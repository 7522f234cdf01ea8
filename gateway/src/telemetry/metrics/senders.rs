//! The costliest senders by name (`telemetry::costs`), set from the cost
//! table at each scrape: a handful of series, whoever they are, so the cardinality stays
//! bounded however many senders there are (the whole table is on the status page and at
//! `/debug/senders`).

use crate::telemetry::costs::{Costs, Row, SortBy, Window};
use prometheus::{GaugeVec, Opts, Registry};

/// Names each family carries at a scrape.
const TOP: usize = 5;

/// Set from the cost table at each scrape.
pub struct SenderMetrics {
    /// `kubegate_top_sender_apiserver_seconds{sender,identity}`.
    sender_seconds: GaugeVec,
    /// `kubegate_top_sender_requests{sender,identity}`.
    sender_requests: GaugeVec,
    /// `kubegate_top_sender_response_bytes{sender,identity}`.
    sender_bytes: GaugeVec,
}

fn family(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let m = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

impl SenderMetrics {
    /// Registers the families.
    pub fn new(r: &Registry) -> SenderMetrics {
        SenderMetrics {
            sender_seconds: family(r, "kubegate_top_sender_apiserver_seconds", "Seconds the costliest senders' requests held a replica over the last minute (the top 5 by that time; terminate mode).", &["sender", "identity"]),
            sender_requests: family(r, "kubegate_top_sender_requests", "Requests of the costliest senders over the last minute (the same senders as kubegate_top_sender_apiserver_seconds).", &["sender", "identity"]),
            sender_bytes: family(r, "kubegate_top_sender_response_bytes", "Response bytes the replicas sent the costliest senders over the last minute (the same senders as kubegate_top_sender_apiserver_seconds).", &["sender", "identity"]),
        }
    }

    /// The series of the costliest of `costs` over the last minute, by apiserver time, and
    /// no others.
    pub fn show(&self, costs: &Costs) {
        // One more: the folded rest may be among them.
        let report = costs.report(Window::Minute, SortBy::Time, TOP + 1);
        for family in [
            &self.sender_seconds,
            &self.sender_requests,
            &self.sender_bytes,
        ] {
            family.reset();
        }
        let seconds = |row: &Row| row.cost.apiserver_micros as f64 / 1e6;
        // Senders that authenticated or connected, never the folded rest; user agents are
        // left out: a client chooses its own, and a new one each scrape would be a new series
        // each scrape in Prometheus.
        for row in report
            .senders
            .iter()
            .filter(|r| r.identity.is_some())
            .take(TOP)
        {
            let labels = [row.name.as_str(), row.identity.unwrap_or_default()];
            self.sender_seconds
                .with_label_values(&labels)
                .set(seconds(row));
            self.sender_requests
                .with_label_values(&labels)
                .set(row.cost.requests as f64);
            self.sender_bytes
                .with_label_values(&labels)
                .set(row.cost.bytes as f64);
        }
    }
}
