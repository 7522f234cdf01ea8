//! Terminate mode's request shaping (`kubegate::terminate::request`), whatever a client sends:
//! no identity header of the client's and no connection-specific header reaches a backend, the
//! URI is absolute HTTPS with an authority, a held body has a matching `Content-Length`, and
//! `X-Forwarded-For` ends with the client's address.
#[path = "head.rs"]
mod head;

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let Some((out, held, flags)) = head::shaped(data) else {
        return;
    };
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
