//! A raw HTTP/2 client for hostile-client tests: it writes whatever frames a test asks for,
//! in any order and at any rate, which no well-behaved client library will do.
//!
//! Header blocks are HPACK "literal without indexing" with no Huffman coding (RFC 7541 §6.2.2),
//! plus the two representations the HPACK bomb needs (a literal that enters the dynamic table,
//! and indexed references to it).

use crate::client::{tls_client_config, tls_connect};
use kubegate_testbed::Pki;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// END_STREAM (HEADERS, DATA).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
}

/// Error code CANCEL.
pub const CANCEL: u32 = 0x8;
/// Error code REFUSED_STREAM.
pub const REFUSED_STREAM: u32 = 0x7;
/// Error code ENHANCE_YOUR_CALM.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame read from the server.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier.
    pub stream: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            kind::RST_STREAM => 0,
            kind::GOAWAY => 4,
            _ => return None,
        };
        let b = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// The server sent GOAWAY with this error code.
    GoAway(u32),
    /// The server closed (or reset) the connection without GOAWAY.
    Closed,
    /// Still open at the deadline.
    Open,
}

/// A raw HTTP/2 connection over TLS.
pub struct RawH2 {
    tls: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl RawH2 {
    /// Connects with ALPN `h2` and `pki`'s admin certificate, and sends the preface and an
    /// empty SETTINGS.
    pub async fn connect(addr: SocketAddr, pki: &Pki) -> io::Result<RawH2> {
        let tls = tls_connect(addr, tls_client_config(pki, &[b"h2"])).await?;
        let mut c = RawH2 {
            tls,
            buf: Vec::new(),
        };
        c.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        c.frame(kind::SETTINGS, 0, 0, &[]).await?;
        Ok(c)
    }

    /// Writes bytes as they are.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.tls.write_all(bytes).await?;
        self.tls.flush().await
    }

    /// Writes one frame.
    pub async fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        self.write(&encode(kind, flags, stream, payload)).await
    }

    /// A GET request for `path` on `stream`, whole.
    pub async fn get(&mut self, stream: u32, path: &str) -> io::Result<()> {
        self.frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            stream,
            &request_block(path, &[]),
        )
        .await
    }

    /// The next frame, `None` once the server closed the connection.
    pub async fn read(&mut self, limit: Duration) -> io::Result<Option<Frame>> {
        tokio::time::timeout(limit, self.read_frame())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no frame in time"))?
    }

    async fn read_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let frame = Frame {
                        kind: head[3],
                        flags: head[4],
                        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]])
                            & 0x7fff_ffff,
                        payload: head[9..].to_vec(),
                    };
                    if frame.kind == kind::SETTINGS && frame.flags & flag::ACK == 0 {
                        // A client acknowledges the server's settings, as RFC 9113 requires.
                        self.frame(kind::SETTINGS, flag::ACK, 0, &[]).await?;
                    }
                    return Ok(Some(frame));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.tls.read(&mut chunk).await {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads until the server sends GOAWAY or closes, or `limit` passes.
    pub async fn ending(&mut self, limit: Duration) -> Ending {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read(left).await {
                Ok(Some(f)) if f.kind == kind::GOAWAY => {
                    return Ending::GoAway(f.error_code().unwrap_or(0))
                }
                Ok(Some(_)) => {}
                Ok(None) => return Ending::Closed,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ending::Open,
                Err(_) => return Ending::Closed,
            }
        }
    }
}

/// One frame's bytes.
pub fn encode(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with an `prefix`-bit prefix and `first` as the high bits (RFC 7541 §5.1).
pub fn hpack_int(first: u8, prefix: u32, value: usize, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128 + 128) as u8);
        rest /= 128;
    }
    out.push(rest as u8);
}

fn hpack_string(s: &[u8], out: &mut Vec<u8>) {
    hpack_int(0, 7, s.len(), out);
    out.extend_from_slice(s);
}

/// A header as a literal without indexing, new name.
pub fn literal(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    hpack_string(name.as_bytes(), out);
    hpack_string(value, out);
}

/// A header as a literal that enters the dynamic table (index 62 afterwards), new name.
pub fn literal_indexed(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.push(0x40);
    hpack_string(name.as_bytes(), out);
    hpack_string(value, out);
}

/// A reference to the header at `index` of the static or dynamic table.
pub fn indexed(index: usize, out: &mut Vec<u8>) {
    hpack_int(0x80, 7, index, out);
}

/// The header block of a GET for `path` with `extra` headers.
pub fn request_block(path: &str, extra: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    indexed(2, &mut b); // :method GET
    indexed(7, &mut b); // :scheme https
    literal(":authority", b"kubernetes", &mut b);
    literal(":path", path.as_bytes(), &mut b);
    for (n, v) in extra {
        literal(n, v, &mut b);
    }
    b
}
