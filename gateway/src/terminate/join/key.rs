//! What makes two reads the same read: the bytes that decide the apiserver's answer, and
//! nothing else. A pure function of the shaped request (the fuzz target and the property
//! tests reach it), because a key that equates two requests the apiserver would answer
//! differently hands one client another's answer.
//!
//! The key is everything kubegate sends upstream — the connection kind (which identity the
//! TLS connection carries), the method, the whole URI (authority, path and query as the
//! client wrote them), every header with every value — less a short list of headers the
//! apiserver never answers by ([`UNANSWERED_HEADERS`]: where the request came from, tracing,
//! kubectl's session labels). The identity is in it as sent: the front-proxy headers kubegate
//! set for a certificate, the client's own `Authorization` and `Impersonate-*` headers. Two
//! bearer tokens of one user are two keys: whether one may read what the other reads is for
//! the apiserver's authorizers to say (a token's `extra`, the pod and node it is bound to, may
//! count), which only a review asks them (below). Anything unknown counts, so a header that could change the answer keeps requests apart.
//!
//! Across senders (`across_senders`), a read's key leaves the identity out — the
//! `Authorization` header and the front-proxy headers, and the connection kind — and the
//! identity becomes the read's [`SenderKey`]: a read joins another sender's only once a
//! SubjectAccessReview says its own sender may ask the same (`sender::access`). A request
//! that impersonates (`Impersonate-*`) or carries no identity keeps the identity in its key.

use crate::state::Kind;
use http::{HeaderMap, HeaderName, Method, Uri};
use kubegate_wire::classify::{RequestInfo, Verb};
use kubegate_wire::identity::IdentityHeaders;
use kubegate_wire::target::{truthy, Query};

/// Headers the apiserver never answers by (it logs some, in its audit record of the request
/// that went upstream). Every other header is part of the key.
pub const UNANSWERED_HEADERS: &[&str] = &[
    "x-forwarded-for",
    "x-real-ip",
    "user-agent",
    "traceparent",
    "tracestate",
    "audit-id",
    "kubectl-command",
    "kubectl-session",
    "content-length",
];

/// Response headers that describe the answer's bytes, not the request that fetched them: the
/// only ones an answer keeps when it goes to another sender. Everything else is about the
/// request that went upstream and its sender — its `Audit-Id`, the flow schema and priority
/// level priority and fairness matched it to, `Warning`s its admission or deprecation raised —
/// or unknown (an extension server's own).
const CROSSING_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "content-length",
    "cache-control",
    "x-content-type-options",
    "strict-transport-security",
    "vary",
];

/// Keeps of the head of an answer given to another sender only [`CROSSING_HEADERS`].
pub fn keep_crossing(headers: &mut HeaderMap) {
    let others: Vec<HeaderName> = headers
        .keys()
        .filter(|n| !CROSSING_HEADERS.contains(&n.as_str()))
        .cloned()
        .collect();
    for name in others {
        headers.remove(name);
    }
}

/// One read's key: the request's answer-deciding bytes, each part length-prefixed (so no
/// two different requests write the same bytes), compared whole (a hash collision cannot
/// join two reads).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JoinKey(Box<[u8]>);

/// Who sent a read whose key leaves the identity out: the connection kind and every identity
/// header with every value, compared whole. Reads of one sender key share without a review.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SenderKey(Box<[u8]>);

/// Which in-flight twin a read may be answered from, by the apiserver's freshness rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// A `resourceVersion` (`0`: any; `N`: not older than N, or exactly N) or a `continue`
    /// token: any twin in flight is as fresh as this read asks, its query being the same.
    AnyTwin,
    /// No `resourceVersion`: a consistent read, which must see every write that completed
    /// before it arrived. Only a twin sent after it arrived will do.
    SentAfterArrival,
}

/// A read that may be joined: its key and freshness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joinable {
    /// What it asks, whole.
    pub key: JoinKey,
    /// Which twin may answer it.
    pub freshness: Freshness,
    /// Its sender, when its key leaves the identity out (reads of other senders may join it,
    /// and it theirs, after a review); `None` when the identity is in its key.
    pub sender: Option<SenderKey>,
}

/// A watch that may be fed from a shared one: its key, its sender (as [`Joinable::sender`])
/// and the resourceVersion it starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedable {
    /// What it asks, its position aside.
    pub key: JoinKey,
    /// Its sender, when the key leaves the identity out.
    pub sender: Option<SenderKey>,
    /// Where it starts.
    pub from: u64,
}

/// Whether a request read as `info`, with `method`, is a read that may be joined: a GET or
/// LIST that is not long-running (watches, logs and sessions stream), of any resource but
/// `secrets` unless `secrets` is true, and not a lease renewal's read. (Its body must be empty
/// too: [`joinable`].)
///
/// A leader's renewal reads its lease consistently, under the identity every standby of the
/// component shares (`system:kube-controller-manager` on each control-plane node): joined, it
/// would wait for a standby's read of the lease in flight before it (up to [`TRAILING_WAIT`]
/// when that read is stuck at a frozen replica), for a saving of one small read.
///
/// [`TRAILING_WAIT`]: crate::terminate::join::TRAILING_WAIT
pub fn may_join(info: &RequestInfo<'_>, method: &Method, secrets: bool) -> bool {
    *method == Method::GET
        && info.class.long_running.is_none()
        && matches!(info.class.verb, Verb::Get | Verb::List)
        && (secrets || info.target.resource != Some("secrets"))
        && !info.renews_lease()
}

/// The key and freshness of a read that [`may_join`], sent upstream with this head and
/// `body`; `None` when it carries a body. With `across` (the front-proxy header names), its key
/// leaves its sender's identity out where it can ([`keys`]).
pub fn joinable(
    kind: Kind,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    across: Option<&IdentityHeaders>,
) -> Option<Joinable> {
    if !body.is_empty() {
        return None;
    }
    let query = Query::new(uri.query());
    let pinned = |key| query.first(key).is_some_and(|v| !v.is_empty());
    let freshness = if pinned("resourceVersion") || pinned("continue") {
        Freshness::AnyTwin
    } else {
        Freshness::SentAfterArrival
    };
    let (key, sender) = keys(kind, method, uri, headers, across);
    Some(Joinable {
        key,
        freshness,
        sender,
    })
}

/// A watch's head as it goes upstream, read for the key it may share under: [`feedable`] and
/// [`watch_list`] leave parts of the client's own query out of it.
#[derive(Clone, Copy)]
pub struct WatchHead<'a> {
    /// How the client authenticated.
    pub kind: Kind,
    /// The request's method.
    pub method: &'a Method,
    /// Its target as it goes upstream.
    pub uri: &'a Uri,
    /// The query as the client wrote it.
    pub client_query: Option<&'a str>,
    /// Its headers as they go upstream.
    pub headers: &'a HeaderMap,
    /// The front-proxy header names, when the key may leave the sender out ([`keys`]).
    pub across: Option<&'a IdentityHeaders>,
}

/// Query parameters a shared watch serves each client by itself: where it starts, how long it
/// lasts, whether it hears bookmarks. Every other parameter is part of a watch's key.
const POSITION_PARAMETERS: &[&str] = &["resourceVersion", "timeoutSeconds", "allowWatchBookmarks"];

/// The key of a watch that may be fed from a shared one, and the position it starts from: a
/// watch from a resourceVersion (a number above 0: an informer's watch after its list),
/// without `sendInitialEvents` and not of Tables (whose first event differs per client). Its
/// key is what [`key_of`] makes of the request with the client's query less
/// [`POSITION_PARAMETERS`] (with `across`, as [`keys`] makes it); `None` for any other watch.
pub fn feedable(watch: &WatchHead<'_>) -> Option<Feedable> {
    let query = Query::new(watch.client_query);
    let from = query
        .text("resourceVersion")?
        .parse::<u64>()
        .ok()
        .filter(|rv| *rv > 0)?;
    let tables = asks_tables(watch.headers);
    // What the apiserver would refuse (400) goes upstream to be refused: `resourceVersionMatch`
    // on a watch without `sendInitialEvents`, a `timeoutSeconds` that is not an integer
    // (apimachinery's `Convert_Slice_string_To_Pointer_int64`, `strconv.ParseInt`).
    let refused = query.first("resourceVersionMatch").is_some()
        || query
            .text("timeoutSeconds")
            .is_some_and(|t| t.parse::<i64>().is_err());
    if query.first("sendInitialEvents").is_some() || tables || refused {
        return None;
    }
    let uri = without(watch.uri, &query, POSITION_PARAMETERS)?;
    let (key, sender) = keys(watch.kind, watch.method, &uri, watch.headers, watch.across);
    Some(Feedable { key, sender, from })
}

/// The key and freshness of a watch-list's initial sync — a watch with `sendInitialEvents`
/// and `resourceVersionMatch=NotOlderThan`, not of Tables, as client-go's informers start
/// since 1.35 — which identical ones may join until its initial events have ended: as
/// [`joinable`] makes them of the request with the client's query less `timeoutSeconds` (each
/// client's own watch lasts its own time); `None` for any other request.
pub fn watch_list(watch: &WatchHead<'_>) -> Option<Joinable> {
    let query = Query::new(watch.client_query);
    let flag = |key| query.first(key).is_some_and(|v| truthy(&v));
    let tables = asks_tables(watch.headers);
    let not_older = query.text("resourceVersionMatch").as_deref() == Some("NotOlderThan");
    if *watch.method != Method::GET
        || !flag("watch")
        || !flag("sendInitialEvents")
        || !not_older
        || tables
    {
        return None;
    }
    let uri = without(watch.uri, &query, &["timeoutSeconds"])?;
    joinable(
        watch.kind,
        watch.method,
        &uri,
        watch.headers,
        b"",
        watch.across,
    )
}

/// Whether a watch asks for Tables (`Accept: ...;as=Table`, read as the apiserver's
/// negotiation reads it), whose first event differs per client.
fn asks_tables(headers: &HeaderMap) -> bool {
    kubegate_wire::accept::converts_to(headers, "Table")
}

/// `uri` with the client's query (`query`) less the parameters named in `left_out`.
fn without(uri: &Uri, query: &Query<'_>, left_out: &[&str]) -> Option<Uri> {
    let kept: Vec<&str> = query
        .pairs()
        .filter(|p| !left_out.iter().any(|n| p.key.as_ref() == n.as_bytes()))
        .map(|p| p.raw)
        .collect();
    let mut parts = uri.clone().into_parts();
    let path = uri.path();
    let pq = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    parts.path_and_query = Some(pq.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The key of a request of `kind` with this head, its identity in it.
pub fn key_of(kind: Kind, method: &Method, uri: &Uri, headers: &HeaderMap) -> JoinKey {
    let answered = |n: &HeaderName| !UNANSWERED_HEADERS.contains(&n.as_str());
    JoinKey(written(&[kind as u8], method, uri, headers, answered).into_boxed_slice())
}

/// What a key across senders has where another has its connection kind: no kind's value.
const ACROSS_SENDERS: u8 = 0xff;

/// The key of a request and its sender: with `across`, for a request that carries an identity
/// (a bearer token, or the front-proxy headers kubegate set) and impersonates no one, a key
/// without the identity and the [`SenderKey`] that is left out; otherwise [`key_of`], and no
/// sender.
pub fn keys(
    kind: Kind,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    across: Option<&IdentityHeaders>,
) -> (JoinKey, Option<SenderKey>) {
    let impersonates = || {
        headers
            .keys()
            .any(|n| n.as_str().starts_with("impersonate-"))
    };
    let ids = match across {
        Some(ids) if kind != Kind::Anonymous && !impersonates() => ids,
        _ => return (key_of(kind, method, uri, headers), None),
    };
    let identity = |n: &HeaderName| *n == http::header::AUTHORIZATION || ids.is_identity(n);
    let answered = |n: &HeaderName| !UNANSWERED_HEADERS.contains(&n.as_str()) && !identity(n);
    let key = written(&[ACROSS_SENDERS], method, uri, headers, answered);
    let mut sender = Vec::with_capacity(128);
    part(&mut sender, &[kind as u8]);
    write_headers(&mut sender, headers, identity);
    (
        JoinKey(key.into_boxed_slice()),
        Some(SenderKey(sender.into_boxed_slice())),
    )
}

/// `kind`, the method, the URI and the headers `keep` keeps, each length-prefixed.
fn written(
    kind: &[u8],
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    keep: impl Fn(&HeaderName) -> bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    part(&mut out, kind);
    part(&mut out, method.as_str().as_bytes());
    part(&mut out, uri.to_string().as_bytes());
    write_headers(&mut out, headers, keep);
    out
}

/// Writes `bytes` to `out`, prefixed with its length (so no two different requests write the
/// same bytes).
fn part(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Writes every header `keep` keeps, sorted by name, with every value.
fn write_headers(out: &mut Vec<u8>, headers: &HeaderMap, keep: impl Fn(&HeaderName) -> bool) {
    let mut names: Vec<&HeaderName> = headers.keys().filter(|n| keep(n)).collect();
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    for name in names {
        // Every value, in the order sent: a header repeated is a list the apiserver reads in
        // order (`Impersonate-Group`).
        let values: Vec<&[u8]> = headers.get_all(name).iter().map(|v| v.as_bytes()).collect();
        part(out, name.as_str().as_bytes());
        part(out, &(values.len() as u32).to_be_bytes());
        for v in values {
            part(out, v);
        }
    }
}

/// The headers of a request sent with bearer `token`, for the tests of what a key leaves out.
#[cfg(test)]
pub(crate) fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let value = format!("Bearer {token}").parse().expect("a header value");
    h.insert(http::header::AUTHORIZATION, value);
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use kubegate_wire::classify::ReadTarget;
    use proptest::prelude::*;

    fn joinable_of(target: &str, headers: &HeaderMap) -> Option<Joinable> {
        let uri: Uri = format!("https://kube.example{target}").parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        if !may_join(&read.info(&Method::GET), &Method::GET, false) {
            return None;
        }
        joinable(Kind::BearerToken, &Method::GET, &uri, headers, b"", None)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn watch_list_of(query: &str) -> Option<Joinable> {
        let uri: Uri = format!("https://kube.example/api/v1/services?{query}")
            .parse()
            .unwrap();
        let h = headers(&[("authorization", "Bearer a")]);
        watch_list(&WatchHead {
            kind: Kind::BearerToken,
            method: &Method::GET,
            uri: &uri,
            client_query: uri.query(),
            headers: &h,
            across: None,
        })
    }

    #[test]
    fn watch_lists_join_whatever_their_timeouts_and_nothing_else() {
        const SYNC: &str = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
        let a = watch_list_of(&format!("{SYNC}&timeoutSeconds=301")).unwrap();
        let b = watch_list_of(&format!("timeoutSeconds=517&{SYNC}")).unwrap();
        assert_eq!(a.freshness, Freshness::SentAfterArrival);
        // The timeout is each client's, wherever it stands in the query.
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, watch_list_of(SYNC).unwrap().key);
        let pinned = watch_list_of(&format!("{SYNC}&resourceVersion=42")).unwrap();
        assert_eq!(pinned.freshness, Freshness::AnyTwin);
        assert_ne!(pinned.key, a.key);
        let selected = watch_list_of(&format!("{SYNC}&labelSelector=a%3Db")).unwrap();
        assert_ne!(selected.key, a.key);
        for not in [
            "watch=1&resourceVersion=42",
            "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact",
            "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan",
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        ] {
            assert!(watch_list_of(not).is_none(), "{not} is no watch-list");
        }
    }

    #[test]
    fn only_plain_reads_are_joined() {
        let h = headers(&[("authorization", "Bearer a")]);
        assert!(joinable_of("/api/v1/pods", &h).is_some());
        assert!(joinable_of("/api/v1/namespaces/a/pods/p", &h).is_some());
        assert!(joinable_of("/version", &h).is_some());
        for not in [
            "/api/v1/pods?watch=true",
            "/api/v1/namespaces/a/pods/p/log?follow=true",
            "/api/v1/namespaces/a/pods/p/exec",
            "/api/v1/namespaces/a/secrets",
            "/api/v1/secrets?resourceVersion=0",
            // A leader's renewal: never held behind a standby's read of its lease.
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager",
        ] {
            assert!(joinable_of(not, &h).is_none(), "{not} is not joined");
        }
        let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        assert!(
            joinable_of(leases, &h).is_some(),
            "a LIST of leases renews none"
        );
    }

    #[test]
    fn freshness_follows_the_resource_version_asked() {
        let h = HeaderMap::new();
        let fresh = |t| joinable_of(t, &h).unwrap().freshness;
        assert_eq!(fresh("/api/v1/pods"), Freshness::SentAfterArrival);
        assert_eq!(
            fresh("/api/v1/pods?resourceVersion="),
            Freshness::SentAfterArrival
        );
        assert_eq!(fresh("/api/v1/pods?limit=500"), Freshness::SentAfterArrival);
        assert_eq!(fresh("/api/v1/pods?resourceVersion=0"), Freshness::AnyTwin);
        assert_eq!(
            fresh("/api/v1/pods?resourceVersion=7&resourceVersionMatch=Exact"),
            Freshness::AnyTwin
        );
        assert_eq!(
            fresh("/api/v1/pods?limit=5&continue=abc"),
            Freshness::AnyTwin
        );
    }

    #[test]
    fn where_a_request_came_from_does_not_keep_reads_apart() {
        let a = headers(&[
            ("authorization", "Bearer a"),
            ("user-agent", "kube-proxy/1"),
            ("x-forwarded-for", "127.0.0.2"),
            ("kubectl-session", "s1"),
        ]);
        let b = headers(&[
            ("x-forwarded-for", "127.0.0.3"),
            ("authorization", "Bearer a"),
            ("user-agent", "kube-proxy/2"),
        ]);
        assert_eq!(
            joinable_of("/api/v1/services", &a),
            joinable_of("/api/v1/services", &b)
        );
    }

    fn feedable_of(query: &str, headers: &HeaderMap) -> Option<(JoinKey, u64)> {
        let uri: Uri = format!("https://kube.example/api/v1/services?{query}")
            .parse()
            .unwrap();
        feedable(&WatchHead {
            kind: Kind::BearerToken,
            method: &Method::GET,
            uri: &uri,
            client_query: Some(query),
            headers,
            across: None,
        })
        .map(|f| (f.key, f.from))
    }

    #[test]
    fn watches_from_a_position_share_whatever_their_position_and_time() {
        let h = headers(&[("authorization", "Bearer a")]);
        let (a, from_a) = feedable_of(
            "watch=1&labelSelector=app%3Da&resourceVersion=10&timeoutSeconds=300",
            &h,
        )
        .unwrap();
        let (b, from_b) = feedable_of(
            "watch=1&allowWatchBookmarks=true&labelSelector=app%3Da&resourceVersion=12",
            &h,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!((from_a, from_b), (10, 12));
        // Another selector, another sender: another watch.
        let (c, _) = feedable_of("watch=1&labelSelector=app%3Db&resourceVersion=10", &h).unwrap();
        assert_ne!(a, c);
        let other = headers(&[("authorization", "Bearer b")]);
        let (d, _) =
            feedable_of("watch=1&labelSelector=app%3Da&resourceVersion=10", &other).unwrap();
        assert_ne!(a, d);
        // No position, an initial listing, a Table: a watch of its own.
        for own in [
            "watch=1",
            "watch=1&resourceVersion=0",
            "watch=1&resourceVersion=abc",
            "watch=1&resourceVersion=10&sendInitialEvents=true",
        ] {
            assert!(feedable_of(own, &h).is_none(), "{own}");
        }
        let table = headers(&[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")]);
        assert!(feedable_of("watch=1&resourceVersion=10", &table).is_none());
        let spaced = headers(&[("accept", "application/json; as = Table; v=v1")]);
        assert!(feedable_of("watch=1&resourceVersion=10", &spaced).is_none());
        // What the apiserver answers 400 is never answered by a feed.
        for refused in [
            "watch=1&resourceVersion=10&resourceVersionMatch=NotOlderThan",
            "watch=1&resourceVersion=10&resourceVersionMatch=Exact",
            "watch=1&resourceVersion=10&timeoutSeconds=abc",
            "watch=1&resourceVersion=10&timeoutSeconds=",
            "watch=1&resourceVersion=10&timeoutSeconds=1.5",
        ] {
            assert!(feedable_of(refused, &h).is_none(), "{refused}");
        }
        assert!(feedable_of("watch=1&resourceVersion=10&timeoutSeconds=-1", &h).is_some());
    }

    /// The values each part of a request that decides its answer takes in the property
    /// below, some nearly alike: identities (tokens, front-proxy users and groups, a
    /// group more, an impersonation), encodings, resourceVersions and selectors, paths.
    fn identities() -> Vec<Vec<(&'static str, &'static str)>> {
        vec![
            vec![],
            vec![("authorization", "Bearer token-a")],
            vec![("authorization", "Bearer token-b")],
            vec![("authorization", "Bearer token-a ")],
            vec![("x-remote-user", "alice"), ("x-remote-group", "dev")],
            vec![("x-remote-user", "alice"), ("x-remote-group", "ops")],
            vec![
                ("x-remote-user", "alice"),
                ("x-remote-group", "dev"),
                ("x-remote-group", "ops"),
            ],
            vec![
                ("x-remote-user", "alice"),
                ("x-remote-group", "ops"),
                ("x-remote-group", "dev"),
            ],
            vec![("x-remote-user", "alicedev")],
            vec![
                ("x-remote-user", "alice"),
                ("x-remote-extra-scopes", "view"),
            ],
            vec![
                ("authorization", "Bearer token-a"),
                ("impersonate-user", "bob"),
            ],
        ]
    }

    const ENCODINGS: &[&[(&str, &str)]] = &[
        &[],
        &[("accept", "application/json")],
        &[("accept", "application/vnd.kubernetes.protobuf")],
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        &[("accept-encoding", "gzip")],
        &[("accept", "application/json"), ("accept-encoding", "gzip")],
    ];

    const QUERIES: &[&str] = &[
        "",
        "?resourceVersion=0",
        "?resourceVersion=10",
        "?resourceVersion=10&resourceVersionMatch=Exact",
        "?resourceVersion=10&resourceVersionMatch=NotOlderThan",
        "?labelSelector=app%3Da",
        "?labelSelector=app%3Db",
        "?labelSelector=app%3Da&resourceVersion=0",
        "?fieldSelector=spec.nodeName%3Dn1",
        "?fieldSelector=spec.nodeName%3Dn2",
        "?limit=500&continue=abc",
        "?limit=500&continue=abd",
    ];

    const PATHS: &[&str] = &[
        "/api/v1/services",
        "/api/v1/namespaces/a/services",
        "/api/v1/namespaces/b/services",
        "/api/v1/namespaces/a/services/x",
        "/apis/discovery.k8s.io/v1/endpointslices",
    ];

    /// A request as indices into the tables above: (path, query, identity, encoding).
    type Ask = (usize, usize, usize, usize);

    /// The target and headers of `ask`, with user agent `agent`.
    fn request((p, q, i, e): Ask, agent: &str) -> (String, HeaderMap) {
        let mut pairs = identities()[i].clone();
        pairs.extend_from_slice(ENCODINGS[e]);
        pairs.push(("user-agent", agent));
        (format!("{}{}", PATHS[p], QUERIES[q]), headers(&pairs))
    }

    /// Two requests, the second alike in each part with even odds (else drawn anew): the
    /// pairs that differ in one part alone, which a leaking key would equate, come often.
    fn two_asks() -> impl Strategy<Value = (Ask, Ask)> {
        let ask = || {
            (
                0..PATHS.len(),
                0..QUERIES.len(),
                0..identities().len(),
                0..ENCODINGS.len(),
            )
        };
        (ask(), ask(), any::<[bool; 4]>()).prop_map(|(a, b, keep)| {
            let pick = |k: bool, x: usize, y: usize| if k { x } else { y };
            let b = (
                pick(keep[0], a.0, b.0),
                pick(keep[1], a.1, b.1),
                pick(keep[2], a.2, b.2),
                pick(keep[3], a.3, b.3),
            );
            (a, b)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Two requests share a key exactly when they are the same request (their user
        /// agents aside): no identity, selector, encoding or resourceVersion crosses to
        /// another.
        #[test]
        fn requests_share_a_key_only_when_they_ask_the_same(
            (a, b) in two_asks(),
            ua in "[a-z]{0,4}",
            ub in "[a-z]{0,4}",
        ) {
            let (ta, ha) = request(a, &ua);
            let (tb, hb) = request(b, &ub);
            let (ka, kb) = (joinable_of(&ta, &ha).unwrap(), joinable_of(&tb, &hb).unwrap());
            prop_assert_eq!(ka.key == kb.key, a == b, "{:?} / {:?}", (ta, ha), (tb, hb));
        }

        /// Across senders, two requests share a key exactly when they ask the same but for
        /// who sends them, and both carry an identity that impersonates no one; their sender
        /// keys are equal only for the same identity. A request with no identity, or an
        /// impersonating one, keeps its identity in its key, so it never meets another's.
        #[test]
        fn across_senders_only_the_identity_is_left_out(
            (a, b) in two_asks(),
            ua in "[a-z]{0,4}",
            ub in "[a-z]{0,4}",
        ) {
            let ids = IdentityHeaders::default();
            let across = |ask: Ask, agent: &str| {
                let (t, h) = request(ask, agent);
                let uri: Uri = format!("https://kube.example{t}").parse().unwrap();
                joinable(kind_of(ask.2), &Method::GET, &uri, &h, b"", Some(&ids)).unwrap()
            };
            let (ka, kb) = (across(a, &ua), across(b, &ub));
            let asks_the_same = (a.0, a.1, a.3) == (b.0, b.1, b.3);
            let shared = asks_the_same && (a.2 == b.2 || (crosses(a.2) && crosses(b.2)));
            prop_assert_eq!(ka.key == kb.key, shared, "{:?} / {:?}", a, b);
            prop_assert_eq!(ka.sender.is_some(), crosses(a.2));
            if let (Some(sa), Some(sb)) = (&ka.sender, &kb.sender) {
                prop_assert_eq!(sa == sb, a.2 == b.2);
            }
        }
    }

    /// The connection kind a request with identity `i` of [`identities`] is sent on.
    fn kind_of(i: usize) -> Kind {
        let id = &identities()[i];
        if id.iter().any(|(n, _)| n.starts_with("x-remote-")) {
            Kind::WithIdentity
        } else if id.iter().any(|(n, _)| *n == "authorization") {
            Kind::BearerToken
        } else {
            Kind::Anonymous
        }
    }

    /// Whether identity `i` of [`identities`] may share across senders: it has one, and
    /// impersonates no one.
    fn crosses(i: usize) -> bool {
        kind_of(i) != Kind::Anonymous
            && !identities()[i]
                .iter()
                .any(|(n, _)| n.starts_with("impersonate-"))
    }
}
