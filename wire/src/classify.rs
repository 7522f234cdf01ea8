//! What a request is, as the apiserver sees it (k8s.io/apiserver `request.RequestInfoFactory`
//! and the long-running check of `pkg/controlplane/apiserver/config.go`): its verb, and whether
//! it is long-running (no request timeout; drained until the deadline; never retried once
//! sent).

use http::{Method, Uri};

/// The apiserver's verb for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET`/`HEAD` of one object or a non-resource path.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` with `watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
    /// Any other method.
    Other,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 9] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Other,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other => "other",
        }
    }

    /// A read the apiserver cannot have changed anything with (`GET`/`HEAD`, not a watch).
    pub fn idempotent_read(self) -> bool {
        matches!(self, Verb::Get | Verb::List)
    }
}

/// A request that may run for as long as it likes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongRunning {
    /// A watch.
    Watch,
    /// `exec`, `attach`, `portforward`, `proxy` (subresources or the proxy verb).
    Session,
    /// `log` (with `follow`, a stream).
    Log,
    /// `/debug/pprof/` profiles.
    Profile,
}

/// A request, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestClass {
    /// Its verb.
    pub verb: Verb,
    /// Whether, and why, it is long-running.
    pub long_running: Option<LongRunning>,
}

/// What a request addresses, as the apiserver's `RequestInfo` and RBAC see it, borrowed from
/// its path (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Target<'a> {
    /// The API group: `Some("")` for the core group (`/api`), `Some(group)` for `/apis/GROUP`,
    /// `None` for a non-resource path (`/healthz`, `/version`, `/apis`).
    pub api_group: Option<&'a str>,
    /// The API version (`v1`), with `api_group`.
    pub api_version: &'a str,
    /// The namespace of a namespaced request.
    pub namespace: Option<&'a str>,
    /// The resource (`pods`).
    pub resource: Option<&'a str>,
    /// The subresource (`status`, `log`, `exec`).
    pub subresource: Option<&'a str>,
    /// The object's name.
    pub name: Option<&'a str>,
}

/// A request, classified, with what it addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestInfo<'a> {
    /// Its verb and whether it is long-running.
    pub class: RequestClass,
    /// What it addresses.
    pub target: Target<'a>,
}

/// Classifies a request by method and URI.
pub fn classify(method: &Method, uri: &Uri) -> RequestClass {
    request_info(method, uri).class
}

/// Classifies a request and reads what it addresses, as the apiserver's `RequestInfoFactory`
/// does.
pub fn request_info<'a>(method: &Method, uri: &'a Uri) -> RequestInfo<'a> {
    let path = uri.path();
    let watch_param = query_flag(uri.query(), "watch");
    let segments = Segments::of(path);
    // /api/v1/... or /apis/GROUP/VERSION/...
    let (group, version, rest): (&str, &str, Option<&[&str]>) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", version, Some(rest)),
        ["apis", group, version, rest @ ..] => (group, version, Some(rest)),
        _ => ("", "", None),
    };
    let Some(mut rest) = rest else {
        let long_running = path
            .starts_with("/debug/pprof/")
            .then_some(LongRunning::Profile);
        let verb = match *method {
            Method::GET | Method::HEAD => Verb::Get,
            _ => method_verb(method, true),
        };
        return RequestInfo {
            class: RequestClass { verb, long_running },
            target: Target::default(),
        };
    };
    // Deprecated path verbs: /api/v1/watch/..., /api/v1/proxy/...
    let mut path_verb = None;
    if let Some((first, tail)) = rest.split_first() {
        if *first == "watch" || *first == "proxy" {
            path_verb = Some(*first);
            rest = tail;
        }
    }
    let mut namespace = None;
    if let ["namespaces", ns, tail @ ..] = rest {
        namespace = Some(*ns);
        // Another step that is not one of the namespace object's own subresources names a
        // resource in the namespace.
        if !tail.is_empty() && !matches!(tail[0], "status" | "finalize") {
            rest = tail;
        }
    }
    let resource = rest.first().copied().filter(|r| !r.is_empty());
    let name = rest.get(1).copied().filter(|n| !n.is_empty());
    // The deprecated proxy verb takes everything after the name as the proxied path.
    let subresource = rest
        .get(2)
        .copied()
        .filter(|s| !s.is_empty() && path_verb != Some("proxy"));
    let verb = match (method, path_verb) {
        (_, Some("watch")) => Verb::Watch,
        (&Method::GET | &Method::HEAD, _) if watch_param => Verb::Watch,
        (&Method::GET | &Method::HEAD, _) if name.is_none() => Verb::List,
        (m, _) => method_verb(m, name.is_some()),
    };
    let long_running = match (verb, path_verb, subresource) {
        (Verb::Watch, _, _) => Some(LongRunning::Watch),
        (_, Some("proxy"), _) => Some(LongRunning::Session),
        (_, _, Some("exec" | "attach" | "portforward" | "proxy")) => Some(LongRunning::Session),
        (_, _, Some("log")) => Some(LongRunning::Log),
        _ => None,
    };
    RequestInfo {
        class: RequestClass { verb, long_running },
        target: Target {
            api_group: Some(group),
            api_version: version,
            namespace,
            resource,
            subresource,
            name,
        },
    }
}

/// A path's first [`Segments::MAX`] segments, on the stack: classifying runs for every
/// request, and a `Vec` of them was one allocation each.
struct Segments<'a> {
    parts: [&'a str; Segments::MAX],
    len: usize,
}

impl<'a> Segments<'a> {
    /// Enough for every pattern `classify` matches: `/apis/GROUP/VERSION` (3), a path verb
    /// (1), `namespaces/NS/RESOURCE/NAME/SUB` (5), and one more, so that a longer path never
    /// looks like a shorter one to a pattern of fixed length (those are at most 8 segments;
    /// the longer ones end in `..`).
    const MAX: usize = 10;

    fn of(path: &'a str) -> Segments<'a> {
        let mut s = Segments {
            parts: [""; Segments::MAX],
            len: 0,
        };
        for part in path.trim_matches('/').split('/').take(Segments::MAX) {
            s.parts[s.len] = part;
            s.len += 1;
        }
        s
    }

    fn as_slice(&self) -> &[&'a str] {
        &self.parts[..self.len]
    }
}

fn method_verb(method: &Method, named: bool) -> Verb {
    match *method {
        Method::GET | Method::HEAD => Verb::Get,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => Verb::Other,
    }
}

/// A boolean query parameter as Go's `strconv.ParseBool` reads it.
pub fn query_flag(query: Option<&str>, key: &str) -> bool {
    query_value(query, key).is_some_and(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The first value of a query parameter (not percent-decoded: the keys kubegate reads never
/// need it).
pub fn query_value<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: Method, uri: &str) -> Target<'static> {
        let uri: &'static Uri = Box::leak(Box::new(uri.parse().unwrap()));
        request_info(&method, uri).target
    }

    #[test]
    fn targets_as_the_apiservers_request_info_reads_them() {
        let t = target(
            Method::GET,
            "/api/v1/namespaces/default/pods/p1/log?follow=1",
        );
        assert_eq!(
            (
                t.api_group,
                t.api_version,
                t.namespace,
                t.resource,
                t.name,
                t.subresource
            ),
            (
                Some(""),
                "v1",
                Some("default"),
                Some("pods"),
                Some("p1"),
                Some("log")
            )
        );
        let t = target(
            Method::GET,
            "/apis/apps/v1/namespaces/kube-system/deployments",
        );
        assert_eq!(
            (t.api_group, t.namespace, t.resource, t.name),
            (Some("apps"), Some("kube-system"), Some("deployments"), None)
        );
        // The namespace object itself, and its own subresources.
        let t = target(Method::GET, "/api/v1/namespaces/foo");
        assert_eq!(
            (t.namespace, t.resource, t.name),
            (Some("foo"), Some("namespaces"), Some("foo"))
        );
        let t = target(Method::PUT, "/api/v1/namespaces/foo/finalize");
        assert_eq!(
            (t.resource, t.name, t.subresource),
            (Some("namespaces"), Some("foo"), Some("finalize"))
        );
        // Cluster-scoped, the deprecated watch path, a non-resource path.
        let t = target(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        );
        assert_eq!(
            (t.api_group, t.namespace, t.resource, t.name),
            (
                Some("rbac.authorization.k8s.io"),
                None,
                Some("clusterroles"),
                Some("admin")
            )
        );
        let t = target(Method::GET, "/api/v1/watch/namespaces/ns/configmaps");
        assert_eq!((t.namespace, t.resource), (Some("ns"), Some("configmaps")));
        let t = target(Method::GET, "/readyz");
        assert_eq!(t, Target::default());
        let t = target(Method::GET, "/apis");
        assert_eq!(t.api_group, None);
    }

    fn class(method: Method, uri: &str) -> (Verb, Option<LongRunning>) {
        let c = classify(&method, &uri.parse().unwrap());
        (c.verb, c.long_running)
    }

    #[test]
    fn verbs_and_long_running_requests_as_the_apiserver_sees_them() {
        use LongRunning::*;
        let table = [
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps",
                Verb::List,
                None,
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps/a",
                Verb::Get,
                None,
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=5",
                Verb::Watch,
                Some(Watch),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps?watch=1",
                Verb::Watch,
                Some(Watch),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps?watch=false",
                Verb::List,
                None,
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/default/pods",
                Verb::Watch,
                Some(Watch),
            ),
            (
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
                Verb::Get,
                None,
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
                Verb::Update,
                None,
            ),
            (
                Method::POST,
                "/api/v1/namespaces/default/configmaps",
                Verb::Create,
                None,
            ),
            (Method::PATCH, "/api/v1/nodes/n1/status", Verb::Patch, None),
            (
                Method::DELETE,
                "/api/v1/namespaces/default/configmaps/a",
                Verb::Delete,
                None,
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/default/configmaps",
                Verb::DeleteCollection,
                None,
            ),
            (Method::GET, "/api/v1/namespaces/default", Verb::Get, None),
            (Method::GET, "/api/v1/namespaces", Verb::List, None),
            (
                Method::POST,
                "/api/v1/namespaces/default/pods/p/exec?command=sh",
                Verb::Create,
                Some(Session),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/p/exec?command=sh",
                Verb::Get,
                Some(Session),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/default/pods/p/attach",
                Verb::Create,
                Some(Session),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/default/pods/p/portforward",
                Verb::Create,
                Some(Session),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/p/log?follow=true",
                Verb::Get,
                Some(Log),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/services/s/proxy/x",
                Verb::Get,
                Some(Session),
            ),
            (
                Method::GET,
                "/api/v1/proxy/namespaces/default/pods/p",
                Verb::Get,
                Some(Session),
            ),
            // Longer than the segments classify keeps: read by its first ten.
            (
                Method::GET,
                "/apis/apps/v1/watch/namespaces/default/services/s/proxy/a/b/c/d",
                Verb::Watch,
                Some(Watch),
            ),
            (
                Method::GET,
                "/apis/g/v1/proxy/namespaces/default/services/s/x/y/z",
                Verb::Get,
                Some(Session),
            ),
            (Method::GET, "/readyz?verbose", Verb::Get, None),
            (Method::GET, "/version", Verb::Get, None),
            (
                Method::GET,
                "/debug/pprof/profile?seconds=30",
                Verb::Get,
                Some(Profile),
            ),
            (Method::OPTIONS, "/api", Verb::Other, None),
        ];
        for (method, uri, verb, long_running) in table {
            assert_eq!(
                class(method.clone(), uri),
                (verb, long_running),
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn only_gets_and_lists_are_idempotent_reads() {
        let reads: Vec<_> = Verb::ALL
            .into_iter()
            .filter(|v| v.idempotent_read())
            .collect();
        assert_eq!(reads, [Verb::Get, Verb::List]);
    }

    #[test]
    fn query_flags_read_like_go() {
        assert!(query_flag(Some("a=b&watch=T"), "watch"));
        assert!(!query_flag(Some("watch=yes"), "watch"));
        assert!(!query_flag(Some("watcher=true"), "watch"));
        assert!(!query_flag(None, "watch"));
        assert_eq!(
            query_value(Some("x&resourceVersion=12"), "resourceVersion"),
            Some("12")
        );
    }
}
