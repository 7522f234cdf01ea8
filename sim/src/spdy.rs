//! SPDY/3.1 server sessions, as the apiserver (and kubelet behind it) speaks them to kubectl for
//! `port-forward` and, when WebSocket is refused, `exec` and `attach`: the client opens
//! streams (SYN_STREAM, headers naming each stream's role), the server answers each with
//! SYN_REPLY, and data flows both ways in DATA frames until FIN. PING is answered; RST_STREAM
//! and GOAWAY end streams or the session. No flow control: spdystream, the Go implementation on
//! kubectl's side, never waits for WINDOW_UPDATE.
//!
//! Header blocks are zlib streams, one per direction for the whole session, each compressed
//! against SPDY's dictionary (`dictionary.rs`).

mod dictionary;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use dictionary::DICTIONARY;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use std::collections::HashMap;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;
/// A frame larger than this ends the session: nothing kubectl sends comes close.
const MAX_FRAME: usize = 1 << 20;

/// A stream the client opened.
pub struct Opened {
    /// Its headers (names lower case), e.g. `streamtype: data`, `port: 8080`.
    pub headers: HashMap<String, String>,
    /// What the client sends on it; ends at the client's FIN.
    pub data: mpsc::Receiver<Bytes>,
    /// Writes to the client on it.
    pub out: StreamWriter,
}

impl Opened {
    /// One header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Writes DATA frames on one stream.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    frames: mpsc::UnboundedSender<Vec<u8>>,
}

impl StreamWriter {
    /// Sends `data` (split into frames as needed); false once the session is gone.
    pub fn send(&self, data: &[u8]) -> bool {
        data.chunks(64 * 1024)
            .all(|chunk| self.frames.send(data_frame(self.id, 0, chunk)).is_ok())
    }

    /// Half-closes the stream (FIN).
    pub fn finish(&self) {
        let _ = self.frames.send(data_frame(self.id, FLAG_FIN, &[]));
    }
}

/// Ends the session from the server's side: GOAWAY, then the connection closes.
#[derive(Clone)]
pub struct SessionCloser(mpsc::UnboundedSender<Vec<u8>>);

impl SessionCloser {
    /// Sends GOAWAY; the writer closes the connection after it.
    pub fn close(&self) {
        let mut payload = BytesMut::new();
        payload.put_u32(0);
        payload.put_u32(0);
        let _ = self.0.send(control_frame(GOAWAY, 0, &payload));
        let _ = self.0.send(Vec::new());
    }
}

fn control_frame(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.put_u16(0x8000 | VERSION);
    f.put_u16(kind);
    f.put_u32(((flags as u32) << 24) | payload.len() as u32);
    f.extend_from_slice(payload);
    f
}

fn data_frame(id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.put_u32(id & 0x7fff_ffff);
    f.put_u32(((flags as u32) << 24) | data.len() as u32);
    f.extend_from_slice(data);
    f
}

/// The header-block codec of one session (one zlib stream each way).
struct HeaderCodec {
    inflate: Decompress,
    deflate: Compress,
}

impl HeaderCodec {
    fn new() -> HeaderCodec {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate
            .set_dictionary(&DICTIONARY)
            .expect("a fresh deflate stream takes a dictionary");
        HeaderCodec {
            inflate: Decompress::new(true),
            deflate,
        }
    }

    fn decode(&mut self, block: &[u8]) -> io::Result<HashMap<String, String>> {
        let mut plain = Vec::with_capacity(block.len() * 4);
        let mut input = block;
        loop {
            plain.reserve(4096);
            let (in_before, out_before) = (self.inflate.total_in(), self.inflate.total_out());
            match self
                .inflate
                .decompress_vec(input, &mut plain, FlushDecompress::Sync)
            {
                Ok(Status::Ok | Status::BufError | Status::StreamEnd) => {}
                // The zlib header named a dictionary: SPDY's.
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&DICTIONARY)
                        .map_err(|e| io::Error::other(format!("SPDY dictionary: {e}")))?;
                }
                Err(e) => return Err(io::Error::other(format!("SPDY header block: {e}"))),
            }
            let used = (self.inflate.total_in() - in_before) as usize;
            let produced = self.inflate.total_out() - out_before;
            input = &input[used..];
            // Done when the input is used up and the output had room to spare; stuck when
            // nothing moved.
            if (input.is_empty() && plain.len() < plain.capacity()) || (used == 0 && produced == 0)
            {
                break;
            }
        }
        let mut buf = &plain[..];
        let mut headers = HashMap::new();
        let count = read_u32(&mut buf)?;
        for _ in 0..count {
            let name = read_string(&mut buf)?;
            let value = read_string(&mut buf)?;
            // Several values of one name are NUL-separated; the first is what streams need.
            let first = value.split('\0').next().unwrap_or("").to_string();
            headers.insert(name.to_ascii_lowercase(), first);
        }
        Ok(headers)
    }

    fn encode(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = BytesMut::new();
        plain.put_u32(headers.len() as u32);
        for (k, v) in headers {
            plain.put_u32(k.len() as u32);
            plain.put_slice(k.as_bytes());
            plain.put_u32(v.len() as u32);
            plain.put_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input = &plain[..];
        loop {
            out.reserve(256);
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .expect("deflate into a growing buffer");
            input = &input[(self.deflate.total_in() - before) as usize..];
            if input.is_empty() && out.capacity() > out.len() {
                break;
            }
        }
        out
    }
}

fn read_u32(buf: &mut &[u8]) -> io::Result<u32> {
    if buf.len() < 4 {
        return Err(io::Error::other("SPDY header block cut short"));
    }
    Ok(buf.get_u32())
}

fn read_string(buf: &mut &[u8]) -> io::Result<String> {
    let n = read_u32(buf)? as usize;
    if buf.len() < n {
        return Err(io::Error::other("SPDY header block cut short"));
    }
    let s = String::from_utf8_lossy(&buf[..n]).into_owned();
    buf.advance(n);
    Ok(s)
}

/// Serves one SPDY session on `io`, handing each stream the client opens to `opened`, until
/// the client goes away or a [`SessionCloser`] ends it. Returns the closer first, through
/// `closer`, so a handler can end the session.
pub async fn serve<IO>(
    io: IO,
    opened: mpsc::Sender<Opened>,
    closer: tokio::sync::oneshot::Sender<SessionCloser>,
) -> io::Result<()>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let _ = closer.send(SessionCloser(frames_tx.clone()));
    let writing = tokio::spawn(async move {
        // An empty frame is the closer's signal: flush and close.
        while let Some(frame) = frames_rx.recv().await {
            if frame.is_empty() {
                break;
            }
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut codec = HeaderCodec::new();
    let mut streams: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    let result = async {
        loop {
            let mut head = [0u8; 8];
            if reader.read_exact(&mut head).await.is_err() {
                return Ok(());
            }
            let flags = head[4];
            let len = (u32::from_be_bytes([0, head[5], head[6], head[7]])) as usize;
            if len > MAX_FRAME {
                return Err(io::Error::other("SPDY frame too large"));
            }
            let mut payload = vec![0u8; len];
            reader.read_exact(&mut payload).await?;
            if head[0] & 0x80 == 0 {
                let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
                if let Some(tx) = streams.get(&id) {
                    if !payload.is_empty() {
                        let _ = tx.send(Bytes::from(payload)).await;
                    }
                }
                if flags & FLAG_FIN != 0 {
                    streams.remove(&id);
                }
                continue;
            }
            let kind = u16::from_be_bytes([head[2], head[3]]);
            match kind {
                SYN_STREAM => {
                    if payload.len() < 10 {
                        return Err(io::Error::other("short SYN_STREAM"));
                    }
                    let id = u32::from_be_bytes(payload[0..4].try_into().expect("4 bytes"))
                        & 0x7fff_ffff;
                    let headers = codec.decode(&payload[10..])?;
                    let (tx, rx) = mpsc::channel(64);
                    if flags & FLAG_FIN == 0 {
                        streams.insert(id, tx);
                    }
                    let mut reply = BytesMut::new();
                    reply.put_u32(id);
                    reply.extend_from_slice(&codec.encode(&[]));
                    let _ = frames_tx.send(control_frame(SYN_REPLY, 0, &reply));
                    let out = StreamWriter {
                        id,
                        frames: frames_tx.clone(),
                    };
                    if opened
                        .send(Opened {
                            headers,
                            data: rx,
                            out,
                        })
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                }
                PING => {
                    let _ = frames_tx.send(control_frame(PING, 0, &payload));
                }
                RST_STREAM if payload.len() >= 4 => {
                    let id = u32::from_be_bytes(payload[0..4].try_into().expect("4 bytes"))
                        & 0x7fff_ffff;
                    streams.remove(&id);
                }
                GOAWAY => return Ok(()),
                // SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do without flow control.
                _ => {}
            }
        }
    }
    .await;
    drop(streams);
    drop(frames_tx);
    let _ = writing.await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        // The dictionary id every SPDY/3 header stream announces.
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for &byte in DICTIONARY.iter() {
            a = (a + byte as u32) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn header_blocks_round_trip_through_one_zlib_stream_each_way() {
        let mut server = HeaderCodec::new();
        let mut client = HeaderCodec::new();
        for port in ["8080", "9090"] {
            let block = client.encode(&[("streamtype", "data"), ("port", port)]);
            // The first block of a stream names the dictionary (FDICT) after the zlib header.
            let headers = server.decode(&block).unwrap();
            assert_eq!(headers["streamtype"], "data");
            assert_eq!(headers["port"], port);
        }
    }
}
