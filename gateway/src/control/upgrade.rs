//! Zero-downtime upgrade of kubegate itself: the running process hands its listening sockets
//! (listeners and admin) to its successor over a Unix socket (`upgrade.socket`), as HAProxy
//! and pingora do, so no connection is ever refused: the sockets stay open throughout and
//! whichever process accepts takes the next connection.
//!
//! 1. `kubegate run --upgrade` connects to the socket and says hello; the running process
//!    sends every socket it listens on (`SCM_RIGHTS`) with their addresses.
//! 2. The new process starts on those sockets (binding only addresses the old one did not
//!    have), and accepts once a backend is ready (or after [`READY_WAIT`]), so a client is
//!    never turned away for want of a probed backend. Meanwhile the old process keeps accepting.
//! 3. It says `ready`; the old process stops accepting (its copies close, the sockets stay
//!    open in the new one), removes the Unix socket, answers `draining`, and drains its own
//!    connections as a shutdown does after its delay, then exits 0.
//! 4. The new process binds the Unix socket for the next upgrade.
//!
//! If the new process dies before `ready`, the old one notices the closed connection and goes
//! on serving as if nothing had happened.

use crate::state::Gateway;
use anyhow::Context;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The most sockets one handover carries (listeners and the admin socket).
const MAX_SOCKETS: usize = 64;
/// What the new process says first.
const HELLO: &str = "kubegate-upgrade 1";
/// How long a new process waits for a ready backend before it accepts anyway.
pub const READY_WAIT: Duration = Duration::from_secs(30);
/// How long each side waits for the other's next message once the handover began.
const STEP: Duration = Duration::from_secs(30);

/// The sockets a running process would hand over: duplicates of its listening sockets.
#[derive(Default)]
pub struct Sockets(Vec<(SocketAddr, OwnedFd)>);

impl Sockets {
    /// Keeps a duplicate of `listener` to hand over later.
    pub fn keep(&mut self, listener: &std::net::TcpListener) -> std::io::Result<()> {
        self.0.push((
            listener.local_addr()?,
            listener.as_fd().try_clone_to_owned()?,
        ));
        Ok(())
    }
}

/// What a new process received from its predecessor.
pub struct Inherited {
    sockets: HashMap<SocketAddr, OwnedFd>,
    stream: UnixStream,
}

impl Inherited {
    /// The inherited listening socket for `address`, if the predecessor had one.
    pub fn take(&mut self, address: SocketAddr) -> Option<std::net::TcpListener> {
        self.sockets
            .remove(&address)
            .map(std::net::TcpListener::from)
    }

    /// The connection to the predecessor, for [`complete`].
    pub fn into_stream(self) -> UnixStream {
        for address in self.sockets.keys() {
            tracing::info!(%address, "upgrade: an inherited socket is not in the configuration; it closes with the old process");
        }
        self.stream
    }
}

/// The new process's first step: connects to `socket` and receives the running process's
/// listening sockets.
pub fn take_over(socket: &Path) -> anyhow::Result<Inherited> {
    let stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "upgrade.socket {}: no running kubegate answers",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(STEP))?;
    (&stream).write_all(format!("{HELLO}\n").as_bytes())?;
    let mut data = vec![0u8; 64 * 1024];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        &stream,
        &mut [std::io::IoSliceMut::new(&mut data)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .context("upgrade: receiving the sockets")?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let addresses: Vec<SocketAddr> = serde_json::from_slice(&data[..received.bytes])
        .context("upgrade: the running process's answer")?;
    anyhow::ensure!(
        addresses.len() == fds.len(),
        "upgrade: {} addresses but {} sockets received",
        addresses.len(),
        fds.len()
    );
    tracing::info!(
        sockets = fds.len(),
        "upgrade: received the listening sockets"
    );
    Ok(Inherited {
        sockets: addresses.into_iter().zip(fds).collect(),
        stream,
    })
}

/// The new process's last step, once it accepts: tells the old process to stop accepting and
/// waits for it to say it drains.
pub fn complete(stream: UnixStream) -> anyhow::Result<()> {
    (&stream).write_all(b"ready\n")?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .context("upgrade: waiting for the old process to drain")?;
    anyhow::ensure!(
        line.trim() == "draining",
        "upgrade: the old process answered {line:?}"
    );
    Ok(())
}

/// Binds the upgrade socket at `path`. A socket file nobody listens on (left by a process that
/// died) is replaced; one a live kubegate listens on is an error.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if UnixStream::connect(path).is_ok() {
        anyhow::bail!(
            "upgrade.socket {}: another kubegate listens there (start with --upgrade to take over)",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("upgrade.socket {}", path.display()))?;
    // Only the owner (kubegate's user) may take the sockets over.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The running process's side: waits for a successor on `listener` (bound at `path`) and
/// hands `sockets` over. Runs on a thread of its own: each step is a blocking exchange of a
/// few bytes.
pub fn serve(listener: UnixListener, path: PathBuf, sockets: Sockets, gw: Arc<Gateway>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        match hand_over(&stream, &sockets) {
            Ok(()) => {
                tracing::info!(
                    "upgrade: the new process accepts; this one stops accepting and drains"
                );
                gw.lifecycle().hand_over();
                // The successor binds the path next; only then may it learn we are done.
                let _ = std::fs::remove_file(&path);
                let _ = (&stream).write_all(b"draining\n");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "upgrade: handover abandoned; serving on")
            }
        }
    }
}

/// One handover: hello, the sockets, then the successor's `ready`.
fn hand_over(stream: &UnixStream, sockets: &Sockets) -> anyhow::Result<()> {
    let mut reader = BufReader::new(stream);
    stream.set_read_timeout(Some(STEP))?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    anyhow::ensure!(line.trim() == HELLO, "unexpected hello {line:?}");
    let addresses: Vec<SocketAddr> = sockets.0.iter().map(|(a, _)| *a).collect();
    let fds: Vec<_> = sockets.0.iter().map(|(_, fd)| fd.as_fd()).collect();
    let body = serde_json::to_vec(&addresses)?;
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    anyhow::ensure!(
        control.push(SendAncillaryMessage::ScmRights(&fds)),
        "too many sockets to hand over ({})",
        fds.len()
    );
    rustix::net::sendmsg(
        stream,
        &[std::io::IoSlice::new(&body)],
        &mut control,
        SendFlags::empty(),
    )?;
    tracing::info!(
        sockets = fds.len(),
        "upgrade: sockets sent; waiting for the new process to accept"
    );
    // The successor may take a while to find a ready backend: no deadline while it is alive.
    stream.set_read_timeout(None)?;
    line.clear();
    reader.read_line(&mut line)?;
    anyhow::ensure!(line.trim() == "ready", "the new process said {line:?}");
    Ok(())
}
