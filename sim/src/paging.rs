//! A LIST in pages, as the apiserver's etcd3 store cuts one (`GetList`): `limit` objects a
//! page, the rest named by a `continue` token, `remainingItemCount` when no selector filters
//! them; a continue page read at its first page's revision, and answered 410 `Expired` with a
//! token to go on inconsistently once that revision is compacted
//! (`handleCompactedErrorForPaging`).
//!
//! The token is apimachinery's (`storage.EncodeContinue` / `DecodeContinue`): base64url (no
//! padding) of `{"v":"meta.k8s.io/v1","rv":REVISION,"start":KEY}`, the key relative to the
//! list's prefix, just after the last key the page read (`\u0000` appended). `rv` -1 asks for
//! the rest at the newest revision.

use crate::respond::{self, Reply};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// apimachinery's continue token.
#[derive(Debug, Serialize, Deserialize)]
struct Token {
    #[serde(rename = "v")]
    version: String,
    rv: i64,
    start: String,
}

/// `EncodeContinue(key, prefix, revision)`: the token to go on after `key`.
pub fn encode(next_key: &str, prefix: &str, revision: i64) -> Option<String> {
    let start = next_key.strip_prefix(prefix)?;
    let token = Token {
        version: "meta.k8s.io/v1".into(),
        rv: revision,
        start: start.into(),
    };
    Some(B64URL.encode(serde_json::to_vec(&token).ok()?))
}

/// `DecodeContinue(token, prefix)`: the key to go on from and the revision to read at, or why
/// the token is not one (the words the apiserver's 400 carries).
pub fn decode(token: &str, prefix: &str) -> Result<(String, i64), String> {
    let invalid = |why: &str| format!("continue key is not valid: {why}");
    let bytes = B64URL.decode(token).map_err(|e| invalid(&e.to_string()))?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
    if t.version != "meta.k8s.io/v1" {
        return Err(invalid(&format!(
            "server does not recognize this encoded version {:?}",
            t.version
        )));
    }
    if t.rv == 0 {
        return Err(invalid(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if t.start.is_empty() {
        return Err(invalid("encoded start key empty (version meta.k8s.io/v1)"));
    }
    // `path.Clean` must leave the key as it is: a token cannot reach above the list's prefix.
    let key = if t.start.starts_with('/') {
        t.start.clone()
    } else {
        format!("/{}", t.start)
    };
    if !is_clean(&key) {
        return Err(invalid(&t.start));
    }
    Ok((format!("{prefix}{}", &key[1..]), t.rv))
}

/// Whether Go's `path.Clean` leaves `path` (which starts with `/`) unchanged: no empty, `.` or
/// `..` element, no trailing `/` (but the root).
fn is_clean(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    path[1..]
        .split('/')
        .all(|e| !e.is_empty() && e != "." && e != "..")
}

/// One page of a list: what it holds, and how to go on.
pub struct Page<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// The key just after the last one read, when more follow.
    pub next: Option<String>,
    /// How many keys follow the page (without a selector: items).
    pub remaining: usize,
}

/// The page of `keys` (in key order, each with its item or `None` when a selector filtered it
/// out) from `start` on: up to `limit` items, reading on past filtered keys as the etcd3
/// store does until the page is full.
pub fn cut<T>(keys: Vec<(String, Option<T>)>, start: &str, limit: usize) -> Page<T> {
    let mut items = Vec::new();
    let mut rest = keys.into_iter().skip_while(|(k, _)| k.as_str() < start);
    let mut last = None;
    for (key, item) in rest.by_ref() {
        last = Some(key);
        if let Some(item) = item {
            items.push(item);
            if items.len() == limit {
                break;
            }
        }
    }
    let remaining = rest.count();
    Page {
        items,
        next: last.filter(|_| remaining > 0).map(|k| format!("{k}\u{0}")),
        remaining,
    }
}

/// A token that cannot be read: the etcd3 store's 400.
pub fn invalid_token(why: &str) -> Reply {
    respond::status(
        400,
        "BadRequest",
        &format!("invalid continue token: {why}"),
        None,
    )
}

/// A continue page asked with a resourceVersion of its own: the etcd3 store's 400.
pub fn with_resource_version() -> Reply {
    respond::status(
        400,
        "BadRequest",
        "specifying resource version is not allowed when using continue",
        None,
    )
}

/// A first page's exact revision is compacted: etcd3's `expired`, no token.
pub fn list_too_old() -> Reply {
    respond::status(
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
        None,
    )
}

/// The continue page's revision is compacted: 410 `Expired`, with a token to go on from the
/// same key at the newest revision (`rv` -1), and words saying what that costs.
pub fn expired(next_key: &str, prefix: &str) -> Reply {
    let message = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Expired", "code": 410,
    });
    if let Some(token) = encode(next_key, prefix, -1) {
        status["metadata"] = json!({ "continue": token });
    }
    Reply::json(http::StatusCode::GONE, &status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/registry/configmaps/";

    #[test]
    fn a_token_says_where_to_go_on_and_at_which_revision() {
        let token = encode("/registry/configmaps/default/b\u{0}", PREFIX, 42).unwrap();
        // apimachinery's own encoding of the same token.
        assert_eq!(
            token,
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDIsInN0YXJ0IjoiZGVmYXVsdC9iXHUwMDAwIn0"
        );
        assert_eq!(
            decode(&token, PREFIX).unwrap(),
            ("/registry/configmaps/default/b\u{0}".to_string(), 42)
        );
        assert!(encode("/registry/secrets/x", PREFIX, 1).is_none());
    }

    #[test]
    fn a_token_that_reaches_above_its_prefix_or_is_not_one_is_refused() {
        let made = |json: &str| B64URL.encode(json);
        for (token, why) in [
            ("!!", "continue key is not valid"),
            (
                &made(r#"{"v":"meta.k8s.io/v2","rv":1,"start":"a"}"#),
                "does not recognize",
            ),
            (
                &made(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
                "resourceVersion",
            ),
            (
                &made(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#),
                "start key empty",
            ),
            (
                &made(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../secrets/x"}"#),
                "../secrets/x",
            ),
            (
                &made(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a//b"}"#),
                "a//b",
            ),
        ] {
            let err = decode(token, PREFIX).unwrap_err();
            assert!(err.contains(why), "{token}: {err}");
        }
    }

    #[test]
    fn a_page_reads_past_filtered_keys_until_it_is_full() {
        let keys = |n: usize| -> Vec<(String, Option<usize>)> {
            (0..n)
                .map(|i| (format!("/p/{i:02}"), (i % 2 == 0).then_some(i)))
                .collect()
        };
        let page = cut(keys(10), "/p/", 2);
        assert_eq!(page.items, [0, 2]);
        assert_eq!(page.next.as_deref(), Some("/p/02\u{0}"));
        assert_eq!(page.remaining, 7);
        let last = cut(keys(10), "/p/08\u{0}", 2);
        assert_eq!(last.items, Vec::<usize>::new());
        assert_eq!((last.next, last.remaining), (None, 0));
        let whole = cut(keys(4), "/p/", 5);
        assert_eq!((whole.items, whole.next), (vec![0, 2], None));
    }
}
