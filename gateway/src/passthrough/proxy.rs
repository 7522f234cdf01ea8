//! The passthrough plane's entry: place a new connection on a backend (a TCP connect,
//! retried on another backend), then hand both sockets to a relay task of their own.

use crate::net::{connect_failed, place, Attempt, Serve, Unplaced};
use crate::passthrough::copy::Relay;
use crate::passthrough::guard::ConnectionGuard;
use crate::state::{Backend, ClientSlot, Gateway};
use crate::telemetry::Refusal;
use kubegate_config::BalancePolicy;
use kubegate_net::{dial, out_of_resources};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// Passthrough listeners' plane.
pub struct Passthrough;

impl Serve for Passthrough {
    fn serve(&self, gw: &Arc<Gateway>, client: TcpStream, slot: ClientSlot) {
        drop(tokio::spawn(open(gw.clone(), client, slot)));
    }
}

/// Connects `client` to a backend, then hands both sockets to a relay task of their own and
/// ends: an open connection costs only its relay.
async fn open(gw: Arc<Gateway>, client: TcpStream, slot: ClientSlot) {
    let Some((backend, upstream)) = connect(&gw).await else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let guard = ConnectionGuard::register(&backend, slot);
    let id = guard.id();
    let task = tokio::spawn(Relay::new(client, upstream, guard));
    backend.planes().passthrough.attach(id, task.abort_handle());
}

/// Why a TCP connect to a backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectFailure {
    /// The backend did not take it (refused, timed out, unreachable).
    Backend,
    /// kubegate itself is out of descriptors or memory: no fault of the backend, which must
    /// not be ejected for it, and another backend would fail the same way.
    OutOfResources,
}

/// One client connection's connects, as the placing loop runs them. Kept lean: its state is
/// what a connection costs while it connects.
struct Connects<'a> {
    gw: &'a Gateway,
    timeout: Duration,
    retried: bool,
}

impl Attempt for Connects<'_> {
    type Output = TcpStream;
    type Failure = ConnectFailure;

    /// Open connections.
    fn load(&self, _: BalancePolicy) -> fn(&Backend) -> u64 {
        |b| b.planes().passthrough.open() as u64
    }

    async fn attempt(&mut self, backend: &Arc<Backend>) -> Result<TcpStream, ConnectFailure> {
        dial(backend.address, self.timeout)
            .await
            .map_err(|e| self.failed(backend, &e))
    }

    fn may_try_another(&self, failure: ConnectFailure) -> bool {
        failure == ConnectFailure::Backend
    }

    fn retrying(&mut self, _: ConnectFailure) {
        // Counts connections that needed another backend, not each further attempt.
        if !std::mem::replace(&mut self.retried, true) {
            self.gw.metrics().net.connect_retries.inc();
        }
    }
}

impl Connects<'_> {
    fn failed(&self, backend: &Backend, e: &io::Error) -> ConnectFailure {
        if out_of_resources(e) {
            tracing::warn!(error = %e, "cannot open a backend socket: closing client connection");
            return ConnectFailure::OutOfResources;
        }
        connect_failed(self.gw, backend, e, "passthrough");
        ConnectFailure::Backend
    }
}

/// Chooses and connects a backend, retrying on others; `None` when the client must be closed.
async fn connect(gw: &Gateway) -> Option<(Arc<Backend>, TcpStream)> {
    let mut connects = Connects {
        gw,
        timeout: gw.config().load().connect.timeout,
        retried: false,
    };
    let refusal = match place(gw, &mut connects, &mut Vec::new()).await {
        Ok(placed) => return Some(placed),
        Err(Unplaced::NoBackend) => {
            tracing::debug!("no ready backend: closing client connection");
            Refusal::NoReadyBackend
        }
        Err(Unplaced::Failed(ConnectFailure::OutOfResources)) => Refusal::OutOfResources,
        Err(Unplaced::Failed(ConnectFailure::Backend)) => Refusal::ConnectFailed,
    };
    gw.metrics().net.refuse(refusal);
    None
}
