//! One SubjectAccessReview (`authorization.k8s.io/v1`), sent as kubegate (`review::post`):
//! whether a sender may do what a request asks, by the apiserver's own authorizers (`access`
//! remembers the answer).

use crate::state::Gateway;
use crate::terminate::sender::review::{post, ReviewFailure};
use crate::terminate::upstream::mode::Upstreams;
use kubegate_wire::classify::RequestInfo;
use kubegate_wire::identity::UserInfo;
use kubegate_wire::target::Query;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Where SubjectAccessReviews go.
const PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// The group every authenticated user is in: the apiserver's authenticator adds it to every
/// user it authenticates (`AuthenticatedGroupAdder`), so a review names it too (roles bound to
/// it, such as discovery's, count).
const AUTHENTICATED: &str = "system:authenticated";

/// What a request asks, as an authorizer reads it: a resource request's verb, group, version,
/// resource, subresource, namespace, name and selectors (which authorizers may read since
/// 1.34), or a non-resource request's path and verb.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// `resourceAttributes`.
    Resource {
        /// RBAC's verb: `get`, `list`, `watch`.
        verb: String,
        /// The API group (`""`: core).
        group: String,
        /// The API version.
        version: String,
        /// The resource.
        resource: String,
        /// The subresource, or `""`.
        subresource: String,
        /// The namespace, or `""` (cluster-scoped, or every namespace).
        namespace: String,
        /// The object's name, or `""`.
        name: String,
        /// The `labelSelector` asked, or `""`.
        label_selector: String,
        /// The `fieldSelector` asked, or `""`.
        field_selector: String,
    },
    /// `nonResourceAttributes`.
    NonResource {
        /// The path, decoded.
        path: String,
        /// The verb: the method in lower case.
        verb: String,
    },
}

impl Attributes {
    /// What the request read as `info`, at `path` (decoded) with `query`, asks.
    pub fn of(info: &RequestInfo<'_>, path: &str, query: &Query<'_>) -> Attributes {
        let t = &info.target;
        let text = |key| query.text(key).map(|v| v.into_owned()).unwrap_or_default();
        match t.api_group {
            Some(group) => Attributes::Resource {
                verb: info.rbac_verb.to_string(),
                group: group.to_string(),
                version: t.api_version.to_string(),
                resource: t.resource.unwrap_or_default().to_string(),
                subresource: t.subresource.unwrap_or_default().to_string(),
                namespace: t.namespace.unwrap_or_default().to_string(),
                name: t.name.unwrap_or_default().to_string(),
                label_selector: text("labelSelector"),
                field_selector: text("fieldSelector"),
            },
            None => Attributes::NonResource {
                path: path.to_string(),
                verb: info.rbac_verb.to_string(),
            },
        }
    }

    /// The review's attributes, as JSON (empty fields left out, as the apiserver encodes
    /// them).
    fn to_json(&self) -> (&'static str, Value) {
        let mut m = Map::new();
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                m.insert(k.to_string(), json!(v));
            }
        };
        match self {
            Attributes::Resource {
                verb,
                group,
                version,
                resource,
                subresource,
                namespace,
                name,
                label_selector,
                field_selector,
            } => {
                put("verb", verb);
                put("group", group);
                put("version", version);
                put("resource", resource);
                put("subresource", subresource);
                put("namespace", namespace);
                put("name", name);
                if !label_selector.is_empty() {
                    m.insert(
                        "labelSelector".into(),
                        json!({ "rawSelector": label_selector }),
                    );
                }
                if !field_selector.is_empty() {
                    m.insert(
                        "fieldSelector".into(),
                        json!({ "rawSelector": field_selector }),
                    );
                }
                ("resourceAttributes", Value::Object(m))
            }
            Attributes::NonResource { path, verb } => {
                put("path", path);
                put("verb", verb);
                ("nonResourceAttributes", Value::Object(m))
            }
        }
    }

    /// Every field, length-prefixed: the bytes the remembered answer is keyed by.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut part = |s: &str| {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        match self {
            Attributes::Resource {
                verb,
                group,
                version,
                resource,
                subresource,
                namespace,
                name,
                label_selector,
                field_selector,
            } => {
                part("resource");
                for f in [
                    verb,
                    group,
                    version,
                    resource,
                    subresource,
                    namespace,
                    name,
                    label_selector,
                    field_selector,
                ] {
                    part(f);
                }
            }
            Attributes::NonResource { path, verb } => {
                part("non-resource");
                part(path);
                part(verb);
            }
        }
    }
}

/// The review of `user` doing what `attributes` say.
pub fn review_of(user: &UserInfo, attributes: &Attributes) -> Value {
    let mut groups = user.groups.clone();
    if !groups.iter().any(|g| g == AUTHENTICATED) {
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
    let (key, attrs) = attributes.to_json();
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
    use http::{Method, Uri};
    use kubegate_wire::classify::ReadTarget;

    fn attributes(target: &str) -> Attributes {
        let uri: Uri = format!("https://kube.example{target}").parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        Attributes::of(&read.info(&Method::GET), read.path(), &read.query())
    }

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

        let version = review_of(&user, &attributes("/version"));
        assert_eq!(
            version["spec"]["nonResourceAttributes"],
            json!({"path": "/version", "verb": "get"})
        );
    }

    #[test]
    fn different_attributes_write_different_bytes() {
        let mut seen = std::collections::HashSet::new();
        for t in [
            "/api/v1/pods",
            "/api/v1/namespaces/a/pods",
            "/api/v1/namespaces/a/pods/p",
            "/api/v1/pods?labelSelector=a",
            "/api/v1/pods?fieldSelector=a",
            "/apis/apps/v1/deployments",
            "/version",
            "/api/v1/namespaces/a/pods/p/log",
        ] {
            let mut out = Vec::new();
            attributes(t).write_to(&mut out);
            assert!(seen.insert(out), "{t} written as another");
        }
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
