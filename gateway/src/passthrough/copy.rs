//! Copying bytes both ways between client and backend, counting as it goes.
//!
//! A [`Relay`] is a hand-written future run as a task of its own, so that an open proxied
//! connection costs one small task and nothing else: no pingora connection task, no boxed async
//! state machine, no cancellation futures (kubegate closes a connection by aborting its task, see
//! `Relays::close_all`).
//!
//! Readiness first, buffer second: each direction waits for its socket to be readable without
//! holding memory, then borrows a buffer from a per-thread pool for the read and the write that
//! follows. An idle proxied connection therefore holds no buffer at all.
//!
//! - EOF in one direction shuts down the other socket's write side and keeps the other
//!   direction running (half-close: a client that stops writing still gets its response).
//! - An error in one direction ends both; a reset is passed on as a reset (SO_LINGER 0), so the
//!   other peer sees what this one saw instead of a clean end.

use crate::passthrough::guard::ConnectionGuard;
use prometheus::IntCounter;
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Size of one pooled buffer.
const BUFFER: usize = 32 * 1024;
/// One pooled buffer; a fixed-size array so that a pointer to it is one word.
type Chunk = [u8; BUFFER];
// Offsets into a buffer are kept as u16.
const _: () = assert!(BUFFER <= u16::MAX as usize);
/// Free buffers a thread keeps for reuse; more are returned to the allocator.
const POOL_MAX: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Box<Chunk>>> = const { RefCell::new(Vec::new()) };
}

fn take_buffer() -> Box<Chunk> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| {
        // Built on the heap: a 32 KiB array is not put on the stack first.
        vec![0u8; BUFFER]
            .into_boxed_slice()
            .try_into()
            .expect("BUFFER bytes")
    })
}

fn give_back(buf: Box<Chunk>) {
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    });
}

/// Where one direction stands. Kept small on purpose: every open connection holds two, and
/// the whole relay should fit a 256-byte task (see the size test below).
enum Direction {
    /// Waiting for the source to be readable; holds no buffer.
    Reading,
    /// `buf[written..filled]` still has to reach the destination.
    Writing {
        buf: Box<Chunk>,
        written: u16,
        filled: u16,
    },
    /// EOF passed on.
    Done,
}

/// One proxied connection: client and backend sockets, the two directions, and the guard that
/// keeps it registered with its backend.
pub struct Relay {
    client: TcpStream,
    backend: TcpStream,
    to_backend: Direction,
    to_client: Direction,
    guard: ConnectionGuard,
}

impl Relay {
    /// Relays between `client` and `backend` until both directions ended or one failed.
    pub fn new(client: TcpStream, backend: TcpStream, guard: ConnectionGuard) -> Relay {
        Relay {
            client,
            backend,
            to_backend: Direction::Reading,
            to_client: Direction::Reading,
            guard,
        }
    }

    /// Passes a failure on: both sockets are reset when dropped rather than closed cleanly.
    fn reset_both(&self) {
        for s in [&self.client, &self.backend] {
            let _ = socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

impl Future for Relay {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let metrics = this.guard.metrics();
        let up = pump(
            cx,
            &this.client,
            &this.backend,
            &mut this.to_backend,
            matches!(this.to_client, Direction::Done),
            &metrics.bytes_to_backend,
        );
        let down = pump(
            cx,
            &this.backend,
            &this.client,
            &mut this.to_client,
            matches!(this.to_backend, Direction::Done),
            &metrics.bytes_to_client,
        );
        for result in [up, down] {
            if let Poll::Ready(Err(e)) = result {
                tracing::debug!(backend = %this.guard.backend().address, error = %e, "connection ended with an error");
                this.reset_both();
                return Poll::Ready(());
            }
        }
        match (&this.to_backend, &this.to_client) {
            (Direction::Done, Direction::Done) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }
}

/// Reads once. A read that did not fill `buf` drained the socket, so its readiness is cleared
/// right away: the next poll waits for the next edge instead of spending a `read` that would
/// only say `EAGAIN` (two syscalls saved per request/response exchange). Clearing is safe: tokio
/// clears only if no readiness event arrived since this read's event (the driver's tick).
fn read_draining(from: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    let result = from.try_io(Interest::READABLE, || {
        got = (&*socket2::SockRef::from(from)).read(buf)?;
        if got > 0 && got < buf.len() {
            // Reported as WouldBlock only to clear readiness; the bytes are in `got`.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(got)
    });
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

/// Moves one direction forward as far as the sockets allow. `Ready(Ok)` once EOF was passed
/// on; `Pending` with the waker registered on the socket it waits for.
fn pump(
    cx: &mut Context<'_>,
    from: &TcpStream,
    to: &TcpStream,
    dir: &mut Direction,
    other_done: bool,
    counter: &IntCounter,
) -> Poll<io::Result<()>> {
    loop {
        match dir {
            Direction::Done => return Poll::Ready(Ok(())),
            Direction::Reading => {
                ready!(from.poll_read_ready(cx))?;
                let mut buf = take_buffer();
                match read_draining(from, &mut buf[..]) {
                    Ok(0) => {
                        give_back(buf);
                        // Half-close: pass the EOF on, keep the other direction running.
                        // When the other direction has ended too, the relay ends and closing
                        // the socket sends the FIN: no `shutdown` needed (both sockets are
                        // read to EOF, so the close is a clean FIN, not a reset).
                        if !other_done {
                            let _ = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
                        }
                        *dir = Direction::Done;
                    }
                    Ok(filled) => {
                        *dir = Direction::Writing {
                            buf,
                            written: 0,
                            // At most BUFFER.
                            filled: filled as u16,
                        }
                    }
                    // Readiness was stale; the next poll_read_ready registers the waker.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => give_back(buf),
                    Err(e) => {
                        give_back(buf);
                        return Poll::Ready(Err(e));
                    }
                }
            }
            Direction::Writing {
                buf,
                written,
                filled,
            } => {
                ready!(to.poll_write_ready(cx))?;
                match to.try_write(&buf[*written as usize..*filled as usize]) {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(n) => *written += n as u16,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
                if *written == *filled {
                    counter.inc_by(*filled as u64);
                    if let Direction::Writing { buf, .. } =
                        std::mem::replace(dir, Direction::Reading)
                    {
                        give_back(buf);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle connection costs its relay task; tokio aligns a task to 128 bytes and adds
    /// about 100 bytes of its own. A relay of at most 144 bytes keeps the task at 256 bytes
    /// instead of 384.
    #[test]
    fn a_relay_fits_a_256_byte_task() {
        assert!(
            std::mem::size_of::<Relay>() <= 144,
            "Relay is {} bytes: TcpStream {}, Direction {}, guard {}",
            std::mem::size_of::<Relay>(),
            std::mem::size_of::<TcpStream>(),
            std::mem::size_of::<Direction>(),
            std::mem::size_of::<ConnectionGuard>()
        );
    }
}
