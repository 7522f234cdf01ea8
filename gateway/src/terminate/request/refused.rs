//! The answers kubegate gives itself when a phase of a request refuses it (`handle`): each as
//! the apiserver would answer, or as client-go retries, counted by why.

use crate::state::Gateway;
use crate::telemetry::RequestFailure;
use crate::terminate::exchange::bodies;
use crate::terminate::exchange::body::ResponseBody;
use crate::terminate::exchange::status::status;
use crate::terminate::request::shape::CertificateRefusal;
use crate::terminate::rules::{Refusal, Rule};
use http::{header, Response, StatusCode, Version};
use kubegate_wire::classify::Unreadable;

/// The answer to a request on a connection whose verified client certificate cannot be passed
/// on (or has expired since): 401, as the apiserver's x509 authenticator answers it at every
/// request, never an anonymous request.
pub(super) fn certificate(gw: &Gateway, refusal: CertificateRefusal) -> Response<ResponseBody> {
    unauthorized(gw, refusal.message())
}

/// 401 with `message`, counted as unauthenticated.
fn unauthorized(gw: &Gateway, message: &str) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Unauthenticated);
    status(StatusCode::UNAUTHORIZED, "Unauthorized", message, None)
}

/// 421 Misdirected Request for a request of HTTP `version` on a connection to `cluster` whose
/// `authority` that cluster does not answer: the client may retry it on a new connection,
/// whose server name then chooses the right cluster.
pub(super) fn misdirected(
    gw: &Gateway,
    cluster: &str,
    authority: Option<&str>,
    version: Version,
) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Misdirected);
    tracing::debug!(
        cluster,
        authority = authority.unwrap_or(""),
        "a request names an authority its connection's cluster does not serve: 421"
    );
    let mut resp = status(
        StatusCode::MISDIRECTED_REQUEST,
        "Misdirected",
        &format!(
            "this connection serves cluster {cluster:?}, which does not answer {:?}: send the request on a connection made to that name",
            authority.unwrap_or("")
        ),
        None,
    );
    if version < Version::HTTP_2 {
        // The next request on this connection would be misdirected too: a new connection
        // (with the right server name) is what the client needs.
        resp.headers_mut()
            .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    resp
}

/// The answer to a bearer-token request whose sender kubegate could not name in time while
/// a `dispatch` rule names senders: 429 with `Retry-After`, which client-go retries.
pub(super) fn unreviewed(gw: &Gateway) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Unreviewed);
    too_many(
        "kubegate could not yet review the bearer token, and its dispatch rules name senders",
        1,
    )
}

/// The answer to a request whose bearer token kubegate cannot read as the apiserver would
/// (bytes that are not UTF-8, a WebSocket token protocol the apiserver refuses): 401, as the
/// apiserver answers a token it cannot authenticate, rather than a name kubegate guessed.
pub(super) fn unreadable_token(gw: &Gateway) -> Response<ResponseBody> {
    unauthorized(gw, "Unauthorized: the bearer token cannot be read as text")
}

/// The answer to a request whose target the apiserver would refuse before any handler: 400
/// for a path that does not decode (Go's HTTP server), 500 for a path verb with nothing after
/// it (the apiserver's `RequestInfo` filter). Never forwarded.
pub(super) fn unreadable(gw: &Gateway, why: &Unreadable) -> Response<ResponseBody> {
    let m = &gw.metrics().terminate;
    match why {
        Unreadable::Target(e) => {
            m.request_failed(RequestFailure::BadRequest);
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("the request's path cannot be read: {e}"),
                None,
            )
        }
        Unreadable::NoResource => {
            m.request_failed(RequestFailure::BadRequest);
            status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("Internal error occurred: failed to create RequestInfo: {why}"),
                None,
            )
        }
    }
}

/// The answer to a request its rule's limit refused: 429 with a `Status` and `Retry-After`,
/// which client-go retries (never a reset).
pub(super) fn limited(gw: &Gateway, rule: &Rule, refusal: Refusal) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Limited);
    let (why, retry_after) = match refusal {
        Refusal::InFlight => ("too many requests in flight", 1),
        Refusal::Rate { retry_after } => ("over its rate", seconds(retry_after)),
        Refusal::Rejected { retry_after } => ("rejecting its requests", seconds(retry_after)),
    };
    too_many(
        &format!("kubegate's dispatch rule {:?} is {why}", rule.name),
        retry_after,
    )
}

/// The 429 of a read cut off while it waited for a replica's answer (`forward::CutOff`): a
/// run-time rule that rejects its sender came into force meanwhile.
pub(super) fn cut_off(
    gw: &Gateway,
    cluster: &str,
    rule: &Rule,
    retry_after: std::time::Duration,
) -> Response<ResponseBody> {
    let why = format!(
        "kubegate's dispatch rule {:?} came into force while the request waited for an apiserver, which was told to cancel it",
        rule.name
    );
    let metrics = &gw.metrics().terminate;
    metrics.request_failed(RequestFailure::Limited);
    metrics.shed_cut_off.with_label_values(&[cluster]).inc();
    too_many(&why, seconds(retry_after))
}

/// The 429 of a request `terminate.auto_shed` holds back: its sender runs away in a priority
/// level a replica is rejecting.
pub(super) fn held_back(
    gw: &Gateway,
    cluster: &str,
    retry_after: std::time::Duration,
) -> Response<ResponseBody> {
    let metrics = &gw.metrics().terminate;
    metrics.request_failed(RequestFailure::Limited);
    metrics
        .auto_shed_rejected
        .with_label_values(&[cluster])
        .inc();
    too_many(
        "kubegate holds this sender back while the apiservers reject its priority level (terminate.auto_shed)",
        seconds(retry_after),
    )
}

/// kubegate's own 429: a `Status` (reason `TooManyRequests`) whose message starts as the
/// apiserver's own 429s do and says `why`, with `Retry-After`, which client-go waits out and
/// retries.
fn too_many(why: &str, retry_after: u32) -> Response<ResponseBody> {
    status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        &format!("Too many requests, please try again later: {why}"),
        Some(retry_after),
    )
}

/// `wait` in whole seconds for a `Retry-After`, rounded up, at least 1.
fn seconds(wait: std::time::Duration) -> u32 {
    u32::try_from(wait.as_millis().div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// The answer to a body kubegate would not hold: 413 (too large for the request, its
/// connection or the gateway), 408 (too slow), 400 (broken off).
pub(super) fn body(gw: &Gateway, refused: bodies::Refused) -> Response<ResponseBody> {
    gw.metrics().terminate.request_failed(refused.failure());
    let (code, reason) = match refused {
        bodies::Refused::TooLarge(..) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
        bodies::Refused::Timeout(_) => (StatusCode::REQUEST_TIMEOUT, "Timeout"),
        bodies::Refused::Broken => (StatusCode::BAD_REQUEST, "BadRequest"),
    };
    status(code, reason, &refused.message(), None)
}
