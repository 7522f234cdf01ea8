//! The admin endpoint: `/livez`, `/readyz`, `/metrics`, `/debug/backends`, `/debug/config`.
//!
//! Plain HTTP/1.1; it keeps answering through `stopping` and `draining` so probes and scrapes see
//! the shutdown happen. `/livez` is 200 until the process exits.

use crate::gateway::Gateway;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tokio::net::TcpListener;

/// Serves admin requests on `listener` until the process ends.
pub async fn serve(listener: TcpListener, gw: Arc<Gateway>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let gw = gw.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(route(&gw, req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            let _ = conn.await;
        });
    }
}

fn route(gw: &Gateway, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/livez" | "/healthz" => text(StatusCode::OK, "ok".into()),
        "/readyz" => match gw.ready() {
            Ok(()) => text(StatusCode::OK, "ok".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        "/metrics" => Response::builder()
            .header(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )
            .body(Full::new(Bytes::from(gw.metrics().render())))
            .expect("valid response"),
        "/debug/backends" => json(&backends_view(gw)),
        "/debug/config" => json(&**gw.config().load()),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

fn json<T: Serialize + ?Sized>(value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).expect("serializable");
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

/// One row of `/debug/backends`; `kubegate status` reads the same shape.
#[derive(Serialize, serde::Deserialize, Debug)]
pub struct BackendView {
    /// Name in logs and metrics.
    pub name: String,
    /// Where connections go.
    pub address: String,
    /// Where probes go.
    pub probe_address: String,
    /// Health state.
    pub state: String,
    /// When the state began (RFC 3339).
    pub since: String,
    /// Result label of the last probe (`pass`, `fail`, `tls_error`, `timeout`, ...).
    pub last_probe_result: Option<String>,
    /// What the last probe found, in words.
    pub last_probe_detail: Option<String>,
    /// Duration of the last probe in milliseconds.
    pub last_probe_latency_ms: Option<f64>,
    /// When the last probe started (RFC 3339).
    pub last_probe_at: Option<String>,
    /// Failing readyz checks in the last verbose answer.
    pub failing_checks: Vec<String>,
    /// The last answer said `[-]shutdown`.
    pub shutting_down: bool,
    /// Skipped after a failed connect until the next probe.
    pub ejected: bool,
    /// Passing probes in a row it needs to (re)enter `ready`: `health.rise`, or more while it
    /// flaps (`health.flap_damping`).
    pub passes_to_ready: u32,
    /// Open proxied connections.
    pub active_connections: i64,
    /// Terminate-mode requests in flight (long-running ones included).
    #[serde(default)]
    pub requests_in_flight: usize,
    /// Terminate mode's HTTP/2 connections open for new requests.
    #[serde(default)]
    pub upstream_connections: usize,
}

fn backends_view(gw: &Gateway) -> Vec<BackendView> {
    gw.pool()
        .backends()
        .iter()
        .map(|b| {
            let info = b.info();
            let probe = b.last_probe();
            BackendView {
                name: info.name.clone(),
                address: b.address.to_string(),
                probe_address: info.probe_address.to_string(),
                state: b.state().as_str().into(),
                since: humantime::format_rfc3339_millis(
                    UNIX_EPOCH + Duration::from_millis(b.since_unix_ms()),
                )
                .to_string(),
                last_probe_result: probe.as_ref().map(|p| p.outcome.result_label().into()),
                last_probe_detail: probe.as_ref().map(|p| p.outcome.describe()),
                last_probe_latency_ms: probe.as_ref().map(|p| p.latency.as_secs_f64() * 1e3),
                last_probe_at: probe
                    .as_ref()
                    .map(|p| humantime::format_rfc3339_millis(p.at).to_string()),
                failing_checks: probe
                    .as_ref()
                    .map(|p| p.outcome.failing_checks().to_vec())
                    .unwrap_or_default(),
                shutting_down: b.shutting_down(),
                ejected: b.ejected(),
                passes_to_ready: b.passes_to_ready(),
                active_connections: b.planes().passthrough.open() as i64,
                requests_in_flight: b.planes().terminate.in_flight(),
                upstream_connections: b.planes().terminate.connections(),
            }
        })
        .collect()
}
