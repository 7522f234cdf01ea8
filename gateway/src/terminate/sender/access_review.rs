//! One SubjectAccessReview (`authorization.k8s.io/v1`), sent as kubegate (`review::post`):
//! whether a sender may do what a request asks, by the apiserver's own authorizers (`access`
//! remembers the answer).

use crate::state::Gateway;
use crate::terminate::sender::attributes::Attributes;
use crate::terminate::sender::failure::ReviewFailure;
use crate::terminate::sender::review::post;
use crate::terminate::upstream::upstreams::Upstreams;
use kubegate_wire::identity::UserInfo;
use serde_json::{json, Value};
use std::sync::Arc;

/// Where SubjectAccessReviews go.
const PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// The group every authenticated user is in: the apiserver's authenticator adds it to every
/// user it authenticates (`AuthenticatedGroupAdder`), so a review names it too (roles bound to
/// it, such as discovery's, count).
const AUTHENTICATED: &str = "system:authenticated";

/// The user the apiserver takes a request without credentials to be (its groups are
/// `system:unauthenticated`, never [`AUTHENTICATED`]).
pub const ANONYMOUS: &str = "system:anonymous";

/// The review of `user` doing what `attributes` say.
pub fn review_of(user: &UserInfo, attributes: &Attributes) -> Value {
    let mut groups = user.groups.clone();
    if user.user != ANONYMOUS && !groups.iter().any(|g| g == AUTHENTICATED) {
        groups.push(AUTHENTICATED.to_string());
    }
    let mut spec = json!({
        "user": user.user,
        "groups": groups,
    });
    if let Some(uid) = &user.uid {
        spec["uid"] = json!(uid);
    }
    if !user.extra.is_empty() {
        spec["extra"] = json!(user.extra);
    }
    let (key, attrs) = attributes.review_json();
    spec[key] = attrs;
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    })
}

/// Sends one SubjectAccessReview: `Ok(true)` allowed, `Ok(false)` not (denied, or no opinion:
/// the apiserver would answer 403), `Err` the review itself failed.
pub async fn review(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    user: Arc<UserInfo>,
    attributes: Arc<Attributes>,
) -> Result<bool, ReviewFailure> {
    let answer = post(&gw, &upstreams, PATH, &review_of(&user, &attributes)).await?;
    allowed(&answer).map_err(ReviewFailure::Refused)
}

/// A review's `status.allowed`.
fn allowed(answer: &Value) -> Result<bool, String> {
    answer["status"]["allowed"]
        .as_bool()
        .ok_or_else(|| "a SubjectAccessReview answer without status.allowed".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminate::sender::attributes::of_get as attributes;

    #[test]
    fn a_review_names_the_user_and_everything_an_authorizer_reads() {
        let user = UserInfo {
            user: "system:serviceaccount:kube-system:kube-proxy".into(),
            groups: vec!["system:serviceaccounts".into()],
            uid: Some("u1".into()),
            extra: [(
                "authentication.kubernetes.io/node-name".to_string(),
                vec!["n1".to_string()],
            )]
            .into(),
        };
        let attrs = attributes(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=a%3Db&fieldSelector=metadata.name%3Dx",
        );
        let review = review_of(&user, &attrs);
        let spec = &review["spec"];
        assert_eq!(spec["user"], "system:serviceaccount:kube-system:kube-proxy");
        assert_eq!(
            spec["groups"],
            json!(["system:serviceaccounts", "system:authenticated"])
        );
        assert_eq!(spec["uid"], "u1");
        assert_eq!(
            spec["extra"]["authentication.kubernetes.io/node-name"],
            json!(["n1"])
        );
        let r = &spec["resourceAttributes"];
        assert_eq!(r["verb"], "list");
        assert_eq!(r["group"], "discovery.k8s.io");
        assert_eq!(r["version"], "v1");
        assert_eq!(r["resource"], "endpointslices");
        assert_eq!(r["namespace"], "default");
        assert_eq!(r["labelSelector"]["rawSelector"], "a=b");
        assert_eq!(r["fieldSelector"]["rawSelector"], "metadata.name=x");
        assert!(r.get("name").is_none());

        let get = review_of(&user, &attributes("/api/v1/namespaces/a/pods/p"));
        let r = &get["spec"]["resourceAttributes"];
        assert_eq!(
            (r["verb"].as_str(), r["name"].as_str()),
            (Some("get"), Some("p"))
        );
        assert!(r.get("group").is_none(), "the core group is empty: {r}");

        let anonymous = UserInfo {
            user: ANONYMOUS.into(),
            groups: vec!["system:unauthenticated".into()],
            uid: None,
            extra: Default::default(),
        };
        let theirs = review_of(&anonymous, &attributes("/version"));
        assert_eq!(theirs["spec"]["groups"], json!(["system:unauthenticated"]));
        let version = review_of(&user, &attributes("/version"));
        assert_eq!(
            version["spec"]["nonResourceAttributes"],
            json!({"path": "/version", "verb": "get"})
        );
    }

    #[test]
    fn only_an_explicit_allowed_allows() {
        assert_eq!(allowed(&json!({"status": {"allowed": true}})), Ok(true));
        assert_eq!(
            allowed(&json!({"status": {"allowed": false, "denied": true}})),
            Ok(false)
        );
        assert!(allowed(&json!({"status": {}})).is_err());
    }
}
