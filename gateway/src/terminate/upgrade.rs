//! Upgraded requests — `kubectl exec`, `attach`, `cp`, `port-forward` over WebSocket
//! (`v5.channel.k8s.io`) or SPDY/3.1 — stay HTTP/1.1 end to end: the request goes to a backend
//! on an HTTP/1.1 connection of its own, the 101 comes back to the client, and from then on
//! bytes are copied both ways with no timeout, until either side closes or kubegate closes the
//! backend's work (down, drain deadline, shutdown grace). Only a failed connect is retried: an
//! upgrade request that reached an apiserver may have started a process.

use crate::gateway::Gateway;
use crate::labels::{ConnectError, RequestFailure};
use crate::planes::Backend;
use crate::proxy::PASSIVE_EJECTION;
use crate::terminate::body::ResponseBody;
use crate::terminate::forward::{prepare_headers, read_small, tls_connect, upstream_uri, Client};
use crate::terminate::status::{broken, unavailable};
use crate::terminate::upstream::{Kind, Upstream};
use crate::terminate::Upstreams;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kubegate_pool::{pick, Candidates};
use kubegate_wire::classify::RequestClass;
use std::net::SocketAddr;
use std::sync::Arc;

/// An HTTP/1.1 request asking to switch protocols.
pub fn requested(req: &Request<Incoming>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Proxies an upgrade request.
pub async fn proxy(
    gw: &Gateway,
    upstreams: &Upstreams,
    client: &Client,
    mut req: Request<Incoming>,
    class: RequestClass,
) -> Response<ResponseBody> {
    // Resolves once kubegate's 101 has been written to the client.
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, _) = req.into_parts();
    let upgrade = parts.headers.get(header::UPGRADE).cloned();
    let kind = prepare_headers(gw, upstreams, client, &mut parts.headers);
    // Before the hop-by-hop headers go: an HTTP/1.1 client's Host is one of them.
    let uri = upstream_uri(
        parts.uri.clone(),
        &parts.headers,
        &upstreams.tls.server_name,
    );
    // Only the two headers that make it an upgrade cross as connection headers.
    crate::terminate::forward::remove_hop_by_hop(parts.version, &mut parts.headers);
    if let Some(host) = uri.authority() {
        if let Ok(h) = HeaderValue::from_str(host.as_str()) {
            parts.headers.insert(header::HOST, h);
        }
    }
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Some(u) = upgrade {
        parts.headers.insert(header::UPGRADE, u);
    }
    let Some((backend, mut sender)) = connect(gw, upstreams, kind).await else {
        gw.metrics().request_failed(RequestFailure::Unavailable);
        return unavailable("no apiserver could take the request");
    };
    let in_flight = Upstream::begin(&backend, true);
    let mut upstream_req = Request::from_parts(parts, Empty::<bytes::Bytes>::new());
    *upstream_req.version_mut() = Version::HTTP_11;
    // A backend closed meanwhile (down) may never answer: the close ends the wait too.
    let mut closes = backend.planes().terminate.closes();
    let answer = tokio::select! {
        r = sender.send_request(upstream_req) => r.map_err(|e| e.to_string()),
        _ = closes.changed() => Err("the backend's work was closed".to_string()),
    };
    let mut resp = match answer {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(backend = %backend.info().name, error = %e, "upgrade request failed");
            gw.metrics().request_failed(RequestFailure::Broken);
            return broken("the connection to the apiserver broke during the upgrade");
        }
    };
    gw.metrics()
        .count_request(&backend.info().name, class.verb, resp.status());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused (403, 400, ...): the apiserver's answer (a small Status) goes back as it is.
        let (parts, body) = resp.into_parts();
        return match read_small(body).await {
            Ok(body) => Response::from_parts(parts, ResponseBody::full(body)),
            Err(()) => {
                gw.metrics().request_failed(RequestFailure::Broken);
                broken("the apiserver's answer to the upgrade broke off")
            }
        };
    }
    let upstream_side = hyper::upgrade::on(&mut resp);
    let name = backend.info().name.clone();
    tokio::spawn(async move {
        let tunnel = async {
            let (client_io, upstream_io) = tokio::try_join!(client_side, upstream_side)
                .map_err(|e| format!("upgrade did not complete: {e}"))?;
            let mut client_io = TokioIo::new(client_io);
            let mut upstream_io = TokioIo::new(upstream_io);
            tokio::io::copy_bidirectional(&mut client_io, &mut upstream_io)
                .await
                .map(|_| ())
                .map_err(|e| format!("upgraded connection ended with an error: {e}"))
        };
        tokio::select! {
            r = tunnel => if let Err(e) = r {
                tracing::debug!(backend = %name, "{e}");
            },
            _ = closes.changed() => tracing::debug!(backend = %name, "upgraded connection closed by kubegate"),
        }
        drop(in_flight);
    });
    let mut out = Response::new(ResponseBody::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = std::mem::take(resp.headers_mut());
    out
}

/// An HTTP/1.1 connection to a backend, retrying failed connects on others.
async fn connect(
    gw: &Gateway,
    upstreams: &Upstreams,
    kind: Kind,
) -> Option<(
    Arc<Backend>,
    hyper::client::conn::http1::SendRequest<Empty<bytes::Bytes>>,
)> {
    let (policy, attempts, no_ready, timeout) = {
        let c = gw.config().load();
        (
            c.balance,
            c.connect.attempts,
            c.no_ready_backend,
            c.connect.timeout,
        )
    };
    let pool = gw.pool();
    let tls = match kind {
        Kind::WithIdentity => upstreams.tls.with_identity_h1.clone()?,
        Kind::BearerToken | Kind::Anonymous => upstreams.tls.without_identity_h1.clone(),
    };
    let mut tried: Vec<SocketAddr> = Vec::new();
    for _ in 0..attempts {
        let table = pool.routing();
        let candidates = match table.candidates(no_ready) {
            Candidates::Ready(c) | Candidates::Fallback(c) => c,
            Candidates::None => return None,
        };
        let backend = pick(
            policy,
            candidates,
            &tried,
            pool.cursor(),
            &crate::terminate::forward::load_for(policy),
        )?;
        tried.push(backend.address);
        let conn = tls_connect(
            backend.address,
            tls.clone(),
            upstreams.tls.server_name.clone(),
            timeout,
        )
        .await;
        let handshake = match conn {
            Ok((tls, _socket)) => hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(std::io::Error::other),
            Err(e) => Err(e),
        };
        match handshake {
            Ok((sender, conn)) => {
                tokio::spawn(async move {
                    let _ = conn.with_upgrades().await;
                });
                return Some((backend, sender));
            }
            Err(e) => {
                let name = backend.info().name.clone();
                gw.metrics().connect_error(&name, ConnectError::of(&e));
                tracing::warn!(backend = %name, error = %e, "upstream connection for an upgrade failed");
                backend.connect_failed(PASSIVE_EJECTION);
            }
        }
    }
    None
}
