//! A real browser: Debian's headless Chromium, loading a page from loopback and handing back
//! the DOM it built, or a screenshot. Kept off the network: no background requests, no
//! component updates, no sync, a profile of its own per run; ended with its process group.

use kubegate_testbed::bins::which;
use kubegate_testbed::ChildProcess;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long a page load may take on a loaded machine.
const LOAD: Duration = Duration::from_secs(90);

/// A headless Chromium, run once per page.
pub struct Browser {
    program: PathBuf,
    dir: PathBuf,
    runs: std::cell::Cell<u32>,
}

impl Browser {
    /// Debian's headless Chromium (`chromium-headless-shell`, else `chromium`), keeping its
    /// profiles and output in `dir`.
    pub fn new(dir: &Path) -> Browser {
        let program = which("chromium-headless-shell")
            .or_else(|| which("chromium"))
            .expect("chromium-headless-shell (apt-get install chromium-headless-shell; scripts/install-deps does)");
        Browser {
            program,
            dir: dir.to_path_buf(),
            runs: std::cell::Cell::new(0),
        }
    }

    /// The DOM Chromium built from `url`, serialized.
    pub fn dom(&self, url: &str) -> String {
        let (out, _) = self.run(&["--dump-dom"], url);
        std::fs::read_to_string(out).expect("the DOM")
    }

    /// A `width`×`height` screenshot of `url`, as PNG, written to `path`.
    pub fn screenshot(&self, url: &str, path: &Path, width: u32, height: u32) {
        let screenshot = format!("--screenshot={}", path.display());
        let size = format!("--window-size={width},{height}");
        self.run(&[&screenshot, &size, "--hide-scrollbars"], url);
        assert!(path.is_file(), "no screenshot at {}", path.display());
    }

    /// Runs Chromium on `url` with `args` until it exits; its stdout and stderr files.
    fn run(&self, args: &[&str], url: &str) -> (PathBuf, PathBuf) {
        assert!(
            url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:"),
            "loopback only: {url}"
        );
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let profile = self.dir.join(format!("chromium-profile-{n}"));
        let (out, err) = (
            self.dir.join(format!("chromium-{n}.out")),
            self.dir.join(format!("chromium-{n}.err")),
        );
        let mut cmd = Command::new(&self.program);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-domain-reliability",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .env("HOME", &self.dir);
        let mut browser = ChildProcess::spawn_group(&mut cmd, &out, &err).expect("chromium starts");
        let status = browser.wait_exit(LOAD).unwrap_or_else(|| {
            panic!(
                "chromium did not finish {url} within {LOAD:?}: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            )
        });
        assert!(
            status.success(),
            "chromium failed on {url} ({status}): {}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        (out, err)
    }
}
