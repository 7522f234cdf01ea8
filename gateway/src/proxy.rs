//! The L4 passthrough path: pick a ready backend, connect (retrying on another backend), then
//! hand both sockets to a relay task that copies bytes until either side closes or kubegate
//! closes the connection (backend down, drain deadline, shutdown grace: the task is aborted).
//! TLS passes through untouched.

use crate::backend::Backend;
use crate::balancer::pick;
use crate::copy::Relay;
use crate::gateway::Gateway;
use async_trait::async_trait;
use kubegate_config::NoReadyBackendPolicy;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;

/// How long a backend whose connect failed is skipped by the balancer before a probe decides.
const PASSIVE_EJECTION: std::time::Duration = std::time::Duration::from_secs(2);

/// The pingora application for passthrough listeners.
pub struct Passthrough {
    /// Shared gateway state.
    pub gateway: Arc<Gateway>,
}

#[async_trait]
impl ServerApp for Passthrough {
    async fn process_new(
        self: &Arc<Self>,
        client: Stream,
        _shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let gw = &self.gateway;
        let client = match crate::fd::into_tcp(client) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take over the client socket");
                return None;
            }
        };
        let (backend, upstream) = connect(gw).await?;
        let _ = upstream.set_nodelay(true);
        // The relay runs as a task of its own, and this (pingora's) task ends: an open
        // connection then costs only the relay.
        let guard = backend.register();
        let id = guard.id();
        let task = tokio::spawn(Relay::new(client, upstream, guard));
        backend.attach(id, task.abort_handle());
        None
    }
}

/// Chooses and connects a backend, retrying on others; `None` when the client must be closed.
async fn connect(gw: &Gateway) -> Option<(Arc<Backend>, TcpStream)> {
    let config = gw.config.load();
    let table = gw.routing.load();
    let candidates = if !table.ready.is_empty() {
        &table.ready
    } else if config.no_ready_backend == NoReadyBackendPolicy::Alive && !table.fallback.is_empty() {
        gw.metrics.fallback.inc();
        &table.fallback
    } else {
        gw.metrics
            .refused
            .with_label_values(&["no_ready_backend"])
            .inc();
        tracing::debug!("no ready backend: closing client connection");
        return None;
    };
    let mut tried: Vec<SocketAddr> = Vec::new();
    for attempt in 0..config.connect.attempts {
        let Some(backend) = pick(config.balance, candidates, &tried, &gw.cursor) else {
            break;
        };
        tried.push(backend.address);
        if attempt == 1 {
            gw.metrics.connect_retries.inc();
        }
        let result =
            tokio::time::timeout(config.connect.timeout, TcpStream::connect(backend.address)).await;
        let reason = match result {
            Ok(Ok(stream)) => return Some((backend, stream)),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => "refused",
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        let info = backend.info();
        gw.metrics
            .connect_errors
            .with_label_values(&[&info.name, reason])
            .inc();
        tracing::warn!(backend = %info.name, reason, attempt = attempt + 1, "connect to backend failed");
        backend.eject_for(PASSIVE_EJECTION);
        backend.probe_soon();
    }
    gw.metrics
        .refused
        .with_label_values(&["connect_failed"])
        .inc();
    None
}
