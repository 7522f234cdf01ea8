//! Child processes started by the load test: logged to a file, signalled and ended by PID
//! (`kubegate-process`), and what finding them needs.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A child process of the load test, ended by PID when dropped.
pub use kubegate_process::ChildProcess as Proc;

/// Starts `cmd` with its output appended to `log`.
pub fn spawn(mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
    Ok(Proc::spawn(&mut cmd, log)?)
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Waits until something accepts TCP on `addr`.
pub fn wait_listening(addr: SocketAddr, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!("nothing listens on {addr} after {limit:?}")
}

/// A binary next to this one (the workspace's `kubegate`, `kubegate-sim`).
pub fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.with_file_name(name)
}

/// `name` on PATH, if installed.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}
