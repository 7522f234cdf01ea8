//! What a request asks, as an authorizer reads it: the attributes a SubjectAccessReview names
//! (`access_review`) and its remembered answer is keyed by (`access`).

use kubegate_wire::classify::RequestInfo;
use kubegate_wire::target::Query;
use serde_json::{json, Map, Value};

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

    /// The attributes as a SubjectAccessReview's spec holds them: the field's name and its
    /// JSON (empty fields left out, as the apiserver encodes them).
    pub fn review_json(&self) -> (&'static str, Value) {
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
}
