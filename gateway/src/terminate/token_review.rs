//! One TokenReview (`authentication.k8s.io/v1`), sent as kubegate's own front-proxy identity
//! to a ready replica, placed and retried as any request kubegate makes: who a bearer token
//! belongs to (`tokens` remembers the answer).

use crate::net::Unplaced;
use crate::state::Gateway;
use crate::terminate::body::read_small;
use crate::terminate::dispatch::{dispatch, Answer};
use crate::terminate::mode::Upstreams;
use crate::terminate::request::Outgoing;
use bytes::Bytes;
use http::{Method, StatusCode};
use kubegate_wire::classify::{RequestClass, Verb};
use kubegate_wire::identity::UserInfo;
use serde_json::{json, Value};
use std::sync::Arc;

/// Where TokenReviews go.
const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Sends one TokenReview: `Ok(Some)` named, `Ok(None)` the apiserver did not accept the
/// token, `Err` the review itself failed.
pub async fn review(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    token: String,
) -> Result<Option<UserInfo>, String> {
    let (gw, upstreams) = (&*gw, &*upstreams);
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let body = Bytes::from(serde_json::to_vec(&body).map_err(|e| e.to_string())?);
    let outgoing = Outgoing::as_kubegate(upstreams, Method::POST, PATH, body)
        .ok_or("no front-proxy certificate (upstream.front_proxy)")?;
    let class = RequestClass {
        verb: Verb::Create,
        long_running: None,
    };
    let answer = dispatch(gw, upstreams, &outgoing, class, &mut Vec::new())
        .await
        .map_err(|e| match e {
            Unplaced::NoBackend => "no apiserver is ready".to_string(),
            Unplaced::Failed(f) => f.as_str().to_string(),
        })?
        .1;
    let (status, body) = match answer {
        // A 429, 503 or 404 kubegate read whole: no review.
        Answer::Whole(resp) => (resp.status(), Bytes::new()),
        Answer::Streaming { resp, .. } => {
            let status = resp.status();
            let body = read_small(resp.into_body())
                .await
                .map_err(|()| "the answer broke off or was too large".to_string())?;
            (status, body)
        }
    };
    if status != StatusCode::CREATED && status != StatusCode::OK {
        return Err(format!("the apiserver answered {status}"));
    }
    read_status(&body)
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
    Ok(Some(UserInfo {
        user: user.to_string(),
        groups,
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
        assert_eq!(
            read_status(br#"{"status":{"authenticated":false,"error":"invalid bearer token"}}"#),
            Ok(None)
        );
        assert_eq!(read_status(br#"{"status":{}}"#), Ok(None));
        assert!(read_status(br#"{"status":{"authenticated":true,"user":{}}}"#).is_err());
        assert!(read_status(b"not json").is_err());
    }
}
