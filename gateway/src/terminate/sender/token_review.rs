//! One TokenReview (`authentication.k8s.io/v1`), sent as kubegate (`review::post`): who a
//! bearer token belongs to (`tokens` remembers the answer).

use crate::state::Gateway;
use crate::terminate::sender::failure::ReviewFailure;
use crate::terminate::sender::review::post;
use crate::terminate::upstream::upstreams::Upstreams;
use kubegate_wire::identity::UserInfo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where TokenReviews go.
const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Sends one TokenReview: `Ok(Some)` named, `Ok(None)` the apiserver did not accept the
/// token, `Err` the review itself failed, why (in the apiserver's words where it gave any).
pub async fn review(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    token: String,
) -> Result<Option<UserInfo>, ReviewFailure> {
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let answer = post(&gw, &upstreams, PATH, &review).await?;
    read_status(&answer).map_err(ReviewFailure::Refused)
}

/// A TokenReview's `status`: the user it names, if the token was accepted.
fn read_status(v: &Value) -> Result<Option<UserInfo>, String> {
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
    // Every value of every key, as the authorizer is given them (a bound service account
    // token's pod and node).
    let extra: BTreeMap<String, Vec<String>> = status["user"]["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let values = v.as_array().into_iter().flatten();
            (
                k.clone(),
                values
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect(),
            )
        })
        .collect();
    Ok(Some(UserInfo {
        user: user.to_string(),
        groups,
        uid,
        extra,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<UserInfo>, String> {
        read_status(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn a_review_status_names_the_user_only_when_accepted() {
        let named = read(r#"{"status":{"authenticated":true,"user":{"username":"system:serviceaccount:ci:runner","uid":"u","groups":["system:serviceaccounts","system:serviceaccounts:ci","system:authenticated"],"extra":{"authentication.kubernetes.io/pod-name":["runner-0"],"authentication.kubernetes.io/node-name":["n1"]}}}}"#).unwrap().unwrap();
        assert_eq!(named.user, "system:serviceaccount:ci:runner");
        assert_eq!(named.groups.len(), 3);
        assert_eq!(named.uid.as_deref(), Some("u"));
        assert_eq!(
            named.extra["authentication.kubernetes.io/pod-name"],
            ["runner-0"]
        );
        assert_eq!(named.extra.len(), 2);
        assert_eq!(
            read(r#"{"status":{"authenticated":false,"error":"invalid bearer token"}}"#),
            Ok(None)
        );
        assert_eq!(read(r#"{"status":{}}"#), Ok(None));
        assert!(read(r#"{"status":{"authenticated":true,"user":{}}}"#).is_err());
    }
}
