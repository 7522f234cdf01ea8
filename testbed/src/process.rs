//! Child processes: output appended to a log file, signalled by PID, and always ended — by
//! PID (or process group), never by name — when the handle is dropped, on success and on
//! failure alike.

use nix::sys::signal::{kill, killpg, Signal};
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
    /// The process group the child leads, ended whole (a browser's helpers): ended as soon as
    /// the leader is reaped, before its id can be reused.
    group: Option<Pid>,
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
        Ok(ChildProcess {
            child: Some(child),
            group: None,
        })
    }

    /// Starts `cmd` in a process group of its own, stdin closed, stdout to `out` and stderr to
    /// `err`; the whole group is ended with it (a program that starts helpers of its own).
    pub fn spawn_group(cmd: &mut Command, out: &Path, err: &Path) -> io::Result<ChildProcess> {
        use std::os::unix::process::CommandExt;
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(File::create(out)?)
            .stderr(File::create(err)?)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("start {:?}: {e}", cmd.get_program())))?;
        let group = Some(Pid::from_raw(child.id() as i32));
        Ok(ChildProcess {
            child: Some(child),
            group,
        })
    }

    /// Takes over a child started elsewhere (its pipes as they were set up).
    pub fn adopt(child: Child) -> ChildProcess {
        ChildProcess {
            child: Some(child),
            group: None,
        }
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
        self.end_group();
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

    /// Ends the process (and its group, if it leads one) now and reaps it.
    pub fn kill(&mut self) {
        self.end_group();
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            // A stopped process is killed too, but let it run its last instructions cleanly.
            let _ = kill(pid, Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl ChildProcess {
    fn end_group(&mut self) {
        if let Some(group) = self.group.take() {
            let _ = killpg(group, Signal::SIGKILL);
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
