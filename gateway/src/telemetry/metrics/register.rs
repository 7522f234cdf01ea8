//! Registering metric families once, and forgetting a backend's (or a cluster's) series.

use crate::telemetry::labels::Label;
use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};
use std::collections::HashMap;
use std::marker::PhantomData;

/// Creates `family`'s series for every value of `L`, at 0: dashboards and alerts read them
/// from the start.
pub fn zero_series<L: Label, B: MetricVecBuilder>(family: &MetricVec<B>) {
    for value in L::all() {
        family.with_label_values(&[value.label()]);
    }
}

/// A counter family of one label whose values are `L`'s: every series made at 0 when it is
/// registered (dashboards and alerts read them from the start) and counted by `L`'s place,
/// without a label lookup.
pub struct Counted<L> {
    series: Box<[IntCounter]>,
    label: PhantomData<fn(L)>,
}

impl<L> Clone for Counted<L> {
    fn clone(&self) -> Self {
        Counted {
            series: self.series.clone(),
            label: PhantomData,
        }
    }
}

impl<L: Label> Counted<L> {
    /// Registers family `name` in `r`, its label named `label`.
    pub fn new(r: &Registry, name: &str, help: &str, label: &str) -> Counted<L> {
        let family = counter_vec(r, name, help, &[label]);
        Counted {
            series: L::all()
                .iter()
                .map(|value| family.with_label_values(&[value.label()]))
                .collect(),
            label: PhantomData,
        }
    }

    /// Counts one for `value`.
    pub fn count(&self, value: L) {
        self.series[value.index()].inc();
    }

    /// The count for `value` so far.
    pub fn get(&self, value: L) -> u64 {
        self.series[value.index()].get()
    }

    /// `value`'s series.
    pub fn of(&self, value: L) -> &IntCounter {
        &self.series[value.index()]
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::labels::RequestFailure;
    use prometheus::Encoder;

    #[test]
    fn each_value_counts_in_its_own_series_and_every_series_is_there_from_the_start() {
        let r = Registry::new();
        let failed = Counted::<RequestFailure>::new(&r, "t_failed_total", "Failed.", "reason");
        let last = *RequestFailure::ALL.last().expect("values");
        failed.count(last);
        failed.count(last);
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        for value in RequestFailure::ALL {
            let n = u64::from(value == last) * 2;
            let series = format!("t_failed_total{{reason=\"{}\"}} {n}", value.as_str());
            assert!(text.contains(&series), "{series} in:\n{text}");
            assert_eq!(failed.get(value), n, "{value:?}");
        }
    }
}
