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

/// Runs `cmd` to its end and asserts it succeeded (panicking with what it printed): its
/// standard output. A program that is not there fails the test: `.ci/run` and `scripts/test`
/// install every one a test runs.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (not installed?)"));
    assert!(out.status.success(), "{cmd:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `promtool check metrics` on `exposition` (written to a file in `dir`): Prometheus' naming
/// rules hold.
pub fn promtool_check_metrics(dir: &std::path::Path, exposition: &str) {
    let path = dir.join("metrics.txt");
    std::fs::write(&path, exposition).unwrap();
    run_ok(
        std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&path).unwrap()),
    );
}

/// A file or folder of this repository.
pub fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// What a finished process printed: its standard output, then its standard error.
pub fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
