//! kubegate's backends: the pool, and what each data plane keeps per backend — passthrough's
//! registry of relays, terminate mode's HTTP/2 connections and requests in flight — with how
//! they carry out the pool's orders (drain, close). It lives here, below both planes, because
//! the pool holds it: each plane reaches its own share through `Backend::planes()` and never
//! the other's.

mod relays;
mod upstream;

pub use relays::{Registered, Relays};
pub use upstream::{Gauges, H2Conn, Killer, Kind, Retired, Stream, Upstream};

use crate::telemetry::Metrics;
use kubegate_pool::{CloseReason, DataPlanes};
use std::sync::Arc;

/// A backend of kubegate's pool.
pub type Backend = kubegate_pool::Backend<Planes>;

/// kubegate's pool.
pub type Pool = kubegate_pool::Pool<Planes>;

/// Per-backend state of each data plane.
pub struct Planes {
    /// Open passthrough connections.
    pub passthrough: Relays,
    /// Terminate mode's connections and requests.
    pub terminate: Upstream,
    metrics: Arc<Metrics>,
}

impl Planes {
    /// Nothing open yet on backend `name`.
    pub fn new(metrics: Arc<Metrics>, name: &str) -> Planes {
        Planes {
            passthrough: Relays::new(&metrics.passthrough, name),
            terminate: Upstream::new(gauges(&metrics, name)),
            metrics,
        }
    }
}

fn gauges(m: &Metrics, name: &str) -> Gauges {
    let m = &m.terminate;
    Gauges {
        in_flight: m.requests_in_flight.with_label_values(&[name]),
        long_running: m.long_running.with_label_values(&[name]),
        connections: m.upstream_connections.with_label_values(&[name]),
    }
}

impl DataPlanes for Planes {
    fn open(&self) -> usize {
        self.passthrough.open() + self.terminate.in_flight()
    }

    /// Passthrough has nothing to do: its connections stay until the deadline, and new ones no
    /// longer pick the backend. Terminate mode stops using the backend's connections; each
    /// closes with GOAWAY once its requests are done.
    fn drain(&self) {
        self.terminate.drain();
    }

    fn close(&self, _reason: CloseReason) -> usize {
        self.passthrough.close_all() + self.terminate.close()
    }

    fn moved(&self) {
        self.terminate.retire_all();
    }

    fn renamed(&self, name: &str) {
        self.passthrough.rename(&self.metrics.passthrough, name);
        self.terminate.set_gauges(gauges(&self.metrics, name));
    }

    fn probed(&self) {
        self.terminate.retire_idle(UPSTREAM_IDLE_TIMEOUT);
    }
}

/// How long an upstream HTTP/2 connection may carry no stream before it is closed, while
/// another of its kind stays open: a burst (a replica's watches resumed at once) opens as many
/// connections as it needs, 100 streams each, and they are given back once it has passed
/// rather than held until the backend drains. Go's HTTP/2 transport waits 90 s; a gateway
/// that keeps one connection of each kind loses nothing by waiting less.
const UPSTREAM_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
