//! A request's bearer token, read exactly as the apiserver's token authenticators read it, over
//! the header's bytes (a value may carry any byte but a control character; the apiserver's Go
//! strings take bytes >= 0x80 as they come):
//!
//! - `Authorization` (k8s.io/apiserver `pkg/authentication/request/bearertoken/bearertoken.go`,
//!   `Authenticator.AuthenticateRequest`): the first value, `strings.TrimSpace`d (Unicode's
//!   White_Space at either end, ASCII or UTF-8; an invalid byte is no space), split by
//!   `strings.SplitN(auth, " ", 3)`; the scheme lowercased must be `bearer`, and the token is
//!   the second part, whatever follows a second space. So `Bearer T \xff` is the token `T`, and
//!   `Bearer  T` (two spaces) no token at all.
//! - `Sec-WebSocket-Protocol` (`pkg/authentication/request/websocket/protocol.go`,
//!   `ProtocolAuthenticator.AuthenticateRequest`), after the `Authorization` header and only
//!   for a WebSocket upgrade: every value split on `,`, each protocol trimmed; one starting
//!   `base64url.bearer.authorization.k8s.io.` carries the token, unpadded base64url of UTF-8
//!   bytes, and at least one other protocol must be offered with it.
//!
//! What is read is what reaches the apiserver: a header an HTTP/1.1 client's `Connection` names
//! is removed before the request goes upstream (hop by hop, read by `hop` for both), so it
//! carries no credential; and
//! an upgrade is a WebSocket one by the `Upgrade` value kubegate forwards (the apiserver's
//! `wsstream.IsWebSocketRequest` lowercases it as Go's `strings.ToLower` does).
//!
//! A token the apiserver reads but kubegate cannot pass on as the apiserver read it (bytes that
//! are not UTF-8 cannot travel in a TokenReview's JSON unchanged) is [`Bearer::Unreadable`]:
//! kubegate answers such a request 401 itself rather than name its sender wrongly. So is a
//! WebSocket upgrade carrying both an `Authorization` token and a token subprotocol: the
//! apiserver's union of authenticators takes whichever of the two authenticates, which only
//! reviewing both would tell.

use http::header::{HeaderMap, AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL, UPGRADE};
use std::borrow::Cow;

/// The WebSocket subprotocol prefix that carries a bearer token.
pub const WEBSOCKET_BEARER_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// What a request's credentials say of a bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// No bearer token the apiserver would authenticate.
    Absent,
    /// The token the apiserver authenticates, as text (a WebSocket protocol's, decoded).
    Token(Cow<'a, str>),
    /// A token the apiserver reads that is not UTF-8, or a WebSocket token protocol the
    /// apiserver refuses (401): kubegate cannot name its sender as the apiserver would.
    Unreadable,
}

/// The bearer token of a request with `headers` as it reaches the apiserver: `Authorization`,
/// or, for a WebSocket upgrade (`websocket`), its token subprotocol.
pub fn bearer(headers: &HeaderMap, websocket: bool) -> Bearer<'_> {
    let from_header = match headers.get(AUTHORIZATION) {
        Some(v) if !crate::hop::names(headers, "authorization") => authorization(v.as_bytes()),
        _ => Bearer::Absent,
    };
    if !websocket || crate::hop::names(headers, "sec-websocket-protocol") {
        return from_header;
    }
    match (from_header, websocket_protocol(headers)) {
        (from_header, Bearer::Absent) => from_header,
        (Bearer::Absent, from_protocol) => from_protocol,
        _ => Bearer::Unreadable,
    }
}

/// The token of an `Authorization` value, as `bearertoken.go` reads it.
pub fn authorization(value: &[u8]) -> Bearer<'_> {
    let auth = trim_space(value);
    if auth.is_empty() {
        return Bearer::Absent;
    }
    // strings.SplitN(auth, " ", 3): the token is what lies between the first and second space.
    let Some(first) = auth.iter().position(|b| *b == b' ') else {
        return Bearer::Absent;
    };
    let (scheme, rest) = (&auth[..first], &auth[first + 1..]);
    let token = match rest.iter().position(|b| *b == b' ') {
        Some(second) => &rest[..second],
        None => rest,
    };
    // strings.ToLower(scheme) == "bearer": no non-ASCII rune lowercases to one of these
    // letters, and an invalid byte becomes U+FFFD, so ASCII case folding is exact.
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Bearer::Absent;
    }
    match std::str::from_utf8(token) {
        Ok(token) => Bearer::Token(Cow::Borrowed(token)),
        Err(_) => Bearer::Unreadable,
    }
}

/// Whether an upgrade kubegate forwards with `headers` is a WebSocket one to the apiserver:
/// `wsstream.IsWebSocketRequest` reads `Connection` (kubegate sends `Upgrade`) and the first
/// `Upgrade` value, lowercased as Go's `strings.ToLower` does (Unicode's lower case: the Kelvin
/// sign is a `k`; an invalid byte U+FFFD), equal to `websocket`.
pub fn upgrades_to_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(UPGRADE)
        .is_some_and(|v| String::from_utf8_lossy(v.as_bytes()).to_lowercase() == "websocket")
}

/// The token of a WebSocket upgrade's `Sec-WebSocket-Protocol`, as `protocol.go` reads it.
fn websocket_protocol(headers: &HeaderMap) -> Bearer<'_> {
    let mut token = None;
    let mut others = 0usize;
    for value in headers.get_all(SEC_WEBSOCKET_PROTOCOL) {
        for protocol in value.as_bytes().split(|b| *b == b',') {
            let protocol = trim_space(protocol);
            let Some(encoded) = protocol.strip_prefix(WEBSOCKET_BEARER_PREFIX.as_bytes()) else {
                others += 1;
                continue;
            };
            if token.is_some() {
                // "multiple base64.bearer.authorization tokens specified": 401.
                return Bearer::Unreadable;
            }
            token = Some(encoded);
        }
    }
    let Some(encoded) = token else {
        return Bearer::Absent;
    };
    // The decoded token must be UTF-8 and come with another protocol; an empty one is none.
    match decode_base64url(encoded).map(String::from_utf8) {
        Some(Ok(t)) if t.is_empty() => Bearer::Absent,
        Some(Ok(_)) if others == 0 => Bearer::Unreadable,
        Some(Ok(t)) => Bearer::Token(Cow::Owned(t)),
        _ => Bearer::Unreadable,
    }
}

/// Go's `base64.RawURLEncoding.DecodeString`: the URL alphabet, no padding; `\r` and `\n`
/// are skipped, and the unused bits of a last partial group are dropped, not checked (the
/// encoding is not `Strict`).
fn decode_base64url(encoded: &[u8]) -> Option<Vec<u8>> {
    fn value(b: u8) -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32)
    }
    let symbols: Vec<u8> = encoded
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    if symbols.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(symbols.len() * 3 / 4);
    for chunk in symbols.chunks(4) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= value(*b)? << (18 - 6 * i);
        }
        let keep = chunk.len() - 1;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + keep]);
    }
    Some(out)
}

/// Go's `strings.TrimSpace` over bytes: removes, from either end, every rune for which
/// `unicode.IsSpace` is true (`\t \n \v \f \r`, space, U+0085, U+00A0, U+1680, U+2000–U+200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000), each as its UTF-8 bytes; a byte that does not
/// begin such a rune (an invalid one included: Go decodes it as U+FFFD) stops the trim.
pub fn trim_space(s: &[u8]) -> &[u8] {
    let mut s = s;
    while let Some(n) = space_at_start(s) {
        s = &s[n..];
    }
    while let Some(n) = space_at_end(s) {
        s = &s[..s.len() - n];
    }
    s
}

/// The UTF-8 encodings of the non-ASCII runes `unicode.IsSpace` holds true for.
const WIDE_SPACES: &[&[u8]] = &[
    b"\xc2\x85",
    b"\xc2\xa0",
    b"\xe1\x9a\x80",
    b"\xe2\x80\x80",
    b"\xe2\x80\x81",
    b"\xe2\x80\x82",
    b"\xe2\x80\x83",
    b"\xe2\x80\x84",
    b"\xe2\x80\x85",
    b"\xe2\x80\x86",
    b"\xe2\x80\x87",
    b"\xe2\x80\x88",
    b"\xe2\x80\x89",
    b"\xe2\x80\x8a",
    b"\xe2\x80\xa8",
    b"\xe2\x80\xa9",
    b"\xe2\x80\xaf",
    b"\xe2\x81\x9f",
    b"\xe3\x80\x80",
];

fn ascii_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' | b' ')
}

/// The length of the space rune `s` starts with, if it starts with one.
fn space_at_start(s: &[u8]) -> Option<usize> {
    match s.first() {
        Some(b) if ascii_space(*b) => Some(1),
        Some(_) => WIDE_SPACES
            .iter()
            .find(|w| s.starts_with(w))
            .map(|w| w.len()),
        None => None,
    }
}

/// The length of the space rune `s` ends with, if it ends with one. A valid encoding's first
/// byte is never a continuation byte, so Go's `DecodeLastRune` finds exactly this rune.
fn space_at_end(s: &[u8]) -> Option<usize> {
    match s.last() {
        Some(b) if ascii_space(*b) => Some(1),
        Some(_) => WIDE_SPACES.iter().find(|w| s.ends_with(w)).map(|w| w.len()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONNECTION;
    use http::HeaderValue;

    fn auth(v: &[u8]) -> Bearer<'_> {
        authorization(v)
    }

    #[test]
    fn an_authorization_header_is_read_as_bearertoken_go_reads_it() {
        let t = |s: &'static str| Bearer::Token(Cow::Borrowed(s));
        assert_eq!(auth(b"Bearer abc"), t("abc"));
        assert_eq!(auth(b"bearer abc"), t("abc"));
        assert_eq!(auth(b"  BEARER abc  "), t("abc"));
        assert_eq!(auth(b"Bearer abc def"), t("abc"));
        // The bytes after a second space are not the token's.
        assert_eq!(auth(b"Bearer abc \xff"), t("abc"));
        assert_eq!(auth(b"Bearer abc \xffmore"), t("abc"));
        // Unicode spaces at either end are trimmed, as Go's TrimSpace does.
        assert_eq!(auth("\u{a0}Bearer abc\u{3000}".as_bytes()), t("abc"));
        assert_eq!(auth("Bearer abc\u{2028}".as_bytes()), t("abc"));
        assert_eq!(auth(b"\x0bBearer abc\x0c"), t("abc"));
        // An invalid byte is no space: it stays, and it is the token's.
        assert_eq!(auth(b"Bearer abc\xff"), Bearer::Unreadable);
        assert_eq!(
            auth(b"Bearer ab\xc2\xa0c"),
            t("ab\u{a0}c"),
            "a wide space inside stays"
        );
        assert_eq!(
            auth(b"Bearer  abc"),
            Bearer::Absent,
            "a space before the token"
        );
        assert_eq!(
            auth(b"Bearer\tabc"),
            Bearer::Absent,
            "a tab is no separator"
        );
        assert_eq!(auth(b"Bearer abc\tdef"), t("abc\tdef"));
        assert_eq!(auth(b"Basic abc"), Bearer::Absent);
        assert_eq!(auth(b"Bearer"), Bearer::Absent);
        assert_eq!(auth(b"Bearer "), Bearer::Absent);
        assert_eq!(auth(b""), Bearer::Absent);
        assert_eq!(auth("B\u{e9}arer abc".as_bytes()), Bearer::Absent);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_websocket_token_counts_only_for_a_websocket_upgrade() {
        // "token" in unpadded base64url.
        let proto = "base64url.bearer.authorization.k8s.io.dG9rZW4, v5.channel.k8s.io";
        let ws = headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
            ("sec-websocket-protocol", proto),
        ]);
        assert!(upgrades_to_websocket(&ws));
        let t = |s: &'static str| Bearer::Token(Cow::Borrowed(s));
        assert_eq!(bearer(&ws, true), t("token"));
        assert_eq!(bearer(&ws, false), Bearer::Absent);
        // Both: which one the apiserver takes is not knowable here.
        let mut with_auth = ws.clone();
        with_auth.insert(AUTHORIZATION, HeaderValue::from_static("Bearer other"));
        assert_eq!(bearer(&with_auth, true), Bearer::Unreadable);
        assert_eq!(bearer(&with_auth, false), t("other"));
        // A header the client's Connection names never reaches the apiserver.
        let mut dropped = with_auth.clone();
        dropped.append(CONNECTION, HeaderValue::from_static("Authorization"));
        assert_eq!(bearer(&dropped, true), t("token"));
        assert_eq!(bearer(&dropped, false), Bearer::Absent);
        // Alone, the token protocol is refused ("missing additional subprotocol").
        let alone = headers(&[(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.dG9rZW4",
        )]);
        assert_eq!(bearer(&alone, true), Bearer::Unreadable);
        let twice = headers(&[(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.dG9rZW4,base64url.bearer.authorization.k8s.io.dG9rZW4,x",
        )]);
        assert_eq!(bearer(&twice, true), Bearer::Unreadable);
        let bad = headers(&[(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.dG9rZW4=,x",
        )]);
        assert_eq!(bearer(&bad, true), Bearer::Unreadable, "padding is refused");
        let empty = headers(&[(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.,x",
        )]);
        assert_eq!(bearer(&empty, true), Bearer::Absent);
    }

    #[test]
    fn a_websocket_upgrade_is_told_as_wsstream_tells_it() {
        let ws = |u: &str| upgrades_to_websocket(&headers(&[("upgrade", u)]));
        assert!(ws("websocket"));
        assert!(ws("WebSocket"));
        assert!(
            ws("websoc\u{212a}et"),
            "the Kelvin sign lowercases to k, as in Go"
        );
        assert!(!ws("SPDY/3.1"));
        assert!(!ws("websocket, h2c"));
        assert!(!upgrades_to_websocket(&HeaderMap::new()));
    }

    #[test]
    fn base64url_is_decoded_as_go_decodes_it() {
        assert_eq!(decode_base64url(b"dG9rZW4").unwrap(), b"token");
        assert_eq!(decode_base64url(b"").unwrap(), b"");
        assert_eq!(decode_base64url(b"_-8").unwrap(), [0xff, 0xef]);
        assert_eq!(
            decode_base64url(b"dG9rZW5").unwrap(),
            b"token",
            "unused bits dropped"
        );
        assert!(decode_base64url(b"a").is_none());
        assert!(decode_base64url(b"dG9r+W4").is_none());
    }
}
