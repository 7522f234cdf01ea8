//! Building responses the way the apiserver shapes them: Go's `http.Error`, JSON `Status`
//! objects (in Go's field order, [`crate::gojson`]), JSON bodies, streams (watch), and the
//! `Cache-Control` header the handler chain's `WithCacheControl` puts on nearly every answer.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde_json::{json, Value};

/// The body type of every simulator response.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A response under construction.
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// Headers in insertion order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whole body (ignored when `stream` is set).
    pub body: Bytes,
    /// A streaming body (watch).
    pub stream: Option<Body>,
}

impl Reply {
    /// A reply with a whole body and no headers yet.
    pub fn new(status: StatusCode, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into(),
            stream: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((
            HeaderName::from_static(name),
            HeaderValue::from_str(value).expect("valid header value"),
        ));
        self
    }

    /// A JSON body, as the apiserver's encoder writes it: Go's escaping, a `Status` in Go's
    /// field order, and `json.Encoder`'s trailing newline.
    pub fn json(status: StatusCode, value: &Value) -> Reply {
        let mut body = crate::gojson::to_vec(value);
        body.push(b'\n');
        Reply::new(status, body).header("content-type", "application/json")
    }

    /// Whether it has a header named `name` (lower case).
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|(k, _)| k == name)
    }

    /// Turns it into a hyper response.
    pub fn into_response(self) -> Response<Body> {
        let body = match self.stream {
            Some(s) => s,
            None => Full::new(self.body).map_err(|never| match never {}).boxed(),
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status;
        for (k, v) in self.headers {
            resp.headers_mut().append(k, v);
        }
        resp
    }
}

/// Go's `http.Error(w, msg, code)`: plain text, `nosniff`, a trailing newline.
pub fn http_error(status: StatusCode, message: &str) -> Reply {
    Reply::new(status, format!("{message}\n"))
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
}

/// Go's `http.NotFound`.
pub fn not_found_text() -> Reply {
    http_error(StatusCode::NOT_FOUND, "404 page not found")
}

/// A `metav1.Status` failure, as the apiserver encodes errors; an empty `reason` is left out
/// (`StatusReasonUnknown`, `omitempty`).
pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Reply {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    });
    if !reason.is_empty() {
        s["reason"] = json!(reason);
    }
    if let Some(d) = details {
        s["details"] = omit_empty(d);
    }
    Reply::json(StatusCode::from_u16(code).expect("valid code"), &s)
}

/// `StatusDetails`' fields are all `omitempty`: Go writes no empty name, group, kind, uid or
/// causes and no zero `retryAfterSeconds` (an empty `details` is still `{}`).
fn omit_empty(mut details: Value) -> Value {
    if let Some(map) = details.as_object_mut() {
        map.retain(|_, v| {
            !(v.as_str() == Some("")
                || v.as_i64() == Some(0)
                || v.as_array().is_some_and(Vec::is_empty))
        });
    }
    details
}

/// The value of the `Cache-Control` header `WithCacheControl` sets
/// (k8s.io/apiserver `pkg/endpoints/filters/cachecontrol.go`).
pub const CACHE_CONTROL: &str = "no-cache, private";

/// `WithCacheControl`: sets `Cache-Control: no-cache, private` unless the handler set one. It
/// wraps everything inside `WithRetryAfter` in `DefaultBuildHandlerChain` (`config.go`), so
/// authentication's 401, priority and fairness' 429, the shutdown 503 and every handler's
/// answer carry it; the shutdown 429 does not. A 101 is written on the hijacked connection by
/// the upgrade's own code, without the handler chain's headers.
pub fn with_cache_control(reply: Reply) -> Reply {
    if reply.status == StatusCode::SWITCHING_PROTOCOLS || reply.has_header("cache-control") {
        reply
    } else {
        reply.header("cache-control", CACHE_CONTROL)
    }
}

/// `metav1.Status` success (returned by delete).
pub fn status_success(details: Value) -> Reply {
    Reply::json(
        StatusCode::OK,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": omit_empty(details),
        }),
    )
}

/// 404 NotFound for an object.
pub fn not_found(group: &str, resource: &str, name: &str) -> Reply {
    let what = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    status(
        404,
        "NotFound",
        &format!("{what} \"{name}\" not found"),
        Some(json!({"name": name, "group": group, "kind": resource})),
    )
}

/// 503 while shutting down: k8s.io/apiserver `pkg/server/filters/waitgroup.go`,
/// `waitGroupWriteRetryAfterToResponse` (also `watch_termination.go`'s answer to a new watch):
/// `Retry-After: 1`, `application/json`, `nosniff`, and the `Status` as `runtime.EncodeOrDie`
/// writes it (the JSON encoder's newline) with one more `'\n'` appended.
pub fn shutting_down() -> Reply {
    let mut reply = status(
        503,
        "ServiceUnavailable",
        "apiserver is shutting down",
        None,
    )
    .header("retry-after", "1")
    .header("x-content-type-options", "nosniff");
    let mut body = reply.body.to_vec();
    body.push(b'\n');
    reply.body = body.into();
    reply
}

/// 429 with `--shutdown-send-retry-after`: k8s.io/apiserver
/// `pkg/server/filters/with_retry_after.go`, `withRetryAfter`: `Connection: close`,
/// `Retry-After: 5`, then `http.Error` (no `Cache-Control`: the filter is outside
/// `WithCacheControl`).
pub fn retry_after_shutdown() -> Reply {
    http_error(
        StatusCode::TOO_MANY_REQUESTS,
        "The apiserver is shutting down, please try again later.",
    )
    .header("connection", "close")
    .header("retry-after", "5")
}
