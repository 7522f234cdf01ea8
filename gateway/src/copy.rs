//! Copying bytes both ways between client and backend, counting as it goes.
//!
//! Readiness first, buffer second: each direction waits for its socket to be readable without
//! holding memory, then borrows a buffer from a per-thread pool only for the read and the
//! write that follows. An idle proxied connection therefore holds no buffer at all.
//!
//! - EOF in one direction shuts down the other socket's write side and keeps the other
//!   direction running (half-close: a client that stops writing still gets its response).
//! - An error in one direction ends both; a reset is passed on as a reset (SO_LINGER 0), so the
//!   other peer sees what this one saw instead of a clean end.

use prometheus::IntCounter;
use std::cell::RefCell;
use std::io;
use tokio::net::TcpStream;

/// Size of one pooled buffer.
const BUFFER: usize = 32 * 1024;
/// Free buffers a thread keeps for reuse; more are returned to the allocator.
const POOL_MAX: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take_buffer() -> Box<[u8]> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; BUFFER].into_boxed_slice())
}

fn give_back(buf: Box<[u8]>) {
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    });
}

/// How a copy ended.
#[derive(Debug)]
pub enum End {
    /// Both directions reached EOF.
    Closed,
    /// One side failed (reset, broken pipe); the other was reset too.
    Failed(io::Error),
}

/// Copies until both directions reached EOF, or one failed.
pub async fn bidirectional(
    client: &TcpStream,
    backend: &TcpStream,
    to_backend: &IntCounter,
    to_client: &IntCounter,
) -> End {
    let up = pump(client, backend, to_backend);
    let down = pump(backend, client, to_client);
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        let result = tokio::select! {
            r = &mut up, if !up_done => { up_done = true; r }
            r = &mut down, if !down_done => { down_done = true; r }
        };
        if let Err(e) = result {
            // Pass the failure on: both sockets are reset rather than closed cleanly.
            for s in [client, backend] {
                let _ = socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
            }
            return End::Failed(e);
        }
    }
    End::Closed
}

async fn pump(from: &TcpStream, to: &TcpStream, counter: &IntCounter) -> io::Result<()> {
    loop {
        from.readable().await?;
        let mut buf = take_buffer();
        let n = match from.try_read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                give_back(buf);
                continue;
            }
            Err(e) => {
                give_back(buf);
                return Err(e);
            }
        };
        if n == 0 {
            give_back(buf);
            // Half-close: pass the EOF on, keep the other direction running.
            let _ = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
            return Ok(());
        }
        let written = write_all(to, &buf[..n]).await;
        give_back(buf);
        written?;
        counter.inc_by(n as u64);
    }
}

async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
