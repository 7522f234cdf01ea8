//! One TokenReview (`authentication.k8s.io/v1`), sent as kubegate's own front-proxy identity
//! to a ready replica, placed and retried as any request kubegate makes: who a bearer token
//! belongs to (`tokens` remembers the answer).

use crate::net::Unplaced;
use crate::state::Gateway;
use crate::terminate::request::body::read_whole;
use crate::terminate::request::shape::Outgoing;
use crate::terminate::sender::tokens::ReviewFailure;
use crate::terminate::upstream::dispatch::{dispatch, Answer};
use crate::terminate::upstream::mode::Upstreams;
use bytes::Bytes;
use http::{Method, StatusCode};
use kubegate_wire::classify::{RequestClass, Verb};
use kubegate_wire::identity::UserInfo;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// Where TokenReviews go.
const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// The largest review answer read: the answer echoes the token (OIDC tokens run to several
/// KiB) and lists every group and extra of the user.
const ANSWER_LIMIT: usize = 1 << 20;

/// Sends one TokenReview: `Ok(Some)` named, `Ok(None)` the apiserver did not accept the
/// token, `Err` the review itself failed, why (in the apiserver's words where it gave any).
pub async fn review(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    token: String,
) -> Result<Option<UserInfo>, ReviewFailure> {
    let (gw, upstreams) = (&*gw, &*upstreams);
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let body =
        Bytes::from(serde_json::to_vec(&body).map_err(|e| ReviewFailure::Refused(e.to_string()))?);
    let outgoing = Outgoing::as_kubegate(upstreams, Method::POST, PATH, body).ok_or_else(|| {
        ReviewFailure::Refused("no front-proxy certificate (upstream.front_proxy)".into())
    })?;
    let class = RequestClass {
        verb: Verb::Create,
        long_running: None,
    };
    let answer = dispatch(
        gw,
        upstreams,
        &outgoing,
        class,
        &mut Vec::new(),
        Instant::now(),
    )
    .await
    .map_err(|e| match e {
        Unplaced::NoBackend => ReviewFailure::Transient("no apiserver is ready".to_string()),
        Unplaced::Failed(f) => ReviewFailure::Transient(f.as_str().to_string()),
    })?
    .1;
    let (status, body) = match answer {
        // A 429, 503 or 404 kubegate read whole: no review.
        Answer::Whole(resp) => (resp.status(), Bytes::new()),
        Answer::Streaming { resp, .. } => {
            let status = resp.status();
            let body = read_whole(resp.into_body(), ANSWER_LIMIT)
                .await
                .map_err(ReviewFailure::Transient)?;
            (status, body)
        }
    };
    if status != StatusCode::CREATED && status != StatusCode::OK {
        return Err(refused(status, &body));
    }
    read_status(&body).map_err(ReviewFailure::Refused)
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

/// A TokenReview's `status`: the user it names, if the token was accepted.
fn read_status(body: &[u8]) -> Result<Option<UserInfo>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the answer: {e}"))?;
    let status = &v["status"];
    if status["authenticated"].as_bool() != Some(true) {
        return Ok(None);
    }
    let user = status["user"]["username"]
        .as_str()
        .filter(|u| !u.is_empty())
        .ok_or("an accepted token without a username")?;
    let groups = status["user"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    let uid = status["user"]["uid"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(str::to_string);
    Ok(Some(UserInfo {
        user: user.to_string(),
        groups,
        uid,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_status_names_the_user_only_when_accepted() {
        let named = read_status(br#"{"status":{"authenticated":true,"user":{"username":"system:serviceaccount:ci:runner","uid":"u","groups":["system:serviceaccounts","system:serviceaccounts:ci","system:authenticated"]}}}"#).unwrap().unwrap();
        assert_eq!(named.user, "system:serviceaccount:ci:runner");
        assert_eq!(named.groups.len(), 3);
        assert_eq!(named.uid.as_deref(), Some("u"));
        assert_eq!(
            read_status(br#"{"status":{"authenticated":false,"error":"invalid bearer token"}}"#),
            Ok(None)
        );
        assert_eq!(read_status(br#"{"status":{}}"#), Ok(None));
        assert!(read_status(br#"{"status":{"authenticated":true,"user":{}}}"#).is_err());
        assert!(read_status(b"not json").is_err());
    }

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
