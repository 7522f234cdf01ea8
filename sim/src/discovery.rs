//! `/version`, `/api`, `/apis` and the per-group resource lists. Served as legacy (unaggregated)
//! discovery with `application/json`, which current clients accept when the server does not
//! answer with an aggregated discovery document.

use crate::resources::Resource;
use crate::respond::Reply;
use crate::versions::Apis;
use http::StatusCode;
use serde_json::{json, Value};

/// Answers a discovery path, or `None`, for a replica serving `apis`.
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
            let gv = path.strip_prefix("/apis/")?;
            if apis
                .resources()
                .any(|r| !r.group.is_empty() && r.api_version() == gv)
            {
                resource_list(apis, gv)
            } else if let Some(g) = groups(apis).into_iter().find(|g| g["name"] == gv) {
                let mut g = g;
                g["kind"] = json!("APIGroup");
                g["apiVersion"] = json!("v1");
                g
            } else {
                return None;
            }
        }
    };
    Some(Reply::json(StatusCode::OK, &body))
}

/// The served groups, each with its versions, the newest (GA before beta) preferred.
fn groups(apis: &Apis) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for r in apis.resources().filter(|r| !r.group.is_empty()) {
        let gv = json!({"groupVersion": r.api_version(), "version": r.version});
        match out.iter_mut().find(|g| g["name"] == r.group) {
            Some(g) => {
                let versions = g["versions"].as_array_mut().expect("built as an array");
                if !versions.contains(&gv) {
                    versions.push(gv);
                    versions.sort_by_key(|v| priority(v["version"].as_str().unwrap_or("")));
                    g["preferredVersion"] = versions[0].clone();
                }
            }
            None => out.push(json!({"name": r.group, "versions": [gv], "preferredVersion": gv})),
        }
    }
    out
}

/// Kubernetes' version priority, highest first: GA, then beta, then alpha, newer first.
fn priority(version: &str) -> (u8, std::cmp::Reverse<u32>, std::cmp::Reverse<u32>) {
    let rest = version.trim_start_matches('v');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (2, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, std::cmp::Reverse(major), std::cmp::Reverse(minor))
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
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}
