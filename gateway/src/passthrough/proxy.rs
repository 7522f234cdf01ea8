//! The passthrough plane's entry: choose the client's cluster (by the server name of its
//! ClientHello, when the file names clusters), place the connection on one of its backends (a
//! TCP connect, retried on another backend), then hand both sockets to a relay task of their
//! own.

use crate::net::{client_of, connect_failed, place, Attempt, Serve, Unplaced, UNRECOGNIZED_NAME};
use crate::passthrough::copy::Relay;
use crate::passthrough::guard::ConnectionGuard;
use crate::passthrough::hello::{self, HelloError};
use crate::passthrough::port_probe::{self, on_port, PortReadiness};
use crate::state::{Backend, ClientSlot, Cluster, Gateway, Generation, Route};
use crate::telemetry::{ConnectError, Refusal};
use kubegate_config::{BalancePolicy, ListenerSpec};
use kubegate_net::{dial, out_of_resources};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A passthrough listener's plane.
pub struct Passthrough {
    /// The listener as configured: the clusters it serves and its default one.
    listener: Arc<ListenerSpec>,
    /// Its `backend_port`'s readiness: the replicas whose port failed lately.
    port_readiness: Option<Arc<PortReadiness>>,
}

impl Passthrough {
    /// The plane of `listener`.
    pub fn new(listener: ListenerSpec) -> Passthrough {
        Passthrough {
            port_readiness: listener.backend_port.map(|_| Default::default()),
            listener: Arc::new(listener),
        }
    }
}

impl Serve for Passthrough {
    fn serve(&self, gw: &Arc<Gateway>, client: TcpStream, slot: ClientSlot) {
        let to = Forwarding {
            listener: self.listener.clone(),
            port_readiness: self.port_readiness.clone(),
        };
        drop(tokio::spawn(open(gw.clone(), to, client, slot)));
    }

    fn start(&self, gw: &Arc<Gateway>) {
        let probed = self.listener.backend_probe.is_some();
        if let (Some(port), Some(readiness), true) =
            (self.listener.backend_port, &self.port_readiness, probed)
        {
            let listener = self.listener.clone();
            let probe = port_probe::probe(gw.clone(), listener, port, readiness.clone());
            drop(tokio::spawn(probe));
        }
    }
}

/// Where a connection of a listener goes: its listener's clusters, and the replicas' port.
struct Forwarding {
    listener: Arc<ListenerSpec>,
    port_readiness: Option<Arc<PortReadiness>>,
}

/// Connects `client` to a backend of its cluster, then hands both sockets to a relay task of
/// their own and ends: an open connection costs only its relay.
async fn open(gw: Arc<Gateway>, to: Forwarding, mut client: TcpStream, slot: ClientSlot) {
    let listener = &to.listener;
    let Some(address) = client_of(&gw, &mut client, listener.proxy_protocol.as_ref()).await else {
        return;
    };
    // One generation for the whole connection, taken once its ClientHello is in: its cluster,
    // its holds and connects. (Whether clusters are named never changes while running.)
    let named = gw.clusters().by_server_name();
    let (generation, cluster, hello) = if named {
        // Boxed: this task is sized for its largest await while it connects, and a one-cluster
        // file's connections never read a ClientHello.
        match Box::pin(choose(&gw, listener, &client, address)).await {
            Some(chosen) => chosen,
            None => return,
        }
    } else {
        let generation = gw.config().generation();
        match generation.clusters.route(listener, None) {
            Route::To(one) => (generation, one, Vec::new()),
            _ => return,
        }
    };
    let Some((backend, mut upstream)) = connect(&gw, &generation, &cluster, &to, address).await
    else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    // The ClientHello read to choose the cluster goes first; the relay carries the rest.
    if !hello.is_empty() && upstream.write_all(&hello).await.is_err() {
        return;
    }
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
    /// The replicas' other port (`backend_port`), if not the apiserver's, and its readiness.
    port: Option<u16>,
    port_readiness: Option<&'a PortReadiness>,
    /// Whether the port is probed (`backend_probe`).
    probed: bool,
    /// Replicas whose port failed lately: the first attempt passes them over.
    avoid: Vec<SocketAddr>,
}

impl Attempt for Connects<'_> {
    type Output = TcpStream;
    type Failure = ConnectFailure;

    /// Open connections.
    fn load(&self, _: BalancePolicy) -> fn(&Backend) -> u64 {
        |b| b.planes().passthrough.open() as u64
    }

    async fn attempt(&mut self, backend: &Arc<Backend>) -> Result<TcpStream, ConnectFailure> {
        dial(on_port(backend.connect_address(), self.port), self.timeout)
            .await
            .map_err(|e| self.failed(backend, &e))
    }

    fn avoid_first(&self) -> &[SocketAddr] {
        &self.avoid
    }

    fn may_try_another(&self, failure: ConnectFailure) -> bool {
        failure == ConnectFailure::Backend
    }

    fn retrying(&mut self, _: ConnectFailure) {
        // Counts connections that needed another backend, not each further attempt; another
        // port's failures are its own (`kubegate_backend_port_connect_errors_total`).
        if !std::mem::replace(&mut self.retried, true) && self.port.is_none() {
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
        match self.port {
            None => connect_failed(self.gw, backend, e, "passthrough"),
            Some(port) => {
                // Another service of the replica's host: its failure is its own, the apiserver
                // neither ejected nor counted for it; the port is tried last for a while.
                let reason = ConnectError::of(e);
                let name = backend.info().name.clone();
                self.gw
                    .metrics()
                    .net
                    .port_connect_error(&name, port, reason);
                tracing::warn!(backend = %name, port, reason = reason.as_str(), error = %e, "connect to a replica's other port failed");
                if let Some(readiness) = self.port_readiness {
                    readiness.failed(backend.address, self.probed);
                }
            }
        }
        ConnectFailure::Backend
    }
}

/// The cluster `client` asks for by the server name of its ClientHello, and the bytes read;
/// `None` when it is turned away (an unrecognized name is told so with a TLS alert) or closed.
async fn choose(
    gw: &Gateway,
    listener: &ListenerSpec,
    client: &TcpStream,
    address: SocketAddr,
) -> Option<(Arc<Generation>, Arc<Cluster>, Vec<u8>)> {
    let refusal = match hello::read(client).await {
        Ok(hello) => {
            let generation = gw.config().generation();
            match generation
                .clusters
                .route(listener, hello.server_name.as_deref())
            {
                Route::To(cluster) => return Some((generation, cluster, hello.bytes)),
                Route::NoServerName => {
                    tracing::debug!(listener = %listener.address, client = %address, "a ClientHello without a server name, and no default_cluster: closing");
                    Refusal::NoServerName
                }
                Route::UnknownServerName => {
                    tracing::debug!(listener = %listener.address, client = %address, server_name = hello.server_name.as_deref().unwrap_or(""), "no cluster answers the server name: closing");
                    Refusal::UnknownServerName
                }
            }
        }
        Err(HelloError::ClosedEarly) => return None,
        Err(HelloError::Unreadable(why)) => {
            tracing::debug!(listener = %listener.address, client = %address, why, "unreadable ClientHello: closing");
            gw.metrics().net.refuse(Refusal::ClientHello);
            return None;
        }
    };
    gw.metrics().net.refuse(refusal);
    // A fresh socket's send buffer takes 7 bytes; what does not go is not worth waiting for.
    let _ = client.try_write(&UNRECOGNIZED_NAME);
    None
}

/// Chooses and connects a backend of `cluster` under `generation`, retrying on others; `None`
/// when the client must be closed.
async fn connect(
    gw: &Gateway,
    generation: &Generation,
    cluster: &Cluster,
    to: &Forwarding,
    client: SocketAddr,
) -> Option<(Arc<Backend>, TcpStream)> {
    let port_readiness = to.port_readiness.as_deref();
    let mut connects = Connects {
        gw,
        timeout: generation.config.connect.timeout,
        retried: false,
        port: to.listener.backend_port,
        port_readiness,
        probed: to.listener.backend_probe.is_some(),
        // Replicas whose other port failed lately are tried last, not skipped: a port back
        // before its probe says so still serves.
        avoid: port_readiness
            .map(PortReadiness::not_ready)
            .unwrap_or_default(),
    };
    let refusal = match place(gw, generation, cluster, &mut connects, &mut Vec::new()).await {
        Ok(placed) => return Some(placed),
        Err(Unplaced::NoBackend) => {
            tracing::debug!(client = %client, "no ready backend: closing client connection");
            Refusal::NoReadyBackend
        }
        Err(Unplaced::Failed(ConnectFailure::OutOfResources)) => Refusal::OutOfResources,
        Err(Unplaced::Failed(ConnectFailure::Backend)) => Refusal::ConnectFailed,
    };
    gw.metrics().net.refuse(refusal);
    None
}
