//! What the request targets read from their input: a request head (and body), shaped for the
//! upstream as terminate mode shapes it for a client.
use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Version};
use kubegate::telemetry::Metrics;
use kubegate::terminate::request::shape::{Client, Shaper};
use kubegate::terminate::Outgoing;
use kubegate_wire::identity::{IdentityHeaders, UserInfo};
use rustls_pki_types::ServerName;
use std::sync::OnceLock;

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

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The request in `data` (`read`), shaped as terminate mode sends it: toward kubeadm's
/// front-proxy header names and upstream server name `kubernetes`, vouching for verified
/// clients when flag 2 is set, from a client at 192.0.2.7 with, when flag 4 is set, a verified
/// certificate of `alice` (`dev`). With its body's length and the flag byte.
pub fn shaped(data: &[u8]) -> Option<(Outgoing, usize, u8)> {
    let (parts, body, flags) = read(data)?;
    let fp = serde_yaml_ng::from_str("cert_file: a\nkey_file: b\n").unwrap();
    let identity = IdentityHeaders::new(&fp).unwrap();
    let server_name = ServerName::try_from("kubernetes").unwrap();
    let shaper = Shaper {
        identity: &identity,
        vouches: flags & 2 == 2,
        server_name: &server_name,
        metrics: &METRICS.get_or_init(Metrics::new).terminate,
    };
    let cert = (flags & 4 == 4).then(|| UserInfo {
        user: "alice".into(),
        groups: vec!["dev".into()],
        uid: None,
        extra: Default::default(),
    });
    let client = Client::new("192.0.2.7:40000".parse().unwrap(), cert);
    let held = body.len();
    Some((shaper.request(&client, parts, body), held, flags))
}
