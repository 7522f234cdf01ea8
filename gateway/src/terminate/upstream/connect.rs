//! Terminate mode's connections to a backend: a stream on one of its HTTP/2 connections of
//! the request's kind, a new connection when all are full (TCP, TLS, the HTTP/2 handshake, all
//! within `connect.timeout`), and plain TLS connections for upgrades.

use crate::net::connect_failed;
use crate::state::{Backend, Gateway, H2Conn, Killer, Kind, Stream};
use crate::telemetry::AttemptFailure;
use crate::terminate::exchange::coalesce::Coalesced;
use crate::terminate::exchange::h2client;
use crate::terminate::upstream::upstreams::Upstreams;
use kubegate_config::Config;
use kubegate_net::dial;
use rustls::pki_types::ServerName;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How much of one response a backend may send before kubegate's client has read it: what a
/// response whose client stops reading holds in kubegate's memory (a client's stream window
/// stops the relay, then this one stops the backend). 256 KiB moved eight concurrent 1 MiB
/// LISTs 20-48% faster than 1 MiB did, with half the spread in their times (bench/README.md,
/// "Bulk").
const UPSTREAM_STREAM_WINDOW: u32 = 256 << 10;

/// The connection window toward a backend covers the windows of all its streams (the largest
/// HTTP/2 allows), so that a client that stops reading stalls only its own response, never the
/// others sharing kubegate's connection. (The two windows grew alike with hyper's adaptive
/// window: one stalled LIST stopped every response on the connection.)
const UPSTREAM_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// A stream to `backend` on an open connection of `kind`, if one has room: `Ok(None)` when a
/// connection must be opened ([`stream_to`]). No future: what most requests take.
pub fn open_stream(
    config: &Config,
    upstreams: &Upstreams,
    backend: &Backend,
    kind: Kind,
) -> Result<Option<Stream>, AttemptFailure> {
    let max = config.upstream.max_streams_per_connection;
    let presents = match kind {
        Kind::WithIdentity => match upstreams.tls.presented() {
            Some(p) => p.fingerprint,
            // A request shaped with identity finds no front-proxy certificate only when a
            // reload dropped it meanwhile: nothing was sent, and no backend is to blame.
            None => {
                tracing::debug!(backend = %backend.info().name, "no front-proxy certificate any more for a request that carries identity");
                return Err(AttemptFailure::Unsent);
            }
        },
        Kind::BearerToken | Kind::Anonymous => 0,
    };
    Ok(backend.planes().terminate.stream(kind, max, presents))
}

/// A stream to `backend` on a connection of `kind`, opening a connection if every one is full.
pub async fn stream_to(
    (gw, config): (&Gateway, &Config),
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    kind: Kind,
) -> Result<Stream, AttemptFailure> {
    let upstream = &backend.planes().terminate;
    let max = config.upstream.max_streams_per_connection;
    // What a connection of this kind presents now: one presenting a replaced front-proxy
    // certificate takes no new stream.
    let (tls, presents) = match kind {
        Kind::WithIdentity => match upstreams.tls.presented() {
            Some(p) => (p.h2.clone(), p.fingerprint),
            // A request shaped with identity finds no front-proxy certificate only when a
            // reload dropped it meanwhile: nothing was sent, and no backend is to blame.
            None => {
                tracing::debug!(backend = %backend.info().name, "no front-proxy certificate any more for a request that carries identity");
                return Err(AttemptFailure::Unsent);
            }
        },
        Kind::BearerToken | Kind::Anonymous => (upstreams.tls.without_identity.clone(), 0),
    };
    if let Some(s) = upstream.stream(kind, max, presents) {
        return Ok(s);
    }
    let _turn = upstream.dial_turn(kind).await;
    // Another request may have opened one while this one waited.
    if let Some(s) = upstream.stream(kind, max, presents) {
        return Ok(s);
    }
    let timeout = config.connect.timeout;
    // Boxed: the TLS and HTTP/2 handshakes' future is ~6.5 KB, and every request's future
    // would otherwise be that large (and moved whole) for a path few requests take.
    match Box::pin(dial_h2(
        backend.connect_address(),
        tls,
        upstreams.tls.server_name.clone(),
        timeout,
    ))
    .await
    {
        Ok(conn) => {
            let conn = conn.presenting(presents);
            let (stream, replaces_ended) = upstream.add(kind, conn);
            // Every connection kubegate's own identity had to the replica ended on its side:
            // it may have restarted, as another version, faster than a probe could see it
            // leave `ready`. What it serves is read again.
            if replaces_ended
                && kind == Kind::WithIdentity
                && upstreams.served.of(backend.address).forget()
            {
                tracing::info!(backend = %backend.info().name, "the replica closed every connection: reading its version and discovery again");
            }
            Ok(stream)
        }
        Err(e) => {
            connect_failed(gw, backend, &e, "upstream HTTP/2 connection");
            Err(AttemptFailure::Connect)
        }
    }
}

/// Opens an HTTP/2 connection to `addr` over TLS (`name` as SNI and verified name).
async fn dial_h2(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    timeout: Duration,
) -> io::Result<H2Conn> {
    let (tls, socket) = tls_connect(addr, tls, name, timeout).await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(io::Error::other("the backend did not agree to HTTP/2"));
    }
    let (sender, conn) = h2client::handshake(
        Coalesced::new(tls),
        UPSTREAM_STREAM_WINDOW,
        UPSTREAM_CONNECTION_WINDOW,
    )
    .await
    .map_err(io::Error::other)?;
    let task = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    Ok(H2Conn::new(
        sender,
        Killer::new(socket, task.abort_handle()),
    ))
}

/// TCP and TLS to a backend, both within `timeout`; with a duplicate of the TCP socket, which
/// kubegate shuts down to end the connection whatever task drives it.
pub async fn tls_connect(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    timeout: Duration,
) -> io::Result<(
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    std::net::TcpStream,
)> {
    let tcp = dial(addr, timeout).await?;
    let _ = tcp.set_nodelay(true);
    let std = tcp.into_std()?;
    let socket = std.try_clone()?;
    let tcp = tokio::net::TcpStream::from_std(std)?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let tls = tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok((tls, socket))
}
