//! What a request is, as the apiserver sees it (k8s.io/apiserver `request.RequestInfoFactory`
//! and the long-running check of `pkg/controlplane/apiserver/config.go`): its verb, whether it
//! is long-running (no request timeout; drained until the deadline; never retried once sent),
//! and what it addresses. Read from the target as Go hands it to the handler chain
//! ([`crate::target`]): the path percent-decoded, the query decoded pair by pair.

use crate::target::{self, BadTarget, Query};
use http::{Method, Uri};
use std::borrow::Cow;

/// The apiserver's verb for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET`/`HEAD` of one object or a non-resource path.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` of a collection with `watch` set, or the `/watch/` path verb.
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
    /// The deprecated `/proxy/` path verb.
    Proxy,
    /// Any other method.
    Other,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 10] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Proxy,
        Verb::Other,
    ];

    /// Metric label, and RBAC's name of the verb of a resource request.
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
            Verb::Proxy => "proxy",
            Verb::Other => "other",
        }
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

impl RequestClass {
    /// Whether the apiserver switches protocols for it when asked to (`Upgrade`): `exec`,
    /// `attach`, `portforward`, `proxy`, and a watch over WebSocket. For anything else an
    /// `Upgrade` header is ignored and the request served as usual.
    pub fn upgradable(&self) -> bool {
        matches!(
            self.long_running,
            Some(LongRunning::Session | LongRunning::Watch)
        )
    }
}

/// What a request addresses, as the apiserver's `RequestInfo` and RBAC see it, borrowed from
/// its decoded path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Target<'a> {
    /// The API group of a resource request: `Some("")` for the core group (`/api`),
    /// `Some(group)` for `/apis/GROUP`; `None` for a non-resource request (`/healthz`,
    /// `/version`, `/apis`, `/api/v1`).
    pub api_group: Option<&'a str>,
    /// The API version (`v1`), with `api_group`.
    pub api_version: &'a str,
    /// The namespace of a namespaced request.
    pub namespace: Option<&'a str>,
    /// The resource (`pods`) of a resource request (`""` when the path has an empty segment
    /// there, as the apiserver reads it).
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
    /// RBAC's verb: a resource request's verb ([`Verb::as_str`], `""` for a method the
    /// apiserver gives none), a non-resource request's method in lower case.
    pub rbac_verb: &'static str,
}

impl RequestInfo<'_> {
    /// A request for an API resource (RBAC's resource rules), not a non-resource path.
    pub fn is_resource_request(&self) -> bool {
        self.target.api_group.is_some()
    }

    /// A lease renewal: one named `coordination.k8s.io` lease read or written (get, update,
    /// patch), as leader election and node heartbeats do. Listing, watching or creating
    /// leases is not what keeps a leader or a node alive.
    pub fn renews_lease(&self) -> bool {
        let target = &self.target;
        matches!(self.class.verb, Verb::Get | Verb::Update | Verb::Patch)
            && target.name.is_some()
            && target.subresource.is_none()
            && target.api_group == Some("coordination.k8s.io")
            && target.resource == Some("leases")
    }
}

/// A request target as the apiserver reads it: the decoded path and the query.
#[derive(Debug, Clone)]
pub struct ReadTarget<'a> {
    path: Cow<'a, str>,
    query: Query<'a>,
}

/// Why the apiserver would refuse a request target before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// The path does not decode (the apiserver's HTTP server answers 400).
    Target(BadTarget),
    /// A path verb (`/api/v1/watch`) with nothing after it: the apiserver answers 500,
    /// "unable to determine kind and namespace from url".
    NoResource,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Target(t) => t.fmt(f),
            Unreadable::NoResource => {
                f.write_str("unable to determine kind and namespace from url")
            }
        }
    }
}

impl<'a> ReadTarget<'a> {
    /// Reads `uri` as the apiserver does; no allocation unless the path holds an escape.
    pub fn of(uri: &'a Uri) -> Result<ReadTarget<'a>, Unreadable> {
        let read = ReadTarget {
            path: target::path(uri.path()).map_err(Unreadable::Target)?,
            query: Query::new(uri.query()),
        };
        let bare_path_verb = Parts::of(&read.path)
            .resource_parts()
            .is_some_and(|rest| rest.len() == 1 && matches!(rest[0], "watch" | "proxy"));
        if bare_path_verb {
            return Err(Unreadable::NoResource);
        }
        Ok(read)
    }

    /// The decoded path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The query.
    pub fn query(&self) -> Query<'a> {
        self.query
    }

    /// The request of `method` to this target, classified.
    pub fn info(&self, method: &Method) -> RequestInfo<'_> {
        request_info(method, &self.path, self.query)
    }
}

/// Classifies a request by method and URI, as [`ReadTarget::of`] and [`ReadTarget::info`].
pub fn classify(method: &Method, uri: &Uri) -> Result<RequestClass, Unreadable> {
    Ok(ReadTarget::of(uri)?.info(method).class)
}

/// Classifies a request to the decoded `path` with `query`, as the apiserver's
/// `RequestInfoFactory` does.
fn request_info<'a>(method: &Method, path: &'a str, query: Query<'_>) -> RequestInfo<'a> {
    let parts = Parts::of(path);
    let (Some((group, version)), Some(mut rest)) = (parts.group_version(), parts.resource_parts())
    else {
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
            rbac_verb: method_name(method),
        };
    };
    // Deprecated path verbs: /api/v1/watch/..., /api/v1/proxy/... (`ReadTarget::of` refused
    // one with nothing after it).
    let mut path_verb = None;
    if let Some((first, tail)) = rest.split_first() {
        if (*first == "watch" || *first == "proxy") && !tail.is_empty() {
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
    let resource = rest.first().copied();
    let name = rest.get(1).copied().filter(|n| !n.is_empty());
    // The deprecated proxy verb takes everything after the name as the proxied path.
    let subresource = rest
        .get(2)
        .copied()
        .filter(|s| !s.is_empty() && path_verb != Some("proxy"));
    let verb = match (method, path_verb) {
        (_, Some("watch")) => Verb::Watch,
        (_, Some(_)) => Verb::Proxy,
        // `watch` counts only for a collection: a named GET with `?watch=1` is a get.
        (&Method::GET | &Method::HEAD, _) if name.is_none() && query.flag("watch") => Verb::Watch,
        (&Method::GET | &Method::HEAD, _) if name.is_none() => Verb::List,
        (m, _) => method_verb(m, name.is_some()),
    };
    let long_running = match (verb, subresource) {
        (Verb::Watch, _) => Some(LongRunning::Watch),
        (Verb::Proxy, _) => Some(LongRunning::Session),
        (_, Some("exec" | "attach" | "portforward" | "proxy")) => Some(LongRunning::Session),
        (_, Some("log")) => Some(LongRunning::Log),
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
        rbac_verb: if verb == Verb::Other {
            ""
        } else {
            verb.as_str()
        },
    }
}

/// A decoded path's first [`Parts::MAX`] segments, on the stack, as the apiserver's
/// `splitPath` cuts them (leading and trailing `/` trimmed, empty middle segments kept):
/// classifying runs for every request, and a `Vec` of them was one allocation each.
struct Parts<'a> {
    parts: [&'a str; Parts::MAX],
    len: usize,
}

impl<'a> Parts<'a> {
    /// Enough for every pattern `request_info` matches: `apis/GROUP/VERSION` (3), a path verb
    /// (1), `namespaces/NS/RESOURCE/NAME/SUB` (5), and one more, so that a longer path never
    /// looks like a shorter one to a pattern of fixed length.
    const MAX: usize = 10;

    fn of(path: &'a str) -> Parts<'a> {
        let mut s = Parts {
            parts: [""; Parts::MAX],
            len: 0,
        };
        let trimmed = path.trim_matches('/');
        if !trimmed.is_empty() {
            for part in trimmed.split('/').take(Parts::MAX) {
                s.parts[s.len] = part;
                s.len += 1;
            }
        }
        s
    }

    fn as_slice(&self) -> &[&'a str] {
        &self.parts[..self.len]
    }

    /// The group and version of a path under `/api/VERSION` or `/apis/GROUP/VERSION`
    /// (resource requests and the group-version's own resource list alike).
    fn group_version(&self) -> Option<(&'a str, &'a str)> {
        match self.as_slice() {
            ["api", version, ..] => Some(("", version)),
            ["apis", group, version, ..] => Some((group, version)),
            _ => None,
        }
    }

    /// What follows the group-version of a resource request (never empty); `None` for a
    /// non-resource request (`/api/v1`, `/apis/apps/v1` and shorter).
    fn resource_parts(&self) -> Option<&[&'a str]> {
        match self.as_slice() {
            ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] if !rest.is_empty() => Some(rest),
            _ => None,
        }
    }
}

/// The group and version a path addresses, whether a resource request or a group-version's
/// resource list (`/api/v1`, `/apis/apps/v1`): `("", "v1")`, `("apps", "v1")`.
pub fn group_version(path: &str) -> Option<(&str, &str)> {
    Parts::of(path).group_version()
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

/// A non-resource request's RBAC verb: its method in lower case.
fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        Method::CONNECT => "connect",
        Method::TRACE => "trace",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `method target` classified: (RBAC verb, namespace, resource, subresource, name).
    fn info(method: &str, target: &str) -> (String, String, String, String, String) {
        let uri: Uri = target.parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        let info = read.info(&method.parse().unwrap());
        let t = info.target;
        (
            info.rbac_verb.to_string(),
            t.namespace.unwrap_or_default().to_string(),
            t.resource.unwrap_or_default().to_string(),
            t.subresource.unwrap_or_default().to_string(),
            t.name.unwrap_or_default().to_string(),
        )
    }

    /// Each case `method, target, verb, namespace, resource, subresource, name` classified as
    /// it says.
    fn assert_cases(cases: &[(&str, &str, &str, &str, &str, &str, &str)]) {
        for (method, target, verb, ns, resource, sub, name) in cases {
            assert_eq!(
                info(method, target),
                (
                    verb.to_string(),
                    ns.to_string(),
                    resource.to_string(),
                    sub.to_string(),
                    name.to_string()
                ),
                "{method} {target}"
            );
        }
    }

    /// The cases of k8s.io/apiserver's `TestGetAPIRequestInfo` (requestinfo_test.go), each
    /// `method, target, verb, namespace, resource, subresource, name`.
    #[test]
    fn the_apiservers_own_request_info_cases() {
        #[rustfmt::skip]
        let cases = [
            ("GET", "/api/v1/namespaces", "list", "", "namespaces", "", ""),
            ("GET", "/api/v1/namespaces/other", "get", "other", "namespaces", "", "other"),
            ("GET", "/api/v1/namespaces/other/pods", "list", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods/foo", "get", "other", "pods", "", "foo"),
            ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "other", "pods", "", "foo"),
            ("GET", "/api/v1/pods", "list", "", "pods", "", ""),
            ("HEAD", "/api/v1/pods", "list", "", "pods", "", ""),
            ("PATCH", "/api/v1/namespaces/new-namespace", "patch", "new-namespace", "namespaces", "", "new-namespace"),
            ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "proxy", "other", "pods", "", "foo"),
            ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "proxy", "other", "pods", "", "foo"),
            ("GET", "/api/v1/watch/pods", "watch", "", "pods", "", ""),
            ("GET", "/api/v1/pods?watch=true", "watch", "", "pods", "", ""),
            ("GET", "/api/v1/pods?watch=false", "list", "", "pods", "", ""),
            ("GET", "/api/v1/watch/namespaces/other/pods", "watch", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods?watch=1", "watch", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods/foo/status", "get", "other", "pods", "status", "foo"),
            ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "get", "other", "pods", "proxy", "foo"),
            ("PUT", "/api/v1/namespaces/other/finalize", "update", "other", "namespaces", "finalize", "other"),
            ("PUT", "/api/v1/namespaces/other/status", "update", "other", "namespaces", "status", "other"),
            ("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", "other", "pods", "", "foo"),
            ("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", "other", "pods", "", "foo"),
            ("POST", "/api/v1/namespaces/other/pods", "create", "other", "pods", "", ""),
            ("DELETE", "/api/v1/nodes", "deletecollection", "", "nodes", "", ""),
            ("DELETE", "/api/v1/namespaces", "deletecollection", "", "namespaces", "", ""),
            ("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", "other", "pods", "", ""),
            ("DELETE", "/apis/extensions/v1/namespaces/other/pods", "deletecollection", "other", "pods", "", ""),
            ("POST", "/apis/extensions/v1/namespaces/other/pods", "create", "other", "pods", "", ""),
            ("POST", "/apis/extensions/v1beta3/namespaces/other/pods", "create", "other", "pods", "", ""),
        ];
        assert_cases(&cases);
        // TestGetNonAPIRequestInfo and the error cases: resource requests or not.
        let resource_request = |target: &str| {
            let uri: Uri = target.parse().unwrap();
            ReadTarget::of(&uri)
                .unwrap()
                .info(&Method::GET)
                .is_resource_request()
        };
        for yes in [
            "/api/version/resource",
            "/apis/group/version/resource/name/subresource",
            "/api/version/resource/name/subresource",
            "/apis/batch/v1/job",
            "/apis/batch/v1/job/foo",
            "/apis/batch/v1/job/foo/scale",
        ] {
            assert!(resource_request(yes), "{yes}");
        }
        for no in [
            "/not-api/version/resource",
            "/apis/extensions/v1beta1",
            "/apis/extensions/v1beta1/",
            "/api/version",
            "/api",
            "/",
            "/api/version/",
            "/apis/group/version/",
            "/badprefix/version/resource",
            "/apis/version/resource",
        ] {
            assert!(!resource_request(no), "{no}");
        }
    }

    /// Each way around a rule that reading the raw bytes left open, read as the apiserver
    /// reads it.
    #[test]
    fn encoded_targets_and_query_flags_as_the_apiserver_reads_them() {
        #[rustfmt::skip]
        let cases = [
            // A percent-encoded path is decoded before it is split.
            ("GET", "/api/v1/namespaces/default/secret%73", "list", "default", "secrets", "", ""),
            ("GET", "/api/v1/namespaces/kube%2Dsystem/pods", "list", "kube-system", "pods", "", ""),
            ("DELETE", "/api/v1/namespaces/default/pods%2Fp", "delete", "default", "pods", "", "p"),
            ("GET", "/api/v1/namespaces/d/pods/p/%65xec", "get", "d", "pods", "exec", "p"),
            // Any `watch` value but a missing key, `0` or `false` is true; keys decode.
            ("GET", "/api/v1/namespaces/d/configmaps?watch=yes", "watch", "d", "configmaps", "", ""),
            ("GET", "/api/v1/namespaces/d/configmaps?watch", "watch", "d", "configmaps", "", ""),
            ("GET", "/api/v1/namespaces/d/configmaps?watch=", "watch", "d", "configmaps", "", ""),
            ("GET", "/api/v1/namespaces/d/configmaps?w%61tch=1", "watch", "d", "configmaps", "", ""),
            ("GET", "/api/v1/namespaces/d/configmaps?watch=FALSE", "list", "d", "configmaps", "", ""),
            ("GET", "/api/v1/namespaces/d/configmaps?watch=0&watch=1", "list", "d", "configmaps", "", ""),
            // `watch` counts only without a name.
            ("GET", "/api/v1/namespaces/d/configmaps/c?watch=1", "get", "d", "configmaps", "", "c"),
            ("GET", "/api/v1/namespaces/d/pods/p/log?watch=true", "get", "d", "pods", "log", "p"),
            ("GET", "/api/v1/namespaces/d/services/s/proxy/x?watch=true", "get", "d", "services", "proxy", "s"),
            // An empty segment is kept where the apiserver keeps it.
            ("GET", "/api/v1//pods", "get", "", "", "", "pods"),
        ];
        assert_cases(&cases);
        // Non-resource requests: decoded too, their verb the lower-case method.
        let uri: Uri = "/vers%69on".parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        assert_eq!(read.path(), "/version");
        let i = read.info(&Method::HEAD);
        assert_eq!((i.rbac_verb, i.is_resource_request()), ("head", false));
        assert_eq!(read.info(&Method::POST).rbac_verb, "post");
        // What the apiserver refuses before any handler.
        let unreadable =
            |t: &'static str| ReadTarget::of(Box::leak(Box::new(t.parse().unwrap()))).err();
        assert!(matches!(
            unreadable("/api/v1/pods%zz"),
            Some(Unreadable::Target(_))
        ));
        assert!(matches!(
            unreadable("/api/v1/%ff"),
            Some(Unreadable::Target(_))
        ));
        assert_eq!(unreadable("/api/v1/watch"), Some(Unreadable::NoResource));
        assert_eq!(
            unreadable("/apis/apps/v1/proxy/"),
            Some(Unreadable::NoResource)
        );
        assert_eq!(unreadable("/api/v1/watch/pods"), None);
    }

    fn class(method: Method, uri: &str) -> (Verb, Option<LongRunning>) {
        let c = classify(&method, &uri.parse().unwrap()).unwrap();
        (c.verb, c.long_running)
    }

    #[test]
    fn verbs_and_long_running_requests_as_the_apiserver_sees_them() {
        use LongRunning::*;
        #[rustfmt::skip]
        let table = [
            (Method::GET, "/api/v1/namespaces/default/configmaps", Verb::List, None),
            (Method::GET, "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=5", Verb::Watch, Some(Watch)),
            (Method::GET, "/api/v1/watch/namespaces/default/pods", Verb::Watch, Some(Watch)),
            (Method::GET, "/api/v1/watch/namespaces/default/pods/p", Verb::Watch, Some(Watch)),
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x", Verb::Update, None),
            (Method::PATCH, "/api/v1/nodes/n1/status", Verb::Patch, None),
            (Method::POST, "/api/v1/namespaces/default/pods/p/exec?command=sh", Verb::Create, Some(Session)),
            (Method::GET, "/api/v1/namespaces/default/pods/p/exec?command=sh", Verb::Get, Some(Session)),
            (Method::POST, "/api/v1/namespaces/default/pods/p/attach", Verb::Create, Some(Session)),
            (Method::POST, "/api/v1/namespaces/default/pods/p/portforward", Verb::Create, Some(Session)),
            (Method::GET, "/api/v1/namespaces/default/pods/p/log?follow=true", Verb::Get, Some(Log)),
            (Method::GET, "/api/v1/namespaces/default/services/s/proxy/x", Verb::Get, Some(Session)),
            (Method::GET, "/api/v1/proxy/namespaces/default/pods/p", Verb::Proxy, Some(Session)),
            (Method::DELETE, "/api/v1/proxy/namespaces/default/pods/p", Verb::Proxy, Some(Session)),
            // Longer than the segments classify keeps: read by its first ten.
            (Method::GET, "/apis/apps/v1/watch/namespaces/default/services/s/proxy/a/b/c/d", Verb::Watch, Some(Watch)),
            (Method::GET, "/apis/g/v1/proxy/namespaces/default/services/s/x/y/z", Verb::Proxy, Some(Session)),
            (Method::GET, "/readyz?verbose", Verb::Get, None),
            (Method::GET, "/debug/pprof/profile?seconds=30", Verb::Get, Some(Profile)),
            (Method::OPTIONS, "/api", Verb::Other, None),
            (Method::OPTIONS, "/api/v1/pods", Verb::Other, None),
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
    fn only_sessions_and_watches_are_upgraded() {
        let upgradable =
            |m: Method, uri: &str| classify(&m, &uri.parse().unwrap()).unwrap().upgradable();
        assert!(upgradable(Method::GET, "/api/v1/namespaces/d/pods/p/exec"));
        assert!(upgradable(
            Method::POST,
            "/api/v1/namespaces/d/pods/p/portforward"
        ));
        assert!(upgradable(
            Method::GET,
            "/api/v1/namespaces/d/services/s/proxy/ws"
        ));
        assert!(upgradable(
            Method::GET,
            "/api/v1/namespaces/d/configmaps?watch=1"
        ));
        assert!(!upgradable(Method::DELETE, "/api/v1/namespaces/d/pods/p"));
        assert!(!upgradable(Method::GET, "/api/v1/namespaces/d/pods/p/log"));
        assert!(!upgradable(Method::GET, "/version"));
    }

    #[test]
    fn group_versions_of_paths() {
        assert_eq!(group_version("/api/v1"), Some(("", "v1")));
        assert_eq!(
            group_version("/apis/apps/v1/deployments"),
            Some(("apps", "v1"))
        );
        assert_eq!(group_version("/apis/apps"), None);
        assert_eq!(group_version("/version"), None);
    }
}
