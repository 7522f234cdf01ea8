//! Taking the client socket out of pingora's stream wrapper.
//!
//! The passthrough path needs the raw socket: to wait for readability without holding a buffer
//! (an idle connection then costs no buffer memory), and to shut down or reset one direction.
//! pingora's `Stream` does not give its socket away, so the descriptor is duplicated and the
//! wrapper dropped; dropping it closes only its own descriptor (pingora's `Drop` does not shut
//! the socket down).

use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::Stream;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The client connection as a tokio `TcpStream` of its own.
pub fn into_tcp(stream: Stream) -> io::Result<tokio::net::TcpStream> {
    let l4 = stream
        .as_any()
        .downcast_ref::<L4Stream>()
        .ok_or_else(|| io::Error::other("listener stream is not a plain TCP stream"))?;
    let raw = l4.as_raw_fd();
    // SAFETY: `raw` belongs to `stream`, which is alive until after the duplicate is made; the
    // borrow does not outlive this statement.
    #[allow(unsafe_code)]
    let owned = unsafe { BorrowedFd::borrow_raw(raw) }.try_clone_to_owned()?;
    drop(stream);
    // O_NONBLOCK is a file status flag, shared by duplicated descriptors: pingora's socket is
    // non-blocking, so the duplicate already is (checked in debug builds, which the tests run).
    debug_assert!(
        socket2::SockRef::from(&owned)
            .nonblocking()
            .unwrap_or(false),
        "pingora handed over a blocking socket"
    );
    tokio::net::TcpStream::from_std(std::net::TcpStream::from(owned))
}
