//! `/version`, `/api`, `/apis` and the per-group resource lists. Served as legacy (unaggregated)
//! discovery with `application/json`, which current clients accept when the server does not
//! answer with an aggregated discovery document.

use crate::resources::{Resource, ALL};
use crate::respond::Reply;
use http::StatusCode;
use serde_json::{json, Value};

/// Answers a discovery path, or `None`.
pub fn answer(path: &str) -> Option<Reply> {
    let path = path.trim_end_matches('/');
    let body = match path {
        "/version" => version(),
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
        }),
        "/apis" => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups(),
        }),
        "/api/v1" => resource_list("v1"),
        _ => {
            let gv = path.strip_prefix("/apis/")?;
            if ALL
                .iter()
                .any(|r| !r.group.is_empty() && r.api_version() == gv)
            {
                resource_list(gv)
            } else if let Some(g) = groups().into_iter().find(|g| g["name"] == gv) {
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

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "emulationMajor": "1",
        "emulationMinor": "35",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "34",
        "gitVersion": "v1.35.0-kubegate-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn groups() -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for r in ALL.iter().filter(|r| !r.group.is_empty()) {
        if out.iter().any(|g| g["name"] == r.group) {
            continue;
        }
        let gv = json!({"groupVersion": r.api_version(), "version": r.version});
        out.push(json!({"name": r.group, "versions": [gv], "preferredVersion": gv}));
    }
    out
}

fn resource_list(group_version: &str) -> Value {
    let resources: Vec<Value> = ALL
        .iter()
        .filter(|r| r.api_version() == group_version)
        .map(|r: &&Resource| {
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
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}
