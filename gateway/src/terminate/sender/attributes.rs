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

    /// A resource request's fields, by their names in a SubjectAccessReview, in the order
    /// they are keyed by; `None` for a non-resource request.
    fn resource_fields(&self) -> Option<[(&'static str, &str); 9]> {
        let Attributes::Resource {
            verb,
            group,
            version,
            resource,
            subresource,
            namespace,
            name,
            label_selector,
            field_selector,
        } = self
        else {
            return None;
        };
        Some([
            ("verb", verb),
            ("group", group),
            ("version", version),
            ("resource", resource),
            ("subresource", subresource),
            ("namespace", namespace),
            ("name", name),
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
        ])
    }

    /// The attributes as a SubjectAccessReview's spec holds them: the field's name and its
    /// JSON (empty fields left out, as the apiserver encodes them; a selector as its raw
    /// text).
    pub fn review_json(&self) -> (&'static str, Value) {
        let mut m = Map::new();
        let mut put = |k: &str, v: &str| {
            if v.is_empty() {
                return;
            }
            let value = match k {
                "labelSelector" | "fieldSelector" => json!({ "rawSelector": v }),
                _ => json!(v),
            };
            m.insert(k.to_string(), value);
        };
        if let Some(fields) = self.resource_fields() {
            for (k, v) in fields {
                put(k, v);
            }
            return ("resourceAttributes", Value::Object(m));
        }
        if let Attributes::NonResource { path, verb } = self {
            put("path", path);
            put("verb", verb);
        }
        ("nonResourceAttributes", Value::Object(m))
    }

    /// Every field, length-prefixed: the bytes the remembered answer is keyed by.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut part = |s: &str| {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        if let Some(fields) = self.resource_fields() {
            part("resource");
            for (_, v) in fields {
                part(v);
            }
        } else if let Attributes::NonResource { path, verb } = self {
            part("non-resource");
            part(path);
            part(verb);
        }
    }
}

#[cfg(test)]
pub fn of_get(target: &str) -> Attributes {
    use http::{Method, Uri};
    use kubegate_wire::classify::ReadTarget;
    let uri: Uri = format!("https://kube.example{target}").parse().unwrap();
    let read = ReadTarget::of(&uri).unwrap();
    Attributes::of(&read.info(&Method::GET), read.path(), &read.query())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(target: &str) -> Attributes {
        of_get(target)
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
