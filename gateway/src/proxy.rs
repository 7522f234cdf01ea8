//! The L4 passthrough path: pick a ready backend, connect (retrying on another backend), then
//! hand both sockets to a relay task that copies bytes until either side closes or kubegate
//! closes the connection (backend down, drain deadline, shutdown grace: the task is aborted).
//! TLS passes through untouched.

use crate::admission::ClientSlot;
use crate::connections::Connections;
use crate::copy::Relay;
use crate::dial::dial;
use crate::gateway::Gateway;
use crate::labels::{ConnectError, Refusal};
use crate::planes::Backend;
use kubegate_health::out_of_resources;
use kubegate_pool::{pick, Candidates};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a backend whose connect failed is skipped by the balancer before a probe decides.
pub const PASSIVE_EJECTION: Duration = Duration::from_secs(2);

/// Connects `client` to a backend, then hands both sockets to a relay task of their own and
/// ends: an open connection costs only its relay.
pub async fn open(gw: Arc<Gateway>, client: TcpStream, slot: ClientSlot) {
    let Some((backend, upstream)) = connect(&gw).await else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let guard = Connections::register(&backend);
    let id = guard.id();
    let task = tokio::spawn(Relay::new(client, upstream, guard, slot));
    backend.planes().passthrough.attach(id, task.abort_handle());
}

/// Passthrough's load signal: open connections.
fn open_connections(b: &Backend) -> u64 {
    b.planes().passthrough.open() as u64
}

/// Chooses and connects a backend, retrying on others; `None` when the client must be closed.
/// Kept lean: its state is what a connection costs while it connects.
async fn connect(gw: &Gateway) -> Option<(Arc<Backend>, TcpStream)> {
    let (policy, attempts, limit, no_ready) = {
        let c = gw.config().load();
        (
            c.balance,
            c.connect.attempts,
            c.connect.timeout,
            c.no_ready_backend,
        )
    };
    let pool = gw.pool();
    let metrics = gw.metrics();
    let table = pool.routing();
    let candidates = match table.candidates(no_ready) {
        Candidates::Ready(c) => c,
        Candidates::Fallback(c) => {
            metrics.fallback.inc();
            c
        }
        Candidates::None => {
            metrics.refuse(Refusal::NoReadyBackend);
            tracing::debug!("no ready backend: closing client connection");
            return None;
        }
    };
    let mut tried: Vec<SocketAddr> = Vec::new();
    for attempt in 0..attempts {
        let Some(backend) = pick(policy, candidates, &tried, pool.cursor(), &open_connections)
        else {
            break;
        };
        tried.push(backend.address);
        if attempt == 1 {
            metrics.connect_retries.inc();
        }
        let reason = match dial(backend.address, limit).await {
            Ok(stream) => return Some((backend, stream)),
            // kubegate itself is out of descriptors or memory: no fault of the backend, which
            // must not be ejected for it, and another backend would fail the same way.
            Err(e) if out_of_resources(&e) => {
                metrics.refuse(Refusal::OutOfResources);
                tracing::warn!(error = %e, "cannot open a backend socket: closing client connection");
                return None;
            }
            Err(e) => ConnectError::of(&e),
        };
        let name = backend.info().name.clone();
        metrics.connect_error(&name, reason);
        tracing::warn!(backend = %name, reason = reason.as_str(), attempt = attempt + 1, "connect to backend failed");
        backend.connect_failed(PASSIVE_EJECTION);
    }
    metrics.refuse(Refusal::ConnectFailed);
    None
}
