//! Data planes and an event log for unit tests: work is a number, closes and events are
//! recorded in order.

use crate::backend::{Backend, BackendInfo};
use crate::events::PoolEvents;
use crate::orders::CloseReason;
use crate::planes::DataPlanes;
use kubegate_health::{BackendState, HealthTracker, ProbeRecord, Thresholds, Transition};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Open work is a counter the test sets; closes empty it and are recorded.
#[derive(Default)]
pub struct TestPlanes {
    open: AtomicUsize,
    load: AtomicU64,
    pub drains: AtomicUsize,
    pub closes: Mutex<Vec<(CloseReason, usize)>>,
}

impl TestPlanes {
    pub fn set_open(&self, n: usize) {
        self.open.store(n, Ordering::SeqCst);
    }

    pub fn set_load(&self, n: u64) {
        self.load.store(n, Ordering::SeqCst);
    }

    pub fn load(&self) -> u64 {
        self.load.load(Ordering::SeqCst)
    }

    pub fn closes(&self) -> Vec<(CloseReason, usize)> {
        self.closes.lock().unwrap().clone()
    }
}

impl DataPlanes for TestPlanes {
    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn drain(&self) {
        self.drains.fetch_add(1, Ordering::SeqCst);
    }

    fn close(&self, reason: CloseReason) -> usize {
        let n = self.open.swap(0, Ordering::SeqCst);
        self.closes.lock().unwrap().push((reason, n));
        n
    }
}

/// `n` backends on 127.0.0.1:1..=n, ready, outside any pool.
pub fn backends(n: u16) -> Vec<Arc<Backend<TestPlanes>>> {
    (1..=n)
        .map(|i| {
            let addr: SocketAddr = format!("127.0.0.1:{i}").parse().unwrap();
            let b = Backend::new(
                addr,
                BackendInfo {
                    name: addr.to_string(),
                    probe_address: addr,
                    addresses: vec![addr],
                    source: crate::BackendSource::Static,
                },
                HealthTracker::new(Thresholds::new(1, 1)),
                TestPlanes::default(),
                Arc::default(),
            );
            b.publish_state(BackendState::Ready);
            Arc::new(b)
        })
        .collect()
}

/// Every event, as one line each, in order.
#[derive(Default)]
pub struct EventLog(Mutex<Vec<String>>);

impl EventLog {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
}

impl PoolEvents for EventLog {
    fn backend_added(&self, name: &str, state: BackendState) {
        self.push(format!("added {name} {state}"));
    }
    fn backend_renamed(&self, old: &str, new: &str, state: BackendState) {
        self.push(format!("renamed {old} {new} {state}"));
    }
    fn probed(&self, name: &str, record: &ProbeRecord) {
        self.push(format!("probed {name} {}", record.outcome.result_label()));
    }
    fn failing_checks(&self, name: &str, before: &[String], now: &[String]) {
        self.push(format!("failing {name} {before:?} -> {now:?}"));
    }
    fn state_changed(&self, name: &str, t: Transition) {
        self.push(format!("state {name} {} -> {}", t.from, t.to));
    }
    fn drain_started(&self, name: &str) {
        self.push(format!("drain {name}"));
    }
    fn closed(&self, name: &str, reason: CloseReason, count: usize) {
        self.push(format!("closed {name} {} {count}", reason.as_str()));
    }
    fn forgotten(&self, name: &str) {
        self.push(format!("forgotten {name}"));
    }
    fn routing_changed(&self, ready: usize) {
        self.push(format!("routing {ready}"));
    }
}
