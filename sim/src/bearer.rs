//! The bearer token of an `Authorization` header, read byte for byte as k8s.io/apiserver
//! `pkg/authentication/request/bearertoken/bearertoken.go` (`Authenticator.AuthenticateRequest`,
//! 1.33–1.35) reads it:
//!
//! ```go
//! auth := strings.TrimSpace(req.Header.Get("Authorization"))
//! if auth == "" { return nil, false, nil }
//! parts := strings.SplitN(auth, " ", 3)
//! if len(parts) < 2 || strings.ToLower(parts[0]) != "bearer" { return nil, false, nil }
//! token := parts[1]
//! if len(token) == 0 {
//!     if len(parts) == 3 { warning.AddWarning(req.Context(), "", invalidTokenWithSpaceWarning) }
//!     return nil, false, nil
//! }
//! ```
//!
//! A Go string is bytes, not necessarily UTF-8, and Go's HTTP servers (HTTP/1.1 and HTTP/2)
//! accept `obs-text` (bytes 0x80–0xFF) in header values, so `Bearer TOKEN \xff` authenticates
//! as `TOKEN`. Reading the header with `to_str()` would refuse every such header instead: this
//! module works on the raw bytes, with Go's `strings.TrimSpace` and `strings.ToLower`.

/// What the bearer-token authenticator made of a request's `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// No bearer token: the authenticator does not answer (other authenticators may).
    None,
    /// `Bearer` followed by two spaces (an empty token, then more): no answer either, but a
    /// `Warning` on the response ([`EXTRA_SPACE_WARNING`]).
    ExtraSpace,
    /// The token, exactly the bytes between the first and second space.
    Token(&'a [u8]),
}

/// The `Warning` header value for [`Bearer::ExtraSpace`]: `invalidTokenWithSpaceWarning` as
/// apimachinery's `net.NewWarningHeader(299, "", text)` formats it (`299 - "text"`).
pub const EXTRA_SPACE_WARNING: &str = "299 - \"the provided Authorization header contains extra space before the bearer token, and is ignored\"";

/// Reads the first `Authorization` value (`req.Header.Get`), if any.
pub fn read(authorization: Option<&[u8]>) -> Bearer<'_> {
    let auth = trim_space(authorization.unwrap_or_default());
    if auth.is_empty() {
        return Bearer::None;
    }
    // strings.SplitN(auth, " ", 3): at most three parts, split at single spaces.
    let mut parts = auth.splitn(3, |&b| b == b' ');
    let scheme = parts.next().unwrap_or_default();
    let Some(token) = parts.next() else {
        return Bearer::None;
    };
    if !lowers_to(scheme, b"bearer") {
        return Bearer::None;
    }
    if token.is_empty() {
        return if parts.next().is_some() {
            Bearer::ExtraSpace
        } else {
            Bearer::None
        };
    }
    Bearer::Token(token)
}

/// Go's `strings.TrimSpace` (`src/strings/strings.go`): an ASCII fast path from each end; at
/// the first byte >= 0x80 it falls back to `TrimFunc(s, unicode.IsSpace)` (from the front) or
/// trims the rest from the end rune by rune (`TrimRightFunc`), decoding UTF-8 as Go does (an
/// invalid byte is `RuneError`, U+FFFD, which is not a space).
pub fn trim_space(s: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < s.len() {
        let c = s[start];
        if c >= 0x80 {
            return trim_right_func(trim_left_func(&s[start..]));
        }
        if !ascii_space(c) {
            break;
        }
        start += 1;
    }
    let mut stop = s.len();
    while stop > start {
        let c = s[stop - 1];
        if c >= 0x80 {
            return trim_right_func(&s[start..stop]);
        }
        if !ascii_space(c) {
            break;
        }
        stop -= 1;
    }
    &s[start..stop]
}

/// `asciiSpace` of `strings.go`: `\t \n \v \f \r` and space.
fn ascii_space(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

/// `TrimLeftFunc(s, unicode.IsSpace)`: drops leading runes that are spaces.
fn trim_left_func(s: &[u8]) -> &[u8] {
    let mut i = 0;
    while i < s.len() {
        let (r, size) = decode_rune(&s[i..]);
        if !is_space(r) {
            return &s[i..];
        }
        i += size;
    }
    &s[s.len()..]
}

/// `TrimRightFunc(s, unicode.IsSpace)`: `lastIndexFunc` finds the last rune that is not a
/// space (decoding backwards), then the slice ends after that rune, its width decoded
/// forwards from its first byte, as Go's does.
fn trim_right_func(s: &[u8]) -> &[u8] {
    let mut end = s.len();
    while end > 0 {
        let (r, size) = decode_last_rune(&s[..end]);
        let start = end - size;
        if !is_space(r) {
            let width = if s[start] >= 0x80 {
                decode_rune(&s[start..]).1
            } else {
                1
            };
            return &s[..start + width];
        }
        end = start;
    }
    &s[..0]
}

/// `unicode.IsSpace` (`src/unicode/graphic.go`): in Latin-1 `\t \n \v \f \r`, space, U+0085
/// and U+00A0; beyond it the `White_Space` property: U+1680, U+2000–U+200A, U+2028, U+2029,
/// U+202F, U+205F, U+3000. `None` is an invalid byte (`RuneError`), not a space.
fn is_space(r: Option<char>) -> bool {
    matches!(
        r,
        Some(
            '\t' | '\n'
                | '\u{0B}'
                | '\u{0C}'
                | '\r'
                | ' '
                | '\u{85}'
                | '\u{A0}'
                | '\u{1680}'
                | '\u{2000}'
                ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
        )
    )
}

/// `utf8.DecodeRune` (`src/unicode/utf8/utf8.go`): the first rune and its width; an invalid
/// or truncated encoding is `RuneError` of width 1 (`None` here). Go and Rust accept the same
/// encodings (no overlong forms, no surrogates, nothing above U+10FFFF).
fn decode_rune(p: &[u8]) -> (Option<char>, usize) {
    match p.utf8_chunks().next() {
        Some(chunk) => match chunk.valid().chars().next() {
            Some(c) => (Some(c), c.len_utf8()),
            None => (None, 1),
        },
        None => (None, 0),
    }
}

/// `utf8.DecodeLastRune`: back up at most 4 bytes to a byte that can start a rune, decode
/// from there, and take the rune only if it ends exactly at the end; else `RuneError`, 1.
fn decode_last_rune(p: &[u8]) -> (Option<char>, usize) {
    let end = p.len();
    if end == 0 {
        return (None, 0);
    }
    if p[end - 1] < 0x80 {
        return (Some(char::from(p[end - 1])), 1);
    }
    let lim = end.saturating_sub(4);
    let mut start = end - 1;
    while start > lim {
        start -= 1;
        if p[start] & 0xC0 != 0x80 {
            break;
        }
    }
    let (r, size) = decode_rune(&p[start..end]);
    if start + size != end {
        return (None, 1);
    }
    (r, size)
}

/// Whether Go's `strings.ToLower(s) == want`, for an ASCII lower-case `want`. `ToLower` maps
/// each rune with `unicode.ToLower` (simple case mapping; an invalid byte becomes U+FFFD).
/// The runes whose simple lower case is an ASCII letter are that letter, its upper case, and
/// two more (`unicode/tables.go` `CaseRanges`): U+0130 → `i` and U+212A (Kelvin) → `k`; the
/// result equals `want` exactly when each rune maps to `want`'s letter in turn.
fn lowers_to(s: &[u8], want: &[u8]) -> bool {
    let mut i = 0;
    for &w in want {
        if i >= s.len() {
            return false;
        }
        let (r, size) = decode_rune(&s[i..]);
        let lowered = match r {
            Some('\u{130}') => Some('i'),
            Some('\u{212A}') => Some('k'),
            Some(c) if c.is_ascii_uppercase() => Some(c.to_ascii_lowercase()),
            other => other,
        };
        if lowered != Some(char::from(w)) {
            return false;
        }
        i += size;
    }
    i == s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(header: &[u8]) -> Option<&[u8]> {
        match read(Some(header)) {
            Bearer::Token(t) => Some(t),
            _ => None,
        }
    }

    #[test]
    fn a_trailing_byte_above_ascii_is_not_trimmed_but_split_off() {
        assert_eq!(token(b"Bearer T \xff"), Some(&b"T"[..]));
    }

    #[test]
    fn a_leading_no_break_space_is_trimmed() {
        assert_eq!(token("\u{a0}Bearer T".as_bytes()), Some(&b"T"[..]));
        assert_eq!(token("Bearer T\u{3000}".as_bytes()), Some(&b"T"[..]));
    }

    #[test]
    fn two_spaces_mean_an_empty_token_and_a_warning() {
        assert_eq!(read(Some(b"Bearer  T")), Bearer::ExtraSpace);
        assert_eq!(token(b"Bearer  T"), None);
    }

    #[test]
    fn the_scheme_is_compared_in_lower_case() {
        assert_eq!(token(b"bearer T"), Some(&b"T"[..]));
        assert_eq!(token(b"BEARER T"), Some(&b"T"[..]));
        assert_eq!(token(b"Basic T"), None);
        // No rune lowers to `b`, `e`, `a` or `r` but the letters themselves.
        assert_eq!(token("Bearer\u{212A} T".as_bytes()), None);
    }

    #[test]
    fn only_a_space_separates() {
        assert_eq!(read(Some(b"Bearer\tT")), Bearer::None);
        assert_eq!(read(Some(b"Bearer")), Bearer::None);
        assert_eq!(read(Some(b"  ")), Bearer::None);
        assert_eq!(read(None), Bearer::None);
        // Trimmed first: the trailing space is gone, so this is an empty token of two parts.
        assert_eq!(read(Some(b"Bearer ")), Bearer::None);
    }

    #[test]
    fn a_token_keeps_its_bytes_above_ascii() {
        assert_eq!(
            token(b"Bearer ab\xc3\xa9\xffcd"),
            Some(&b"ab\xc3\xa9\xffcd"[..])
        );
        // Only the first space splits: the rest is a third part, ignored.
        assert_eq!(token(b"Bearer T extra words"), Some(&b"T"[..]));
    }

    #[test]
    fn trim_space_decodes_utf8_as_go_does() {
        assert_eq!(trim_space(b" \t x \n"), b"x");
        // An invalid byte is RuneError, not a space: it stops the trim at either end.
        assert_eq!(trim_space(b"\xff x \xff"), b"\xff x \xff");
        // NEL (U+0085) is a space when encoded in UTF-8, not as the lone byte 0x85.
        assert_eq!(trim_space("x\u{85}".as_bytes()), b"x");
        assert_eq!(trim_space(b"x\x85"), b"x\x85");
        // A truncated rune at the end is RuneError too.
        assert_eq!(trim_space(b"x\xe2\x80"), b"x\xe2\x80");
        // U+2028 (E2 80 A8) is a space; at the end after invalid bytes it is still trimmed.
        assert_eq!(trim_space(b"\xffx\xe2\x80\xa8"), b"\xffx");
        assert_eq!(trim_space("\u{2003}\u{a0}".as_bytes()), b"");
    }

    /// GET of the config maps with `Authorization: <authorization>` over HTTP/1.1: who the
    /// replica found, and the answer.
    async fn as_http1(
        s: &crate::testserver::TestServer,
        authorization: &[u8],
    ) -> crate::testserver::Raw {
        let mut head =
            b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nAuthorization: ".to_vec();
        head.extend_from_slice(authorization);
        s.request(None, &head, b"").await
    }

    /// Tokens with bytes above ASCII, and whose they are.
    const ABOVE_ASCII: [(&[u8], &str); 2] =
        [(b"Bearer tok \xff", "alice"), (b"Bearer t\xffx", "bytes")];

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn header_bytes_above_ascii_reach_the_authenticator_over_http1() {
        let s = crate::testserver::TestServer::start().await;
        let other_spellings = [
            ("\u{a0}Bearer tok".as_bytes(), "alice"),
            (b"bearer tok", "alice"),
        ];
        for (header, user) in ABOVE_ASCII.into_iter().chain(other_spellings) {
            let r = as_http1(&s, header).await;
            assert_eq!(r.status, 200, "{header:?}: {}", r.text());
            assert_eq!(r.header("x-kubegate-sim-user"), Some(user), "{header:?}");
            assert_eq!(r.header("warning"), None);
        }
        // An unknown token (these bytes are in no token file line): 401.
        let r = as_http1(&s, b"Bearer t\xfex").await;
        assert_eq!(r.status, 401);
        // No token at all: anonymous, and anonymous may not list config maps.
        let r = as_http1(&s, b"Bearer\ttok").await;
        assert_eq!(r.status, 403);
        // Two spaces: anonymous too, with the authenticator's warning.
        let r = as_http1(&s, b"Bearer  tok").await;
        assert_eq!(r.status, 403);
        assert_eq!(r.header("warning"), Some(EXTRA_SPACE_WARNING));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn header_bytes_above_ascii_reach_the_authenticator_over_http2() {
        let s = crate::testserver::TestServer::start().await;
        for (header, user) in ABOVE_ASCII {
            let req = http::Request::get("https://127.0.0.1/api/v1/namespaces/default/configmaps")
                .header(
                    http::header::AUTHORIZATION,
                    http::HeaderValue::from_bytes(header).unwrap(),
                )
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap();
            let (status, headers, _) = crate::testserver::http2(&s, None, req).await;
            assert_eq!(status, 200, "{header:?}");
            assert_eq!(headers["x-kubegate-sim-user"], user);
        }
    }
}
