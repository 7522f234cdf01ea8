//! Responses kubegate answers itself, as a `meta/v1 Status` JSON body like the apiserver's
//! errors, so clients (client-go, kubectl) read them as they would an apiserver's.

use crate::terminate::exchange::body::ResponseBody;
use http::{header, Response, StatusCode};

/// A `Status` response. `retry_after` (seconds) tells client-go to try again, which it does
/// for every verb: only set it when the request was not processed.
pub fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry_after: Option<u32>,
) -> Response<ResponseBody> {
    let mut details = serde_json::Map::new();
    if let Some(s) = retry_after {
        details.insert("retryAfterSeconds".into(), s.into());
    }
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code.as_u16(),
    });
    let mut resp = Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private");
    if let Some(s) = retry_after {
        resp = resp.header(header::RETRY_AFTER, s);
    }
    resp.body(ResponseBody::full(
        serde_json::to_vec(&body).expect("a Status serializes"),
    ))
    .expect("a valid response")
}

/// No backend can take the request (none ready, or every one tried failed before processing
/// it): 503 with `Retry-After`, so client-go retries.
pub fn unavailable(message: &str) -> Response<ResponseBody> {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        message,
        Some(1),
    )
}

/// The backend may have processed the request when its connection broke: 502 without
/// `Retry-After`, so a write is never replayed behind the client's back.
pub fn broken(message: &str) -> Response<ResponseBody> {
    status(StatusCode::BAD_GATEWAY, "InternalError", message, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_status_reads_like_the_apiservers() {
        let resp = unavailable("no apiserver is ready");
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "1");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["code"], 503);
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        let resp = broken("connection broke");
        assert!(resp.headers().get("retry-after").is_none());
    }
}
