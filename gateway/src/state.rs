//! The gateway's shared state, below both data planes and the control plane: the running
//! configuration, the backends (the pool, with what each data plane keeps per backend), the
//! gateway's own lifecycle, its client listeners, and the metrics. Each part has a narrow interface; nothing here
//! carries traffic.

mod backends;
mod cluster;
mod gateway;
mod lifecycle;
mod listeners;
mod running;
mod settings;
mod shed;

pub use backends::{
    Backend, Gauges, H2Conn, Killer, Kind, Planes, Pool, Registered, Relays, Retired, Stream,
    Upstream,
};
pub use cluster::{Cluster, ClusterHolds, Clusters, Route, HELD_RETRIES_PER_SECOND};
pub use gateway::Gateway;
pub use lifecycle::{Lifecycle, Phase};
pub use listeners::{ClientListener, ClientSlot};
pub use running::{Generation, RunningConfig};
pub use settings::{pool_settings, probe_settings};
pub use shed::{HeldBackShown, InForce as ShedInForce, Shed, MAX_RULES as MAX_SHED_RULES};
