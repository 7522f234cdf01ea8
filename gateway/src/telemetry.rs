//! What kubegate reports about itself: every metric family (grouped by who records them), the
//! typed label values every plane records with, the pool's decisions turned into metrics, the
//! allocator with its figures, what this binary is (version, commit), and what the status page
//! and the access log show (who costs the apiservers what, the last transitions, one line per request).
//! Nothing here decides anything or carries traffic.

pub mod access_log;
pub mod build;
pub mod costs;
mod events;
mod labels;
pub mod memory;
mod metrics;
pub mod transitions;

pub use events::{MetricEvents, Readiness};
pub use labels::{
    code_class, AcceptError, AccessReviewResult, AdminRefusal, AttemptFailure, ClientLimit,
    ClientProtocol, ConnectError, ContinuePage, Freshened, HandshakeFailure, HoldOutcome, Identity,
    JoinMiss, Refusal, ReloadResult, RequestFailure, TokenReviewResult, WatchBreak, WatchEnd,
};
pub use metrics::{
    set_one_hot, BackendMetrics, ControlMetrics, GatewayMetrics, JoinMetrics, Metrics, NetMetrics,
    PassthroughMetrics, RelayHandles, TerminateMetrics,
};
