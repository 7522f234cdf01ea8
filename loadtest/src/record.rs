//! What the clients saw, sample by sample.

use crate::client::ErrorClass;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// GET one object (long-lived HTTP/2 client).
    Get,
    /// LIST a namespace (long-lived HTTP/2 client).
    List,
    /// CREATE an object.
    Create,
    /// UPDATE (lease renewal).
    Update,
    /// A short-lived client: new connection, one LIST, close (kubectl-like, HTTP/1.1 or /2).
    Short,
    /// A real kubectl process.
    Kubectl,
}

impl Kind {
    /// Label in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::List => "list",
            Kind::Create => "create",
            Kind::Update => "update",
            Kind::Short => "short",
            Kind::Kubectl => "kubectl",
        }
    }
}

/// One request as the client saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Start, ms since the run began.
    pub at_ms: u64,
    /// Kind.
    pub kind: Kind,
    /// From start to the final answer (all retries), ms.
    pub latency_ms: f64,
    /// The first attempt's failure, if it failed.
    pub first_error: Option<ErrorClass>,
    /// The failure a client-go client would have returned after its retries, if any.
    pub final_error: Option<ErrorClass>,
}

/// Collects samples and watch counters for one run.
pub struct Recorder {
    start: Instant,
    samples: Mutex<Vec<Sample>>,
    /// Watch streams that broke (not a clean end).
    pub watch_interruptions: AtomicU64,
    /// Watches re-opened from their last resourceVersion.
    pub watch_resumes: AtomicU64,
    /// Watches that had to relist (410 Expired).
    pub watch_relists: AtomicU64,
    /// Watch events received.
    pub watch_events: AtomicU64,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            samples: Mutex::new(Vec::new()),
            watch_interruptions: AtomicU64::new(0),
            watch_resumes: AtomicU64::new(0),
            watch_relists: AtomicU64::new(0),
            watch_events: AtomicU64::new(0),
        }
    }

    /// ms since the run began.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records one request that started at `started`.
    pub fn add(
        &self,
        kind: Kind,
        started: Instant,
        first_error: Option<ErrorClass>,
        final_error: Option<ErrorClass>,
    ) {
        let sample = Sample {
            at_ms: started.saturating_duration_since(self.start).as_millis() as u64,
            kind,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            first_error,
            final_error,
        };
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sample);
    }

    /// Counts one watch-side event.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// All samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
