//! The headers of an HTTP/1.1 request that describe its connection, not the request: those its
//! `Connection` header names. A proxy removes them before the request goes on (RFC 9110 §7.6.1),
//! so one reading of `Connection` must decide both what kubegate forwards and what it takes a
//! request to carry: a header read as absent here never reaches the apiserver, and one read as
//! present does.

use http::header::{HeaderMap, CONNECTION};

/// The options `Connection` names, every value and list element, with the list's optional
/// whitespace (space, tab) trimmed; raw bytes, so that a value with bytes beyond ASCII is read,
/// not skipped.
pub fn connection_options(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(trim_ows)
        .filter(|n| !n.is_empty())
}

/// Whether `Connection` names `name` (any case): the header goes no further than kubegate.
pub fn names(headers: &HeaderMap, name: &str) -> bool {
    connection_options(headers).any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn every_value_and_element_is_read_bytes_beyond_ascii_and_all() {
        let mut h = HeaderMap::new();
        h.append(
            CONNECTION,
            HeaderValue::from_static("keep-alive, Authorization"),
        );
        h.append(
            CONNECTION,
            HeaderValue::from_bytes(b"\tsec-websocket-protocol ,\xff").unwrap(),
        );
        let read: Vec<&[u8]> = connection_options(&h).collect();
        assert_eq!(
            read,
            [
                &b"keep-alive"[..],
                b"Authorization",
                b"sec-websocket-protocol",
                b"\xff"
            ]
        );
        assert!(names(&h, "authorization"));
        assert!(names(&h, "sec-websocket-protocol"));
        assert!(!names(&h, "upgrade"));
        assert!(!names(&HeaderMap::new(), "authorization"));
    }
}
