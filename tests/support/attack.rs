//! What the hostile-client tests share: a terminating kubegate with limits a test can reach, a
//! well-behaved HTTP/2 client asking beside each attack, and the figures each attack prints
//! (kubegate's CPU time and RSS across it, the slowest answer the well-behaved client got).

use crate::client::Conn;
use crate::cluster::{Cluster, Started};
use crate::h2raw::{self, kind};
use crate::kubegate::{secs, Kubegate};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);
const PODS: &str = "/api/v1/namespaces/default/pods";

/// One replica, kubegate terminating in front with limits small enough for a test to reach.
pub fn attacked() -> Started {
    Cluster::new()
        .terminate()
        .configure(|cfg| {
            cfg.terminate.handshake_timeout = secs(5);
            cfg.terminate.header_read_timeout = secs(2);
            cfg.terminate.max_concurrent_streams = 50;
            cfg.limits.max_client_connections = 150;
        })
        .start()
}

/// CPU time (ms) and RSS (KiB) of a process, from `/proc`.
pub fn usage(pid: i32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    (ticks * 10, rss)
}

/// A well-behaved HTTP/2 client asking every 50 ms while an attack runs.
struct Bystander {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u32, u32, Duration)>,
}

impl Bystander {
    async fn start(s: &Started) -> Bystander {
        let mut conn = Conn::open(s.kg.listen, &s.pki, true).await.unwrap();
        assert_eq!(conn.get(PODS).await.unwrap().status, 200);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // The attack starts once the first request is on its way: on a busy machine the task
        // could otherwise first run after a short attack ended, and ask nothing.
        let (asking, asked) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let (mut ok, mut failed, mut slowest) = (0, 0, Duration::ZERO);
            let mut asking = Some(asking);
            while asking.is_some() || !flag.load(Ordering::Relaxed) {
                if let Some(asking) = asking.take() {
                    let _ = asking.send(());
                }
                let t = Instant::now();
                match tokio::time::timeout(T, conn.get(PODS)).await {
                    Ok(Ok(r)) if r.status == 200 => ok += 1,
                    _ => failed += 1,
                }
                slowest = slowest.max(t.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (ok, failed, slowest)
        });
        asked.await.expect("the bystander task runs");
        Bystander { stop, task }
    }

    /// Stops asking; asserts every answer was a 200 within a generous bound.
    async fn finish(self, attack: &str) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        let (ok, failed, slowest) = self.task.await.unwrap();
        assert_eq!(
            failed, 0,
            "{attack}: the well-behaved client failed {failed} times"
        );
        assert!(ok > 0, "{attack}: the well-behaved client got no answer");
        assert!(
            slowest < Duration::from_secs(10),
            "{attack}: the well-behaved client waited {slowest:?}"
        );
        slowest
    }
}

/// Runs `attack` beside a bystander; prints the figures; returns kubegate's RSS growth (KiB).
pub async fn measured<F: std::future::Future<Output = ()>>(
    s: &Started,
    name: &str,
    attack: F,
) -> u64 {
    let pid = s.kg.proc.pid();
    let bystander = Bystander::start(s).await;
    let (cpu0, rss0) = usage(pid);
    let started = Instant::now();
    attack.await;
    let took = started.elapsed();
    let (cpu1, rss1) = usage(pid);
    let slowest = bystander.finish(name).await;
    println!(
        "FIGURE attack={name} took_ms={} kubegate_cpu_ms={} rss_kib_before={rss0} rss_kib_after={rss1} bystander_slowest_ms={}",
        took.as_millis(),
        cpu1 - cpu0,
        slowest.as_millis()
    );
    rss1.saturating_sub(rss0)
}

/// A counter's value from kubegate's `/metrics`.
pub fn counter(kg: &Kubegate, series: &str) -> f64 {
    kg.admin_body("/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A response HEADERS frame with `:status 200` (HPACK static index 8, how h2 encodes it).
pub fn is_200(f: &h2raw::Frame) -> bool {
    f.kind == kind::HEADERS && f.payload.first() == Some(&0x88)
}

/// kubegate still answers `/livez`, and never panicked.
pub fn assert_alive(s: &Started) {
    assert!(s
        .kg
        .admin_get("/livez")
        .is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    assert!(!s.kg.proc.log().contains("panicked"), "kubegate panicked");
}
