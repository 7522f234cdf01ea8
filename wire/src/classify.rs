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

/// Classifies a request by method and URI.
pub fn classify(method: &Method, uri: &Uri) -> RequestClass {
    let path = uri.path();
    let watch_param = query_flag(uri.query(), "watch");
    let segments = Segments::of(path);
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest: Option<&[&str]> = match segments.as_slice() {
        ["api", _version, rest @ ..] => Some(rest),
        ["apis", _group, _version, rest @ ..] => Some(rest),
        _ => None,
    };
    let Some(mut rest) = rest else {
        let long_running = path
            .starts_with("/debug/pprof/")
            .then_some(LongRunning::Profile);
        let verb = match *method {
            Method::GET | Method::HEAD => Verb::Get,
            _ => method_verb(method, true),
        };
        return RequestClass { verb, long_running };
    };
    // Deprecated path verbs: /api/v1/watch/..., /api/v1/proxy/...
    let mut path_verb = None;
    if let Some((first, tail)) = rest.split_first() {
        if *first == "watch" || *first == "proxy" {
            path_verb = Some(*first);
            rest = tail;
        }
    }
    let (name, subresource) = match rest {
        // The namespace object's own subresources.
        ["namespaces", name, sub @ ("status" | "finalize")] => (Some(*name), Some(*sub)),
        ["namespaces", _ns, _resource, name, sub, ..] => (Some(*name), Some(*sub)),
        ["namespaces", _ns, _resource, name] => (Some(*name), None),
        ["namespaces", _ns, _resource] => (None, None),
        // The namespace object itself: /namespaces/NAME
        ["namespaces", name] => (Some(*name), None),
        [_resource, name, sub, ..] => (Some(*name), Some(*sub)),
        [_resource, name] => (Some(*name), None),
        _ => (None, None),
    };
    let name = name.filter(|n| !n.is_empty());
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
    RequestClass { verb, long_running }
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
