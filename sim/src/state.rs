//! One replica's shared state: options, health checks, shutdown phase, store, faults.

use crate::auth::Authenticator;
use crate::checks::Checks;
use crate::store::Store;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Behaviour switches, mostly named after kube-apiserver flags.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// `--shutdown-delay-duration`.
    pub shutdown_delay: Duration,
    /// `--shutdown-send-retry-after`.
    pub send_retry_after: bool,
    /// `--shutdown-watch-termination-grace-period`.
    pub watch_termination_grace: Duration,
    /// `--goaway-chance`.
    pub goaway_chance: f64,
    /// `--http2-max-streams-per-connection`.
    pub max_streams: u32,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Shown in `/version` and logs.
    pub replica: String,
    /// `--advertise-address` and `--secure-port`, when the lease reconciler runs.
    pub advertise: Option<std::net::SocketAddr>,
}

/// Shared by every connection of the replica.
pub struct Sim {
    /// Flags.
    pub behaviour: Behaviour,
    /// Health checks.
    pub checks: Checks,
    /// The object store.
    pub store: Arc<dyn Store>,
    /// Who is asking.
    pub authenticator: Authenticator,
    /// Non-long-running requests being served (shutdown waits for them).
    pub inflight: AtomicI64,
    /// Extra latency for every request, from the fault port.
    pub latency_ms: AtomicU64,
    /// Default shutdown mode, after the delay: new requests get 503.
    pub rejecting: AtomicBool,
    /// `--shutdown-send-retry-after`, after the delay: new requests get 429.
    pub retry_after: AtomicBool,
    /// Fires to send GOAWAY / close idle connections.
    pub close_connections: CancellationToken,
    /// Fires to end watches cleanly (watch termination grace period).
    pub end_watches: CancellationToken,
    /// Open watches.
    pub watches: AtomicI64,
    /// Collection reads received, as `apiserver_request_total` counts them.
    pub requests: ReadCounts,
    /// The replica's version and the group-versions it serves.
    pub apis: crate::versions::Apis,
    /// Priority and fairness: its levels' seats and queues.
    pub flowcontrol: crate::flowcontrol::FlowControl,
    /// What every pod answers through `pods/proxy` (the fault port's `/pod-answer`).
    pub pod_answer: crate::pod_answer::PodAnswer,
    /// Validating admission webhooks that deny writes (the fault port's `/admission`).
    pub admission: crate::admission::Webhooks,
    /// What the extension servers behind `--aggregated-api` answer (the fault port's
    /// `/aggregated-answer`).
    pub extension: crate::extension::ExtensionServer,
}

/// LIST and WATCH requests a replica received (answered or not): what a failover costs it;
/// every API request and every write it received, so a test can tell a request reached the
/// replicas exactly once; the TokenReviews, SubjectAccessReviews, evictions and proxied
/// requests it answered, the requests passed to an extension server; the requests it refused for an expired client certificate; the body
/// bytes it sent.
#[derive(Debug, Default)]
pub struct ReadCounts {
    /// Every request but the health endpoints', answered or not (401, 429 included).
    pub requests: AtomicU64,
    /// The writes among them, by method: POST, PUT, PATCH, DELETE.
    pub writes: AtomicU64,
    /// Evictions (`POST pods/NAME/eviction`) that reached the eviction handler.
    pub evictions: AtomicU64,
    /// `pods/NAME/proxy` requests that reached the proxy handler.
    pub proxied: AtomicU64,
    /// Requests under an `--aggregated-api` group-version that reached the aggregator's proxy.
    pub aggregated: AtomicU64,
    /// Requests refused (401) because a client certificate was outside its validity.
    pub expired_certificates: AtomicU64,
    /// LIST requests.
    pub lists: AtomicU64,
    /// LIST continue pages read at their first page's revision from the watch cache's memory.
    pub continue_pages_from_cache: AtomicU64,
    /// LIST continue pages read from storage (etcd): the revision was older than the watch
    /// cache's window, no cache, or the newest revision asked for (`rv` -1).
    pub continue_pages_from_storage: AtomicU64,
    /// LIST continue pages answered 410 `Expired` (their revision compacted).
    pub continue_pages_expired: AtomicU64,
    /// WATCH requests.
    pub watches: AtomicU64,
    /// WATCH requests with `sendInitialEvents` (watch-lists: an initial sync each), counted in
    /// `watches` too.
    pub watch_lists: AtomicU64,
    /// TokenReviews.
    pub token_reviews: AtomicU64,
    /// SubjectAccessReviews.
    pub access_reviews: AtomicU64,
    /// Response body bytes sent, whole and streamed (watch events).
    pub bytes_sent: AtomicU64,
    /// Requests the client gave up (reset the stream or closed the connection) before their
    /// answer began: Go's request context cancelled, the handler's work abandoned.
    pub abandoned: AtomicU64,
}

impl Sim {
    /// A replica with `behaviour`, serving `apis` from `store` behind `flowcontrol`: nothing
    /// in flight, no fault set, no webhook.
    pub fn new(
        behaviour: Behaviour,
        checks: Checks,
        store: Arc<dyn Store>,
        authenticator: Authenticator,
        apis: crate::versions::Apis,
        flowcontrol: crate::flowcontrol::FlowControl,
    ) -> Self {
        Self {
            behaviour,
            checks,
            store,
            authenticator,
            inflight: Default::default(),
            latency_ms: Default::default(),
            rejecting: Default::default(),
            retry_after: Default::default(),
            close_connections: CancellationToken::new(),
            end_watches: CancellationToken::new(),
            watches: Default::default(),
            requests: Default::default(),
            apis,
            flowcontrol,
            pod_answer: Default::default(),
            admission: Default::default(),
            extension: Default::default(),
        }
    }

    /// Extra latency set through the fault port.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::Relaxed))
    }
}

/// Counts one request while it lives.
pub struct Inflight<'a>(&'a AtomicI64);

impl<'a> Inflight<'a> {
    /// Starts counting.
    pub fn new(counter: &'a AtomicI64) -> Inflight<'a> {
        counter.fetch_add(1, Ordering::AcqRel);
        Inflight(counter)
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
