//! What the request targets read from their input: a request head (and body), and the
//! upstream settings and client they shape it for.
use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Version};
use kubegate::terminate::request::shape::Client;
use kubegate_wire::identity::{IdentityHeaders, UserInfo};
use rustls_pki_types::ServerName;

/// A request from `data`: its head, its body and a flag byte. The first line holds the
/// method, the URI and the flag byte (1: HTTP/2; the targets read the others); then
/// `name:value` lines; after an empty line, the body. `None` for a head no client could send
/// (http refuses it, or h2 would refuse it as a malformed stream).
pub fn read(data: &[u8]) -> Option<(Parts, Bytes, u8)> {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], Bytes::copy_from_slice(&data[at + 2..])),
        None => (data, Bytes::new()),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let mut words = first.splitn(3, |b| *b == b' ');
    let method = Method::from_bytes(words.next().unwrap_or(b"GET")).unwrap_or(Method::GET);
    let uri = words.next().unwrap_or(b"/");
    let flags = words.next().and_then(|f| f.first().copied()).unwrap_or(0);
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .version(if flags & 1 == 1 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        });
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        req = req.header(&line[..colon], &line[colon + 1..]);
    }
    let (parts, ()) = req.body(()).ok()?.into_parts();
    // h2 refuses an HTTP/2 request carrying connection-specific headers (a malformed stream,
    // `vendor/h2/src/frame/headers.rs`): such a request never reaches kubegate.
    if parts.version == Version::HTTP_2 {
        let h = &parts.headers;
        let specific = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
        ]
        .iter()
        .any(|n| h.contains_key(*n));
        if specific || h.get("te").is_some_and(|v| v != "trailers") {
            return None;
        }
    }
    Some((parts, body, flags))
}

/// kubeadm's front-proxy header names and the upstream server name `kubernetes`.
pub fn upstream() -> (IdentityHeaders, ServerName<'static>) {
    let fp = serde_yaml_ng::from_str("cert_file: a\nkey_file: b\n").unwrap();
    let identity = IdentityHeaders::new(&fp).unwrap();
    (identity, ServerName::try_from("kubernetes").unwrap())
}

/// A client at 192.0.2.7 with, when flag 4 is set, a verified certificate of `alice` (`dev`).
pub fn client(flags: u8) -> Client {
    let cert = (flags & 4 == 4).then(|| UserInfo {
        user: "alice".into(),
        groups: vec!["dev".into()],
        uid: None,
    });
    Client::new("192.0.2.7:40000".parse().unwrap(), cert)
}
