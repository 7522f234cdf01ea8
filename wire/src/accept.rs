//! A request's `Accept` header as the apiserver reads it: `req.Header.Get("Accept")` (the first
//! value) split by `goautoneg.ParseAccept` (the apiserver's content negotiation, vendored from
//! github.com/munnerz/goautoneg): clauses on `,`, each `type/subtype` then `;`-separated
//! `name=value` parameters, spaces (only spaces) trimmed around each piece, a piece with a
//! second `=` or a bad media range skipped. The negotiation then reads a clause's `as`
//! parameter as the kind to convert the answer to (`Table`, `PartialObjectMetadata`).

use http::header::{HeaderMap, ACCEPT};

/// Whether the first `Accept` value has a clause whose `as` parameter names `kind`. Compared
/// without case and without surrounding quotes: a near miss counts (the caller only ever
/// shares less for it), never the other way.
pub fn converts_to(headers: &HeaderMap, kind: &str) -> bool {
    let Some(accept) = headers.get(ACCEPT) else {
        return false;
    };
    let trim = |s: &[u8]| -> Vec<u8> {
        let start = s.iter().position(|b| *b != b' ').unwrap_or(s.len());
        let end = s.iter().rposition(|b| *b != b' ').map_or(start, |e| e + 1);
        s[start..end.max(start)].to_vec()
    };
    accept.as_bytes().split(|b| *b == b',').any(|clause| {
        let mut pieces = clause.split(|b| *b == b';');
        let media_range = pieces.next().unwrap_or_default();
        // `type/subtype`, or `*`; anything else is skipped.
        let slashes = media_range.iter().filter(|b| **b == b'/').count();
        if slashes > 1 || (slashes == 0 && trim(media_range) != b"*") {
            return false;
        }
        pieces.any(|param| {
            let mut kv = param.split(|b| *b == b'=');
            let (Some(k), Some(v), None) = (kv.next(), kv.next(), kv.next()) else {
                return false;
            };
            let v = trim(v);
            let v = v
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(&v);
            trim(k) == b"as" && v.eq_ignore_ascii_case(kind.as_bytes())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn asks(accept: &[&str]) -> bool {
        let mut h = HeaderMap::new();
        for a in accept {
            h.append(ACCEPT, HeaderValue::from_str(a).unwrap());
        }
        converts_to(&h, "Table")
    }

    #[test]
    fn a_table_is_asked_as_goautoneg_reads_the_header() {
        assert!(asks(&["application/json;as=Table;v=v1;g=meta.k8s.io"]));
        assert!(asks(&["application/json ; as = Table ; v=v1"]));
        assert!(asks(&[
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json"
        ]));
        assert!(asks(&[
            "application/json, application/json;as=Table;g=meta.k8s.io"
        ]));
        // Near misses count: sharing less is safe.
        assert!(asks(&["application/json;as=\"Table\""]));
        assert!(asks(&["application/json;as=table"]));
        assert!(!asks(&["application/json"]));
        assert!(!asks(&[
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io"
        ]));
        assert!(!asks(&["application/json;x-as=Table"]));
        assert!(
            !asks(&["application/json;as=Table=1"]),
            "a second = skips the piece"
        );
        assert!(
            !asks(&["application/json/x;as=Table"]),
            "a bad media range is skipped"
        );
        // Only the first value is read.
        assert!(!asks(&["application/json", "application/json;as=Table"]));
    }
}
