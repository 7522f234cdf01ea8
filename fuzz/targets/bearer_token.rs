//! Bearer tokens: kubegate reads an `Authorization` value exactly as the apiserver's
//! bearer-token authenticator does. The reference below is a line-by-line transcription of
//! k8s.io/apiserver `pkg/authentication/request/bearertoken/bearertoken.go`
//! (`AuthenticateRequest`) with Go's `strings.TrimSpace`, `strings.SplitN` and
//! `strings.ToLower`, decoding runes as Go's `utf8.DecodeRuneInString` does (an invalid byte
//! is U+FFFD, one byte wide); `kubegate_wire::credentials::authorization` is written another
//! way (byte patterns). The two must agree on every value a client can send.
use http::HeaderValue;
use kubegate_wire::credentials::{authorization, Bearer};

/// Go's `utf8.DecodeRune`: the rune at the start of `s` and its width (U+FFFD, 1 for an
/// invalid or truncated sequence).
fn decode_rune(s: &[u8]) -> (char, usize) {
    for width in 1..=4.min(s.len()) {
        if let Ok(text) = std::str::from_utf8(&s[..width]) {
            if let Some(c) = text.chars().next() {
                return (c, width);
            }
        }
        // A valid rune is valid from its full width; a longer prefix cannot fix an invalid
        // first byte.
        if s[0] < 0x80 || s[0] < 0xc2 || s[0] > 0xf4 {
            break;
        }
    }
    ('\u{fffd}', 1)
}

/// Go's `utf8.DecodeLastRune`: the rune at the end of `s` and its width.
fn decode_last_rune(s: &[u8]) -> (char, usize) {
    let end = s.len();
    // The start of the last rune: back over at most three continuation bytes.
    let mut start = end - 1;
    while start > 0 && end - start < 4 && (s[start] & 0xc0) == 0x80 {
        start -= 1;
    }
    let (c, width) = decode_rune(&s[start..]);
    if start + width != end {
        return ('\u{fffd}', 1);
    }
    (c, width)
}

/// Go's `unicode.IsSpace` (its Latin-1 list, then the White_Space property: the same set as
/// Rust's `char::is_whitespace`).
fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// Go's `strings.TrimSpace` (`TrimFunc(s, unicode.IsSpace)`).
fn trim_space(mut s: &[u8]) -> &[u8] {
    while !s.is_empty() {
        let (c, w) = decode_rune(s);
        if !is_space(c) {
            break;
        }
        s = &s[w..];
    }
    while !s.is_empty() {
        let (c, w) = decode_last_rune(s);
        if !is_space(c) {
            break;
        }
        s = &s[..s.len() - w];
    }
    s
}

/// Go's `strings.SplitN(s, " ", 3)`.
fn split_n3(s: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = s;
    while parts.len() < 2 {
        match rest.iter().position(|b| *b == b' ') {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + 1..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// Go's `strings.ToLower` compared with `"bearer"`: every rune lowercased (an invalid byte as
/// U+FFFD). For these six ASCII letters Go's simple mapping and Rust's agree.
fn lower_is_bearer(s: &[u8]) -> bool {
    let mut lowered = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (c, w) = decode_rune(rest);
        lowered.extend(c.to_lowercase());
        rest = &rest[w..];
    }
    lowered == "bearer"
}

/// `AuthenticateRequest`, as far as the token: what it hands the token authenticators.
fn apiserver_token(header: &[u8]) -> Option<&[u8]> {
    let auth = trim_space(header);
    if auth.is_empty() {
        return None;
    }
    let parts = split_n3(auth);
    if parts.len() < 2 || !lower_is_bearer(parts[0]) {
        return None;
    }
    let token = parts[1];
    if token.is_empty() {
        return None;
    }
    Some(token)
}

/// Runs one input: panics where kubegate's reading differs from the apiserver's.
pub fn run(data: &[u8]) {
    // Only what a client can send: a header value (no control byte but tab, no DEL).
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let ours = authorization(value.as_bytes());
    match apiserver_token(value.as_bytes()) {
        None => assert_eq!(ours, Bearer::Absent, "{data:?}"),
        Some(token) => match std::str::from_utf8(token) {
            Ok(text) => assert_eq!(ours, Bearer::Token(text.into()), "{data:?}"),
            Err(_) => assert_eq!(ours, Bearer::Unreadable, "{data:?}"),
        },
    }
}
