//! A watch response, cut into whole events as the apiserver writes them: one JSON object per
//! line (`application/json`), or length-prefixed protobuf `WatchEvent`s
//! (`application/vnd.kubernetes.protobuf;stream=watch`). Of each event only what continuity
//! needs is read — its type, the resourceVersion it carries, whether a BOOKMARK ends the initial
//! events, an ERROR's code — and its bytes are forwarded as they came.

use crate::proto::{Fields, Wire};
use bytes::{Bytes, BytesMut};

/// An event larger than this ends the watch (the apiserver's objects are at most 3 MiB,
/// `Table` rows and protobuf overhead included well under it).
pub const MAX_EVENT: usize = 16 * 1024 * 1024;

/// How a watch stream is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Newline-delimited JSON.
    JsonLines,
    /// 4-byte big-endian length, then a raw protobuf `WatchEvent`.
    Protobuf,
}

impl Framing {
    /// From a watch response's `Content-Type`; `None` for encodings kubegate does not follow.
    pub fn of(content_type: &str) -> Option<Framing> {
        let base = content_type.split(';').next().unwrap_or("").trim();
        match base {
            "application/json" => Some(Framing::JsonLines),
            "application/vnd.kubernetes.protobuf"
                if content_type.replace(' ', "").contains("stream=watch") =>
            {
                Some(Framing::Protobuf)
            }
            _ => None,
        }
    }

    /// From the `Content-Type` of a watch response with `headers`.
    pub fn of_headers(headers: &http::HeaderMap) -> Option<Framing> {
        headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(Framing::of)
    }
}

/// A watch event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ADDED`, `MODIFIED`, `DELETED`: a change.
    Change,
    /// `BOOKMARK`: a position, no change.
    Bookmark,
    /// `ERROR`: the stream ends with a `Status`.
    Error,
}

/// One whole event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its bytes, as they came (frame or line, terminator included).
    pub bytes: Bytes,
    /// Its type.
    pub kind: Kind,
    /// The resourceVersion of its object.
    pub resource_version: Option<String>,
    /// A BOOKMARK annotated `k8s.io/initial-events-end: "true"`.
    pub initial_events_end: bool,
    /// An ERROR's `Status.code`.
    pub code: Option<u16>,
    /// A `Table` event that carries `columnDefinitions` (only the first of a stream should).
    pub table_header: bool,
}

/// Why a stream could not be cut into events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// An event larger than [`MAX_EVENT`].
    TooLarge,
    /// Bytes that are not an event.
    Malformed(String),
}

/// Cuts a byte stream into events.
pub struct Decoder {
    framing: Framing,
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline: a large JSON event arriving in many
    /// small reads is scanned once, not once per read.
    scanned: usize,
}

impl Decoder {
    /// An empty decoder for `framing`.
    pub fn new(framing: Framing) -> Decoder {
        Decoder {
            framing,
            buf: BytesMut::new(),
            scanned: 0,
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received that do not yet make a whole event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole event, if one has arrived.
    pub fn next_event(&mut self) -> Result<Option<Event>, FramingError> {
        let bytes = match self.framing {
            Framing::JsonLines => match self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                Some(at) => {
                    let end = self.scanned + at;
                    self.scanned = 0;
                    self.buf.split_to(end + 1).freeze()
                }
                None if self.buf.len() > MAX_EVENT => return Err(FramingError::TooLarge),
                None => {
                    self.scanned = self.buf.len();
                    return Ok(None);
                }
            },
            Framing::Protobuf => {
                if self.buf.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if len > MAX_EVENT {
                    return Err(FramingError::TooLarge);
                }
                if self.buf.len() < 4 + len {
                    return Ok(None);
                }
                self.buf.split_to(4 + len).freeze()
            }
        };
        let event = match self.framing {
            Framing::JsonLines => json_event(bytes),
            Framing::Protobuf => protobuf_event(bytes),
        };
        event.map(Some)
    }
}

fn kind_of(t: &str) -> Result<Kind, FramingError> {
    match t {
        "ADDED" | "MODIFIED" | "DELETED" => Ok(Kind::Change),
        "BOOKMARK" => Ok(Kind::Bookmark),
        "ERROR" => Ok(Kind::Error),
        other => Err(FramingError::Malformed(format!(
            "watch event type {other:?}"
        ))),
    }
}

fn json_event(bytes: Bytes) -> Result<Event, FramingError> {
    let malformed = |e: serde_json::Error| FramingError::Malformed(format!("watch event: {e}"));
    // Only the few fields continuity needs are read, in one pass, borrowed: the rest of the
    // object (a whole pod, say) is read past, not built into a tree. A field of an unexpected
    // type reads as absent, as a lookup in a parsed tree would.
    let event: json::Event = serde_json::from_slice(&bytes).map_err(malformed)?;
    let kind = kind_of(json::string(event.kind).as_deref().unwrap_or(""))?;
    let object = event.object.0.unwrap_or_default();
    let table = json::string(object.kind).as_deref() == Some("Table");
    // A `Table` event's object is the table; the row's object carries the version.
    let row_meta = if table {
        json::first(object.rows)
            .and_then(|row| serde_json::from_str::<json::IfMap<json::Row>>(row.get()).ok())
            .and_then(|row| row.0?.object.0?.metadata.0)
    } else {
        None
    };
    let meta = row_meta.or(object.metadata.0).unwrap_or_default();
    let annotations = meta.annotations.0.unwrap_or_default();
    Ok(Event {
        kind,
        resource_version: json::string(meta.resource_version).map(Into::into),
        initial_events_end: json::string(annotations.initial_events_end).as_deref() == Some("true"),
        code: object
            .code
            .and_then(|c| serde_json::from_str::<u64>(c.get()).ok())
            .and_then(|c| u16::try_from(c).ok()),
        table_header: table && object.column_definitions.is_some(),
        bytes,
    })
}

/// The parts of a JSON watch event [`json_event`] reads: objects it looks into as structs of
/// just those fields, values as raw text until looked at.
mod json {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::Deserialize;
    use serde_json::value::RawValue;
    use std::borrow::Cow;
    use std::marker::PhantomData;

    type Raw<'a> = Option<&'a RawValue>;

    #[derive(Deserialize)]
    pub struct Event<'a> {
        #[serde(rename = "type", borrow, default)]
        pub kind: Raw<'a>,
        #[serde(borrow, default)]
        pub object: IfMap<Object<'a>>,
    }

    #[derive(Deserialize, Default)]
    pub struct Object<'a> {
        #[serde(borrow, default)]
        pub kind: Raw<'a>,
        #[serde(borrow, default)]
        pub metadata: IfMap<Meta<'a>>,
        #[serde(borrow, default)]
        pub code: Raw<'a>,
        #[serde(rename = "columnDefinitions", borrow, default)]
        pub column_definitions: Raw<'a>,
        #[serde(borrow, default)]
        pub rows: Raw<'a>,
    }

    #[derive(Deserialize)]
    pub struct Row<'a> {
        #[serde(borrow, default)]
        pub object: IfMap<Object<'a>>,
    }

    #[derive(Deserialize, Default)]
    pub struct Meta<'a> {
        #[serde(rename = "resourceVersion", borrow, default)]
        pub resource_version: Raw<'a>,
        #[serde(borrow, default)]
        pub annotations: IfMap<Annotations<'a>>,
    }

    #[derive(Deserialize, Default)]
    pub struct Annotations<'a> {
        #[serde(rename = "k8s.io/initial-events-end", borrow, default)]
        pub initial_events_end: Raw<'a>,
    }

    /// `T` when the value is a JSON object; any other value is read past and gives nothing.
    pub struct IfMap<T>(pub Option<T>);

    impl<T> Default for IfMap<T> {
        fn default() -> Self {
            IfMap(None)
        }
    }

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for IfMap<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(IfMapVisitor(PhantomData))
        }
    }

    struct IfMapVisitor<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for IfMapVisitor<T> {
        type Value = IfMap<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<IfMap<T>, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                .map(|t| IfMap(Some(t)))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IfMap<T>, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(IfMap(None))
        }

        fn visit_bool<E>(self, _: bool) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }

        fn visit_i64<E>(self, _: i64) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }

        fn visit_u64<E>(self, _: u64) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }

        fn visit_f64<E>(self, _: f64) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }

        fn visit_str<E>(self, _: &str) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }

        fn visit_unit<E>(self) -> Result<IfMap<T>, E> {
            Ok(IfMap(None))
        }
    }

    /// A raw value as a string, when it is one.
    pub fn string(raw: Raw<'_>) -> Option<Cow<'_, str>> {
        raw.and_then(|r| serde_json::from_str(r.get()).ok())
    }

    /// The first element of a raw array.
    pub fn first(raw: Raw<'_>) -> Option<&RawValue> {
        raw.filter(|r| r.get().starts_with('['))
            .and_then(|r| serde_json::from_str::<Vec<&RawValue>>(r.get()).ok())
            .and_then(|rows| rows.into_iter().next())
    }
}

/// Removes a `Table` event's `columnDefinitions`: a resumed stream starts with a first event
/// again, and a client that printed the header already must not see it twice.
pub fn without_table_header(event: &Event) -> Bytes {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&event.bytes) else {
        return event.bytes.clone();
    };
    if let Some(o) = v["object"].as_object_mut() {
        o.remove("columnDefinitions");
    }
    let mut out = serde_json::to_vec(&v).expect("a parsed value serializes");
    out.push(b'\n');
    Bytes::from(out)
}

fn protobuf_event(bytes: Bytes) -> Result<Event, FramingError> {
    let bad = |what: &str| FramingError::Malformed(format!("protobuf watch event: {what}"));
    let mut kind = None;
    let mut object: &[u8] = &[];
    for field in Fields(&bytes[4..]) {
        match field.map_err(&bad)? {
            (1, Wire::Bytes(t)) => kind = Some(kind_of(std::str::from_utf8(t).unwrap_or(""))?),
            (2, Wire::Bytes(raw_extension)) => {
                for f in Fields(raw_extension) {
                    if let (1, Wire::Bytes(raw)) = f.map_err(&bad)? {
                        object = raw;
                    }
                }
            }
            _ => {}
        }
    }
    let kind = kind.ok_or_else(|| bad("no type"))?;
    // The object: magic `k8s\0`, then `runtime.Unknown` { typeMeta (1) { kind (2) }, raw (2) }.
    let unknown = object
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| bad("no k8s magic"))?;
    let (mut type_kind, mut raw): (&[u8], &[u8]) = (&[], &[]);
    for f in Fields(unknown) {
        match f.map_err(&bad)? {
            (1, Wire::Bytes(type_meta)) => {
                for g in Fields(type_meta) {
                    if let (2, Wire::Bytes(k)) = g.map_err(&bad)? {
                        type_kind = k;
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    let mut event = Event {
        kind,
        resource_version: None,
        initial_events_end: false,
        code: None,
        table_header: false,
        bytes: bytes.clone(),
    };
    if type_kind == b"Status" {
        // Status: code (6).
        for f in Fields(raw) {
            if let (6, Wire::Varint(c)) = f.map_err(&bad)? {
                event.code = u16::try_from(c).ok();
            }
        }
        return Ok(event);
    }
    // Every other kind has its ObjectMeta at field 1: resourceVersion (6), annotations (12).
    for f in Fields(raw) {
        if let (1, Wire::Bytes(meta)) = f.map_err(&bad)? {
            for g in Fields(meta) {
                match g.map_err(&bad)? {
                    (6, Wire::Bytes(rv)) => {
                        event.resource_version =
                            Some(String::from_utf8_lossy(rv).into_owned()).filter(|s| !s.is_empty())
                    }
                    (12, Wire::Bytes(entry)) => {
                        let (mut k, mut v): (&[u8], &[u8]) = (&[], &[]);
                        for h in Fields(entry) {
                            match h.map_err(&bad)? {
                                (1, Wire::Bytes(b)) => k = b,
                                (2, Wire::Bytes(b)) => v = b,
                                _ => {}
                            }
                        }
                        if k == b"k8s.io/initial-events-end" && v == b"true" {
                            event.initial_events_end = true;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::field;
    use proptest::prelude::*;

    fn decode_all(framing: Framing, chunks: &[&[u8]]) -> Vec<Event> {
        let mut d = Decoder::new(framing);
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(e) = d.next_event().unwrap() {
                out.push(e);
            }
        }
        assert_eq!(d.pending(), 0);
        out
    }

    #[test]
    fn json_lines_split_anywhere_come_out_whole() {
        let stream = concat!(
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"10"}}}"#,
            "\n",
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "\n",
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#,
            "\n",
        );
        for cut in [1, 7, 50, 100, stream.len() - 1] {
            let (a, b) = stream.as_bytes().split_at(cut);
            let events = decode_all(Framing::JsonLines, &[a, b]);
            assert_eq!(events.len(), 3, "cut at {cut}");
            assert_eq!(events[0].kind, Kind::Change);
            assert_eq!(events[0].resource_version.as_deref(), Some("10"));
            assert!(!events[0].initial_events_end);
            assert_eq!(
                (events[1].kind, events[1].initial_events_end),
                (Kind::Bookmark, true)
            );
            assert_eq!((events[2].kind, events[2].code), (Kind::Error, Some(410)));
            let joined: Vec<u8> = events.iter().flat_map(|e| e.bytes.to_vec()).collect();
            assert_eq!(
                joined,
                stream.as_bytes(),
                "forwarded bytes are the bytes received"
            );
        }
    }

    #[test]
    fn table_events_read_the_rows_version_and_lose_their_header_on_request() {
        let line = concat!(
            r#"{"type":"MODIFIED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name"}],"rows":[{"cells":["a"],"object":{"kind":"PartialObjectMetadata","metadata":{"name":"a","resourceVersion":"77"}}}]}}"#,
            "\n"
        );
        let e = decode_all(Framing::JsonLines, &[line.as_bytes()]).remove(0);
        assert_eq!(e.resource_version.as_deref(), Some("77"));
        assert!(e.table_header);
        let stripped = without_table_header(&e);
        let again = decode_all(Framing::JsonLines, &[&stripped]).remove(0);
        assert!(!again.table_header);
        assert_eq!(again.resource_version.as_deref(), Some("77"));
    }

    /// A protobuf watch frame as the apiserver writes it.
    fn frame(kind: &str, type_kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, b"v1"), field(2, type_kind.as_bytes())].concat();
        let unknown = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat();
        let event = [field(1, kind.as_bytes()), field(2, &field(1, &unknown))].concat();
        [(event.len() as u32).to_be_bytes().to_vec(), event].concat()
    }

    #[test]
    fn protobuf_frames_give_type_version_and_markers() {
        let meta = [field(1, b"a"), field(6, b"33")].concat();
        let added = frame("ADDED", "ConfigMap", &field(1, &meta));
        let end = [
            field(6, b"40"),
            field(
                12,
                &[field(1, b"k8s.io/initial-events-end"), field(2, b"true")].concat(),
            ),
        ]
        .concat();
        let bookmark = frame("BOOKMARK", "ConfigMap", &field(1, &end));
        let status = frame(
            "ERROR",
            "Status",
            &[field(2, b"Failure"), vec![6 << 3, 0x9a, 0x03]].concat(),
        );
        let stream = [added.clone(), bookmark, status].concat();
        for cut in [2, 5, added.len(), stream.len() - 3] {
            let (a, b) = stream.split_at(cut);
            let events = decode_all(Framing::Protobuf, &[a, b]);
            assert_eq!(events.len(), 3, "cut at {cut}");
            assert_eq!(events[0].resource_version.as_deref(), Some("33"));
            assert_eq!(events[0].bytes.as_ref(), added.as_slice());
            assert_eq!(events[1].resource_version.as_deref(), Some("40"));
            assert!(events[1].initial_events_end);
            assert_eq!((events[2].kind, events[2].code), (Kind::Error, Some(410)));
        }
    }

    /// What an event says: type, resourceVersion, initial events end, code, table header.
    type Says = (Kind, Option<String>, bool, Option<u16>, bool);

    /// What `json_event` reads of `line`.
    fn says(line: &[u8]) -> Option<Says> {
        json_event(Bytes::copy_from_slice(line)).ok().map(|e| {
            (
                e.kind,
                e.resource_version,
                e.initial_events_end,
                e.code,
                e.table_header,
            )
        })
    }

    /// What an event says, read from a whole parsed tree: the reading `json_event` must agree
    /// with, however the fields it looks at are typed.
    fn by_tree(line: &[u8]) -> Option<Says> {
        let v: serde_json::Value = serde_json::from_slice(line).ok()?;
        let kind = kind_of(v["type"].as_str().unwrap_or("")).ok()?;
        let object = &v["object"];
        let meta = if object["kind"] == "Table" {
            object["rows"][0]["object"]["metadata"]
                .as_object()
                .map(|_| &object["rows"][0]["object"]["metadata"])
                .unwrap_or(&object["metadata"])
        } else {
            &object["metadata"]
        };
        Some((
            kind,
            meta["resourceVersion"].as_str().map(str::to_string),
            meta["annotations"]["k8s.io/initial-events-end"] == "true",
            object["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
            object["kind"] == "Table"
                && object
                    .get("columnDefinitions")
                    .is_some_and(|c| !c.is_null()),
        ))
    }

    /// Any JSON value, a few levels deep, strings with escapes among them.
    fn any_json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::{json, Value};
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\\\"\n é]{0,8}".prop_map(Value::from),
            Just(json!("true")),
            Just(json!("Table")),
            Just(json!("42")),
            Just(json!(410)),
            Just(json!(70000)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("kind".to_string()),
                        Just("metadata".to_string()),
                        Just("resourceVersion".to_string()),
                        Just("annotations".to_string()),
                        Just("k8s.io/initial-events-end".to_string()),
                        Just("code".to_string()),
                        Just("rows".to_string()),
                        Just("object".to_string()),
                        Just("columnDefinitions".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A JSON object of the fields given (absent ones left out).
    fn fields(pairs: Vec<(&'static str, Option<serde_json::Value>)>) -> serde_json::Value {
        serde_json::Value::Object(
            pairs
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect(),
        )
    }

    /// Either `likely` (the shapes an apiserver sends) or any JSON value, or absent.
    fn maybe(
        likely: impl Strategy<Value = serde_json::Value> + 'static,
    ) -> impl Strategy<Value = Option<serde_json::Value>> {
        prop::option::of(prop_oneof![3 => likely, 1 => any_json()])
    }

    /// Object metadata: a resourceVersion and annotations, well or oddly typed.
    fn metadata() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::json;
        let annotations = (
            maybe(prop_oneof![
                Just(json!("true")),
                Just(json!("false")),
                Just(json!(true))
            ]),
            any_json(),
        )
            .prop_map(|(end, other)| {
                fields(vec![
                    ("k8s.io/initial-events-end", end),
                    ("other", Some(other)),
                ])
            });
        (
            maybe(prop_oneof![
                Just(json!("1234")),
                Just(json!(1234)),
                Just(json!("9\\u0030"))
            ]),
            maybe(annotations),
        )
            .prop_map(|(rv, ann)| fields(vec![("resourceVersion", rv), ("annotations", ann)]))
    }

    /// A watch event's object: a plain object, a Status or a Table, with fields of any type.
    fn object() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::json;
        let row = maybe(maybe(metadata()).prop_map(|m| fields(vec![("metadata", m)])))
            .prop_map(|o| fields(vec![("cells", Some(json!([1]))), ("object", o)]));
        (
            maybe(prop_oneof![
                Just(json!("Table")),
                Just(json!("Pod")),
                Just(json!("Status"))
            ]),
            maybe(metadata()),
            maybe(prop_oneof![
                Just(json!(410)),
                Just(json!(70000)),
                Just(json!("410")),
                Just(json!(4.5))
            ]),
            maybe(prop_oneof![
                Just(json!([{"name": "Name"}])),
                Just(json!(null))
            ]),
            maybe(prop::collection::vec(row, 0..3).prop_map(serde_json::Value::from)),
        )
            .prop_map(|(kind, meta, code, columns, rows)| {
                fields(vec![
                    ("kind", kind),
                    ("metadata", meta),
                    ("code", code),
                    ("columnDefinitions", columns),
                    ("rows", rows),
                ])
            })
    }

    #[test]
    fn odd_json_events_read_as_a_whole_parse_reads_them() {
        for line in [
            // A row whose metadata is not an object: the table's own version.
            r#"{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"5"},"rows":[{"object":{"metadata":"x"}}]}}"#,
            r#"{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"5"},"rows":{"a":1}}}"#,
            r#"{"type":"ADDED","object":{"kind":"Table","rows":[{"object":{"metadata":{"resourceVersion":"7"}}}],"columnDefinitions":null}}"#,
            // Codes that are not a u16.
            r#"{"type":"ERROR","object":{"kind":"Status","code":"410"}}"#,
            r#"{"type":"ERROR","object":{"kind":"Status","code":4.5}}"#,
            r#"{"type":"ERROR","object":{"kind":"Status","code":70000}}"#,
            r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#,
            // Escapes, and fields of the wrong type.
            r#"{"type":"\u0041DDED","object":{"metadata":{"resourceVersion":"1\u0032"}}}"#,
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":12,"annotations":{"k8s.io/initial-events-end":true}}}}"#,
            r#"{"type":"BOOKMARK","object":{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            r#"{"type":"ADDED","object":[1,2]}"#,
            r#"{"type":"ADDED"}"#,
        ] {
            let read = says(line.as_bytes());
            assert!(read.is_some(), "{line}");
            assert_eq!(read, by_tree(line.as_bytes()), "{line}");
        }
    }

    proptest! {
        #[test]
        fn json_events_read_as_a_whole_parse_reads_them(
            kind in prop_oneof![
                Just(serde_json::json!("ADDED")),
                Just(serde_json::json!("BOOKMARK")),
                Just(serde_json::json!("ERROR")),
                any_json(),
            ],
            object in prop_oneof![3 => object(), 1 => any_json()],
            extra in any_json(),
        ) {
            let line = serde_json::to_vec(
                &serde_json::json!({"type": kind, "object": object, "extra": extra}),
            ).unwrap();
            let tree = by_tree(&line);
            prop_assert_eq!(says(&line), tree, "{}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn oversized_and_malformed_events_are_errors() {
        let mut d = Decoder::new(Framing::Protobuf);
        d.push(&(MAX_EVENT as u32 + 1).to_be_bytes());
        assert_eq!(d.next_event(), Err(FramingError::TooLarge));
        let mut d = Decoder::new(Framing::JsonLines);
        d.push(b"not json\n");
        assert!(matches!(d.next_event(), Err(FramingError::Malformed(_))));
        let mut d = Decoder::new(Framing::Protobuf);
        d.push(&[0, 0, 0, 3, 0x0a, 0x7f, 0x00]);
        assert!(matches!(d.next_event(), Err(FramingError::Malformed(_))));
    }

    #[test]
    fn content_types_name_the_framing() {
        assert_eq!(Framing::of("application/json"), Some(Framing::JsonLines));
        assert_eq!(
            Framing::of("application/vnd.kubernetes.protobuf;stream=watch"),
            Some(Framing::Protobuf)
        );
        assert_eq!(Framing::of("application/vnd.kubernetes.protobuf"), None);
        assert_eq!(Framing::of("application/yaml"), None);
    }
}
