//! Child processes started by the load test: logged to a file, signalled and ended by PID.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process; SIGKILLed (after a SIGCONT, in case it is stopped) when dropped.
pub struct Proc {
    child: Option<Child>,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
        let out = File::options().create(true).append(true).open(log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| anyhow::anyhow!("start {:?}: {e}", cmd.get_program()))?;
        Ok(Proc { child: Some(child) })
    }

    /// Sends a signal by PID.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on a PID this process started and has not reaped.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    /// Waits up to `limit` for the process to exit by itself; true if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Ends the process now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.signal(libc::SIGCONT);
            // SAFETY: as above; the child is reaped right after.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
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
