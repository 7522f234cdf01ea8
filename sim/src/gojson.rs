//! JSON as the apiserver's encoder writes it, where that shows on the wire.
//!
//! The apiserver encodes with Go's `encoding/json` (apimachinery
//! `pkg/runtime/serializer/json/json.go`, `Serializer.doEncode`: `json.NewEncoder(w).Encode`),
//! which writes a struct's fields in their declaration order and escapes `<`, `>`, `&`,
//! U+2028 and U+2029 (`encodeState.string`, `escapeHTML` on by default). `serde_json` writes
//! an object's keys sorted and escapes none of those, so a `metav1.Status` written by
//! `serde_json` is not the apiserver's bytes: this module writes `Status`, `StatusDetails`
//! and `StatusCause` in their Go field order (apimachinery `pkg/apis/meta/v1/types.go`) and
//! escapes as Go does. Other objects keep `serde_json`'s key order: the simulator stores
//! them as maps, and clients read them as such.

use serde_json::{Map, Value};

/// `metav1.Status`'s fields in declaration order (`TypeMeta` inline first).
const STATUS: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "status",
    "message",
    "reason",
    "details",
    "code",
];
/// `metav1.StatusDetails`'s JSON names in declaration order.
const DETAILS: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];
/// `metav1.StatusCause`'s JSON names (`Type` is `reason`) in declaration order.
const CAUSE: &[&str] = &["reason", "message", "field"];

/// Which Go struct an object stands for, deciding its key order.
#[derive(Clone, Copy)]
enum Shape {
    Any,
    Details,
    Cause,
}

/// `value` as Go's `json.Encoder` would write the struct it stands for (without the
/// encoder's trailing newline).
pub fn to_vec(value: &Value) -> Vec<u8> {
    if value.get("kind").and_then(Value::as_str) != Some("Status") {
        // Objects and lists (possibly large) keep serde_json's order: its own writer is
        // faster than walking them here.
        return escape_html(serde_json::to_vec(value).expect("a Value serializes"));
    }
    let mut out = Vec::new();
    write(&mut out, value, Shape::Any);
    escape_html(out)
}

fn write(out: &mut Vec<u8>, value: &Value, shape: Shape) {
    match value {
        Value::Object(map) => {
            let is_status = map.get("kind").and_then(Value::as_str) == Some("Status");
            let order: &[&str] = match shape {
                Shape::Details => DETAILS,
                Shape::Cause => CAUSE,
                Shape::Any if is_status => STATUS,
                Shape::Any => &[],
            };
            write_object(out, map, order, |key| match (is_status, shape, key) {
                (true, Shape::Any, "details") => Shape::Details,
                (_, Shape::Details, "causes") => Shape::Cause,
                _ => Shape::Any,
            });
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item, shape);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a scalar serializes"),
    }
}

/// The keys of `order` first, in that order, then any others in the map's order.
fn write_object(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    order: &[&str],
    child: impl Fn(&str) -> Shape,
) {
    out.push(b'{');
    let known = order.iter().copied().filter(|k| map.contains_key(*k));
    let others = map
        .keys()
        .map(String::as_str)
        .filter(|k| !order.contains(k));
    for (i, key) in known.chain(others).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key).expect("a key serializes");
        out.push(b':');
        write(out, &map[key], child(key));
    }
    out.push(b'}');
}

/// Go's HTML-safe escaping. These bytes occur in JSON text only inside strings (U+2028 and
/// U+2029 are the only characters encoded with `E2 80 A8`/`A9`), so replacing them in the
/// whole text escapes exactly what Go escapes.
fn escape_html(text: Vec<u8>) -> Vec<u8> {
    if !text.iter().any(|b| matches!(b, b'<' | b'>' | b'&' | 0xE2)) {
        return text;
    }
    let mut out = Vec::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < text.len() {
        match (text[i], text.get(i + 1..i + 3)) {
            (b'<', _) => out.extend_from_slice(br"\u003c"),
            (b'>', _) => out.extend_from_slice(br"\u003e"),
            (b'&', _) => out.extend_from_slice(br"\u0026"),
            (0xE2, Some([0x80, 0xA8])) => {
                out.extend_from_slice(br"\u2028");
                i += 2;
            }
            (0xE2, Some([0x80, 0xA9])) => {
                out.extend_from_slice(br"\u2029");
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_is_written_in_go_field_order() {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "m", "reason": "TooManyRequests", "code": 429,
            "details": {"retryAfterSeconds": 10, "causes": [{"message": "x", "reason": "DisruptionBudget"}], "name": "n"},
        });
        assert_eq!(
            String::from_utf8(to_vec(&status)).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"TooManyRequests","details":{"name":"n","causes":[{"reason":"DisruptionBudget","message":"x"}],"retryAfterSeconds":10},"code":429}"#
        );
    }

    #[test]
    fn html_characters_and_line_separators_are_escaped_as_go_does() {
        let v = json!({"a": "<b> & \u{2028}\u{2029} é"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"{"a":"\u003cb\u003e \u0026 \u2028\u2029 é"}"#
        );
    }

    #[test]
    fn other_objects_keep_their_order() {
        let v = json!({"b": 1, "a": {"kind": "Pod", "z": [1, 2], "c": null}});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"{"a":{"c":null,"kind":"Pod","z":[1,2]},"b":1}"#
        );
    }
}
