//! A terminate-mode client connection: the TLS handshake within `terminate.handshake_timeout`,
//! the identity of a verified client certificate, then HTTP/2 (ALPN `h2`) or HTTP/1.1 (ALPN
//! `http/1.1` or none). When kubegate drains, HTTP/2 clients get GOAWAY and HTTP/1.1 ones
//! `Connection: close` on their next response; requests in flight finish.

use crate::gateway::Gateway;
use crate::lifecycle::Phase;
use crate::server_tls::{server_config, ServingCert};
use crate::terminate::forward::{handle, Client};
use crate::terminate::identity::CertIdentity;
use crate::terminate::tls::ALPN;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use kubegate_config::ListenerTls;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// One terminate-mode listener's TLS.
pub struct TerminateListener {
    acceptor: TlsAcceptor,
    serving: Arc<ServingCert>,
    tls: ListenerTls,
}

impl TerminateListener {
    /// Loads the serving certificate and client CA now.
    pub fn new(tls: &ListenerTls) -> Result<TerminateListener, String> {
        let serving = Arc::new(ServingCert::load(tls)?);
        let config = server_config(tls, serving.clone(), &ALPN)?;
        Ok(TerminateListener {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            serving,
            tls: tls.clone(),
        })
    }
}

impl crate::certs::Reloadable for TerminateListener {
    fn files(&self) -> Vec<std::path::PathBuf> {
        vec![self.tls.cert_file.clone(), self.tls.key_file.clone()]
    }

    /// New connections get the certificate read now; on failure the current one stays.
    fn reload(&self) -> Result<(), String> {
        self.serving.reload(&self.tls)
    }
}

/// Serves one accepted client connection until it closes.
pub async fn serve(gw: Arc<Gateway>, listener: Arc<TerminateListener>, tcp: TcpStream) {
    let Ok(addr) = tcp.peer_addr() else { return };
    let limits = gw.config().load().terminate.clone();
    let metrics = gw.metrics();
    let tls =
        match tokio::time::timeout(limits.handshake_timeout, listener.acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                metrics
                    .tls_handshake_failures
                    .with_label_values(&["error"])
                    .inc();
                tracing::debug!(client = %addr, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                metrics
                    .tls_handshake_failures
                    .with_label_values(&["timeout"])
                    .inc();
                tracing::debug!(client = %addr, "TLS handshake timed out");
                return;
            }
        };
    let session = tls.get_ref().1;
    let identity = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| CertIdentity::from_der(leaf));
    let h2 = session.alpn_protocol() == Some(b"h2");
    let client = Arc::new(Client { addr, identity });
    let gauge = metrics
        .client_connections
        .with_label_values(&[if h2 { "h2" } else { "http/1.1" }]);
    gauge.inc();
    let service = {
        let gw = gw.clone();
        hyper::service::service_fn(move |req| {
            let gw = gw.clone();
            let client = client.clone();
            async move { Ok::<_, Infallible>(handle(gw, client, req).await) }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams);
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
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
