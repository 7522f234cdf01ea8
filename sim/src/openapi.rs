//! `/openapi/v3`: the discovery document and, per group version, a document with the PATCH
//! operation of each resource and its `fieldValidation` parameter. That is what kubectl's
//! `--validate` looks for (`QueryParamVerifierV3`): finding it, kubectl sends
//! `fieldValidation=Strict` and leaves validation to the server instead of downloading schemas.
//! Schemas themselves are not served; kubectl falls back to its compiled-in types for patches.

use crate::resources::Resource;
use crate::respond::Reply;
use crate::versions::Apis;
use http::StatusCode;
use serde_json::{json, Map, Value};

/// Answers `/openapi/v3[/GROUP-VERSION-PATH]`, or `None` for other paths.
pub fn answer(path: &str, apis: &Apis) -> Option<Reply> {
    let rest = path.strip_prefix("/openapi/v3")?;
    if rest.is_empty() || rest == "/" {
        let mut paths = Map::new();
        for gv in group_versions(apis) {
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash=kubegate-sim")}),
            );
        }
        return Some(Reply::json(StatusCode::OK, &json!({"paths": paths})));
    }
    let gv = rest.trim_start_matches('/');
    let resources: Vec<&Resource> = apis.resources().filter(|r| gv_path(r) == gv).collect();
    if resources.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for r in resources {
        paths.insert(
            format!("/{gv}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
            json!({"patch": operation(r, "patch")}),
        );
        paths.insert(
            format!("/{gv}/namespaces/{{namespace}}/{}", r.plural),
            json!({"post": operation(r, "post")}),
        );
    }
    Some(Reply::json(
        StatusCode::OK,
        &json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.35.0"},
            "paths": paths,
            "components": {"schemas": {}},
        }),
    ))
}

fn operation(r: &Resource, action: &str) -> Value {
    json!({
        "operationId": format!("{action}{}", r.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "parameters": [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
    })
}

fn gv_path(r: &Resource) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

fn group_versions(apis: &Apis) -> Vec<String> {
    let mut out: Vec<String> = apis.resources().map(gv_path).collect();
    out.sort();
    out.dedup();
    out
}
