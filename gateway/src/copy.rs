//! Copying bytes both ways between client and backend, counting as it goes.
//!
//! Each direction ends on EOF by shutting down the other side's write half (half-close is
//! preserved: a client that shuts down writing still gets its response). An error in either
//! direction ends both.

use prometheus::IntCounter;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const BUFFER: usize = 16 * 1024;

/// Copies until both directions reached EOF, or one failed.
pub async fn bidirectional<C, B>(
    client: C,
    backend: B,
    to_backend: &IntCounter,
    to_client: &IntCounter,
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut br, mut bw) = tokio::io::split(backend);
    let up = pump(&mut cr, &mut bw, to_backend);
    let down = pump(&mut br, &mut cw, to_client);
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            r = &mut up, if !up_done => { r?; up_done = true; }
            r = &mut down, if !down_done => { r?; down_done = true; }
        }
    }
    Ok(())
}

async fn pump<R, W>(r: &mut R, w: &mut W, counter: &IntCounter) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            // Half-close: pass the EOF on, keep the other direction running.
            let _ = w.shutdown().await;
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
        counter.inc_by(n as u64);
    }
}
