//! Terminate mode's request shaping (`kubegate::terminate::request`), whatever a client sends:
//! no identity header of the client's and no connection-specific header reaches a backend, the
//! URI is absolute HTTPS with an authority, a held body has a matching `Content-Length`, and
//! `X-Forwarded-For` ends with the client's address.
use bytes::Bytes;
use http::{Method, Request, Version};
use kubegate::telemetry::Metrics;
use kubegate::terminate::request::shape::{Client, Shaper};
use kubegate_wire::identity::{IdentityHeaders, UserInfo};
use rustls_pki_types::ServerName;
use std::sync::OnceLock;

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    // First line: method, URI and a flag byte; then `name:value` lines; after an empty line,
    // the body.
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
    let Ok(req) = req.body(()) else { return };
    let (parts, ()) = req.into_parts();
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
            return;
        }
    }
    let fp = serde_yaml_ng::from_str("cert_file: a\nkey_file: b\n").unwrap();
    let identity = IdentityHeaders::new(&fp).unwrap();
    let server_name = ServerName::try_from("kubernetes").unwrap();
    let metrics = METRICS.get_or_init(Metrics::new);
    let shaper = Shaper {
        identity: &identity,
        vouches: flags & 2 == 2,
        server_name: &server_name,
        metrics: &metrics.terminate,
    };
    let cert = (flags & 4 == 4).then(|| UserInfo {
        user: "alice".into(),
        groups: vec!["dev".into()],
        uid: None,
    });
    let client = Client::new("192.0.2.7:40000".parse().unwrap(), cert);
    let held = body.len();
    let out = shaper.request(&client, parts, body);
    let head = out.head();
    let h = head.headers();
    for n in h.keys() {
        let n = n.as_str();
        assert!(
            !matches!(
                n,
                "connection"
                    | "keep-alive"
                    | "proxy-connection"
                    | "transfer-encoding"
                    | "upgrade"
                    | "te"
                    | "host"
            ),
            "{n} crossed"
        );
    }
    // Identity headers reach the backend only as kubegate set them.
    let users: Vec<_> = h.get_all("x-remote-user").iter().collect();
    if flags & 6 == 6 {
        assert_eq!(users, ["alice"]);
    } else {
        assert!(users.is_empty(), "a client's X-Remote-User crossed");
        assert!(h.get("x-remote-group").is_none());
    }
    assert!(h.keys().all(|k| !k.as_str().starts_with("x-remote-extra-")));
    assert_eq!(head.uri().scheme_str(), Some("https"));
    assert!(head.uri().authority().is_some());
    if held > 0 {
        let lengths: Vec<_> = h.get_all("content-length").iter().collect();
        assert!(!lengths.is_empty());
    }
    let xff = h.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    assert!(xff.is_some_and(|v| v.ends_with("192.0.2.7")), "{xff:?}");
}
