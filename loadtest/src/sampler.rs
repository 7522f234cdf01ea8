//! A process's resources over time (a gateway's, in the soak and the scale run), read from
//! `/proc` every [`EVERY`]: open descriptors, RSS, threads, CPU time.

use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sampling period.
pub const EVERY: Duration = Duration::from_secs(2);

/// One reading.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reading {
    /// ms since the soak began.
    pub at_ms: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Threads.
    pub threads: u64,
    /// User + system CPU time so far, ms.
    pub cpu_ms: u64,
}

/// Samples a process in the background until dropped.
pub struct Sampler {
    pid: u32,
    start: Instant,
    readings: Arc<Mutex<Vec<Reading>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, start: Instant) -> Sampler {
        let readings = Arc::new(Mutex::new(Vec::new()));
        let into = readings.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                if let Some(r) = read(pid, start) {
                    into.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                }
            }
        });
        Sampler {
            pid,
            start,
            readings,
            task,
        }
    }

    /// A reading now.
    pub fn latest(&self) -> Reading {
        read(self.pid, self.start).unwrap_or_default()
    }

    /// Every reading so far.
    pub fn all(&self) -> Vec<Reading> {
        self.readings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits (up to `limit`) until the descriptors are back to `baseline`; the reading then
    /// (or at the limit).
    pub async fn settle(&self, baseline: u64, limit: Duration) -> Reading {
        let deadline = Instant::now() + limit;
        loop {
            let r = self.latest();
            if r.fds <= baseline || Instant::now() >= deadline {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn read(pid: u32, start: Instant) -> Option<Reading> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th of them, in clock ticks (100 per second on Linux).
    let after: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let ticks = after.get(11)?.parse::<u64>().ok()? + after.get(12)?.parse::<u64>().ok()?;
    Some(Reading {
        at_ms: start.elapsed().as_millis() as u64,
        fds,
        rss_kib: field("VmRSS:")?,
        threads: field("Threads:")?,
        cpu_ms: ticks * 10,
    })
}
