//! Accepting client connections: one accept loop per listener, in a pingora background service;
//! each accepted socket goes to its listener's data plane ([`Serve`]: a passthrough relay, or
//! terminate mode's TLS and HTTP), which start-up chose.
//!
//! kubegate accepts itself instead of through pingora's listening service. pingora wraps every
//! accepted socket in its own stream type and runs a task per connection; the passthrough path
//! needs the bare socket (see `copy.rs`), and taking it out of pingora's wrapper meant a
//! duplicated descriptor, a second epoll registration and a third `close`, plus the wrapper's
//! allocations and its `getsockopt` on drop: a tenth of kubegate's CPU per new connection
//! (bench/README.md). The server process, its runtimes and its shutdown stay pingora's.
//!
//! The listeners are bound before pingora starts (a taken address fails the start with its
//! name), or inherited from the process being upgraded, and closed when the lifecycle reaches
//! `draining` (`shutdown.delay` after SIGTERM) or the sockets went to a successor. Options
//! every client connection needs (`TCP_NODELAY`, keepalive) are set on the listeners, which
//! accepted sockets inherit.
//!
//! Admission: a connection over `limits.max_client_connections` (every listener together) is
//! accepted and closed at once rather than left in the kernel's backlog: the client learns
//! immediately (and retries elsewhere, or later), and a flood of idle or half-open connections
//! cannot take the descriptors and memory that the admin endpoint, the probes and the clients
//! already served need. The limit is read from the running configuration, so a reload applies
//! to the next accept.

use crate::state::{ClientListener, ClientSlot, Gateway, Phase};
use crate::telemetry::{AcceptError, ClientLimit};
use async_trait::async_trait;
use kubegate_config::KeepaliveConfig;
use kubegate_net::out_of_resources;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// Connections the kernel queues before kubegate accepts them (pingora's value): a reconnect
/// storm after an apiserver restart should queue, not be refused.
const BACKLOG: i32 = 65_535;

/// Pause after an accept failed for lack of descriptors or memory: the pending connection stays
/// queued, and retrying at once would only spin.
const RESOURCE_PAUSE: Duration = Duration::from_millis(100);

/// At most one warning per listener this often while accepts keep failing; the metric counts
/// every failure.
const WARNING_EVERY: Duration = Duration::from_secs(10);

/// Binds the admin endpoint's listener as std would (address reuse), `[::]` taking both
/// families whatever `net.ipv6.bindv6only` says.
pub fn bind_admin(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if address.is_ipv6() && address.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&address.into())?;
    socket.listen(128)?;
    Ok(socket.into())
}

/// Binds a listener the way pingora would: address reuse (a restart does not wait for
/// TIME_WAIT), a deep backlog, non-blocking. Accepted sockets inherit the listener's TCP
/// options, so `TCP_NODELAY` (small writes — TLS records, watch events — leave at once) and the
/// client keepalive are set here once instead of on every connection.
pub fn bind(address: SocketAddr, keepalive: &KeepaliveConfig) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_tcp_nodelay(true)?;
    set_keepalive(&socket, keepalive)?;
    // `[::]` takes both families whatever `net.ipv6.bindv6only` says (a dual-stack node).
    if address.is_ipv6() && address.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&address.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

fn set_keepalive(socket: &Socket, k: &KeepaliveConfig) -> io::Result<()> {
    socket.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(k.idle)
            .with_interval(k.interval)
            .with_retries(k.count),
    )
}

/// What a listener does with the connections it accepts: its data plane.
pub trait Serve: Send + Sync + 'static {
    /// Takes over an accepted, admitted connection (on a task of its own); `slot` frees when
    /// the connection ends.
    fn serve(&self, gw: &Arc<Gateway>, client: TcpStream, slot: ClientSlot);

    /// Starts what the plane runs beside its connections for the process's life (a probe of
    /// the replicas' other port), as the listeners start.
    fn start(&self, _gw: &Arc<Gateway>) {}
}

/// The listeners, as a pingora background service.
pub struct Acceptor {
    gateway: Arc<Gateway>,
    /// The bound listeners and their planes, taken when the service starts.
    listeners: Mutex<Vec<(std::net::TcpListener, Arc<dyn Serve>)>>,
}

impl Acceptor {
    /// Accepts on `listeners` (bound already; `gateway.listeners()` in the same order), each
    /// for its plane, once pingora starts.
    pub fn new(
        gateway: Arc<Gateway>,
        listeners: Vec<(std::net::TcpListener, Arc<dyn Serve>)>,
    ) -> Acceptor {
        Acceptor {
            gateway,
            listeners: Mutex::new(listeners),
        }
    }
}

#[async_trait]
impl BackgroundService for Acceptor {
    async fn start(&self, _pingora_shutdown: ShutdownWatch) {
        let listeners =
            std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|e| e.into_inner()));
        let mut loops = tokio::task::JoinSet::new();
        let counts = self.gateway.listeners().to_vec();
        for ((listener, plane), count) in listeners.into_iter().zip(counts) {
            plane.start(&self.gateway);
            match TcpListener::from_std(listener) {
                Ok(l) => {
                    loops.spawn(accept_loop(l, plane, count, self.gateway.clone()));
                }
                Err(e) => tracing::error!(error = %e, "cannot register a listener"),
            }
        }
        while loops.join_next().await.is_some() {}
    }
}

/// Accepts until the lifecycle reaches `draining`, then closes the listener.
async fn accept_loop(
    listener: TcpListener,
    plane: Arc<dyn Serve>,
    count: &'static ClientListener,
    gw: Arc<Gateway>,
) {
    let mut keepalive = gw.config().load().client_keepalive.clone();
    let mut reloads = gw.config().subscribe();
    let mut phase = gw.lifecycle().subscribe();
    let mut handed_over = gw.lifecycle().handed_over();
    // A process taking over from its predecessor accepts once it has a backend; until then
    // the predecessor accepts on the same socket.
    let mut accepting = gw.lifecycle().accepting();
    tokio::select! {
        _ = accepting.wait_for(|a| *a) => {}
        _ = phase.wait_for(|p| *p >= Phase::Draining) => return,
    }
    // Clients wait in the backlog until start-up has put the first generation (the clusters)
    // in force.
    tokio::select! {
        _ = reloads.wait_for(|generations| *generations >= 1) => {}
        _ = phase.wait_for(|p| *p >= Phase::Draining) => return,
    }
    if *phase.borrow() >= Phase::Draining {
        return;
    }
    let mut last_warning: Option<Instant> = None;
    let mut unreported = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Ok(()) = reloads.changed() => {
                // Connections accepted from now on get the reloaded keepalive.
                let wanted = &gw.config().load().client_keepalive;
                if *wanted != keepalive {
                    match set_keepalive(&SockRef::from(&listener), wanted) {
                        Ok(()) => keepalive = wanted.clone(),
                        Err(e) => tracing::warn!(error = %e, "cannot set client_keepalive on a listener"),
                    }
                }
                continue;
            }
            Ok(()) = phase.changed() => {
                if *phase.borrow_and_update() >= Phase::Draining {
                    break;
                }
                continue;
            }
            // The successor accepts on this socket now; this process's copy closes.
            _ = handed_over.wait_for(|h| *h) => break,
        };
        match accepted {
            Ok((client, _)) => {
                let Some(slot) = count.admit(gw.client_limit()) else {
                    gw.metrics().net.limit_closed(ClientLimit::Connections);
                    continue;
                };
                plane.serve(&gw, client, slot);
            }
            Err(e) => {
                let reason = if out_of_resources(&e) {
                    AcceptError::OutOfResources
                } else if e.kind() == std::io::ErrorKind::ConnectionAborted {
                    AcceptError::Aborted
                } else {
                    AcceptError::Other
                };
                gw.metrics().net.accept_failed(reason);
                unreported += 1;
                if last_warning.is_none_or(|t| t.elapsed() >= WARNING_EVERY) {
                    tracing::warn!(error = %e, failures = unreported, "accept failed");
                    last_warning = Some(Instant::now());
                    unreported = 0;
                }
                if out_of_resources(&e) {
                    tokio::time::sleep(RESOURCE_PAUSE).await;
                }
            }
        }
    }
    tracing::debug!(address = ?listener.local_addr().ok(), "listener closed");
}
