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
    /// A read (or create) in the group-version discovery just showed (`upgrade`).
    Discovered,
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
            Kind::Discovered => "discovered",
        }
    }
}

/// How one logical request ended, after the client's retries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// The first attempt's failure, if it failed.
    pub first: Option<ErrorClass>,
    /// The failure the client returned after its retries, if any.
    pub last: Option<ErrorClass>,
    /// The replica that gave the final answer, when one did.
    pub replica: Option<usize>,
    /// A write whose failure does not say whether it was applied: the connection broke or
    /// timed out, or a 5xx came without `Retry-After`.
    pub ambiguous: bool,
}

/// A write that failed ambiguously, and how to find out whether it was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Write {
    /// A create of the configmap with this name (nothing else creates it).
    Create {
        /// Its name.
        name: String,
    },
    /// A lease renewal carrying this write id in an annotation.
    LeaseRenewal {
        /// The lease.
        lease: String,
        /// The id the update carried.
        write_id: String,
    },
}

/// How a watch stream ended under its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEndSeen {
    /// The stream ended cleanly before the client's `timeoutSeconds`.
    Ended,
    /// The stream broke (reset, connection lost).
    Failed,
    /// The watch was answered with another status than 200.
    Status(u16),
    /// The watch could not be sent (the connection could not be made or broke first).
    NotSent,
    /// An ERROR event with 410 Expired: the client relists.
    Expired,
    /// `kubectl get --watch` exited.
    KubectlExited,
}

impl WatchEndSeen {
    /// Label in the report.
    pub fn label(self) -> String {
        match self {
            WatchEndSeen::Ended => "ended".into(),
            WatchEndSeen::Failed => "broke".into(),
            WatchEndSeen::Status(code) => format!("answered {code}"),
            WatchEndSeen::NotSent => "not sent".into(),
            WatchEndSeen::Expired => "410 expired".into(),
            WatchEndSeen::KubectlExited => "kubectl exited".into(),
        }
    }
}

/// A watch that ended under its client before the client was done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WatchBreak {
    /// When, ms since the run began.
    pub at_ms: u64,
    /// How.
    pub how: WatchEndSeen,
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
    /// The replica that answered, when one did and said so.
    pub replica: Option<usize>,
    /// A write whose failure left it unknown whether it was applied.
    pub ambiguous: bool,
}

/// Collects samples and watch events for one run.
pub struct Recorder {
    start: Instant,
    samples: Mutex<Vec<Sample>>,
    /// Ambiguous writes, with when they started (ms).
    ambiguous: Mutex<Vec<(u64, Write)>>,
    /// Creates the client saw succeed, by name (the soak checks each is in the store).
    acknowledged: Mutex<Vec<String>>,
    /// Watch streams that ended or failed under a client.
    watch_breaks: Mutex<Vec<WatchBreak>>,
    /// Watches the gateway itself continued on another replica, unseen by the client (ms).
    gateway_resumes: Mutex<Vec<u64>>,
    /// Watches re-opened from their last resourceVersion.
    pub watch_resumes: AtomicU64,
    /// Watches that had to relist (410 Expired).
    pub watch_relists: AtomicU64,
    /// Watches that ended at the `timeoutSeconds` their client asked for (not breaks: the
    /// client asks again, as client-go's reflector does).
    pub watch_timeouts: AtomicU64,
    /// Watch events received.
    pub watch_events: AtomicU64,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            samples: Mutex::new(Vec::new()),
            ambiguous: Mutex::new(Vec::new()),
            acknowledged: Mutex::new(Vec::new()),
            watch_breaks: Mutex::new(Vec::new()),
            gateway_resumes: Mutex::new(Vec::new()),
            watch_resumes: AtomicU64::new(0),
            watch_relists: AtomicU64::new(0),
            watch_timeouts: AtomicU64::new(0),
            watch_events: AtomicU64::new(0),
        }
    }

    /// ms since the run began.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records one request that started at `started`; an ambiguous write is remembered as
    /// `write`, to be checked against the store at the end.
    pub fn add(&self, kind: Kind, started: Instant, outcome: Outcome, write: Option<Write>) {
        let sample = Sample {
            at_ms: started.saturating_duration_since(self.start).as_millis() as u64,
            kind,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            first_error: outcome.first,
            final_error: outcome.last,
            replica: outcome.replica,
            ambiguous: outcome.ambiguous,
        };
        match write {
            Some(w) if outcome.ambiguous => locked(&self.ambiguous).push((sample.at_ms, w)),
            Some(Write::Create { name }) if outcome.last.is_none() => {
                locked(&self.acknowledged).push(name)
            }
            _ => {}
        }
        locked(&self.samples).push(sample);
    }

    /// Counts one watch-side event.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A watch stream ended or failed under its client, now, as `how` says.
    pub fn watch_broke(&self, how: WatchEndSeen) {
        let at_ms = self.now_ms();
        locked(&self.watch_breaks).push(WatchBreak { at_ms, how });
    }

    /// The gateway continued `n` watches on another replica since its last report.
    pub fn gateway_resumed(&self, n: u64) {
        let at = self.now_ms();
        locked(&self.gateway_resumes).extend(std::iter::repeat_n(at, n as usize));
    }

    /// All samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        locked(&self.samples).clone()
    }

    /// Writes that failed ambiguously and started by `until_ms` (the report's samples end
    /// there too: a write started as the traffic was being stopped is in neither).
    pub fn ambiguous_writes(&self, until_ms: u64) -> Vec<Write> {
        locked(&self.ambiguous)
            .iter()
            .filter(|(at, _)| *at <= until_ms)
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// Names of the creates the client saw succeed.
    pub fn acknowledged_creates(&self) -> Vec<String> {
        locked(&self.acknowledged).clone()
    }

    /// When and how watches broke under their clients.
    pub fn watch_breaks(&self) -> Vec<WatchBreak> {
        locked(&self.watch_breaks).clone()
    }

    /// When the gateway continued watches itself.
    pub fn gateway_resumes(&self) -> Vec<u64> {
        locked(&self.gateway_resumes).clone()
    }
}
