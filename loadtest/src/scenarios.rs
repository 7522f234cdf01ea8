//! The faults, each bounded in time. Every fault is a real signal to a replica or etcd
//! process or a readyz check forced through its fault port; each is logged with its time for
//! the plot.

use crate::control_plane::{ControlPlane, ReplicaSettings};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every scenario the runner knows.
pub const ALL: &[&str] = &[
    "rolling-restart",
    "rolling-restart-goaway",
    "crash",
    "crash-writes",
    "freeze",
    "flap",
    "slow-start",
    "not-ready",
    "all-down",
    "etcd-down",
];

/// How the replicas run in scenario `name`. In `crash-writes` every API request takes 25 ms
/// more, as writes do on a loaded etcd, so writes are in flight when the replica dies.
pub fn replica_settings(name: &str) -> ReplicaSettings {
    ReplicaSettings {
        latency: Duration::from_millis(if name == "crash-writes" { 25 } else { 0 }),
        shutdown_delay: "5s".into(),
        // kube-apiserver's --goaway-chance: each HTTP/2 request ends its connection with this
        // probability, which spreads long-lived clients over replicas (and tests gateways'
        // handling of GOAWAY).
        goaway_chance: if name == "rolling-restart-goaway" {
            0.001
        } else {
            0.0
        },
    }
}

/// Writers beside the usual traffic in scenario `name`: `crash-writes` keeps writes in
/// flight when the replica dies.
pub fn writers(name: &str) -> usize {
    if name == "crash-writes" {
        4
    } else {
        0
    }
}

/// Fault events with their time (ms since the run began).
#[derive(Default)]
pub struct Events(Mutex<Vec<(u64, String)>>);

impl Events {
    /// Records an event at `at_ms`.
    pub fn add(&self, at_ms: u64, what: impl Into<String>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((at_ms, what.into()));
    }

    /// All events.
    pub fn all(&self) -> Vec<(u64, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// How long a scenario's faults last: the full matrix, or short runs for CI.
#[derive(Clone, Copy)]
pub struct Pace {
    /// `freeze`: how long the replica is stopped.
    pub freeze: Duration,
    /// `crash`: how long until the killed replica is restarted.
    pub crash_down: Duration,
    /// `not-ready`: how long the etcd check fails.
    pub not_ready: Duration,
    /// `flap`: number of fail/pass cycles.
    pub flaps: u32,
    /// `slow-start`: the restarted replica's startup duration.
    pub slow_start: &'static str,
    /// `rolling-restart`: replicas restarted (from the first).
    pub rolling: usize,
    /// `etcd-down`: how long etcd is stopped.
    pub etcd_down: Duration,
}

impl Pace {
    /// The documented matrix.
    pub const FULL: Pace = Pace {
        freeze: Duration::from_secs(20),
        crash_down: Duration::from_secs(10),
        not_ready: Duration::from_secs(15),
        flaps: 4,
        slow_start: "10s",
        rolling: usize::MAX,
        etcd_down: Duration::from_secs(20),
    };
    /// Short runs.
    pub const SHORT: Pace = Pace {
        freeze: Duration::from_secs(10),
        crash_down: Duration::from_secs(5),
        not_ready: Duration::from_secs(6),
        flaps: 2,
        slow_start: "5s",
        rolling: 2,
        etcd_down: Duration::from_secs(10),
    };
}

/// Runs scenario `name`; `now` gives ms since the run began.
pub async fn run(
    name: &str,
    cp: &mut ControlPlane,
    pace: Pace,
    events: &Events,
    now: &(dyn Fn() -> u64 + Sync),
    phase: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<()> {
    let sleep = tokio::time::sleep;
    match name {
        "rolling-restart" | "rolling-restart-goaway" => {
            for i in 0..cp.replicas.len().min(pace.rolling) {
                let r = cp.replicas[i].name().to_string();
                phase(&format!("SIGTERM {r}"));
                events.add(now(), format!("SIGTERM {r}"));
                let exited =
                    tokio::task::block_in_place(|| cp.terminate(i, Duration::from_secs(70)));
                anyhow::ensure!(exited, "{r} did not exit after SIGTERM");
                events.add(now(), format!("{r} exited"));
                phase(&format!("restart {r}"));
                cp.restart(i, "1s")?;
                cp.wait_ready(i, Duration::from_secs(30)).await?;
                events.add(now(), format!("{r} ready"));
                sleep(Duration::from_secs(2)).await;
            }
        }
        "crash" | "crash-writes" => {
            phase("SIGKILL replica-1");
            events.add(now(), "SIGKILL replica-1");
            cp.kill(0);
            sleep(pace.crash_down).await;
            phase("restart replica-1");
            events.add(now(), "restart replica-1");
            cp.restart(0, "1s")?;
            cp.wait_ready(0, Duration::from_secs(30)).await?;
            events.add(now(), "replica-1 ready");
        }
        "freeze" => {
            phase("SIGSTOP replica-1");
            events.add(now(), "SIGSTOP replica-1");
            cp.signal(0, libc::SIGSTOP);
            sleep(pace.freeze).await;
            phase("SIGCONT replica-1");
            events.add(now(), "SIGCONT replica-1");
            cp.signal(0, libc::SIGCONT);
        }
        "flap" => {
            for n in 0..pace.flaps {
                phase(&format!("flap {}/{}", n + 1, pace.flaps));
                events.add(now(), "replica-1 readyz fails");
                cp.force_check(0, "etcd", true)?;
                sleep(Duration::from_secs(2)).await;
                events.add(now(), "replica-1 readyz passes");
                cp.force_check(0, "etcd", false)?;
                sleep(Duration::from_secs(2)).await;
            }
        }
        "slow-start" => {
            phase("SIGTERM replica-1");
            events.add(now(), "SIGTERM replica-1");
            let exited = tokio::task::block_in_place(|| cp.terminate(0, Duration::from_secs(70)));
            anyhow::ensure!(exited, "replica-1 did not exit after SIGTERM");
            phase("slow restart replica-1");
            events.add(
                now(),
                format!("restart replica-1 (startup {})", pace.slow_start),
            );
            cp.restart(0, pace.slow_start)?;
            cp.wait_ready(0, Duration::from_secs(60)).await?;
            events.add(now(), "replica-1 ready");
        }
        "not-ready" => {
            phase("replica-1 etcd check fails");
            events.add(now(), "replica-1 etcd fails");
            cp.force_check(0, "etcd", true)?;
            sleep(pace.not_ready).await;
            events.add(now(), "replica-1 etcd passes");
            cp.force_check(0, "etcd", false)?;
        }
        "all-down" => {
            phase("SIGTERM every replica");
            events.add(now(), "SIGTERM all");
            let exited = tokio::task::block_in_place(|| cp.terminate_all(Duration::from_secs(70)));
            anyhow::ensure!(exited, "a replica did not exit after SIGTERM");
            events.add(now(), "all exited");
            phase("restart every replica");
            for i in 0..cp.replicas.len() {
                cp.restart(i, "1s")?;
            }
            wait_all_ready(cp, events, now, Duration::from_secs(60)).await?;
        }
        "etcd-down" => {
            phase("etcd stopped");
            events.add(now(), "etcd stopped");
            let stopped = tokio::task::block_in_place(|| cp.stop_etcd(Duration::from_secs(30)));
            anyhow::ensure!(stopped, "etcd did not exit after SIGTERM");
            sleep(pace.etcd_down).await;
            phase("etcd started");
            events.add(now(), "etcd started");
            cp.start_etcd()?;
            wait_all_ready(cp, events, now, Duration::from_secs(60)).await?;
        }
        other => anyhow::bail!("unknown scenario {other}; known: {}", ALL.join(", ")),
    }
    Ok(())
}

/// Waits until every replica is ready, logging each as it becomes so.
async fn wait_all_ready(
    cp: &ControlPlane,
    events: &Events,
    now: &(dyn Fn() -> u64 + Sync),
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let mut ready = vec![false; cp.replicas.len()];
    while ready.contains(&false) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "replicas not ready after {limit:?}"
        );
        for (i, done) in ready.iter_mut().enumerate() {
            if !*done && cp.ready(i).await {
                *done = true;
                events.add(now(), format!("{} ready", cp.replicas[i].name()));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
