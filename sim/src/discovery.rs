//! `/version`, `/api`, `/apis` and the per-group resource lists. Served as legacy (unaggregated)
//! discovery with `application/json`, which current clients accept when the server does not
//! answer with an aggregated discovery document.

use crate::aggregator;
use crate::resources::Resource;
use crate::respond::Reply;
use crate::versions::Apis;
use http::StatusCode;
use serde_json::{json, Value};

/// Answers a discovery path, or `None`, for a replica serving `apis`.
///
/// `/apis`, `/apis/` and `/apis/GROUP` are kube-aggregator's (`handler_apis.go`: `apisHandler`,
/// `apiGroupHandler`), read from the replica's APIServices ([`crate::aggregator`]): a group
/// none names is not answered here (it ends at the not-found handler). `/apis/GROUP/VERSION` is
/// the resource list of a group-version the replica serves itself (an extension server's is
/// proxied, never answered here).
pub fn answer(path: &str, apis: &Apis) -> Option<Reply> {
    let path = path.trim_end_matches('/');
    let body = match path {
        "/version" => apis.version(),
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
        }),
        "/apis" => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups(apis),
        }),
        "/api/v1" => resource_list(apis, "v1"),
        _ => {
            let rest = path.strip_prefix("/apis/")?;
            match rest.split_once('/') {
                Some((group, version)) if apis.serves_locally(group, version) => {
                    resource_list(apis, rest)
                }
                Some(_) => return None,
                None => {
                    let mut g = groups(apis).into_iter().find(|g| g["name"] == rest)?;
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    g
                }
            }
        }
    };
    Some(Reply::json(StatusCode::OK, &body))
}

/// `apisHandler`'s groups: the aggregator's own first, then the APIServices' groups in
/// `SortedByGroupAndVersion` order, each preferring its first version
/// (`convertToDiscoveryAPIGroup`). The core group is not among them.
fn groups(apis: &Apis) -> Vec<Value> {
    let own = format!("{}/{}", aggregator::GROUP, aggregator::VERSION);
    let own = json!({"groupVersion": own, "version": aggregator::VERSION});
    let mut out =
        vec![json!({"name": aggregator::GROUP, "versions": [own], "preferredVersion": own})];
    let services = aggregator::api_services(apis);
    for group in aggregator::sorted_by_group_and_version(&services) {
        if group[0].group.is_empty() {
            continue;
        }
        let versions: Vec<Value> = group
            .iter()
            .map(|s| json!({"groupVersion": format!("{}/{}", s.group, s.version), "version": s.version}))
            .collect();
        out.push(
            json!({"name": group[0].group, "preferredVersion": versions[0], "versions": versions}),
        );
    }
    out
}

/// The resources of the group-versions every replica serves besides its stored ones: the
/// aggregator's `apiservices` (read-only here) and the review APIs (create only).
fn always_served(group_version: &str) -> Vec<Value> {
    let review = |name: &str, singular: &str, kind: &str| json!({"name": name, "singularName": singular, "namespaced": false, "kind": kind, "verbs": ["create"]});
    match group_version {
        "apiregistration.k8s.io/v1" => vec![
            json!({"name": "apiservices", "singularName": "apiservice", "namespaced": false, "kind": "APIService", "verbs": ["get", "list"], "categories": ["api-extensions"], "storageVersionHash": ""}),
            json!({"name": "apiservices/status", "singularName": "", "namespaced": false, "kind": "APIService", "verbs": ["get"]}),
        ],
        "authentication.k8s.io/v1" => vec![
            review(
                "selfsubjectreviews",
                "selfsubjectreview",
                "SelfSubjectReview",
            ),
            review("tokenreviews", "tokenreview", "TokenReview"),
        ],
        "authorization.k8s.io/v1" => vec![review(
            "subjectaccessreviews",
            "subjectaccessreview",
            "SubjectAccessReview",
        )],
        _ => Vec::new(),
    }
}

/// The pod subresources the simulator serves, as `/api/v1` lists them (`kubectl drain` looks
/// for `pods/eviction` there, with its group and version, before it evicts rather than
/// deletes).
fn pod_subresources() -> Vec<Value> {
    let sub = |name: &str, kind: &str, verbs: &[&str]| json!({"name": format!("pods/{name}"), "singularName": "", "namespaced": true, "kind": kind, "verbs": verbs});
    let mut eviction = sub("eviction", "Eviction", &["create"]);
    eviction["group"] = json!("policy");
    eviction["version"] = json!("v1");
    vec![
        sub("attach", "PodAttachOptions", &["create", "get"]),
        eviction,
        sub("exec", "PodExecOptions", &["create", "get"]),
        sub("log", "Pod", &["get"]),
        sub("portforward", "PodPortForwardOptions", &["create", "get"]),
        sub(
            "proxy",
            "PodProxyOptions",
            &["create", "delete", "get", "patch", "update"],
        ),
    ]
}

fn resource_list(apis: &Apis, group_version: &str) -> Value {
    let mut resources: Vec<Value> = apis
        .resources()
        .filter(|r| r.api_version() == group_version)
        .map(|r: &Resource| {
            json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": true,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "update", "watch"],
                "shortNames": r.short_names,
                "storageVersionHash": "",
            })
        })
        .collect();
    if group_version == "v1" && apis.serves(&crate::resources::PODS) {
        resources.extend(pod_subresources());
    }
    resources.extend(always_served(group_version));
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(path: &str, apis: &Apis) -> Option<String> {
        answer(path, apis).map(|r| String::from_utf8(r.body.to_vec()).unwrap())
    }

    fn group(name: &str, versions: &[&str]) -> String {
        let gv = |v: &str| format!("{{\"groupVersion\":\"{name}/{v}\",\"version\":\"{v}\"}}");
        let all: Vec<String> = versions.iter().map(|v| gv(v)).collect();
        format!(
            "{{\"name\":\"{name}\",\"preferredVersion\":{},\"versions\":[{}]}}",
            gv(versions[0]),
            all.join(",")
        )
    }

    #[test]
    fn apis_lists_the_aggregators_group_first_then_the_apiservices_by_priority() {
        let apis = Apis::new("1.35.0", None, &["resource.k8s.io/v1beta1=true".into()])
            .unwrap()
            .with_aggregated(&["metrics.k8s.io/v1beta1".into()])
            .unwrap();
        let groups = [
            group("apiregistration.k8s.io", &["v1"]),
            group("authentication.k8s.io", &["v1"]),
            group("authorization.k8s.io", &["v1"]),
            group("policy", &["v1"]),
            group("coordination.k8s.io", &["v1"]),
            group("discovery.k8s.io", &["v1"]),
            group("resource.k8s.io", &["v1", "v1beta1"]),
            group("kubegate.example.com", &["v1"]),
            group("metrics.k8s.io", &["v1beta1"]),
        ];
        let expected = format!(
            "{{\"apiVersion\":\"v1\",\"groups\":[{}],\"kind\":\"APIGroupList\"}}\n",
            groups.join(",")
        );
        assert_eq!(text("/apis", &apis).as_deref(), Some(expected.as_str()));
        assert_eq!(text("/apis/", &apis).as_deref(), Some(expected.as_str()));
        let resource = group("resource.k8s.io", &["v1", "v1beta1"]);
        assert_eq!(
            text("/apis/resource.k8s.io", &apis).unwrap(),
            format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"APIGroup\",{}\n",
                &resource[1..]
            )
        );
        // No APIService names it: not answered here (the not-found handler's).
        assert_eq!(text("/apis/apps", &apis), None);
        // An extension server's group-version is its own to answer.
        assert_eq!(text("/apis/metrics.k8s.io/v1beta1", &apis), None);
    }

    #[test]
    fn the_group_versions_every_replica_serves_list_their_resources() {
        let apis = Apis::default();
        assert_eq!(
            text("/apis/apiregistration.k8s.io/v1", &apis).unwrap(),
            "{\"apiVersion\":\"v1\",\"groupVersion\":\"apiregistration.k8s.io/v1\",\"kind\":\"APIResourceList\",\"resources\":[{\"categories\":[\"api-extensions\"],\"kind\":\"APIService\",\"name\":\"apiservices\",\"namespaced\":false,\"singularName\":\"apiservice\",\"storageVersionHash\":\"\",\"verbs\":[\"get\",\"list\"]},{\"kind\":\"APIService\",\"name\":\"apiservices/status\",\"namespaced\":false,\"singularName\":\"\",\"verbs\":[\"get\"]}]}\n"
        );
        assert_eq!(
            text("/apis/authentication.k8s.io/v1", &apis).unwrap(),
            "{\"apiVersion\":\"v1\",\"groupVersion\":\"authentication.k8s.io/v1\",\"kind\":\"APIResourceList\",\"resources\":[{\"kind\":\"SelfSubjectReview\",\"name\":\"selfsubjectreviews\",\"namespaced\":false,\"singularName\":\"selfsubjectreview\",\"verbs\":[\"create\"]},{\"kind\":\"TokenReview\",\"name\":\"tokenreviews\",\"namespaced\":false,\"singularName\":\"tokenreview\",\"verbs\":[\"create\"]}]}\n"
        );
        assert_eq!(
            text("/apis/authorization.k8s.io/v1", &apis).unwrap(),
            "{\"apiVersion\":\"v1\",\"groupVersion\":\"authorization.k8s.io/v1\",\"kind\":\"APIResourceList\",\"resources\":[{\"kind\":\"SubjectAccessReview\",\"name\":\"subjectaccessreviews\",\"namespaced\":false,\"singularName\":\"subjectaccessreview\",\"verbs\":[\"create\"]}]}\n"
        );
        assert_eq!(
            text("/apis/apiregistration.k8s.io", &apis).unwrap(),
            "{\"apiVersion\":\"v1\",\"kind\":\"APIGroup\",\"name\":\"apiregistration.k8s.io\",\"preferredVersion\":{\"groupVersion\":\"apiregistration.k8s.io/v1\",\"version\":\"v1\"},\"versions\":[{\"groupVersion\":\"apiregistration.k8s.io/v1\",\"version\":\"v1\"}]}\n"
        );
    }
}
