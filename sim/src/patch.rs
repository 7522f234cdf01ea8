//! PATCH as the apiserver takes it for the simulator's resources: JSON merge patch (RFC 7386),
//! strategic merge patch (for ConfigMaps, Leases and Pods' fields kubectl patches, which are maps
//! and scalars, the same as a merge patch; `$`-directives are dropped), and JSON patch (RFC
//! 6902: add, remove, replace, test). Server-side apply is refused with 415, which kubectl
//! reports.

use serde_json::Value;

/// The patch types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/json-patch+json`.
    Json,
}

impl PatchType {
    /// From the request's `Content-Type`; `None` for types the simulator does not take.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/json-patch+json" => Some(PatchType::Json),
            _ => None,
        }
    }
}

/// Applies `patch` (the request body) to `current`.
pub fn apply(current: &Value, kind: PatchType, patch: &[u8]) -> Result<Value, String> {
    let patch: Value =
        serde_json::from_slice(patch).map_err(|e| format!("invalid JSON patch body: {e}"))?;
    let mut out = current.clone();
    match kind {
        PatchType::Merge => merge(&mut out, &patch),
        PatchType::StrategicMerge => merge(&mut out, &without_directives(&patch)),
        PatchType::Json => json_patch(&mut out, &patch)?,
    }
    Ok(out)
}

/// RFC 7386: objects merge key by key, `null` deletes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn without_directives(patch: &Value) -> Value {
    match patch {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// RFC 6902, the operations clients send.
fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch is a list of operations")?;
    for op in ops {
        let path = op["path"].as_str().ok_or("operation without a path")?;
        let pointer = |p: &str| -> Result<(String, String), String> {
            let (parent, last) = p.rsplit_once('/').ok_or(format!("bad path {p:?}"))?;
            Ok((
                parent.to_string(),
                last.replace("~1", "/").replace("~0", "~"),
            ))
        };
        match op["op"].as_str() {
            Some("add") | Some("replace") => {
                let (parent, key) = pointer(path)?;
                let value = op["value"].clone();
                match target.pointer_mut(&parent) {
                    Some(Value::Object(m)) => {
                        m.insert(key, value);
                    }
                    Some(Value::Array(a)) if key == "-" => a.push(value),
                    Some(Value::Array(a)) => {
                        let i: usize = key.parse().map_err(|_| format!("bad index in {path:?}"))?;
                        if op["op"] == "add" && i <= a.len() {
                            a.insert(i, value);
                        } else if i < a.len() {
                            a[i] = value;
                        } else {
                            return Err(format!("index out of range in {path:?}"));
                        }
                    }
                    _ => return Err(format!("path {path:?} does not exist")),
                }
            }
            Some("remove") => {
                let (parent, key) = pointer(path)?;
                let removed = match target.pointer_mut(&parent) {
                    Some(Value::Object(m)) => m.remove(&key).is_some(),
                    Some(Value::Array(a)) => match key.parse::<usize>() {
                        Ok(i) if i < a.len() => {
                            a.remove(i);
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !removed {
                    return Err(format!("path {path:?} does not exist"));
                }
            }
            Some("test") => {
                if target.pointer(path) != Some(&op["value"]) {
                    return Err(format!("test failed at {path:?}"));
                }
            }
            other => return Err(format!("unsupported JSON patch operation {other:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_patch_merges_maps_and_null_deletes() {
        let cur =
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"a": "b", "c": "d"}});
        let out = apply(
            &cur,
            PatchType::Merge,
            br#"{"data":{"a":"z","c":null},"metadata":{"labels":{"y":"2"}}}"#,
        )
        .unwrap();
        assert_eq!(out["data"], json!({"a": "z"}));
        assert_eq!(out["metadata"]["labels"], json!({"x": "1", "y": "2"}));
    }

    #[test]
    fn strategic_merge_drops_directives() {
        let cur = json!({"data": {"a": "b"}});
        let out = apply(
            &cur,
            PatchType::StrategicMerge,
            br#"{"data":{"a":"c","$retainKeys":["a"]}}"#,
        )
        .unwrap();
        assert_eq!(out["data"], json!({"a": "c"}));
    }

    #[test]
    fn json_patch_operations() {
        let cur = json!({"data": {"a": "b"}, "list": [1, 2]});
        let ops = br#"[{"op":"test","path":"/data/a","value":"b"},{"op":"replace","path":"/data/a","value":"c"},{"op":"add","path":"/data/x~1y","value":"1"},{"op":"add","path":"/list/-","value":3},{"op":"remove","path":"/list/0"}]"#;
        let out = apply(&cur, PatchType::Json, ops).unwrap();
        assert_eq!(out, json!({"data": {"a": "c", "x/y": "1"}, "list": [2, 3]}));
        assert!(apply(
            &cur,
            PatchType::Json,
            br#"[{"op":"test","path":"/data/a","value":"no"}]"#
        )
        .is_err());
    }

    #[test]
    fn content_types_name_patch_types() {
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            None
        );
    }
}
