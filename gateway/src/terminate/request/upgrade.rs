//! Upgraded requests — `kubectl exec`, `attach`, `cp`, `port-forward` over WebSocket
//! (`v5.channel.k8s.io`) or SPDY/3.1, a `proxy` to a pod or service, a watch over WebSocket:
//! what the apiserver itself upgrades — stay HTTP/1.1 end to end: the request goes to a
//! backend on an HTTP/1.1 connection of its own, the 101 comes back to the client, and from
//! then on bytes are copied both ways with no timeout, until either side closes or kubegate
//! closes the backend's work (down, drain deadline, shutdown grace). The backend is chosen as
//! for any request: within the request's `dispatch` rule (its backends, its fallback) and
//! around version skew. Only a failed connect is retried: an upgrade request that reached an
//! apiserver may have started a process.

use crate::net::{connect_failed, place, Attempt, Unplaced};
use crate::state::{Backend, Gateway, Generation, Kind};
use crate::telemetry::RequestFailure;
use crate::terminate::exchange::body::{read_small, ResponseBody};
use crate::terminate::exchange::in_flight::InFlight;
use crate::terminate::exchange::status::{broken, unavailable};
use crate::terminate::request::served::Served;
use crate::terminate::request::shape::{Client, Shaper};
use crate::terminate::upstream::connect::tls_connect;
use crate::terminate::upstream::dispatch::{load_for, Within};
use crate::terminate::upstream::skew;
use crate::terminate::upstream::upstreams::Upstreams;
use http::header;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kubegate_config::BalancePolicy;
use kubegate_wire::classify::RequestClass;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// An HTTP/1.1 request asking to switch protocols.
pub fn requested(req: &Request<Incoming>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && kubegate_wire::hop::names(req.headers(), "upgrade")
}

/// Proxies an upgrade request to a backend `within` its rule, under the request's generation;
/// `served` learns who sent it and which replica answered.
pub async fn proxy(
    (gw, generation): (&Gateway, &Generation),
    upstreams: &Upstreams,
    client: &Client,
    mut req: Request<Incoming>,
    class: RequestClass,
    served: &mut Served,
    mut within: Within,
) -> Response<ResponseBody> {
    // Resolves once kubegate's 101 has been written to the client.
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, _) = req.into_parts();
    let metrics = &gw.metrics().terminate;
    let uri = parts.uri.clone();
    let kind = Shaper::new(upstreams, metrics).upgrade(client, &mut parts);
    // An upgrade is counted in no level: never charged by one.
    let payer = served.sent_as(gw, client, kind, &parts.headers, false, false);
    let mut placed = connect((gw, generation), upstreams, &uri, kind, &mut within.tried).await;
    if let Err(Unplaced::NoBackend) = placed {
        match within.fall_back() {
            Ok(true) => {
                placed = connect((gw, generation), upstreams, &uri, kind, &mut within.tried).await
            }
            Ok(false) => {}
            Err(refused) => return refused.answer(gw),
        }
    }
    let Ok((backend, mut sender)) = placed else {
        metrics.request_failed(RequestFailure::Unavailable);
        return unavailable("no apiserver could take the request");
    };
    served.answered_by(backend.clone(), within.tries());
    let in_flight = InFlight::begin(&backend, true, None, Some(&payer));
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
            metrics.request_failed(RequestFailure::Broken);
            return broken("the connection to the apiserver broke during the upgrade");
        }
    };
    metrics.count_request(&backend.info().name, class.verb, resp.status());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused (403, 400, ...): the apiserver's answer (a small Status) goes back as it is.
        let (parts, body) = resp.into_parts();
        return match read_small(body).await {
            Ok(body) => Response::from_parts(parts, ResponseBody::full(body)),
            Err(()) => {
                metrics.request_failed(RequestFailure::Broken);
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

/// An HTTP/1.1 connection to a backend not in `tried` (nor kept off by version skew, for
/// `uri`), retrying failed connects on others.
async fn connect(
    (gw, generation): (&Gateway, &Generation),
    upstreams: &Upstreams,
    uri: &Uri,
    kind: Kind,
    tried: &mut Vec<SocketAddr>,
) -> Result<(Arc<Backend>, SendRequest<Empty<bytes::Bytes>>), Unplaced<()>> {
    let tls = match kind {
        Kind::WithIdentity => upstreams.tls.presented().map(|p| p.h1.clone()),
        Kind::BearerToken | Kind::Anonymous => Some(upstreams.tls.without_identity_h1.clone()),
    };
    // A reload dropped the front-proxy certificate since the request was shaped.
    let Some(tls) = tls else {
        return Err(Unplaced::Failed(()));
    };
    let mut connects = Connects {
        gw,
        upstreams,
        tls,
        timeout: generation.config.connect.timeout,
    };
    let before = tried.len();
    let routing = generation.config.terminate.version_skew.routing;
    let steered = skew::steer((gw, routing), upstreams, uri, tried);
    let placed = place(gw, generation, &upstreams.cluster, &mut connects, tried).await;
    tried.drain(before..before + steered);
    placed
}

/// An upgrade's connects, as the placing loop runs them: only a failed connect is tried on
/// another backend (an upgrade request that reached an apiserver may have started a process).
struct Connects<'a> {
    gw: &'a Gateway,
    upstreams: &'a Upstreams,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl Attempt for Connects<'_> {
    type Output = SendRequest<Empty<bytes::Bytes>>;
    type Failure = ();

    fn load(&self, policy: BalancePolicy) -> fn(&Backend) -> u64 {
        load_for(policy)
    }

    async fn attempt(&mut self, backend: &Arc<Backend>) -> Result<Self::Output, ()> {
        let name = self.upstreams.tls.server_name.clone();
        let handshake = match tls_connect(
            backend.connect_address(),
            self.tls.clone(),
            name,
            self.timeout,
        )
        .await
        {
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
                Ok(sender)
            }
            Err(e) => {
                connect_failed(self.gw, backend, &e, "upgrade");
                Err(())
            }
        }
    }

    fn may_try_another(&self, _: ()) -> bool {
        true
    }

    fn retrying(&mut self, _: ()) {}
}
