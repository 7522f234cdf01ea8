//! A request target read as the apiserver reads it: Go's `net/url` hands the handler chain a
//! **percent-decoded** path (`/api/v1/namespaces/default/secret%73` is a list of secrets,
//! `pods%2Fp` the pod `p`), and `URL.Query()` decodes every key and value, skipping a pair it
//! cannot read (a bad escape, a `;`) rather than failing. Booleans in a query are read as
//! apimachinery's `Convert_Slice_string_To_bool` reads them: the first value counts, and only
//! `0` and (any case) `false` are false — `?watch`, `?watch=` and `?watch=yes` are true.
//!
//! kubegate decides with these readings and forwards the client's bytes unchanged. Nothing
//! here allocates unless the text holds an escape (`%`, or `+` in a query).

use std::borrow::Cow;

/// A request target the apiserver would refuse before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadTarget {
    /// A `%` not followed by two hex digits (Go: `invalid URL escape`, 400).
    Escape(String),
    /// The decoded path is not UTF-8 text.
    NotText,
}

impl std::fmt::Display for BadTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadTarget::Escape(e) => write!(f, "invalid URL escape {e:?}"),
            BadTarget::NotText => f.write_str("the decoded path is not UTF-8 text"),
        }
    }
}

/// The decoded path (Go's `URL.Path`): `%XX` becomes its byte, `+` stays `+`.
pub fn path(raw: &str) -> Result<Cow<'_, str>, BadTarget> {
    match unescape(raw.as_bytes(), false) {
        Ok(Cow::Borrowed(_)) => Ok(Cow::Borrowed(raw)),
        Ok(Cow::Owned(bytes)) => String::from_utf8(bytes)
            .map(Cow::Owned)
            .map_err(|_| BadTarget::NotText),
        Err(at) => {
            let bad = &raw.as_bytes()[at..raw.len().min(at + 3)];
            Err(BadTarget::Escape(String::from_utf8_lossy(bad).into_owned()))
        }
    }
}

/// Go's `unescape`: `Err(index)` of the first malformed escape. With `plus_is_space` (a
/// query component), `+` is a space.
fn unescape(s: &[u8], plus_is_space: bool) -> Result<Cow<'_, [u8]>, usize> {
    let mut escapes = false;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if i + 2 >= s.len()
                    || !s[i + 1].is_ascii_hexdigit()
                    || !s[i + 2].is_ascii_hexdigit()
                {
                    return Err(i);
                }
                escapes = true;
                i += 3;
            }
            b'+' if plus_is_space => {
                escapes = true;
                i += 1;
            }
            _ => i += 1,
        }
    }
    if !escapes {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                out.push(hex(s[i + 1]) << 4 | hex(s[i + 2]));
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(Cow::Owned(out))
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// A query string as `URL.Query()` reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<'a> {
    raw: Option<&'a str>,
}

/// One `key=value` pair of a query, decoded, with the bytes it came from.
#[derive(Debug, Clone)]
pub struct Pair<'a> {
    /// The pair as the client wrote it.
    pub raw: &'a str,
    /// The decoded key.
    pub key: Cow<'a, [u8]>,
    /// The decoded value (`""` for a key without `=`).
    pub value: Cow<'a, [u8]>,
}

impl<'a> Query<'a> {
    /// The query after `?` (`None`: the target has none).
    pub fn new(raw: Option<&'a str>) -> Query<'a> {
        Query { raw }
    }

    /// The query as the client wrote it.
    pub fn raw(&self) -> Option<&'a str> {
        self.raw
    }

    /// Every pair Go reads, in order: empty pairs, pairs holding `;` and pairs with a
    /// malformed escape are skipped, as `url.ParseQuery` skips them.
    pub fn pairs(&self) -> impl Iterator<Item = Pair<'a>> + 'a {
        self.raw
            .unwrap_or("")
            .split('&')
            .filter_map(|raw| Some((raw, read_pair(raw)?)))
            .map(|(raw, (key, value))| Pair { raw, key, value })
    }

    /// The first decoded value of `key` (decoded too), if it is there.
    pub fn first(&self, key: &str) -> Option<Cow<'a, [u8]>> {
        self.pairs()
            .find(|p| p.key.as_ref() == key.as_bytes())
            .map(|p| p.value)
    }

    /// The first value of `key` as text (a value that is not UTF-8 is read lossily: no
    /// apiserver parameter kubegate reads accepts one).
    pub fn text(&self, key: &str) -> Option<Cow<'a, str>> {
        self.first(key).map(|v| match v {
            Cow::Borrowed(b) => String::from_utf8_lossy(b),
            Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
        })
    }

    /// `key` as a boolean the way apimachinery converts it (`Convert_Slice_string_To_bool`):
    /// missing is false; otherwise the first value is true unless it is `0` or, in any case,
    /// `false`.
    pub fn flag(&self, key: &str) -> bool {
        self.first(key).is_some_and(|v| truthy(&v))
    }
}

/// The decoded key of one raw `key=value` pair, or `None` when Go would skip the pair.
pub fn key_of(raw: &str) -> Option<Cow<'_, [u8]>> {
    read_pair(raw).map(|(k, _)| k)
}

/// `value` escaped as a query component (Go's `QueryEscape`): unreserved characters as they
/// are, anything else `%XX`. A resourceVersion is digits, so this normally borrows.
pub fn escape_component(value: &str) -> Cow<'_, str> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~');
    if value.bytes().all(unreserved) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// A present boolean parameter's value as apimachinery reads it.
pub fn truthy(value: &[u8]) -> bool {
    !(value == b"0" || value.eq_ignore_ascii_case(b"false"))
}

/// A decoded key and value.
type Decoded<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// A pair as `url.ParseQuery` reads it, or `None` when Go would skip it.
fn read_pair(raw: &str) -> Option<Decoded<'_>> {
    if raw.is_empty() || raw.contains(';') {
        return None;
    }
    let (k, v) = raw.split_once('=').unwrap_or((raw, ""));
    let key = unescape(k.as_bytes(), true).ok()?;
    let value = unescape(v.as_bytes(), true).ok()?;
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_decode_as_go_decodes_them() {
        assert_eq!(path("/api/v1/pods").unwrap(), "/api/v1/pods");
        assert!(matches!(path("/api/v1/pods").unwrap(), Cow::Borrowed(_)));
        assert_eq!(
            path("/api/v1/namespaces/default/secret%73").unwrap(),
            "/api/v1/namespaces/default/secrets"
        );
        assert_eq!(path("/a/pods%2Fp").unwrap(), "/a/pods/p");
        assert_eq!(path("/a/%4a%4A").unwrap(), "/a/JJ");
        // `+` is itself in a path.
        assert_eq!(path("/a+b").unwrap(), "/a+b");
        assert_eq!(path("/caf%C3%A9").unwrap(), "/café");
        assert_eq!(path("/a%zz"), Err(BadTarget::Escape("%zz".into())));
        assert_eq!(path("/a%4"), Err(BadTarget::Escape("%4".into())));
        assert_eq!(path("/a%"), Err(BadTarget::Escape("%".into())));
        assert_eq!(path("/%ff"), Err(BadTarget::NotText));
    }

    #[test]
    fn query_flags_read_as_apimachinery_converts_them() {
        let q = |s: &'static str| Query::new(Some(s));
        for yes in [
            "watch=1",
            "watch=true",
            "watch=True",
            "watch=yes",
            "watch",
            "watch=",
            "watch=f",
            "w%61tch=1",
            "a=b&watch=T",
            "watch=1&watch=0",
        ] {
            assert!(q(yes).flag("watch"), "{yes}");
        }
        for no in [
            "watch=0",
            "watch=false",
            "watch=FALSE",
            "watch=fAlSe",
            "watch=%30",
            "watcher=true",
            "watch=0&watch=1",
            // Go skips a pair holding `;`, or a malformed escape.
            "watch=1;x=2",
            "watch=%zz",
            "",
        ] {
            assert!(!q(no).flag("watch"), "{no}");
        }
        assert!(!Query::new(None).flag("watch"));
    }

    #[test]
    fn values_and_pairs_are_decoded_and_keep_their_bytes() {
        let q = Query::new(Some("x&resourceVersion=12&labelSelector=a%3Db+c&&bad=%g1"));
        assert_eq!(q.text("resourceVersion").as_deref(), Some("12"));
        assert_eq!(q.text("labelSelector").as_deref(), Some("a=b c"));
        assert_eq!(q.text("x").as_deref(), Some(""));
        assert_eq!(q.text("bad"), None);
        let raws: Vec<&str> = q.pairs().map(|p| p.raw).collect();
        assert_eq!(raws, ["x", "resourceVersion=12", "labelSelector=a%3Db+c"]);
    }
}
