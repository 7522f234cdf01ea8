//! A `metav1.Status`, as the apiserver writes one (`responsewriters.ErrorNegotiated`, which
//! encodes it as the request's `Accept` asked): JSON (`application/json`, compact or pretty) or
//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`: the `k8s\0` magic, then a
//! `runtime.Unknown` holding the Status). Read whole, every field kubegate tells the
//! apiserver's own answers by; anything else (another kind, another media type, bytes that do
//! not parse) is no Status.

use crate::framing::Framing;
use crate::proto::{Fields, Wire};
use serde::Deserialize;

/// The JSON media type the apiserver writes a Status in.
pub const JSON: &str = "application/json";
/// The protobuf media type the apiserver writes a Status in.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// What a Status says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// `status`: `Failure` for every error.
    pub status: String,
    /// `message`.
    pub message: String,
    /// `reason`: empty when the apiserver left it out (`StatusReasonUnknown`).
    pub reason: String,
    /// `details`, when present.
    pub details: Option<Details>,
    /// `code`.
    pub code: i64,
}

/// `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Details {
    /// The object's name.
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// The causes.
    pub causes: Vec<Cause>,
    /// `retryAfterSeconds`.
    #[serde(rename = "retryAfterSeconds")]
    pub retry_after_seconds: i64,
}

/// One cause in `details.causes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Cause {
    /// Its `reason` (the cause type).
    pub reason: String,
    /// Its `message`.
    pub message: String,
}

impl Details {
    /// Whether the details name nothing: go-restful's `NewGenericServerResponse` for a path
    /// without a route leaves them empty.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty()
            && self.group.is_empty()
            && self.kind.is_empty()
            && self.causes.is_empty()
            && self.retry_after_seconds == 0
    }
}

/// The JSON shape: every field the apiserver writes, `kind` and `apiVersion` checked.
#[derive(Deserialize)]
struct JsonStatus {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    details: Option<Details>,
    #[serde(default)]
    code: i64,
}

/// The Status an answer of media type `content_type` carries in `body`, if it is one.
pub fn read(content_type: &str, body: &[u8]) -> Option<Status> {
    match content_type {
        JSON => from_json(body),
        PROTOBUF => from_protobuf(body.strip_prefix(b"k8s\0")?),
        _ => None,
    }
}

/// The Status of a watch's ERROR event (its bytes as `framing` cut them), if it carries one.
pub fn of_event(framing: Framing, event: &[u8]) -> Option<Status> {
    match framing {
        Framing::JsonLines => {
            #[derive(Deserialize)]
            struct Event<'a> {
                #[serde(borrow)]
                object: &'a serde_json::value::RawValue,
            }
            let e: Event = serde_json::from_slice(event).ok()?;
            from_json(e.object.get().as_bytes())
        }
        Framing::Protobuf => {
            // A length prefix (4), the `k8s\0`-less WatchEvent: type (1), object (2) holding
            // a RawExtension whose raw (1) is the object with its magic.
            let mut object: &[u8] = &[];
            for field in Fields(event.get(4..)?) {
                if let (2, Wire::Bytes(raw_extension)) = field.ok()? {
                    for f in Fields(raw_extension) {
                        if let (1, Wire::Bytes(raw)) = f.ok()? {
                            object = raw;
                        }
                    }
                }
            }
            from_protobuf(object.strip_prefix(b"k8s\0")?)
        }
    }
}

fn from_json(body: &[u8]) -> Option<Status> {
    let s: JsonStatus = serde_json::from_slice(body).ok()?;
    (s.kind == "Status").then_some(Status {
        status: s.status,
        message: s.message,
        reason: s.reason,
        details: s.details,
        code: s.code,
    })
}

/// A `runtime.Unknown` { typeMeta (1) { apiVersion (1), kind (2) }, raw (2) } whose kind is
/// Status; raw: Status { metadata (1), status (2), message (3), reason (4), details (5),
/// code (6) }; details: { name (1), group (2), kind (3), causes (4) { reason (1), message
/// (2) }, retryAfterSeconds (5) }.
fn from_protobuf(unknown: &[u8]) -> Option<Status> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    let (mut kind, mut raw): (&[u8], &[u8]) = (&[], &[]);
    for f in Fields(unknown) {
        match f.ok()? {
            (1, Wire::Bytes(type_meta)) => {
                for g in Fields(type_meta) {
                    if let (2, Wire::Bytes(k)) = g.ok()? {
                        kind = k;
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    if kind != b"Status" {
        return None;
    }
    let mut status = Status::default();
    for f in Fields(raw) {
        match f.ok()? {
            (2, Wire::Bytes(b)) => status.status = text(b)?,
            (3, Wire::Bytes(b)) => status.message = text(b)?,
            (4, Wire::Bytes(b)) => status.reason = text(b)?,
            (5, Wire::Bytes(d)) => {
                let mut details = Details::default();
                for g in Fields(d) {
                    match g.ok()? {
                        (1, Wire::Bytes(b)) => details.name = text(b)?,
                        (2, Wire::Bytes(b)) => details.group = text(b)?,
                        (3, Wire::Bytes(b)) => details.kind = text(b)?,
                        (4, Wire::Bytes(c)) => {
                            let mut cause = Cause::default();
                            for h in Fields(c) {
                                match h.ok()? {
                                    (1, Wire::Bytes(b)) => cause.reason = text(b)?,
                                    (2, Wire::Bytes(b)) => cause.message = text(b)?,
                                    _ => {}
                                }
                            }
                            details.causes.push(cause);
                        }
                        (5, Wire::Varint(n)) => details.retry_after_seconds = n as i32 as i64,
                        _ => {}
                    }
                }
                status.details = Some(details);
            }
            (6, Wire::Varint(n)) => status.code = n as i32 as i64,
            _ => {}
        }
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{field, protobuf_status};

    #[test]
    fn a_json_status_is_read_whole_and_nothing_else_is_one() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 123, current: 100","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}
"#;
        let s = read(JSON, body).unwrap();
        assert_eq!(s.code, 504);
        assert_eq!(s.reason, "Timeout");
        let d = s.details.unwrap();
        assert_eq!(d.causes[0].reason, "ResourceVersionTooLarge");
        assert_eq!(d.retry_after_seconds, 1);
        // Pretty, as `?pretty=true` asks.
        let pretty = "{\n  \"kind\": \"Status\",\n  \"code\": 404,\n  \"details\": {}\n}";
        let s = read(JSON, pretty.as_bytes()).unwrap();
        assert!(s.details.unwrap().is_empty());
        assert_eq!(s.reason, "");
        assert!(read(JSON, br#"{"kind":"Pod","code":404}"#).is_none());
        assert!(read("application/json; charset=utf-8", body).is_none());
        assert!(read("text/plain; charset=utf-8", body).is_none());
        assert!(read(JSON, b"not json").is_none());
    }

    #[test]
    fn a_protobuf_status_is_read_as_its_json_twin() {
        let pb = protobuf_status(
            "Timeout: Too large resource version: 9, current: 7",
            "Timeout",
            Some("ResourceVersionTooLarge"),
            504,
        );
        let s = read(PROTOBUF, &pb).unwrap();
        assert_eq!(s.code, 504);
        assert_eq!(s.status, "Failure");
        assert_eq!(s.reason, "Timeout");
        assert_eq!(
            s.details.unwrap().causes[0].reason,
            "ResourceVersionTooLarge"
        );
        assert!(read(PROTOBUF, &pb[4..]).is_none(), "no magic");
        assert!(read(PROTOBUF, &pb[..pb.len() - 3]).is_none(), "truncated");
    }

    #[test]
    fn a_watch_error_event_carries_its_status() {
        let json = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}
"#;
        let s = of_event(Framing::JsonLines, json).unwrap();
        assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
        let status = protobuf_status("gone", "Expired", None, 410);
        let mut event = field(1, b"ERROR");
        event.extend(field(2, &field(1, &status)));
        let mut framed = (event.len() as u32).to_be_bytes().to_vec();
        framed.extend(event);
        let s = of_event(Framing::Protobuf, &framed).unwrap();
        assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
    }
}
