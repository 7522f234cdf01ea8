//! What a request asks for, as the apiserver's `WithRequestInfo` filter reads it from the path
//! alone (k8s.io/apiserver `pkg/endpoints/request/requestinfo.go`,
//! `RequestInfoFactory.NewRequestInfo`): authorization names a request by it
//! (`forbiddenMessage`), whatever handler ends up serving the path — a built-in resource, a
//! custom resource, an aggregated API's, or none.

/// `RequestInfo`'s fields the simulator reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo<'a> {
    /// Whether the path names a resource (`/api/VERSION/...` or `/apis/GROUP/VERSION/...` with
    /// at least a resource part).
    pub resource_request: bool,
    /// The path.
    pub path: &'a str,
    /// `api` or `apis`, for a resource request.
    pub prefix: &'a str,
    /// The API group (`""` for core).
    pub group: &'a str,
    /// The API version.
    pub version: &'a str,
    /// The namespace, or `""`.
    pub namespace: &'a str,
    /// The resource (plural), or `""`.
    pub resource: &'a str,
    /// The object's name, or `""`.
    pub name: &'a str,
    /// The subresource, or `""`.
    pub subresource: &'a str,
    /// The verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection` (or a path-prefix verb) for a resource request; the lower-cased
    /// method for any other.
    pub verb: String,
}

/// `specialVerbs`: verbs a path may begin with (`/api/v1/watch/...`).
const SPECIAL_VERBS: [&str; 3] = ["proxy", "watch", "connect"];
/// `namespaceSubresources`: parts after `namespaces/NAME` that are the namespace's own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// `NewRequestInfo` for `method` and the decoded `path`; `watch` is the `watch` query
/// parameter's first value, if any.
pub fn parse<'a>(method: &http::Method, path: &'a str, watch: Option<&str>) -> RequestInfo<'a> {
    let mut info = RequestInfo {
        path,
        verb: method.as_str().to_ascii_lowercase(),
        ..RequestInfo::default()
    };
    // `splitPath`: the path trimmed of slashes, split on them.
    let trimmed = path.trim_matches('/');
    let mut parts: Vec<&'a str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return info;
    }
    let prefix = parts.remove(0);
    if prefix == "apis" {
        if parts.len() < 3 {
            return info;
        }
        info.group = parts.remove(0);
    }
    info.prefix = prefix;
    info.resource_request = true;
    info.version = parts.remove(0);

    if SPECIAL_VERBS.contains(&parts[0]) {
        if parts.len() < 2 {
            // The apiserver refuses to read such a path (an error from NewRequestInfo).
            return RequestInfo {
                path,
                verb: method.as_str().to_ascii_lowercase(),
                ..RequestInfo::default()
            };
        }
        info.verb = parts.remove(0).to_string();
    } else {
        info.verb = match *method {
            http::Method::POST => "create",
            http::Method::GET | http::Method::HEAD => "get",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "",
        }
        .to_string();
    }

    // `/namespaces/{namespace}/{kind}/*`: parts from the kind on, unless what follows the
    // namespace's name is the namespace's own subresource.
    if parts[0] == "namespaces" && parts.len() > 1 {
        info.namespace = parts[1];
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts.drain(..2);
        }
    }
    // `specialVerbsNoSubresources`: a proxy path's rest is the proxied path, not a subresource.
    if parts.len() >= 3 && info.verb != "proxy" {
        info.subresource = parts[2];
    }
    if parts.len() >= 2 {
        info.name = parts[1];
    }
    info.resource = parts[0];

    if info.name.is_empty() && info.verb == "get" {
        info.verb = if watch.is_some_and(crate::query::truthy) {
            "watch"
        } else {
            "list"
        }
        .to_string();
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".to_string();
    }
    info
}

impl RequestInfo<'_> {
    /// `GroupResource.String()`: `RESOURCE` or `RESOURCE.GROUP`.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    /// Each `method, path, watch, group, namespace, resource, name, subresource, verb`.
    #[test]
    fn paths_are_read_as_new_request_info_reads_them() {
        use Method as M;
        #[rustfmt::skip]
        let cases = [
            (M::GET, "/api/v1/namespaces/default/configmaps", None, "", "default", "configmaps", "", "", "list"),
            (M::GET, "/apis/metrics.k8s.io/v1beta1/nodes", Some("1"), "metrics.k8s.io", "", "nodes", "", "", "watch"),
            (M::GET, "/apis/metrics.k8s.io/v1beta1/nodes", Some("false"), "metrics.k8s.io", "", "nodes", "", "", "list"),
            (M::POST, "/api/v1/namespaces/default/pods/web/eviction", None, "", "default", "pods", "web", "eviction", "create"),
            (M::DELETE, "/apis/apps/v1/namespaces/a/deployments", None, "apps", "a", "deployments", "", "", "deletecollection"),
            // A namespace itself, and its status.
            (M::GET, "/api/v1/namespaces/a", None, "", "a", "namespaces", "a", "", "get"),
            (M::PUT, "/api/v1/namespaces/a/status", None, "", "a", "namespaces", "a", "status", "update"),
            // Cluster-scoped objects.
            (M::GET, "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps/", None, "apiregistration.k8s.io", "", "apiservices", "v1.apps", "", "get"),
            // The path-prefix verbs; a proxy's rest is no subresource.
            (M::GET, "/api/v1/watch/namespaces/a/pods/p", None, "", "a", "pods", "p", "", "watch"),
            (M::GET, "/api/v1/proxy/namespaces/a/pods/p/x/y", None, "", "a", "pods", "p", "", "proxy"),
        ];
        for (method, path, watch, group, namespace, resource, name, subresource, verb) in cases {
            let i = parse(&method, path, watch);
            assert!(i.resource_request, "{path}");
            assert_eq!(
                (
                    i.group,
                    i.namespace,
                    i.resource,
                    i.name,
                    i.subresource,
                    i.verb.as_str()
                ),
                (group, namespace, resource, name, subresource, verb),
                "{method} {path} {watch:?}"
            );
        }
        assert_eq!(parse(&M::GET, "/api/v1/pods", None).version, "v1");
    }

    #[test]
    fn short_paths_are_no_resource_requests() {
        for path in [
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/api/v1",
            "/version",
            "/",
            "/apisx/a/b/c",
        ] {
            let i = parse(&Method::GET, path, None);
            assert!(!i.resource_request, "{path}");
            assert_eq!(i.verb, "get");
        }
        assert_eq!(parse(&Method::POST, "/apis", None).verb, "post");
    }
}
