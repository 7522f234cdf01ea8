//! The admin endpoint: the status page (`/`), `/livez`, `/readyz` (and its checks,
//! `/readyz/lifecycle`, `/readyz/backends`), `/metrics`, `/debug/backends`, `/debug/config`;
//! and the one kind of call that changes something, `POST /backends/NAME/drain` and
//! `/undrain` (`drain.rs`).
//!
//! HTTP/1.1, over TLS when `admin.tls` is set; it keeps answering through `stopping` and
//! `draining` so probes and scrapes see the shutdown happen. `/livez` is 200 until the process
//! exits.
//!
//! Hardened so that whoever reaches the port cannot keep probes out or read more than they
//! should: at most `admin.max_connections` at once, a new one closing the oldest (an idle or
//! slow client holds a slot only until newer ones need it); request headers within
//! `admin.header_read_timeout` and 16 KiB; only GET and HEAD, but for the drain calls. With a
//! client CA or a bearer token file configured, everything but `admin.public_paths` (the
//! probes, by default) needs a verified client certificate or one of the tokens.

mod drain;
mod page;
mod readyz;
mod respond;
mod senders;
mod shed;
mod views;

pub use drain::DrainAnswer;
pub use views::BackendView;

use crate::state::Gateway;
use crate::telemetry::AdminRefusal;
use crate::terminate::TerminatePlane;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kubegate_config::{AdminConfig, ServingTls};
use kubegate_net::tls::ServingCert;
use readyz::{readyz, verbose, Check};
use respond::{json, text};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

/// Largest request head the admin endpoint reads.
const MAX_HEAD: usize = 16 * 1024;

/// The admin endpoint's TLS: its serving certificate follows its files.
pub struct AdminTls {
    acceptor: TlsAcceptor,
    serving: Arc<ServingCert>,
}

impl AdminTls {
    /// Loads `admin.tls` now.
    pub fn new(tls: &ServingTls) -> Result<AdminTls, String> {
        let (serving, config) = kubegate_net::tls::serving(tls, &[b"http/1.1"])?;
        Ok(AdminTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            serving,
        })
    }

    /// Its serving certificate, which follows its files.
    pub fn serving(&self) -> &Arc<ServingCert> {
        &self.serving
    }
}

/// The connections open on the admin endpoint, oldest first.
#[derive(Default)]
struct Open {
    next: AtomicU64,
    tasks: Mutex<VecDeque<(u64, AbortHandle)>>,
}

impl Open {
    fn tasks(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, AbortHandle)>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Serves admin requests on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<AdminTls>>,
    gw: Arc<Gateway>,
    plane: Arc<TerminatePlane>,
) {
    let settings = gw.config().load().admin.clone();
    let open = Arc::new(Open::default());
    let mut handed_over = gw.lifecycle().handed_over();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // The successor answers on this socket now.
            _ = handed_over.wait_for(|h| *h) => return,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = open.next.fetch_add(1, Ordering::Relaxed);
        let (gw2, plane2, tls, open2, settings2) = (
            gw.clone(),
            plane.clone(),
            tls.clone(),
            open.clone(),
            settings.clone(),
        );
        let task = tokio::spawn(async move {
            match tls {
                None => connection(stream, peer, false, (&gw2, &plane2), &settings2).await,
                Some(tls) => {
                    let handshake = tls.acceptor.accept(stream);
                    match tokio::time::timeout(settings2.header_read_timeout, handshake).await {
                        Ok(Ok(stream)) => {
                            let verified = stream.get_ref().1.peer_certificates().is_some();
                            connection(stream, peer, verified, (&gw2, &plane2), &settings2).await
                        }
                        Ok(Err(_)) => {}
                        Err(_) => gw2.metrics().control.admin_refused(AdminRefusal::Timeout),
                    }
                }
            }
            open2.tasks().retain(|(i, _)| *i != id);
        });
        let mut tasks = open.tasks();
        tasks.push_back((id, task.abort_handle()));
        while tasks.len() > settings.max_connections {
            if let Some((_, oldest)) = tasks.pop_front() {
                oldest.abort();
                gw.metrics().control.admin_refused(AdminRefusal::Evicted);
            }
        }
    }
}

/// Serves HTTP/1.1 on one connection from `peer`; `verified`: it presented a client
/// certificate the admin CA verified.
async fn connection<S>(
    stream: S,
    peer: std::net::SocketAddr,
    verified: bool,
    (gw, plane): (&Arc<Gateway>, &Arc<TerminatePlane>),
    settings: &AdminConfig,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (gw2, plane2) = (gw.clone(), plane.clone());
    let service = hyper::service::service_fn(move |req| {
        let (gw, plane) = (gw2.clone(), plane2.clone());
        async move { Ok::<_, Infallible>(route((&gw, &plane), req, peer, verified).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = conn.await {
        if e.is_timeout() {
            gw.metrics().control.admin_refused(AdminRefusal::Timeout);
        } else if e.is_parse_too_large() {
            gw.metrics().control.admin_refused(AdminRefusal::TooLarge);
        }
    }
}

async fn route(
    (gw, plane): (&Gateway, &TerminatePlane),
    req: Request<Incoming>,
    peer: std::net::SocketAddr,
    verified: bool,
) -> Response<Full<Bytes>> {
    let admin = gw.config().load().admin.clone();
    let path = req.uri().path();
    if let Some((name, drain)) = drain::target(path) {
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n".into());
        }
        let caller = drain::Caller {
            authenticated: verified || token_matches(&admin, &req).await,
            loopback: peer.ip().to_canonical().is_loopback(),
        };
        return drain::handle(gw, caller, req.headers(), name, drain);
    }
    if let Some(call) = shed::Call::of(path) {
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n".into());
        }
        let caller = drain::Caller {
            authenticated: verified || token_matches(&admin, &req).await,
            loopback: peer.ip().to_canonical().is_loopback(),
        };
        return shed::handle(gw, caller, req, call).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    let public = admin.public_paths.iter().any(|p| p == path);
    if admin.authenticates() && !public && !verified && !token_matches(&admin, &req).await {
        gw.metrics()
            .control
            .admin_refused(AdminRefusal::Unauthorized);
        let mut resp = text(StatusCode::UNAUTHORIZED, "unauthorized\n".into());
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"kubegate\""),
        );
        return resp;
    }
    match path {
        "/" => page::render(
            (gw, plane),
            senders::Asked::of(req.uri()).unwrap_or_default(),
        ),
        "/livez" | "/healthz" => text(StatusCode::OK, "ok".into()),
        "/readyz" => readyz(gw, None, verbose(&req)),
        "/readyz/lifecycle" => readyz(gw, Some(Check::Lifecycle), verbose(&req)),
        "/readyz/backends" => readyz(gw, Some(Check::Backends), verbose(&req)),
        "/metrics" => Response::builder()
            .header(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )
            .body(Full::new(Bytes::from(gw.render_metrics())))
            .expect("valid response"),
        "/debug/backends" => json(&views::backends_view(gw, plane)),
        "/debug/senders" => senders::debug(gw, req.uri()),
        "/debug/shed" => shed::debug(gw),
        "/debug/shed/auto" => shed::auto_preview(gw, plane, req.uri()),
        // File paths only: no key, token or certificate content is ever in the configuration.
        "/debug/config" => json(&*gw.config().load()),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Whether the request's bearer token is one of the token file's lines. The file is read
/// for every such request (admin traffic is a scrape every few seconds), so a rotation needs
/// no reload; a file that cannot be read matches nothing.
async fn token_matches(admin: &AdminConfig, req: &Request<Incoming>) -> bool {
    let (Some(file), Some(given)) = (
        &admin.bearer_token_file,
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim),
    ) else {
        return false;
    };
    let Ok(tokens) = tokio::fs::read_to_string(file).await else {
        tracing::warn!(file = %file.display(), "admin.bearer_token_file cannot be read");
        return false;
    };
    // Every line is compared in full, so the time taken says nothing about how close a guess was.
    tokens
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .fold(false, |found, t| {
            constant_time_eq(t.as_bytes(), given.as_bytes()) | found
        })
}

/// Compares two byte strings in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn tokens_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
