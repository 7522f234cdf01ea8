//! The fault port (loopback only): make named checks fail or add latency while the replica runs.
//!
//! ```text
//! POST /fail?check=etcd        the check fails from now on (on every endpoint that has it)
//! POST /pass?check=etcd        it passes again
//! POST /latency?ms=250         every request waits this long first (0 to clear)
//! POST /cache?state=initializing  the watch caches re-initialize, as the cacher does after
//!                              its etcd watch failed: LISTs and watches get 429 "storage is
//!                              (re)initializing" while /readyz passes; state=ready ends it
//! POST /cache?state=lagging    the watch cache stops taking etcd's changes (--watch-cache):
//!                              a watch from beyond it fails "Too large resource version"
//!                              after 3 s; state=ready catches it up
//! POST /apf?level=L&state=saturated  traffic that does not pass through any gateway holds
//!                              every seat of priority level L and fills its queues: its new
//!                              requests get APF's 429 at once; state=calm ends it;
//!                              &retry_after=N: they ask for N s (else the level's adapted
//!                              Retry-After)
//! POST /revoke?token=T         the static token T is no longer accepted (a deleted service
//!                              account's): requests carrying it get 401, its reviews say so
//! POST /admission?resource=R&state=deny429
//!                              a validating admission webhook denies every create, update,
//!                              patch and delete of R (a plural, or `pods/eviction`) with a
//!                              429 Status, after priority and fairness admitted it;
//!                              &webhook=NAME, &message=TEXT, &reason=REASON (empty: none),
//!                              &retry_after=N (the webhook's details.retryAfterSeconds, so
//!                              Retry-After: N); state=allow ends it
//! POST /pod-answer?status=CODE&body=TEXT&content_type=TYPE
//!                              what every pod answers through pods/NAME/proxy (each omitted
//!                              parameter takes its default: 200, `ok`,
//!                              `text/plain; charset=utf-8`; an empty content_type sends none)
//! POST /aggregated-answer?status=CODE&body=TEXT&content_type=TYPE&header=NAME:VALUE
//!                              what the extension servers behind --aggregated-api answer to
//!                              every request the aggregator passes them (defaults: 200,
//!                              metrics-server's APIResourceList for the group-version's path
//!                              and an empty List below it, application/json; header= repeats)
//! GET  /state                  forced checks, latency, in-flight requests, open watches, and
//!                              what the replica received since the start: requests (all but
//!                              health), writes, LISTs, WATCHes, reviews, evictions, proxied
//!                              requests, aggregated requests, requests refused for an
//!                              expired certificate
//! ```

use crate::query::params as query_params;
use crate::state::Sim;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves the fault port until the process ends.
pub async fn serve(listener: TcpListener, sim: Arc<Sim>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let sim = sim.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let sim = sim.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&sim, req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

fn handle(sim: &Sim, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let params = query_params(req.uri().query());
    let get = |k: &str| crate::query::first(&params, k);
    let (status, body) = match (req.method(), req.uri().path()) {
        (&Method::POST, "/fail") | (&Method::POST, "/pass") => match get("check") {
            Some(check) => {
                let failing = req.uri().path() == "/fail";
                sim.checks.force(check, failing);
                tracing::info!(check, failing, "fault: check forced");
                (StatusCode::OK, json!({"check": check, "failing": failing}))
            }
            None => (
                StatusCode::BAD_REQUEST,
                json!({"error": "check= is required"}),
            ),
        },
        (&Method::POST, "/latency") => match get("ms").and_then(|m| m.parse::<u64>().ok()) {
            Some(ms) => {
                sim.latency_ms.store(ms, Ordering::Relaxed);
                tracing::info!(ms, "fault: latency set");
                (StatusCode::OK, json!({"latency_ms": ms}))
            }
            None => (
                StatusCode::BAD_REQUEST,
                json!({"error": "ms=<integer> is required"}),
            ),
        },
        (&Method::POST, "/cache") => match get("state") {
            Some(state @ ("initializing" | "ready" | "lagging")) => {
                let lagging = state == "lagging";
                if sim.store.set_lagging(lagging) || !lagging {
                    sim.checks.set_cache_initializing(state == "initializing");
                    tracing::info!(state, "fault: watch caches");
                    (StatusCode::OK, json!({"cache": state}))
                } else {
                    (
                        StatusCode::BAD_REQUEST,
                        json!({"error": "state=lagging needs a watch cache (--watch-cache)"}),
                    )
                }
            }
            _ => (
                StatusCode::BAD_REQUEST,
                json!({"error": "state=initializing, state=lagging or state=ready is required"}),
            ),
        },
        (&Method::POST, "/apf") => match (get("level"), get("state")) {
            (Some(level), Some(state @ ("saturated" | "calm")))
                if sim.flowcontrol.saturate(
                    level,
                    state == "saturated",
                    get("retry_after").and_then(|s| s.parse().ok()),
                ) && sim.flowcontrol.queue(level, None) =>
            {
                tracing::info!(level, state, "fault: priority level");
                (StatusCode::OK, json!({"level": level, "state": state}))
            }
            (Some(level), Some("queued"))
                if get("ms")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .is_some_and(|ms| {
                        sim.flowcontrol
                            .queue(level, Some(std::time::Duration::from_millis(ms)))
                    }) =>
            {
                tracing::info!(level, "fault: priority level queued");
                (StatusCode::OK, json!({"level": level, "state": "queued"}))
            }
            _ => (
                StatusCode::BAD_REQUEST,
                json!({"error": "level=<a limited priority level> and state=saturated, state=queued&ms=N or state=calm are required"}),
            ),
        },
        (&Method::POST, "/revoke") => match get("token") {
            Some(token) if sim.authenticator.tokens.revoke(token) => {
                tracing::info!("fault: a token revoked");
                (StatusCode::OK, json!({"revoked": true}))
            }
            _ => (
                StatusCode::BAD_REQUEST,
                json!({"error": "token= naming one of --token-auth-file's tokens is required"}),
            ),
        },
        (&Method::POST, "/admission") => answered(admission(sim, &params)),
        (&Method::POST, "/pod-answer") => answered(pod_answer(sim, &params)),
        (&Method::POST, "/aggregated-answer") => answered(aggregated_answer(sim, &params)),
        (&Method::GET, "/state") => (
            StatusCode::OK,
            json!({
                "replica": sim.behaviour.replica,
                "forced_failing": sim.checks.forced(),
                "latency_ms": sim.latency_ms.load(Ordering::Relaxed),
                "inflight": sim.inflight.load(Ordering::Relaxed),
                "watches": sim.watches.load(Ordering::Relaxed),
                "requests_received": sim.requests.requests.load(Ordering::Relaxed),
                "writes_received": sim.requests.writes.load(Ordering::Relaxed),
                "evictions_received": sim.requests.evictions.load(Ordering::Relaxed),
                "proxied_received": sim.requests.proxied.load(Ordering::Relaxed),
                "aggregated_received": sim.requests.aggregated.load(Ordering::Relaxed),
                "expired_certificates_refused": sim.requests.expired_certificates.load(Ordering::Relaxed),
                "admission_denied": sim.admission.denied(),
                "lists_received": sim.requests.lists.load(Ordering::Relaxed),
                "continue_pages_from_cache": sim.requests.continue_pages_from_cache.load(Ordering::Relaxed),
                "continue_pages_from_storage": sim.requests.continue_pages_from_storage.load(Ordering::Relaxed),
                "continue_pages_expired": sim.requests.continue_pages_expired.load(Ordering::Relaxed),
                "watches_received": sim.requests.watches.load(Ordering::Relaxed),
                "watch_lists_received": sim.requests.watch_lists.load(Ordering::Relaxed),
                "token_reviews_received": sim.requests.token_reviews.load(Ordering::Relaxed),
                "access_reviews_received": sim.requests.access_reviews.load(Ordering::Relaxed),
                "bytes_sent": sim.requests.bytes_sent.load(Ordering::Relaxed),
                "requests_abandoned": sim.requests.abandoned.load(Ordering::Relaxed),
                "shutting_down": sim.checks.shutting_down(),
                "cache_initializing": sim.checks.cache_initializing(),
                "custom_caches_initializing": sim.checks.cache_initializing_for(true),
            }),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            json!({"error": "see the fault port's documentation"}),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

/// `POST /admission?resource=R&state=deny429|allow[&webhook=..][&message=..][&reason=..]
/// [&retry_after=N]`.
fn admission(sim: &Sim, params: &[(String, String)]) -> Result<serde_json::Value, &'static str> {
    let get = |k: &str| crate::query::first(params, k);
    let Some(resource) = get("resource").filter(|r| !r.is_empty()) else {
        return Err("resource=<plural, or pods/eviction> is required");
    };
    match get("state") {
        Some("allow") => {
            sim.admission.set(resource, None);
            tracing::info!(resource, "fault: admission allows");
            Ok(json!({"resource": resource, "state": "allow"}))
        }
        Some("deny429") => {
            let webhook = get("webhook").unwrap_or(DEFAULT_WEBHOOK);
            if !crate::admission::valid_webhook_name(webhook) {
                return Err("webhook= must be a DNS subdomain (a webhook's name)");
            }
            let retry_after = match get("retry_after").map(str::parse::<u32>) {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(_)) => return Err("retry_after=<seconds> must be an integer"),
            };
            let mut denial = crate::admission::Denial::too_many_requests(
                webhook,
                get("reason").unwrap_or("TooManyRequests"),
                get("message").unwrap_or("too many requests, please try again later"),
            );
            denial.retry_after = retry_after;
            sim.admission.set(resource, Some(denial));
            tracing::info!(resource, webhook, "fault: admission denies with 429");
            Ok(json!({"resource": resource, "state": "deny429", "webhook": webhook}))
        }
        _ => Err("state=deny429 or state=allow is required"),
    }
}

/// The webhook named in denials unless `webhook=` names another.
const DEFAULT_WEBHOOK: &str = "deny.kubegate-sim.example.com";

/// What `/pod-answer` and `/aggregated-answer` are given alike, each `None` when omitted:
/// `status=` (200 to 999), `body=`, `content_type=` (empty: none sent).
struct Given<'a> {
    status: Option<StatusCode>,
    body: Option<&'a str>,
    content_type: Option<Option<http::HeaderValue>>,
}

impl<'a> Given<'a> {
    fn read(params: &'a [(String, String)]) -> Result<Given<'a>, &'static str> {
        let get = |k: &str| crate::query::first(params, k);
        let status = match get("status") {
            None => None,
            Some(code) => match code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
            {
                Some(status) if status.as_u16() >= 200 => Some(status),
                _ => return Err("status= must be a status code from 200 to 999"),
            },
        };
        let content_type = match get("content_type") {
            None => None,
            Some("") => Some(None),
            Some(t) => match http::HeaderValue::from_str(t) {
                Ok(v) => Some(Some(v)),
                Err(_) => return Err("content_type= must be a valid header value"),
            },
        };
        Ok(Given {
            status,
            body: get("body"),
            content_type,
        })
    }

    /// Sets what was given of `status` and `content_type`; the body given, if any.
    fn apply(
        self,
        status: &mut StatusCode,
        content_type: &mut Option<http::HeaderValue>,
    ) -> Option<&'a str> {
        if let Some(s) = self.status {
            *status = s;
        }
        if let Some(t) = self.content_type {
            *content_type = t;
        }
        self.body
    }
}

/// A fault's answer: 200 and what is now in force, or 400 and why its parameters cannot be
/// taken.
fn answered(fault: Result<serde_json::Value, &str>) -> (StatusCode, serde_json::Value) {
    match fault {
        Ok(shown) => (StatusCode::OK, shown),
        Err(why) => (StatusCode::BAD_REQUEST, json!({"error": why})),
    }
}

/// `POST /pod-answer?status=CODE&body=TEXT&content_type=TYPE`.
fn pod_answer(sim: &Sim, params: &[(String, String)]) -> Result<serde_json::Value, &'static str> {
    let given = Given::read(params)?;
    let mut answer = crate::pod_answer::Answer::default();
    if let Some(body) = given.apply(&mut answer.status, &mut answer.content_type) {
        answer.body = Bytes::from(body.to_string());
    }
    let shown = json!({
        "status": answer.status.as_u16(),
        "body": String::from_utf8_lossy(&answer.body),
        "content_type": answer.content_type.as_ref().and_then(|v| v.to_str().ok()),
    });
    sim.pod_answer.set(answer);
    tracing::info!(%shown, "fault: pods answer");
    Ok(shown)
}

/// `POST /aggregated-answer?status=CODE&body=TEXT&content_type=TYPE&header=NAME:VALUE...`:
/// what the extension servers behind `--aggregated-api` answer. An omitted parameter takes its
/// default (200; for the group-version's own path metrics-server's `APIResourceList`, else
/// an empty `List`; `application/json`; no further header); an empty `content_type` sends none;
/// `header=` repeats, in order. `Content-Length` is the body's.
fn aggregated_answer(
    sim: &Sim,
    params: &[(String, String)],
) -> Result<serde_json::Value, &'static str> {
    let given = Given::read(params)?;
    let mut answer = crate::extension::Answer::default();
    if let Some(body) = given.apply(&mut answer.status, &mut answer.content_type) {
        answer.body = Some(Bytes::from(body.to_string()));
    }
    for (k, v) in params {
        if k != "header" {
            continue;
        }
        let parsed = v.split_once(':').and_then(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            let value = http::HeaderValue::from_str(value.trim()).ok()?;
            Some((name, value))
        });
        match parsed {
            Some((name, _)) if name == http::header::CONTENT_LENGTH => {
                return Err("header=Content-Length: the body's length is sent")
            }
            Some(pair) => answer.headers.push(pair),
            None => return Err("header= must be NAME:VALUE"),
        }
    }
    let shown = json!({
        "status": answer.status.as_u16(),
        "body": answer.body.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        "content_type": answer.content_type.as_ref().and_then(|v| v.to_str().ok()),
        "headers": answer.headers.iter().map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes()))).collect::<Vec<_>>(),
    });
    sim.extension.set(answer);
    tracing::info!(%shown, "fault: extension servers answer");
    Ok(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Vec<(String, String)> {
        query_params(Some(query))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aggregated_answer_sets_what_the_extension_servers_say() {
        let s = crate::testserver::TestServer::start().await;
        let shown = aggregated_answer(
            &s.sim,
            &params("status=429&body=slow%20down&content_type=&header=Retry-After:%207&header=X-Kubernetes-PF-FlowSchema-UID:ext"),
        );
        assert_eq!(
            shown,
            Ok(
                json!({"status": 429, "body": "slow down", "content_type": null,
                   "headers": ["retry-after: 7", "x-kubernetes-pf-flowschema-uid: ext"]})
            )
        );
        let answer = s.sim.extension.get();
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.body.as_deref(), Some(&b"slow down"[..]));
        assert_eq!(answer.content_type, None);
        assert_eq!(answer.headers.len(), 2);
        // Nothing but defaults: the per-path default body, JSON.
        let shown = aggregated_answer(&s.sim, &params(""));
        assert_eq!(
            shown,
            Ok(
                json!({"status": 200, "body": null, "content_type": "application/json", "headers": []})
            )
        );
        for bad in [
            "status=99",
            "header=nocolon",
            "header=Content-Length:3",
            "content_type=%0a",
        ] {
            assert!(aggregated_answer(&s.sim, &params(bad)).is_err(), "{bad}");
        }
        assert_eq!(s.sim.extension.get(), crate::extension::Answer::default());
    }
}
