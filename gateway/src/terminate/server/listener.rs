//! A terminate-mode client connection: the TLS handshake within `terminate.handshake_timeout`
//! (the ClientHello's server name chooses the cluster, as a passthrough listener's does; the
//! client sees its listener's certificate, or where the listener has none — a file with
//! `clusters:` — its cluster's, whose CA then verifies the client's own), the identity of a verified client
//! certificate, then HTTP/2 (ALPN `h2`) or HTTP/1.1 (ALPN `http/1.1` or none). When kubegate drains, HTTP/2 clients get GOAWAY and HTTP/1.1 ones
//! `Connection: close` on their next response; requests in flight finish.
//!
//! What one client can make kubegate hold is bounded here: the handshake and the HTTP/1.1
//! request head each have a deadline; a request head has a size limit in both protocols (HPACK
//! decoded, so CONTINUATION floods and HPACK bombs stop at it); HTTP/2 has a stream limit, a
//! send buffer per stream and flow control (a client that never reads stops its streams, not
//! kubegate's memory); PING and SETTINGS are answered one at a time (h2 stops reading while an
//! answer is pending, so a flood is held by TCP); and the rapid reset rule (`resets`).

use crate::net::{client_of, Serve};
use crate::state::ClientSlot;
use crate::state::{Gateway, Phase};
use crate::telemetry::{ClientLimit, ClientProtocol, HandshakeFailure, Refusal};
use crate::terminate::cluster::plane::{Handshake, ServedCluster, TerminatePlane};
use crate::terminate::exchange::coalesce::Coalesced;
use crate::terminate::request::handle::{handle, Connection};
use crate::terminate::request::shape::{CertificateRefusal, Client};
use crate::terminate::server::resets::ResetWatch;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use kubegate_config::{ListenerSpec, TerminateConfig};
use kubegate_net::tls::{not_after, ServingCert};
use kubegate_wire::identity::{CertificateName, IdentityHeaders, UserInfo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

/// One terminate-mode listener: its own TLS, if it has any. The clusters it serves, and what
/// terminate mode keeps for each, are the plane's.
pub struct TerminateListener {
    plane: Arc<TerminatePlane>,
    /// `listeners[].tls` (a file without `clusters:`): every client's handshake completes
    /// with it. Without, each completes with its cluster's.
    own: Option<Handshake>,
    /// As configured: routing by server name (the handshake) and by authority (each
    /// request, `handle`) reads its clusters and default cluster.
    listener: Arc<ListenerSpec>,
}

impl TerminateListener {
    /// `listener`, serving the clusters it names (or every one) of `plane`; loads its own
    /// serving certificate and client CA now, if it has them.
    pub fn new(
        listener: &ListenerSpec,
        plane: Arc<TerminatePlane>,
    ) -> Result<TerminateListener, String> {
        Ok(TerminateListener {
            plane,
            own: listener.tls.as_ref().map(Handshake::load).transpose()?,
            listener: Arc::new(listener.clone()),
        })
    }

    /// Its own serving certificate, if it has one, which follows its files (the control plane
    /// watches it; a cluster's follows with the cluster).
    pub fn serving(&self) -> Option<&Arc<ServingCert>> {
        self.own.as_ref().map(|h| &h.serving)
    }
}

impl Serve for Arc<TerminateListener> {
    fn serve(&self, gw: &Arc<Gateway>, client: TcpStream, slot: ClientSlot) {
        drop(tokio::spawn(serve(gw.clone(), self.clone(), client, slot)));
    }
}

/// Serves one accepted client connection until it closes; its admission `slot` frees then.
async fn serve(
    gw: Arc<Gateway>,
    listener: Arc<TerminateListener>,
    mut tcp: TcpStream,
    _slot: ClientSlot,
) {
    let proxy_protocol = listener.listener.proxy_protocol.as_ref();
    let Some(addr) = client_of(&gw, &mut tcp, proxy_protocol).await else {
        return;
    };
    let limits = gw.config().load().terminate.clone();
    let metrics = gw.metrics();
    // The TLS stream is only moved here, never borrowed, so that once the connection took it
    // over this future keeps no slot (1.2 KB) for it during the connection's life.
    let Some(Accepted {
        tls,
        h2,
        identity,
        refused_certificate,
        certificate_expires,
        served,
    }) = handshake(&gw, &listener, tcp, addr, &limits).await
    else {
        return;
    };
    // The connection borrows its builder.
    let builder = builder(&limits, h2);
    let (conn, resets) = {
        let client = Client::new(addr, identity)
            .speaking_h2(h2)
            .trusting(addr, &limits.trusted_proxies)
            .refusing(refused_certificate)
            .certificate_expiring(certificate_expires);
        let connection = Arc::new(Connection {
            plane: listener.plane.clone(),
            accepted: served,
            listener: listener.listener.clone(),
            client,
            pages: Default::default(),
        });
        let resets = ResetWatch::new(if h2 {
            limits.rapid_reset_min_streams
        } else {
            0
        });
        let service = {
            let gw = gw.clone();
            let resets = resets.clone();
            hyper::service::service_fn(move |req| {
                let stream = resets.opened();
                // Boxed once: hyper moves a pointer into the stream's task instead of copying
                // the request's future, and an open stream such as a watch does not keep an
                // inline slot for it.
                let response = Box::pin(handle(gw.clone(), connection.clone(), req));
                async move {
                    let response = response.await;
                    stream.finish();
                    Ok::<_, Infallible>(response)
                }
            })
        };
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(Coalesced::holding(tls, h2)), service);
        (conn, resets)
    };
    let gauge = metrics.terminate.client_connections(if h2 {
        ClientProtocol::H2
    } else {
        ClientProtocol::Http1
    });
    gauge.inc();
    tokio::pin!(conn);
    let mut phase = gw.lifecycle().subscribe();
    let mut draining = false;
    loop {
        if !draining && *phase.borrow_and_update() >= Phase::Draining {
            draining = true;
            conn.as_mut().graceful_shutdown();
        }
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(client = %addr, error = %e, "client connection ended with an error");
                }
                break;
            }
            () = resets.tripped() => {
                metrics.net.limit_closed(ClientLimit::RapidReset);
                tracing::warn!(client = %addr, "closing a client connection that reset most of its streams at once (rapid reset)");
                break;
            }
            changed = phase.changed(), if !draining => {
                if changed.is_err() {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
    gauge.dec();
}

/// The HTTP server for one client connection: HTTP/2 or HTTP/1.1 only, as ALPN chose.
fn builder(limits: &TerminateConfig, h2: bool) -> auto::Builder<TokioExecutor> {
    // hyper's HTTP/1.1 read buffer holds the request head; it cannot be under 8 KiB.
    let head_limit = usize::try_from(limits.max_header_list_bytes).unwrap_or(usize::MAX);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(head_limit.max(8192));
    let ping = (!limits.client_ping_interval.is_zero()).then_some(limits.client_ping_interval);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(limits.max_header_list_bytes)
        // A client that stops answering is closed, and everything it holds with it.
        .keep_alive_interval(ping)
        .keep_alive_timeout(limits.client_ping_timeout);
    if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    }
}

/// A client connection after its TLS handshake.
struct Accepted {
    tls: TlsStream<TcpStream>,
    /// Whether ALPN chose HTTP/2.
    h2: bool,
    /// The verified client certificate's identity, if any.
    identity: Option<UserInfo>,
    /// A verified client certificate was presented that cannot be passed on.
    refused_certificate: Option<CertificateRefusal>,
    /// When the verified client certificate expires.
    certificate_expires: Option<std::time::SystemTime>,
    /// The client's cluster, as it was served when it connected.
    served: ServedCluster,
}

/// The TLS handshake within `terminate.handshake_timeout`; failures are counted and logged.
async fn handshake(
    gw: &Gateway,
    listener: &TerminateListener,
    tcp: TcpStream,
    addr: SocketAddr,
    limits: &TerminateConfig,
) -> Option<Accepted> {
    let metrics = gw.metrics();
    let accepted =
        tokio::time::timeout(limits.handshake_timeout, accept(gw, listener, tcp, addr)).await;
    match accepted {
        Ok(Ok(None)) => None,
        Ok(Ok(Some((tls, served)))) => {
            let session = tls.get_ref().1;
            let leaf = session.peer_certificates().and_then(|chain| chain.first());
            let read = leaf.map(|leaf| UserInfo::from_der(leaf));
            let (identity, refused_certificate) = match read {
                None => (None, None),
                Some(Err(CertificateName::NoCommonName)) => {
                    (None, Some(CertificateRefusal::NoName))
                }
                Some(Err(CertificateName::BadUid)) => (None, Some(CertificateRefusal::BadUid)),
                Some(Ok(id)) if !IdentityHeaders::sendable(&id) => {
                    (None, Some(CertificateRefusal::Unsendable))
                }
                Some(Ok(id)) => (Some(id), None),
            };
            let h2 = session.alpn_protocol() == Some(b"h2");
            let certificate_expires = leaf.and_then(|leaf| not_after(leaf));
            Some(Accepted {
                tls,
                h2,
                refused_certificate,
                certificate_expires,
                identity,
                served,
            })
        }
        Ok(Err(e)) => {
            metrics.terminate.handshake_failed(HandshakeFailure::Error);
            tracing::debug!(client = %addr, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics
                .terminate
                .handshake_failed(HandshakeFailure::Timeout);
            tracing::debug!(client = %addr, "TLS handshake timed out");
            None
        }
    }
}

/// The handshake, with the listener's certificate or with that of the cluster the
/// ClientHello names: the TLS stream and terminate mode's state for its cluster. `None`: the
/// client was turned away for its name (counted; told `unrecognized_name`).
async fn accept(
    gw: &Gateway,
    listener: &TerminateListener,
    tcp: TcpStream,
    addr: SocketAddr,
) -> std::io::Result<Option<(TlsStream<TcpStream>, ServedCluster)>> {
    let mut start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
    let name = start
        .client_hello()
        .server_name()
        .map(str::to_ascii_lowercase);
    let chosen = listener.plane.route(&listener.listener, name.as_deref());
    let chosen = chosen.and_then(|c| {
        let handshake = listener.own.as_ref().or(c.terminated.handshake());
        // `kubegate check` made sure a cluster without a listener's TLS has its own.
        let config = handshake.ok_or(Refusal::UnknownServerName)?.config.clone();
        Ok((config, c))
    });
    match chosen {
        Ok((config, served)) => Ok(Some((start.into_stream(config).await?, served))),
        Err(refusal) => {
            tracing::debug!(client = %addr, server_name = name.as_deref().unwrap_or(""), reason = refusal.as_str(), "no cluster of the listener answers the client's server name");
            gw.metrics().net.refuse(refusal);
            use tokio::io::AsyncWriteExt;
            let _ = start.io.write_all(&crate::net::UNRECOGNIZED_NAME).await;
            Ok(None)
        }
    }
}
