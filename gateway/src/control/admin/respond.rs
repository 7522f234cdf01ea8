//! The admin endpoint's answers: text, JSON and HTML responses.

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

/// A plain-text answer.
pub fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

/// A JSON answer.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).expect("serializable");
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

/// An HTML page: no script, no frame, nothing loaded from elsewhere (its style is inline).
pub fn html(body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        )
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}
