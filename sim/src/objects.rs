//! Object JSON in and out of the store: metadata the server owns (uid, resourceVersion,
//! creationTimestamp), list and Table shapes.

use crate::resources::Resource;
use crate::store::Stored;
use serde_json::{json, Map, Value};
use std::time::SystemTime;

/// The stored value with `metadata.resourceVersion` set from the store.
pub fn from_store(kv: &Stored, resource: &Resource) -> Value {
    with_revision(kv, kv.mod_revision, resource)
}

/// The stored value with an explicit resourceVersion (a deletion's revision), in the
/// group-version `resource` was asked for: versions of a resource share their storage, and
/// the apiserver converts to the one requested.
pub fn with_revision(kv: &Stored, revision: i64, resource: &Resource) -> Value {
    let mut v: Value = serde_json::from_slice(&kv.value).unwrap_or_else(|_| json!({}));
    v["metadata"]["resourceVersion"] = json!(revision.to_string());
    v["apiVersion"] = json!(resource.api_version());
    v
}

/// What is wrong with a request body, as an apiserver would say it.
pub type Invalid = String;

/// Checks and completes a new object for `resource` in `namespace`. Returns the object to
/// store and its name.
pub fn prepare_create(
    resource: &Resource,
    namespace: &str,
    body: &[u8],
) -> Result<(Value, String), Invalid> {
    let mut obj = parse_body(resource, body)?;
    let meta = obj["metadata"]
        .as_object_mut()
        .ok_or("metadata is required")?;
    if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
        if !ns.is_empty() && ns != namespace {
            return Err(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            );
        }
    }
    let name = match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) => format!("{prefix}{}", random_suffix()),
            None => return Err("name or generateName is required".into()),
        },
    };
    validate_name(&name)?;
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(namespace));
    meta.insert("uid".into(), json!(uid()));
    meta.insert("creationTimestamp".into(), json!(now()));
    meta.remove("resourceVersion");
    Ok((obj, name))
}

/// Checks an updated object against the stored one. Returns the object to store and the
/// resourceVersion precondition it carried.
pub fn prepare_update(
    resource: &Resource,
    namespace: &str,
    name: &str,
    body: &[u8],
    current: &Value,
) -> Result<(Value, Option<i64>), Invalid> {
    let mut obj = parse_body(resource, body)?;
    let meta = obj["metadata"]
        .as_object_mut()
        .ok_or("metadata is required")?;
    if meta.get("name").and_then(Value::as_str) != Some(name) {
        return Err(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta.get("name").and_then(Value::as_str).unwrap_or("")
        ));
    }
    let precondition = match meta.get("resourceVersion").and_then(Value::as_str) {
        Some(rv) if !rv.is_empty() => Some(
            rv.parse::<i64>()
                .map_err(|_| format!("invalid resourceVersion {rv:?}"))?,
        ),
        _ => None,
    };
    meta.remove("resourceVersion");
    meta.insert("namespace".into(), json!(namespace));
    for owned in ["uid", "creationTimestamp"] {
        if let Some(v) = current["metadata"].get(owned) {
            meta.insert(owned.into(), v.clone());
        }
    }
    Ok((obj, precondition))
}

fn parse_body(resource: &Resource, body: &[u8]) -> Result<Value, Invalid> {
    let mut obj: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    if !obj.is_object() {
        return Err("body must be a JSON object".into());
    }
    for (field, want) in [
        ("kind", resource.kind.to_string()),
        ("apiVersion", resource.api_version()),
    ] {
        match obj.get(field).and_then(Value::as_str) {
            Some(got) if got != want => {
                return Err(format!("{field} {got:?} does not match {want:?}"))
            }
            _ => obj[field] = json!(want),
        }
    }
    if obj.get("metadata").is_none() {
        obj["metadata"] = json!({});
    }
    Ok(obj)
}

/// DNS-1123 subdomain, as configmap and lease names must be.
fn validate_name(name: &str) -> Result<(), Invalid> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

/// `XxxList` of `items`.
pub fn list(resource: &Resource, items: Vec<Value>, revision: i64) -> Value {
    json!({
        "kind": format!("{}List", resource.kind),
        "apiVersion": resource.api_version(),
        "metadata": {"resourceVersion": revision.to_string()},
        "items": items,
    })
}

/// A `meta.k8s.io/v1` Table, what kubectl asks for to print.
pub fn table(resource: &Resource, items: &[Value], revision: Option<i64>) -> Value {
    let second = match resource.kind {
        "ConfigMap" => {
            json!({"name": "Data", "type": "integer", "format": "", "description": "Number of keys", "priority": 0})
        }
        "Pod" => {
            json!({"name": "Status", "type": "string", "format": "", "description": "status.phase", "priority": 0})
        }
        _ => {
            json!({"name": "Holder", "type": "string", "format": "", "description": "spec.holderIdentity", "priority": 0})
        }
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cell = match resource.kind {
                "ConfigMap" => json!(
                    o["data"].as_object().map(Map::len).unwrap_or(0)
                        + o["binaryData"].as_object().map(Map::len).unwrap_or(0)
                ),
                "Pod" => json!(o["status"]["phase"].as_str().unwrap_or("Pending")),
                _ => json!(o["spec"]["holderIdentity"].as_str().unwrap_or("")),
            };
            table_row(
                o,
                vec![
                    o["metadata"]["name"].clone(),
                    cell,
                    json!(age(&o["metadata"]["creationTimestamp"])),
                ],
            )
        })
        .collect();
    let columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
        second,
        json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0}),
    ];
    table_of(columns, rows, revision.map(|rv| rv.to_string()))
}

/// A `Table` row of `object`: its `cells`, and the object as `PartialObjectMetadata` (the
/// `includeObject=Metadata` default).
pub fn table_row(object: &Value, cells: Vec<Value>) -> Value {
    json!({
        "cells": cells,
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object["metadata"],
        },
    })
}

/// A `meta.k8s.io/v1` `Table` of `columns` and `rows`, at `resource_version` if any.
pub fn table_of(columns: Vec<Value>, rows: Vec<Value>, resource_version: Option<String>) -> Value {
    let mut meta = json!({});
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// kubectl's short age: `5s`, `3m`, `2h`, `4d`.
pub(crate) fn age(created: &Value) -> String {
    let Some(t) = created
        .as_str()
        .and_then(|s| humantime::parse_rfc3339(s).ok())
    else {
        return "<unknown>".into();
    };
    let secs = SystemTime::now()
        .duration_since(t)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// RFC 3339 seconds, as metav1.Time encodes.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

fn uid() -> String {
    let b: [u8; 16] = std::array::from_fn(|_| fastrand::u8(..));
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-4{:x}{:02x}-{:x}{:x}{:02x}-{}",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6] & 0x0f,
        b[7],
        8 + (b[8] & 0x03),
        b[8] >> 4,
        b[9],
        b[10..]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIGMAPS;

    #[test]
    fn create_fills_server_owned_metadata() {
        let (obj, name) = prepare_create(
            &CONFIGMAPS,
            "default",
            br#"{"metadata":{"generateName":"cm-","resourceVersion":"9"},"data":{"a":"b"}}"#,
        )
        .unwrap();
        assert!(name.starts_with("cm-") && name.len() == 8);
        assert_eq!(obj["kind"], "ConfigMap");
        assert_eq!(obj["apiVersion"], "v1");
        assert_eq!(obj["metadata"]["namespace"], "default");
        assert!(obj["metadata"].get("resourceVersion").is_none());
        assert_eq!(obj["metadata"]["uid"].as_str().unwrap().len(), 36);
    }

    #[test]
    fn create_refuses_bad_names_and_namespaces() {
        assert!(prepare_create(
            &CONFIGMAPS,
            "default",
            br#"{"metadata":{"name":"Bad_Name"}}"#
        )
        .is_err());
        assert!(prepare_create(
            &CONFIGMAPS,
            "a",
            br#"{"metadata":{"name":"x","namespace":"b"}}"#
        )
        .is_err());
        assert!(prepare_create(
            &CONFIGMAPS,
            "a",
            br#"{"kind":"Lease","metadata":{"name":"x"}}"#
        )
        .is_err());
    }

    #[test]
    fn update_keeps_uid_and_reads_the_precondition() {
        let current = json!({"metadata": {"name": "x", "uid": "u1", "creationTimestamp": "t"}});
        let (obj, pre) = prepare_update(
            &CONFIGMAPS,
            "default",
            "x",
            br#"{"metadata":{"name":"x","resourceVersion":"42","uid":"forged"}}"#,
            &current,
        )
        .unwrap();
        assert_eq!(pre, Some(42));
        assert_eq!(obj["metadata"]["uid"], "u1");
    }
}
