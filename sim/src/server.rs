//! The replica's network side: the TLS listener (HTTP/2 and HTTP/1.1 by ALPN), per-connection
//! GOAWAY, and the shutdown sequence of k8s.io/apiserver's `genericapiserver.go`.

use crate::api;
use crate::auth::PeerCert;
use crate::state::Sim;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Builds the TLS config: the serving pair, and client certificates verified against every CA
/// in `client_cas` (the client CA and the front-proxy CA: which one signed a certificate decides
/// how it authenticates, see `auth.rs`).
pub fn tls_config(cert: &Path, key: &Path, client_cas: &[&Path]) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect())
        .map_err(|e| anyhow::anyhow!("--tls-cert-file {}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("--tls-private-key-file {}: {e}", key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_cas {
        [] => builder.with_no_client_auth(),
        cas => {
            let mut roots = RootCertStore::empty();
            for ca in cas {
                for c in CertificateDer::pem_file_iter(ca)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))?
                {
                    roots.add(c?)?;
                }
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()?;
            // Validity is checked at each request, as the apiserver's authenticators do.
            builder.with_client_cert_verifier(Arc::new(
                crate::clientcert::TimeDeferringVerifier::new(verifier),
            ))
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts connections until `stop` fires, then drops the listener (new connects are refused).
pub async fn accept_loop(
    listener: TcpListener,
    tls: TlsAcceptor,
    sim: Arc<Sim>,
    stop: CancellationToken,
) {
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let sim = sim.clone();
        tokio::spawn(async move {
            let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp)).await
            else {
                return;
            };
            let session = stream.get_ref().1;
            // The client's certificate and the validity of what it presented, kept with the
            // connection: each request checks it against the time it arrives.
            let peer = session.peer_certificates().and_then(PeerCert::from_chain);
            // What the client negotiated, for tests of a client's TLS settings. Not an
            // apiserver header.
            let negotiated = format!(
                "{} {}",
                session
                    .protocol_version()
                    .and_then(|v| v.as_str())
                    .unwrap_or("-"),
                session
                    .negotiated_cipher_suite()
                    .and_then(|s| s.suite().as_str())
                    .unwrap_or("-")
            );
            let negotiated = http::HeaderValue::from_str(&negotiated).ok();
            serve_connection(stream, sim, peer, negotiated).await;
        });
    }
    drop(listener);
    tracing::info!("listener closed");
}

async fn serve_connection(
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    sim: Arc<Sim>,
    peer: Option<PeerCert>,
    negotiated: Option<http::HeaderValue>,
) {
    let goaway = Arc::new(Notify::new());
    let service = {
        let sim = sim.clone();
        let goaway = goaway.clone();
        hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let sim = sim.clone();
            let peer = peer.clone();
            let goaway = goaway.clone();
            let negotiated = negotiated.clone();
            async move {
                // --goaway-chance: this HTTP/2 request is the connection's last.
                let chance = sim.behaviour.goaway_chance;
                let h2 = req.version() == http::Version::HTTP_2;
                if h2 && chance > 0.0 && fastrand::f64() < chance {
                    goaway.notify_one();
                }
                let replica = http::HeaderValue::from_str(&sim.behaviour.replica).ok();
                // The client addresses the audit log would record, for tests of what a proxy
                // passes on. Not an apiserver header.
                let forwarded: Vec<&str> = req
                    .headers()
                    .get_all("x-forwarded-for")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                let forwarded = (!forwarded.is_empty())
                    .then(|| http::HeaderValue::from_str(&forwarded.join(", ")).ok())
                    .flatten();
                // The audit log reads X-Real-Ip after the X-Forwarded-For chain.
                let real_ip = req.headers().get("x-real-ip").cloned();
                // The apiserver's audit filter answers every request with its audit ID: the
                // client's `Audit-ID` if it sent one, else a new UUID.
                let audit_id = req
                    .headers()
                    .get("audit-id")
                    .filter(|v| !v.is_empty())
                    .cloned()
                    .or_else(|| http::HeaderValue::from_str(&new_uuid()).ok());
                let mut resp = api::handle(sim, peer.as_ref(), req).await;
                // Set before the handler runs: a proxied answer's own `Audit-Id` (an
                // extension server's) is a second value after it.
                if let Some(id) = audit_id {
                    let theirs: Vec<http::HeaderValue> = match resp.headers_mut().entry("audit-id")
                    {
                        http::header::Entry::Occupied(e) => e.remove_entry_mult().1.collect(),
                        http::header::Entry::Vacant(_) => Vec::new(),
                    };
                    resp.headers_mut().insert("audit-id", id);
                    for v in theirs {
                        resp.headers_mut().append("audit-id", v);
                    }
                }
                // Go's HTTP/2 server turns `Connection: close` into GOAWAY (the apiserver sets
                // it for anonymous and unauthenticated HTTP/2 requests).
                if h2
                    && resp
                        .headers_mut()
                        .remove(http::header::CONNECTION)
                        .is_some()
                {
                    goaway.notify_one();
                }
                // Which replica answered, for tests behind a TLS-terminating proxy (where the
                // serving certificate no longer tells). Not an apiserver header.
                if let Some(name) = replica {
                    resp.headers_mut().insert("x-kubegate-sim-replica", name);
                }
                if let Some(f) = forwarded {
                    resp.headers_mut().insert("x-kubegate-sim-forwarded-for", f);
                }
                if let Some(ip) = real_ip {
                    resp.headers_mut().insert("x-kubegate-sim-real-ip", ip);
                }
                if let Some(tls) = negotiated {
                    resp.headers_mut().insert("x-kubegate-sim-tls", tls);
                }
                Ok::<_, std::convert::Infallible>(resp)
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Go's limit on a request's head: http.DefaultMaxHeaderBytes (1 MiB) and the slack its
    // HTTP/2 server adds (hyper's defaults are 16 KiB here, the first 431 a client would see).
    const GO_MAX_HEADER_BYTES: u32 = (1 << 20) + 4096;
    builder
        .http2()
        .max_concurrent_streams(sim.behaviour.max_streams)
        .max_header_list_size(GO_MAX_HEADER_BYTES);
    builder.http1().max_buf_size(GO_MAX_HEADER_BYTES as usize);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = sim.close_connections.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = goaway.notified(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// SIGTERM and SIGINT, taken over from their default (exit at once).
pub struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    /// Installs the handlers. Called before the listener is bound: a SIGTERM sent as soon as
    /// the port accepts must start the shutdown sequence, not kill the process.
    pub fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes at the next SIGTERM or SIGINT.
    async fn received(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Waits for SIGTERM/SIGINT and runs the shutdown sequence; returns when the process may exit 0.
pub async fn shutdown_sequence(
    sim: Arc<Sim>,
    stop_accepting: CancellationToken,
    mut signals: StopSignals,
) {
    signals.received().await;
    let b = &sim.behaviour;
    // T0: readyz fails at once; everything else is served normally.
    sim.checks.begin_shutdown();
    // And the replica leaves the `kubernetes` service's endpoints.
    if let Some(advertise) = sim.behaviour.advertise {
        let sim = sim.clone();
        tokio::spawn(async move { crate::reconciler::remove(&sim, advertise).await });
    }
    tracing::info!(delay = ?b.shutdown_delay, retry_after = b.send_retry_after, "shutdown initiated: readyz fails");
    tokio::spawn(async move {
        signals.received().await;
        tracing::warn!("second signal: exiting at once");
        std::process::exit(1);
    });
    tokio::time::sleep(b.shutdown_delay).await;
    tracing::info!("shutdown delay elapsed");
    if b.send_retry_after {
        // New requests get 429 + Connection: close while in-flight ones drain; then the listener
        // closes.
        sim.retry_after.store(true, Ordering::Release);
        wait_for_inflight(&sim, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop_accepting.cancel();
        sim.close_connections.cancel();
    } else {
        // Stop listening; open connections get GOAWAY (HTTP/2) or close when idle (HTTP/1.1);
        // requests that still arrive get 503 Retry-After: 1.
        stop_accepting.cancel();
        sim.rejecting.store(true, Ordering::Release);
        sim.close_connections.cancel();
    }
    if !b.watch_termination_grace.is_zero() {
        terminate_watches(&sim, b.watch_termination_grace).await;
    }
    wait_for_inflight(&sim, Duration::from_secs(60)).await;
    tracing::info!("in-flight requests drained; exiting");
}

/// Ends open watches cleanly within `grace` (the apiserver paces this at max(count/grace, 200)/s;
/// all at once is the limit of that pacing for the watch counts a simulator holds).
async fn terminate_watches(sim: &Sim, grace: Duration) {
    sim.end_watches.cancel();
    let deadline = Instant::now() + grace;
    while sim.watches.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for_inflight(sim: &Sim, limit: Duration) {
    let deadline = Instant::now() + limit;
    while sim.inflight.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A random (version 4) UUID, as the apiserver makes audit IDs.
fn new_uuid() -> String {
    let n = fastrand::u128(..);
    let n = (n & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
