//! A watch response, cut into whole events as the apiserver writes them: one JSON object per
//! line (`application/json`), or length-prefixed protobuf `WatchEvent`s
//! (`application/vnd.kubernetes.protobuf;stream=watch`). Of each event only what continuity
//! needs is read — its type, the resourceVersion it carries, whether a BOOKMARK ends the initial
//! events, an ERROR's code — and its bytes are forwarded as they came.

use bytes::{Buf, Bytes, BytesMut};

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
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| FramingError::Malformed(format!("watch event: {e}")))?;
    let kind = kind_of(v["type"].as_str().unwrap_or(""))?;
    let object = &v["object"];
    // A `Table` event's object is the table; the row's object carries the version.
    let meta = if object["kind"] == "Table" {
        object["rows"][0]["object"]["metadata"]
            .as_object()
            .map(|_| &object["rows"][0]["object"]["metadata"])
            .unwrap_or(&object["metadata"])
    } else {
        &object["metadata"]
    };
    Ok(Event {
        kind,
        resource_version: meta["resourceVersion"].as_str().map(str::to_string),
        initial_events_end: meta["annotations"]["k8s.io/initial-events-end"] == "true",
        code: object["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
        table_header: object["kind"] == "Table" && object.get("columnDefinitions").is_some(),
        bytes,
    })
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

/// A protobuf field's payload.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first().ok_or("truncated varint")?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("truncated field");
        }
        let head = &self.0[..n];
        self.0.advance(n);
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                    Wire::Bytes(self.take(n)?)
                }
                5 => {
                    self.take(4)?;
                    Wire::Fixed
                }
                _ => return Err("unknown wire type"),
            };
            Ok((key >> 3, wire))
        })();
        if field.is_err() {
            self.0 = &[];
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        let mut key = n << 3 | 2;
        while key >= 0x80 {
            v.push((key as u8) | 0x80);
            key >>= 7;
        }
        v.push(key as u8);
        let mut len = payload.len() as u64;
        while len >= 0x80 {
            v.push((len as u8) | 0x80);
            len >>= 7;
        }
        v.push(len as u8);
        v.extend_from_slice(payload);
        v
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
