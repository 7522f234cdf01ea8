//! How the apiserver reads a request target (Go's `net/url` under `net/http`, apimachinery's
//! parameter conversion), so that the simulator reads one exactly as a real apiserver: the
//! path percent-decoded before routing (a malformed escape is 400), the query split by
//! `url.ParseQuery` (a pair with `;` or a malformed escape skipped, `+` a space), and a
//! boolean as `Convert_Slice_string_To_bool` reads it (the first value; true unless `0` or,
//! in any case, `false`: `?watch`, `?watch=yes` are true).

/// The decoded path, or `None` when Go would refuse it (400 Bad Request).
pub fn path(raw: &str) -> Option<String> {
    let bytes = unescape(raw, false)?;
    String::from_utf8(bytes).ok()
}

/// The decoded pairs of `query` that Go keeps, in order (`verbose` alone has an empty value).
pub fn params(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.contains(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = unescape(k, true)?;
            let v = unescape(v, true)?;
            Some((
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            ))
        })
        .collect()
}

/// The first value of parameter `key` among `params`, as Go's `Query().Get` reads it.
pub fn first<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// A present boolean parameter's first value as apimachinery converts it.
pub fn truthy(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

/// Go's `unescape`; `None` for a malformed escape.
fn unescape(s: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_as_go_reads_them() {
        assert_eq!(
            path("/api/v1/namespaces/default/secret%73").as_deref(),
            Some("/api/v1/namespaces/default/secrets")
        );
        assert_eq!(path("/a+b").as_deref(), Some("/a+b"));
        assert_eq!(path("/a%zz"), None);
        assert_eq!(path("/a%4"), None);
        assert_eq!(
            params(Some(
                "verbose&exclude=poststarthook%2Fx&exclude=a+b&w%61tch=1&x=%4&y=1;z"
            )),
            vec![
                ("verbose".into(), "".into()),
                ("exclude".into(), "poststarthook/x".into()),
                ("exclude".into(), "a b".into()),
                ("watch".into(), "1".into()),
            ]
        );
        for yes in ["1", "true", "yes", "", "f"] {
            assert!(truthy(yes), "{yes}");
        }
        for no in ["0", "false", "FALSE", "False"] {
            assert!(!truthy(no), "{no}");
        }
    }
}
