//! Registering metric families once, and forgetting a backend's (or a cluster's) series.

use crate::telemetry::labels::Label;
use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};
use std::collections::HashMap;

/// Creates `family`'s series for every value of `L`, at 0: dashboards and alerts read them
/// from the start.
pub fn zero_series<L: Label, B: MetricVecBuilder>(family: &MetricVec<B>) {
    for value in L::all() {
        family.with_label_values(&[value.label()]);
    }
}

/// Counts one in `family`'s series for `value`.
pub fn count<L: Label>(family: &IntCounterVec, value: L) {
    family.with_label_values(&[value.label()]).inc();
}

/// A counter, registered.
pub fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let m = IntCounter::new(name, help).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// A gauge, registered.
pub fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let m = IntGauge::new(name, help).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// A gauge family, registered.
pub fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// A counter family, registered.
pub fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// A histogram, registered.
pub fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let m = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// A histogram family, registered.
pub fn histogram_vec(
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

/// Removes series by their labels.
pub trait Forget {
    /// Removes every series whose labels `which` picks.
    fn forget_where(&self, which: &dyn Fn(&HashMap<&str, &str>) -> bool);

    /// Removes every series whose `backend` label is the given name.
    fn forget(&self, backend: &str) {
        self.forget_where(&|labels| labels.get("backend") == Some(&backend));
    }
}

impl<T: prometheus::core::MetricVecBuilder> Forget for prometheus::core::MetricVec<T> {
    fn forget_where(&self, which: &dyn Fn(&HashMap<&str, &str>) -> bool) {
        use prometheus::core::Collector;
        for family in self.collect() {
            for metric in family.get_metric() {
                let labels: HashMap<&str, &str> = metric
                    .get_label()
                    .iter()
                    .map(|l| (l.name(), l.value()))
                    .collect();
                if which(&labels) {
                    let _ = self.remove(&labels);
                }
            }
        }
    }
}

/// Forgets `backend` in each of `families`.
pub fn forget_in(families: &[&dyn Forget], backend: &str) {
    for f in families {
        f.forget(backend);
    }
}
