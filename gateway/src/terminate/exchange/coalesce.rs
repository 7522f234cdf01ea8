//! Writes coalesced across the tasks ready at once. An HTTP/2 connection's task flushes each
//! time it is polled, and under load it is polled once for every stream whose answer (or
//! request) came in: each flush a TLS record and a `writev` of its own, three times as many
//! as HAProxy makes for the same requests. Here a flush is put off for one turn of the
//! scheduler — the connection's task is woken at once and polled again after the tasks
//! ready now, which add their frames meanwhile — and what was written goes out then, in one
//! record and one system call. A connection with nothing else to do is polled again at once:
//! it waits for nothing but the scheduler.
//!
//! What is held is bounded ([`HELD`]: a larger write, or one that would pass it, goes out at
//! once) and given back once written, so an idle connection holds no buffer. A connection
//! dropped with bytes held (its peer closed without a goodbye, a read failed) passes them on
//! if its socket takes them at once, as they would have gone before. Only HTTP/2 connections
//! hold writes: an HTTP/1.1 connection may become an upgraded tunnel, whose copy drops both
//! ends at the first error, and whose last bytes (a WebSocket's close frame) must not wait for
//! a turn that never comes.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most held for a flush: about four full TLS records.
const HELD: usize = 64 * 1024;

/// `T` (a TLS stream) with its writes coalesced until a flush, and that flush put off once.
pub struct Coalesced<T: AsyncWrite + Unpin> {
    io: T,
    /// Whether writes are held at all (else each passes through).
    holds: bool,
    /// Written, not yet passed on.
    held: Vec<u8>,
    /// Of `held`, the bytes passed on already (a write the stream took in part).
    passed: usize,
    /// The flush asked for now was put off once already.
    put_off: bool,
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes to `io` coalesced.
    pub fn new(io: T) -> Coalesced<T> {
        Coalesced::holding(io, true)
    }

    /// Writes to `io` coalesced if `holds` (an HTTP/2 connection), else passed through.
    pub fn holding(io: T, holds: bool) -> Coalesced<T> {
        Coalesced {
            io,
            holds,
            held: Vec::new(),
            passed: 0,
            put_off: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Passes on everything held; ready once the stream took all of it.
    fn poll_pass_on(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.passed < self.held.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.passed..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.passed += n;
        }
        // Given back: a connection between bursts holds nothing.
        self.held = Vec::new();
        self.passed = 0;
        Poll::Ready(Ok(()))
    }

    /// Holds `bufs` (`len` bytes, which fit within [`HELD`]), the buffer grown no larger than
    /// that (doubling could make it twice that, kept while a peer that reads nothing holds the
    /// bytes up).
    fn hold(&mut self, bufs: &[IoSlice<'_>], len: usize) {
        let need = self.held.len() + len;
        debug_assert!(need <= HELD);
        if need > self.held.capacity() {
            let grown = (self.held.capacity() * 2).max(need).min(HELD);
            self.held.reserve_exact(grown - self.held.len());
        }
        for b in bufs {
            self.held.extend_from_slice(b);
        }
    }
}

impl<T: AsyncWrite + Unpin> Drop for Coalesced<T> {
    fn drop(&mut self) {
        if self.passed < self.held.len() {
            // Out if the socket takes them now, as they would have gone before being held.
            let mut cx = Context::from_waker(Waker::noop());
            if self.poll_pass_on(&mut cx).is_ready() {
                let _ = Pin::new(&mut self.io).poll_flush(&mut cx);
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !self.holds {
            return Pin::new(&mut self.io).poll_write(cx, buf);
        }
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.holds {
            return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        }
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.held.len() + len > HELD {
            ready!(this.poll_pass_on(cx))?;
        }
        if len >= HELD {
            return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        }
        this.hold(bufs, len);
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        self.holds || self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.held.is_empty() {
            if !this.put_off {
                // Polled again after the tasks ready now: their frames go out with these.
                this.put_off = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_pass_on(cx))?;
        }
        this.put_off = false;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pass_on(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A stream that counts the writes it is given.
    struct Counted {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn counted() -> Coalesced<Counted> {
        Coalesced::new(Counted {
            writes: 0,
            bytes: Vec::new(),
        })
    }

    #[tokio::test]
    async fn writes_until_a_flush_go_out_as_one_after_a_turn() {
        let mut c = counted();
        c.write_all(b"frame one,").await.unwrap();
        c.write_all(b"frame two").await.unwrap();
        assert_eq!(c.io.writes, 0, "held until the flush");
        // The first poll of the flush puts it off (and asks to be polled again).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut c).poll_flush(&mut cx).is_pending());
        c.write_all(b", three").await.unwrap();
        c.flush().await.unwrap();
        assert_eq!(c.io.writes, 1);
        assert_eq!(c.io.bytes, b"frame one,frame two, three");
        assert_eq!(c.held.capacity(), 0, "nothing held between bursts");
        // Nothing held: a flush is not put off.
        assert!(Pin::new(&mut c).poll_flush(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn what_is_held_is_bounded() {
        let mut c = counted();
        let block = vec![7u8; HELD / 2 + 1];
        c.write_all(&block).await.unwrap();
        c.write_all(&block).await.unwrap();
        assert_eq!(
            c.io.writes, 1,
            "the first passed on before the second was held"
        );
        assert!(c.held.len() <= HELD);
        for _ in 0..HELD / 100 {
            c.write_all(&[1u8; 99]).await.unwrap();
            assert!(c.held.capacity() <= HELD, "{}", c.held.capacity());
        }
        let large = vec![9u8; HELD * 2];
        c.write_all(&large).await.unwrap();
        assert!(c.held.is_empty(), "a large write goes out at once");
        c.shutdown().await.unwrap();
        assert_eq!(
            c.io.bytes.len(),
            2 * block.len() + (HELD / 100) * 99 + large.len()
        );
    }

    #[tokio::test]
    async fn what_is_held_goes_out_when_the_connection_is_dropped() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut c = Coalesced::new(a);
        c.write_all(b"the last response").await.unwrap();
        drop(c);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"the last response");
    }

    #[tokio::test]
    async fn a_connection_that_holds_nothing_passes_each_write_through() {
        let mut c = Coalesced::holding(
            Counted {
                writes: 0,
                bytes: Vec::new(),
            },
            false,
        );
        c.write_all(b"one").await.unwrap();
        c.write_all(b"two").await.unwrap();
        assert_eq!(c.io.writes, 2);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut c).poll_flush(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn bytes_go_through_a_real_stream_in_order() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut c = Coalesced::new(a);
        let mut sent = Vec::new();
        for i in 0..1000u32 {
            let piece = i.to_be_bytes().repeat((i % 50) as usize + 1);
            c.write_all(&piece).await.unwrap();
            sent.extend_from_slice(&piece);
            if i % 7 == 0 {
                c.flush().await.unwrap();
            }
        }
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, sent);
    }
}
