//! Child processes: output appended to a log file, signalled by PID, and always ended — by
//! PID, never by name — when the handle is dropped, on success and on failure alike.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::io;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How often [`ChildProcess::wait_exit`] looks whether the process has ended.
const POLL: Duration = Duration::from_millis(20);

/// A started child process. Dropping it kills (SIGCONT, in case it is stopped, then SIGKILL)
/// and reaps it.
pub struct ChildProcess {
    child: Option<Child>,
}

impl ChildProcess {
    /// Starts `cmd` with stdin closed and stdout and stderr appended to `log`.
    pub fn spawn(cmd: &mut Command, log: &Path) -> io::Result<ChildProcess> {
        let out = File::options().create(true).append(true).open(log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("start {:?}: {e}", cmd.get_program())))?;
        Ok(ChildProcess { child: Some(child) })
    }

    /// Takes over a child started elsewhere (its pipes as they were set up).
    pub fn adopt(child: Child) -> ChildProcess {
        ChildProcess { child: Some(child) }
    }

    /// The process id, while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The child, for its pipes.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// Sends signal `sig` (`libc::SIGTERM`, ...) to the process.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("the process was already reaped"))?;
        let sig = Signal::try_from(sig).map_err(io::Error::from)?;
        kill(Pid::from_raw(pid as i32), sig).map_err(io::Error::from)
    }

    /// Reaps the process if it has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Waits up to `limit` for the process to end by itself; its status if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if self.child.is_none() || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Still running (not ended, not reaped).
    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// Ends the process now and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            // A stopped process is killed too, but let it run its last instructions cleanly.
            let _ = kill(pid, Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(dir: &Path) -> ChildProcess {
        ChildProcess::spawn(Command::new("sleep").arg("30"), &dir.join("sleep.log")).unwrap()
    }

    #[test]
    fn a_signal_ends_the_process_and_its_status_says_which() {
        use std::os::unix::process::ExitStatusExt;
        let dir = std::env::temp_dir();
        let mut p = sleeper(&dir);
        assert!(p.running());
        p.signal(nix::libc::SIGTERM).unwrap();
        let status = p.wait_exit(Duration::from_secs(10)).expect("ended");
        assert_eq!(status.signal(), Some(nix::libc::SIGTERM));
        assert!(!p.running());
        assert!(
            p.signal(nix::libc::SIGTERM).is_err(),
            "reaped: no PID to signal"
        );
    }

    #[test]
    fn dropping_a_stopped_process_ends_it() {
        let dir = std::env::temp_dir();
        let p = sleeper(&dir);
        let pid = p.pid().unwrap() as i32;
        p.signal(nix::libc::SIGSTOP).unwrap();
        drop(p);
        // Reaped: the PID no longer names our child.
        let alive = kill(Pid::from_raw(pid), None).is_ok()
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s.contains(" Z "))
                .unwrap_or(false);
        assert!(!alive, "process {pid} survived its handle");
    }
}
