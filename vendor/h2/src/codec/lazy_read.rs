//! kubegate: the length-delimited frame reader that tokio-util's `FramedRead` was here, with a
//! read buffer that exists only while it holds bytes. tokio-util keeps an 8 KiB buffer for the
//! life of a connection; an idle HTTP/2 connection (most of a gateway's: one per kubelet and
//! controller) then holds it for nothing. Here a read into an empty buffer goes to the stack
//! first, and only the bytes that came are moved to the heap, in a buffer sized for the frame
//! they begin. The frames themselves are cut by tokio-util's `LengthDelimitedCodec`, as before.

use bytes::BytesMut;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{Decoder, LengthDelimitedCodec};
use tokio_util::io::poll_read_buf;

/// How much one read into an empty buffer may take (tokio-util's initial buffer size).
const READ_SIZE: usize = 8 * 1024;

/// An HTTP/2 frame header: 3 bytes of length, type, flags, stream id.
const FRAME_HEADER_LEN: usize = 9;

#[derive(Debug)]
pub struct LazyRead<T> {
    io: T,
    codec: LengthDelimitedCodec,
    buf: BytesMut,
    eof: bool,
}

impl<T> LazyRead<T> {
    pub fn new(io: T, codec: LengthDelimitedCodec) -> LazyRead<T> {
        LazyRead {
            io,
            codec,
            buf: BytesMut::new(),
            eof: false,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.io
    }

    pub fn decoder(&self) -> &LengthDelimitedCodec {
        &self.codec
    }

    pub fn decoder_mut(&mut self) -> &mut LengthDelimitedCodec {
        &mut self.codec
    }
}

impl<T: AsyncRead + Unpin> LazyRead<T> {
    /// The next whole frame (header included), `None` at a clean end of stream.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<BytesMut>>> {
        loop {
            if !self.buf.is_empty() || self.eof {
                let frame = if self.eof {
                    self.codec.decode_eof(&mut self.buf)
                } else {
                    self.codec.decode(&mut self.buf)
                };
                match frame {
                    Ok(Some(frame)) => {
                        if self.buf.is_empty() {
                            // The frames cut from it keep the allocation while they live.
                            self.buf = BytesMut::new();
                        }
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Ok(None) if self.eof => return Poll::Ready(None),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
            }
            let n = if self.buf.is_empty() {
                let mut stack = [MaybeUninit::<u8>::uninit(); READ_SIZE];
                let mut read = ReadBuf::uninit(&mut stack);
                match Pin::new(&mut self.io).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                    Poll::Pending => return Poll::Pending,
                }
                let filled = read.filled();
                // Bounded: a header claiming more than the frame size limit is the codec's
                // error to report, not an allocation to make.
                let most = filled.len() + self.codec.max_frame_length() + FRAME_HEADER_LEN;
                let mut buf = BytesMut::with_capacity(first_frame_end(filled).min(most));
                buf.extend_from_slice(filled);
                self.buf = buf;
                filled.len()
            } else {
                // The codec reserved room for the frame it waits for; this is for a header.
                if self.buf.len() == self.buf.capacity() {
                    self.buf.reserve(READ_SIZE);
                }
                match poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf) {
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                    Poll::Pending => return Poll::Pending,
                }
            };
            if n == 0 {
                self.eof = true;
            }
        }
    }
}

/// Where the first frame that `bytes` does not hold whole ends, so that the buffer they are
/// moved to has room for it; `bytes.len()` when they end on a frame boundary.
fn first_frame_end(bytes: &[u8]) -> usize {
    let mut at = 0;
    while at + FRAME_HEADER_LEN <= bytes.len() {
        let len = usize::from(bytes[at]) << 16 | usize::from(bytes[at + 1]) << 8
            | usize::from(bytes[at + 2]);
        at += FRAME_HEADER_LEN + len;
    }
    if at < bytes.len() {
        // A header cut short: room for it; the codec reserves the rest once it is whole.
        at += FRAME_HEADER_LEN;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tokio_util::codec::length_delimited;

    /// Hands out its chunks one read at a time, then end of stream.
    struct Chunks(VecDeque<Vec<u8>>);

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut chunk) = self.0.pop_front() {
                let n = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..n]);
                if n < chunk.len() {
                    self.0.push_front(chunk.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, 0, 0, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    /// Every frame and the ending `chunks` make, as h2's codec configures the reader.
    fn read_all(chunks: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, Option<io::Error>) {
        let codec = length_delimited::Builder::new()
            .big_endian()
            .length_field_length(3)
            .length_adjustment(9)
            .num_skip(0)
            .new_codec();
        let mut read = LazyRead::new(Chunks(chunks.into()), codec);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut frames = Vec::new();
        loop {
            match read.poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(f))) => {
                    frames.push(f.to_vec());
                    if read.buf.is_empty() {
                        assert_eq!(read.buf.capacity(), 0, "an empty buffer is released");
                    }
                }
                Poll::Ready(Some(Err(e))) => return (frames, Some(e)),
                Poll::Ready(None) => return (frames, None),
                Poll::Pending => unreachable!("the chunks are always ready"),
            }
        }
    }

    #[test]
    fn frames_come_whole_however_the_bytes_are_cut() {
        let big = vec![7u8; 20_000];
        let frames = [frame(b""), frame(b"abc"), frame(&big), frame(b"end")];
        let wire: Vec<u8> = frames.concat();
        // All at once (more than one read's worth), a byte at a time, and in odd pieces.
        let cuts: Vec<Vec<Vec<u8>>> = vec![
            vec![wire.clone()],
            wire.iter().map(|b| vec![*b]).collect(),
            wire.chunks(5).map(<[u8]>::to_vec).collect(),
            wire.chunks(9_001).map(<[u8]>::to_vec).collect(),
        ];
        for chunks in cuts {
            let (got, err) = read_all(chunks);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(got, frames);
        }
    }

    #[test]
    fn an_end_inside_a_frame_and_an_oversized_frame_are_errors() {
        let mut cut = frame(b"abcdef");
        cut.truncate(12);
        let (got, err) = read_all(vec![frame(b"x"), cut]);
        assert_eq!(got, vec![frame(b"x")]);
        assert!(err.is_some(), "the stream ended inside a frame");

        // 16 MiB claimed: the codec's error.
        let (got, err) = read_all(vec![vec![0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 1]]);
        assert!(got.is_empty());
        let err = err.expect("a frame over the size limit");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    /// kubegate: an idle connection keeps no read buffer — none before the first read, none
    /// once the frames that came were handed out.
    #[test]
    fn no_read_buffer_outlives_the_frames_it_held() {
        let codec = length_delimited::Builder::new()
            .big_endian()
            .length_field_length(3)
            .length_adjustment(9)
            .num_skip(0)
            .new_codec();
        let wire = [frame(b"one"), frame(b"two")].concat();
        let mut read = LazyRead::new(Chunks(vec![wire].into()), codec);
        assert_eq!(read.buf.capacity(), 0, "a new connection");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let first = read.poll_frame(&mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        assert!(read.buf.capacity() > 0, "the second frame waits in the buffer");
        let second = read.poll_frame(&mut cx);
        assert!(matches!(second, Poll::Ready(Some(Ok(_)))));
        assert_eq!(read.buf.capacity(), 0, "both frames handed out");
    }

    #[test]
    fn first_frame_end_covers_the_frame_cut_short() {
        // Two whole frames (9 + 0, 9 + 3 bytes).
        let whole = [0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 7, 7, 7];
        assert_eq!(first_frame_end(&whole), whole.len());
        // A 100-byte frame of which 5 payload bytes came.
        let cut = [0, 0, 100, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5];
        assert_eq!(first_frame_end(&cut), 109);
        // A header cut short after one whole frame.
        let head = [0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(first_frame_end(&head), 9 + 9);
    }
}
