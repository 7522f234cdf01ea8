//! A named child process of a test: killed by PID when dropped, its log printed when the test
//! fails while it runs.

use kubegate_testbed::ChildProcess;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// A child process with a name.
pub struct Proc {
    name: String,
    child: ChildProcess,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd`, logging stderr and stdout to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let child =
            ChildProcess::spawn(&mut cmd, &log).unwrap_or_else(|e| panic!("start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.pid().expect("running") as i32
    }

    /// Sends `sig` (libc::SIGTERM, SIGSTOP, ...) to the process.
    pub fn signal(&self, sig: i32) {
        self.child
            .signal(sig)
            .unwrap_or_else(|e| panic!("signal {sig} to {}: {e}", self.name));
    }

    /// Waits for the process to exit by itself within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.child.wait_exit(limit).unwrap_or_else(|| {
            panic!(
                "timed out after {limit:?} waiting for {} to exit",
                self.name
            )
        })
    }

    /// Still running.
    pub fn running(&mut self) -> bool {
        self.child.running()
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills now (SIGKILL) and reaps.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Whether it still runs or ended early: its log is what tells why a test failed.
        if std::thread::panicking() {
            let state = if self.child.running() {
                ""
            } else {
                " (it had exited)"
            };
            eprintln!("---- log of {}{state} ----\n{}", self.name, self.log());
        }
    }
}

/// What a finished process printed: its standard output, then its standard error.
pub fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
