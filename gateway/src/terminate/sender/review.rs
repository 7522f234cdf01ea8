//! One review (a TokenReview, a SubjectAccessReview) POSTed as kubegate's own front-proxy
//! identity to a ready replica, placed and retried as any request kubegate makes, its answer
//! read as JSON. kubegate's user needs the `system:auth-delegator` ClusterRole for both.

use crate::state::Gateway;
use crate::terminate::sender::failure::ReviewFailure;
use crate::terminate::upstream::own::{self, Unanswered};
use crate::terminate::upstream::upstreams::Upstreams;
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use kubegate_wire::classify::{RequestClass, Verb};
use serde_json::Value;

/// The largest review answer read: a TokenReview's echoes the token (OIDC tokens run to
/// several KiB) and lists every group and extra of the user.
const ANSWER_LIMIT: usize = 1 << 20;

/// POSTs `review` to `path` as kubegate: the apiserver's answer (201 or 200), as JSON.
pub async fn post(
    gw: &Gateway,
    upstreams: &Upstreams,
    path: &'static str,
    review: &Value,
) -> Result<Value, ReviewFailure> {
    let body =
        Bytes::from(serde_json::to_vec(review).map_err(|e| ReviewFailure::Refused(e.to_string()))?);
    let class = RequestClass {
        verb: Verb::Create,
        long_running: None,
    };
    let answer = own::send(
        gw,
        upstreams,
        Method::POST,
        Uri::from_static(path),
        body,
        class,
    )
    .await
    .map_err(|e| match e {
        Unanswered::NoIdentity => {
            ReviewFailure::Refused("no front-proxy certificate (upstream.front_proxy)".into())
        }
        Unanswered::Transient(why) => ReviewFailure::Transient(why),
    })?;
    let status = answer.status;
    let body = answer
        .whole(ANSWER_LIMIT)
        .await
        .map_err(ReviewFailure::Transient)?;
    if status != StatusCode::CREATED && status != StatusCode::OK {
        return Err(refused(status, &body));
    }
    serde_json::from_slice(&body).map_err(|e| ReviewFailure::Refused(format!("the answer: {e}")))
}

/// Why the apiserver answered `status` to a review, in its own words (a `Status`'s message)
/// where its answer has them; transient for 429 and 5xx.
fn refused(status: StatusCode, body: &[u8]) -> ReviewFailure {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string));
    let why = match (status, message) {
        (StatusCode::FORBIDDEN, Some(m)) => format!(
            "the apiserver answered 403: {m} (kubegate's user needs the system:auth-delegator ClusterRole)"
        ),
        (_, Some(m)) => format!("the apiserver answered {status}: {m}"),
        (_, None) => format!("the apiserver answered {status}"),
    };
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        ReviewFailure::Transient(why)
    } else {
        ReviewFailure::Refused(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_review_names_the_apiservers_reason_and_whether_to_ask_again() {
        let forbidden = br#"{"kind":"Status","message":"tokenreviews.authentication.k8s.io is forbidden: User \"kubegate\" cannot create resource"}"#;
        match refused(StatusCode::FORBIDDEN, forbidden) {
            ReviewFailure::Refused(why) => {
                assert!(why.contains("cannot create resource"), "{why}");
                assert!(why.contains("system:auth-delegator"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        match refused(
            StatusCode::TOO_MANY_REQUESTS,
            b"{\"message\":\"Too many requests\"}",
        ) {
            ReviewFailure::Transient(why) => assert!(why.contains("429"), "{why}"),
            other => panic!("{other:?}"),
        }
        match refused(StatusCode::BAD_REQUEST, b"") {
            ReviewFailure::Refused(why) => {
                assert!(!why.contains("auth-delegator"), "not blamed on RBAC: {why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
