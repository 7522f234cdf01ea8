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

    #[test]
    fn paths_are_read_as_new_request_info_reads_them() {
        let i = parse(&Method::GET, "/api/v1/namespaces/default/configmaps", None);
        assert_eq!(
            (
                i.resource_request,
                i.group,
                i.version,
                i.namespace,
                i.resource,
                i.name,
                i.verb.as_str()
            ),
            (true, "", "v1", "default", "configmaps", "", "list")
        );
        let i = parse(
            &Method::GET,
            "/apis/metrics.k8s.io/v1beta1/nodes",
            Some("1"),
        );
        assert_eq!(
            (i.group, i.resource, i.verb.as_str()),
            ("metrics.k8s.io", "nodes", "watch")
        );
        let i = parse(
            &Method::GET,
            "/apis/metrics.k8s.io/v1beta1/nodes",
            Some("false"),
        );
        assert_eq!(i.verb, "list");
        let i = parse(
            &Method::POST,
            "/api/v1/namespaces/default/pods/web/eviction",
            None,
        );
        assert_eq!(
            (i.resource, i.name, i.subresource, i.verb.as_str()),
            ("pods", "web", "eviction", "create")
        );
        let i = parse(
            &Method::DELETE,
            "/apis/apps/v1/namespaces/a/deployments",
            None,
        );
        assert_eq!(i.verb, "deletecollection");
        // A namespace itself, and its status.
        let i = parse(&Method::GET, "/api/v1/namespaces/a", None);
        assert_eq!(
            (i.namespace, i.resource, i.name, i.verb.as_str()),
            ("a", "namespaces", "a", "get")
        );
        let i = parse(&Method::PUT, "/api/v1/namespaces/a/status", None);
        assert_eq!(
            (i.resource, i.name, i.subresource),
            ("namespaces", "a", "status")
        );
        // Cluster-scoped objects.
        let i = parse(
            &Method::GET,
            "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps/",
            None,
        );
        assert_eq!(
            (i.namespace, i.resource, i.name, i.verb.as_str()),
            ("", "apiservices", "v1.apps", "get")
        );
        // The path-prefix verbs; a proxy's rest is no subresource.
        let i = parse(&Method::GET, "/api/v1/watch/namespaces/a/pods/p", None);
        assert_eq!(
            (i.verb.as_str(), i.resource, i.name),
            ("watch", "pods", "p")
        );
        let i = parse(&Method::GET, "/api/v1/proxy/namespaces/a/pods/p/x/y", None);
        assert_eq!((i.verb.as_str(), i.name, i.subresource), ("proxy", "p", ""));
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
