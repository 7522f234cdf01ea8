//! One terminate-mode request, from the client's head to the answer: an upgrade goes its own
//! way (`upgrade`); otherwise the body is read whole (bounded: a retry must be able to send it
//! again), the request shaped for the backends (`request`), placed and sent (`dispatch`), and
//! a watch's response followed across backends (`watch`). With the access log on, the
//! response body carries the request's line until it ends (`served`).

use crate::net::Unplaced;
use crate::state::Gateway;
use crate::telemetry::{AttemptFailure, RequestFailure};
use crate::terminate::body::{LoggedBody, Relayed, ResponseBody};
use crate::terminate::dispatch::{dispatch, Answer};
use crate::terminate::mode::{TerminateMode, Upstreams};
use crate::terminate::request::{Client, Outgoing, Shaper};
use crate::terminate::retry::may_retry;
use crate::terminate::rules::{Facts, Refusal, Rule, Slot};
use crate::terminate::served::{self, Served};
use crate::terminate::status::{broken, status, unavailable};
use crate::terminate::{upgrade, watch};
use bytes::Bytes;
use http::header;
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use kubegate_config::{AccessLogFormat, Fallback};
use kubegate_wire::classify::{request_info, RequestClass, Verb};
use kubegate_wire::framing::Framing;
use kubegate_wire::position::resumed_query;
use std::sync::Arc;
use std::time::Instant;

/// Serves one request, and logs it if the access log is on.
pub async fn handle(
    gw: Arc<Gateway>,
    mode: Arc<TerminateMode>,
    client: Arc<Client>,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    if gw.config().load().terminate.access_log.format == AccessLogFormat::Off {
        return serve(gw, mode, &client, req, &mut Served::default()).await;
    }
    let started = Instant::now();
    let mut entry = served::entry(&client, &req);
    let mut served = Served::default();
    // Boxed: requests served without a log line do not pay for the larger future.
    let resp = Box::pin(serve(gw.clone(), mode, &client, req, &mut served)).await;
    served.complete(&mut entry, &resp);
    resp.map(|body| LoggedBody::wrap(body, entry, started, gw))
}

/// Serves one request; `served` learns who sent it and which replica answered.
async fn serve(
    gw: Arc<Gateway>,
    mode: Arc<TerminateMode>,
    client: &Client,
    req: Request<Incoming>,
    served: &mut Served,
) -> Response<ResponseBody> {
    if client.unnamed_certificate {
        // As the apiserver's x509 authenticator: a certificate that names no user is an
        // error, never an anonymous request.
        gw.metrics()
            .terminate
            .request_failed(RequestFailure::Unauthenticated);
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized: the client certificate has no common name (CN), so it names no user",
            None,
        );
    }
    let upstreams = mode.upstreams();
    let info = request_info(req.method(), req.uri());
    let class = info.class;
    let rules = mode.rules();
    let rule = rules
        .rule_for(&Facts {
            info,
            path: req.uri().path(),
            identity: client.identity.as_ref(),
        })
        .cloned();
    let slot = match &rule {
        Some(rule) => match rule.admit(Instant::now()) {
            Ok(slot) => Some(slot),
            Err(refusal) => return limited(&gw, rule, refusal),
        },
        None => None,
    };
    if upgrade::requested(&req) {
        // Boxed, as every rarely taken path that awaits a large future: a future is as large
        // as its largest await, and each request's is allocated and moved whole. An upgrade
        // holds its rule's slot only until it is established, as any long-running request.
        return Box::pin(upgrade::proxy(&gw, &upstreams, client, req, class, served)).await;
    }
    let (parts, body) = req.into_parts();
    let body = if body.is_end_stream() {
        // Most requests (GET, watch, DELETE without options) carry none.
        Bytes::new()
    } else {
        match read_body(&gw, body).await {
            Ok(body) => body,
            Err(answer) => return answer,
        }
    };
    let mut outgoing =
        Shaper::new(&upstreams, &gw.metrics().terminate).request(client, parts, body);
    served.sent_as(&gw, client, outgoing.kind(), outgoing.user_agent());
    if class.verb == Verb::Watch {
        // Bookmarks carry positions: asked for upstream whatever the client asked (those it
        // did not ask for are kept from it).
        outgoing = outgoing.with_query(&resumed_query(outgoing.client_query(), None, None));
    }
    let ruled = rule.map(|rule| Ruled { rule, slot });
    send(gw, upstreams, outgoing, class, served, ruled).await
}

/// A request's dispatch rule and its place under the rule's limits.
struct Ruled {
    rule: Arc<Rule>,
    slot: Option<Slot>,
}

/// The answer to a request its rule's limit refused: 429 with a `Status` and `Retry-After`,
/// which client-go retries (never a reset).
fn limited(gw: &Gateway, rule: &Rule, refusal: Refusal) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Limited);
    let (why, retry_after) = match refusal {
        Refusal::InFlight => ("too many requests in flight", 1),
        Refusal::Rate { retry_after } => (
            "over its rate",
            u32::try_from(retry_after.as_millis().div_ceil(1000))
                .unwrap_or(u32::MAX)
                .max(1),
        ),
    };
    status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        &format!(
            "Too many requests, please try again later: kubegate's dispatch rule {:?} is {why}",
            rule.name
        ),
        Some(retry_after),
    )
}

/// The addresses of the backends `rule` does not send to: placed as already tried, so that
/// the balancer picks among the rule's own.
fn outside(gw: &Gateway, rule: &Rule) -> Vec<std::net::SocketAddr> {
    if rule.backends.is_empty() {
        return Vec::new();
    }
    gw.pool()
        .backends()
        .iter()
        .filter(|b| !rule.backends.contains(&b.info().name))
        .map(|b| b.address)
        .collect()
}

/// Reads a request body whole (a retry must be able to send it again), up to
/// `terminate.max_request_body_bytes`; `Err` is the answer for the client. The read is
/// boxed: only requests with a body pay for its future.
async fn read_body(gw: &Gateway, body: Incoming) -> Result<Bytes, Response<ResponseBody>> {
    let limit = gw.config().load().terminate.max_request_body_bytes;
    let read = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX)).collect();
    let metrics = &gw.metrics().terminate;
    match Box::pin(read).await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            metrics.request_failed(RequestFailure::BodyTooLarge);
            Err(status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                &format!("the request body is larger than {limit} bytes"),
                None,
            ))
        }
        Err(e) => {
            metrics.request_failed(RequestFailure::BadRequest);
            Err(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("reading the request body: {e}"),
                None,
            ))
        }
    }
}

/// Sends `outgoing` and answers the client.
async fn send(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    outgoing: Outgoing,
    class: RequestClass,
    served: &mut Served,
    ruled: Option<Ruled>,
) -> Response<ResponseBody> {
    let metrics = &gw.metrics().terminate;
    let (rule, slot) = match ruled {
        Some(Ruled { rule, slot }) => (Some(rule), slot),
        None => (None, None),
    };
    let mut tried = rule.as_ref().map(|r| outside(&gw, r)).unwrap_or_default();
    let mut elsewhere = tried.len();
    let mut answer = dispatch(&gw, &upstreams, &outgoing, class, &mut tried).await;
    if let (Err(Unplaced::NoBackend), Some(rule)) = (&answer, &rule) {
        if elsewhere > 0 {
            if rule.fallback == Fallback::None {
                metrics.request_failed(RequestFailure::NoRuleBackend);
                return unavailable(&format!(
                    "none of the apiservers of kubegate's dispatch rule {:?} is ready",
                    rule.name
                ));
            }
            rule.fell_back();
            tried.clear();
            elsewhere = 0;
            answer = dispatch(&gw, &upstreams, &outgoing, class, &mut tried).await;
        }
    }
    let answer = answer.map(|(replica, answer)| {
        served.answered_by(replica, tried.len() - elsewhere);
        answer
    });
    // A long-running request counts against its rule's limit only until its response
    // starts; any other until its body has been sent.
    let slot = slot.filter(|_| class.long_running.is_none());
    let hold = move |resp: Response<ResponseBody>| match slot {
        Some(slot) => resp.map(|body| ResponseBody::held(body, slot)),
        None => resp,
    };
    let resp = match answer {
        Ok(Answer::Whole(resp)) => resp,
        Ok(Answer::Streaming {
            resp,
            in_flight,
            stream,
        }) => {
            let watch = class.verb == Verb::Watch;
            let framing = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(Framing::of);
            match framing {
                Some(framing) if watch && resp.status() == StatusCode::OK => watch::follow(
                    gw.clone(),
                    upstreams.clone(),
                    outgoing,
                    class,
                    resp,
                    (in_flight, stream),
                    framing,
                ),
                _ => resp.map(|body| {
                    ResponseBody::Relayed(Relayed::new(body, watch, in_flight, stream))
                }),
            }
        }
        Err(Unplaced::NoBackend) => {
            metrics.request_failed(RequestFailure::NoReadyBackend);
            unavailable("no apiserver is ready")
        }
        Err(Unplaced::Failed(AttemptFailure::NotServed)) => {
            // No replica tried has a handler for it: the apiserver's own answer.
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
                None,
            )
        }
        Err(Unplaced::Failed(failure)) if !may_retry(failure, &class) => {
            metrics.request_failed(RequestFailure::Broken);
            broken("the connection to the apiserver broke after the request was sent: it may have been applied")
        }
        Err(Unplaced::Failed(_)) => {
            metrics.request_failed(RequestFailure::Unavailable);
            unavailable("no apiserver could take the request")
        }
    };
    hold(resp)
}
