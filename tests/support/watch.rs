//! A watch as a client reads it: JSON lines or protobuf frames, event by event, as (type, name,
//! resourceVersion, status code).

use crate::client::{read_more, Conn};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::Full;
use std::io;
use std::time::Duration;

/// One event as the test needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    pub kind: String,
    /// The object's name (empty for bookmarks and errors).
    pub name: String,
    /// Its resourceVersion.
    pub resource_version: String,
    /// An ERROR's Status code.
    pub code: Option<u64>,
}

/// An open watch.
pub struct Watch {
    body: hyper::body::Incoming,
    buf: BytesMut,
    protobuf: bool,
    /// The response's status.
    pub status: u16,
}

impl Conn {
    /// Opens a watch on `path`, in protobuf when `protobuf`.
    pub async fn watch(&mut self, path: &str, protobuf: bool) -> io::Result<Watch> {
        let accept = if protobuf {
            "application/vnd.kubernetes.protobuf;stream=watch, application/json"
        } else {
            "application/json"
        };
        let req = http::Request::get(self.uri(path))
            .header(http::header::HOST, self.host())
            .header(http::header::ACCEPT, accept)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = self.send_raw(req).await?;
        let protobuf = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/vnd.kubernetes.protobuf"));
        Ok(Watch {
            status: resp.status().as_u16(),
            body: resp.into_body(),
            buf: BytesMut::new(),
            protobuf,
        })
    }
}

impl Watch {
    /// Whether the events come as protobuf.
    pub fn is_protobuf(&self) -> bool {
        self.protobuf
    }

    /// The next event, `None` at the end of the stream, an error after `limit`.
    pub async fn next(&mut self, limit: Duration) -> io::Result<Option<WatchEvent>> {
        tokio::time::timeout(limit, async {
            loop {
                if let Some(e) = self.take()? {
                    return Ok(Some(e));
                }
                if !read_more(&mut self.body, &mut self.buf).await? {
                    return Ok(None);
                }
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no event in time"))?
    }

    fn take(&mut self) -> io::Result<Option<WatchEvent>> {
        if self.protobuf {
            if self.buf.len() < 4 {
                return Ok(None);
            }
            let n = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
            if self.buf.len() < 4 + n {
                return Ok(None);
            }
            self.buf.advance(4);
            let frame = self.buf.split_to(n);
            return protobuf_event(&frame).map(Some);
        }
        let Some(end) = self.buf.iter().position(|b| *b == b'\n') else {
            return Ok(None);
        };
        let line = self.buf.split_to(end + 1);
        let v: serde_json::Value = serde_json::from_slice(&line).map_err(io::Error::other)?;
        let meta = &v["object"]["metadata"];
        Ok(Some(WatchEvent {
            kind: v["type"].as_str().unwrap_or("").into(),
            name: meta["name"].as_str().unwrap_or("").into(),
            resource_version: meta["resourceVersion"].as_str().unwrap_or("").into(),
            code: v["object"]["code"].as_u64(),
        }))
    }
}

/// A field's payload: length-delimited bytes, or a varint's value.
type Payload<'a> = Result<&'a [u8], u64>;

/// The fields of a protobuf message, by number.
fn fields(mut b: &[u8]) -> io::Result<Vec<(u64, Payload<'_>)>> {
    fn varint(b: &mut &[u8]) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.first().ok_or_else(|| io::Error::other("truncated"))?;
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(io::Error::other("varint"))
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        match key & 7 {
            0 => out.push((key >> 3, Err(varint(&mut b)?))),
            2 => {
                let n = varint(&mut b)? as usize;
                if n > b.len() {
                    return Err(io::Error::other("truncated"));
                }
                out.push((key >> 3, Ok(&b[..n])));
                b = &b[n..];
            }
            t => return Err(io::Error::other(format!("wire type {t}"))),
        }
    }
    Ok(out)
}

fn field<'a>(fs: &[(u64, Payload<'a>)], n: u64) -> Option<&'a [u8]> {
    fs.iter()
        .find_map(|(k, v)| (*k == n).then_some(v.ok()).flatten())
}

fn protobuf_event(frame: &[u8]) -> io::Result<WatchEvent> {
    let event = fields(frame)?;
    let kind = String::from_utf8_lossy(field(&event, 1).unwrap_or_default()).into_owned();
    let raw = field(&fields(field(&event, 2).unwrap_or_default())?, 1).unwrap_or_default();
    let unknown = fields(
        raw.strip_prefix(b"k8s\0")
            .ok_or_else(|| io::Error::other("magic"))?,
    )?;
    let type_kind = field(&fields(field(&unknown, 1).unwrap_or_default())?, 2).unwrap_or_default();
    let object = fields(field(&unknown, 2).unwrap_or_default())?;
    if type_kind == b"Status" {
        let code = object
            .iter()
            .find_map(|(k, v)| (*k == 6).then(|| v.err()).flatten());
        return Ok(WatchEvent {
            kind,
            name: String::new(),
            resource_version: String::new(),
            code,
        });
    }
    let meta = fields(field(&object, 1).unwrap_or_default())?;
    let text = |n| String::from_utf8_lossy(field(&meta, n).unwrap_or_default()).into_owned();
    Ok(WatchEvent {
        kind,
        name: text(1),
        resource_version: text(6),
        code: None,
    })
}
