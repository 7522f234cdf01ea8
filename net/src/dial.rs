//! One TCP connect to a backend with a deadline, shared by both data planes of the gateway.

use socket2::{Domain, Protocol, Socket, Type};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// One TCP connect with a deadline. A non-blocking connect and a wait for writability, rather
/// than `TcpStream::connect`: no address resolution machinery and no stored waiter, so the
/// future is a socket and a timer.
pub async fn dial(addr: SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    // Non-blocking from creation (SOCK_NONBLOCK): no separate fcntl.
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    std::future::poll_fn(|cx| match stream.poll_write_ready(cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
            Poll::Ready(Err(io::ErrorKind::TimedOut.into()))
        }
        Poll::Pending => Poll::Pending,
    })
    .await?;
    // Writable means the handshake ended. Only a failed one also reports an error event, and
    // only then is SO_ERROR read for the reason: a `getsockopt` saved per connection.
    if stream.try_io(Interest::ERROR, || Ok(())).is_err() {
        return Ok(stream);
    }
    match stream.take_error()? {
        Some(e) => Err(e),
        None => Ok(stream),
    }
}
