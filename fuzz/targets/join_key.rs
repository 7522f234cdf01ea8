//! The joined-read key (`kubegate::terminate::join::key`), whatever two clients send: two
//! shaped requests share a key exactly when they are the same request — the same connection
//! kind, method and URI, and the same values of every header but the few the apiserver never
//! answers by — so no answer crosses identities, selectors, encodings or resourceVersions.
//! And no identity header is one of those few. Across senders, two requests share a key
//! exactly when they are the same but for who sends them (the `Authorization` and front-proxy
//! headers, the connection kind) and both carry an identity that impersonates no one — else
//! exactly as above — and their sender keys are equal exactly when the identities are.
//! Two watch-lists share a key exactly when they are the same request but for their
//! `timeoutSeconds` (each client's own).
use http::{HeaderMap, HeaderName};
use kubegate::state::Kind;
use kubegate::terminate::join::key::{joinable, watch_list, WatchHead, UNANSWERED_HEADERS};
use kubegate::terminate::Outgoing;
use kubegate_wire::identity::IdentityHeaders;
use std::collections::BTreeMap;

#[path = "head.rs"]
mod head;

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    for name in UNANSWERED_HEADERS {
        assert!(
            !(*name == "authorization"
                || name.starts_with("impersonate-")
                || name.starts_with("x-remote-")
                || name.starts_with("accept")),
            "{name} decides the answer"
        );
    }
    // Two requests, split at the first `\n--\n`. The second's first line, when empty, is the
    // first's; its header lines, when its first is `+`, come after the first's (the pairs
    // that differ in one header alone, which a leaking key would equate).
    let at = data.windows(4).position(|w| w == b"\n--\n");
    let (a, b) = match at {
        Some(at) => (&data[..at], &data[at + 4..]),
        None => (data, data),
    };
    let b = second(a, b);
    let (Some((a, ..)), Some((b, ..))) = (head::shaped(a), head::shaped(&b)) else {
        return;
    };
    let key = |o: &Outgoing| joinable(o.kind(), o.method(), o.uri(), o.headers(), o.body(), None);
    let (Some(ka), Some(kb)) = (key(&a), key(&b)) else {
        return;
    };
    let asks_the_same = a.method() == b.method() && a.uri().to_string() == b.uri().to_string();
    let all = |_: &HeaderName| true;
    let same = a.kind() == b.kind()
        && asks_the_same
        && answered_by(a.headers(), all) == answered_by(b.headers(), all);
    assert_eq!(
        ka.key == kb.key,
        same,
        "{:?} / {:?}",
        a.headers(),
        b.headers()
    );

    // Watch-lists: the same request but for `timeoutSeconds`, wherever it stands.
    let sync = |o: &Outgoing| {
        watch_list(&WatchHead {
            kind: o.kind(),
            method: o.method(),
            uri: o.uri(),
            client_query: o.client_query(),
            headers: o.headers(),
            across: None,
        })
    };
    if let (Some(sa), Some(sb)) = (sync(&a), sync(&b)) {
        let untimed = |o: &Outgoing| -> (String, Vec<String>) {
            let kept = o
                .client_query()
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .filter(|p| {
                    kubegate_wire::target::key_of(p).as_deref() != Some(&b"timeoutSeconds"[..])
                })
                .map(str::to_string)
                .collect();
            (format!("{:?}{}", o.uri().authority(), o.uri().path()), kept)
        };
        let same_sync = a.kind() == b.kind()
            && a.method() == b.method()
            && untimed(&a) == untimed(&b)
            && answered_by(a.headers(), all) == answered_by(b.headers(), all);
        assert_eq!(
            sa.key == sb.key,
            same_sync,
            "watch-lists: {:?} / {:?}",
            a.uri(),
            b.uri()
        );
    }

    let ids = IdentityHeaders::default();
    let identity = |n: &HeaderName| *n == http::header::AUTHORIZATION || ids.is_identity(n);
    let across = |o: &Outgoing| {
        joinable(
            o.kind(),
            o.method(),
            o.uri(),
            o.headers(),
            o.body(),
            Some(&ids),
        )
        .unwrap()
    };
    let (ka, kb) = (across(&a), across(&b));
    let crosses = |o: &Outgoing| {
        o.kind() != Kind::Anonymous
            && !o
                .headers()
                .keys()
                .any(|n| n.as_str().starts_with("impersonate-"))
    };
    let same_sender = a.kind() == b.kind()
        && answered_by(a.headers(), identity) == answered_by(b.headers(), identity);
    let not_identity = |n: &HeaderName| !identity(n);
    let same_but_sender = asks_the_same
        && answered_by(a.headers(), not_identity) == answered_by(b.headers(), not_identity);
    let shared = match (crosses(&a), crosses(&b)) {
        (true, true) => same_but_sender,
        (false, false) => same,
        _ => false,
    };
    assert_eq!(
        ka.key == kb.key,
        shared,
        "across: {:?} / {:?}",
        a.headers(),
        b.headers()
    );
    assert_eq!(ka.sender.is_some(), crosses(&a));
    if let (Some(sa), Some(sb)) = (&ka.sender, &kb.sender) {
        assert_eq!(
            sa == sb,
            same_sender,
            "{:?} / {:?}",
            a.headers(),
            b.headers()
        );
    }
}

/// The second request's bytes, read against the first's (`run`).
fn second(a: &[u8], b: &[u8]) -> Vec<u8> {
    let a_first = a.split(|c| *c == b'\n').next().unwrap_or_default();
    let mut lines = b.split(|c| *c == b'\n');
    let first = lines.next().unwrap_or_default();
    let mut out = if first.is_empty() { a_first } else { first }.to_vec();
    let rest: Vec<&[u8]> = lines.collect();
    if rest.first() == Some(&&b"+"[..]) {
        let a_head = a
            .split(|c| *c == b'\n')
            .skip(1)
            .take_while(|l| !l.is_empty());
        for l in a_head {
            out.push(b'\n');
            out.extend_from_slice(l);
        }
        for l in &rest[1..] {
            out.push(b'\n');
            out.extend_from_slice(l);
        }
    } else {
        for l in rest {
            out.push(b'\n');
            out.extend_from_slice(l);
        }
    }
    out
}

/// Every header `keep` keeps that the apiserver may answer by, with its values in order.
fn answered_by(h: &HeaderMap, keep: impl Fn(&HeaderName) -> bool) -> BTreeMap<&str, Vec<&[u8]>> {
    h.keys()
        .filter(|n| !UNANSWERED_HEADERS.contains(&n.as_str()) && keep(n))
        .map(|n| {
            (
                n.as_str(),
                h.get_all(n).iter().map(|v| v.as_bytes()).collect(),
            )
        })
        .collect()
}
