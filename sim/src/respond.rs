//! Building responses the way the apiserver shapes them: Go's `http.Error`, JSON `Status`
//! objects, JSON bodies, and streams (watch).

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

    /// A JSON body.
    pub fn json(status: StatusCode, value: &Value) -> Reply {
        let mut body = serde_json::to_vec(value).expect("serializable");
        body.push(b'\n');
        Reply::new(status, body).header("content-type", "application/json")
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

/// A `metav1.Status` failure, as the apiserver encodes errors.
pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Reply {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        s["details"] = d;
    }
    Reply::json(StatusCode::from_u16(code).expect("valid code"), &s)
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
            "details": details,
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

/// 503 while shutting down (`WithWaitGroup`): retry soon, probably on another replica.
pub fn shutting_down() -> Reply {
    status(
        503,
        "ServiceUnavailable",
        "apiserver is shutting down",
        None,
    )
    .header("retry-after", "1")
    .header("x-content-type-options", "nosniff")
}

/// 429 with `--shutdown-send-retry-after` (`WithRetryAfter`).
pub fn retry_after_shutdown() -> Reply {
    http_error(
        StatusCode::TOO_MANY_REQUESTS,
        "The apiserver is shutting down, please try again later.",
    )
    .header("connection", "close")
    .header("retry-after", "5")
}
