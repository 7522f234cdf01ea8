//! What kubegate reports about itself: every metric family (grouped by who records them), the
//! typed label values every plane records with, the pool's decisions turned into metrics, and
//! the allocator with its figures. Nothing here decides anything or carries traffic.

mod events;
mod labels;
pub mod memory;
mod metrics;

pub use events::{MetricEvents, Readiness};
pub use labels::{
    code_class, AdminRefusal, AttemptFailure, ClientLimit, ClientProtocol, ConnectError,
    HandshakeFailure, Identity, Refusal, ReloadResult, RequestFailure, WatchBreak, WatchEnd,
};
pub use metrics::{
    set_one_hot, BackendMetrics, ControlMetrics, GatewayMetrics, Metrics, NetMetrics,
    PassthroughMetrics, RelayHandles, TerminateMetrics,
};
