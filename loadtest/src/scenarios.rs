//! The faults, each bounded in time. Every fault is a real signal to a replica or etcd
//! process or a readyz check forced through its fault port; each is logged with its time for
//! the plot.

use crate::control_plane::{ControlPlane, ReplicaSettings};
use crate::traffic;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every scenario the runner knows.
pub const ALL: &[&str] = &[
    "rolling-restart",
    "rolling-restart-goaway",
    "crash",
    "crash-writes",
    "freeze",
    "freeze-leader",
    "flap",
    "slow-start",
    "not-ready",
    "all-down",
    "etcd-down",
    "blackout",
    "apf-hot",
    "upgrade",
    "calm",
];

/// How long etcd is away in `blackout`: the 5–8 s of `/readyz` failures an etcd leader
/// election is reported to cause, the same in short runs.
const BLACKOUT: Duration = Duration::from_secs(8);

/// How long `apf-hot` keeps the first replica's `workload-low` saturated.
const APF_HOT: Duration = Duration::from_secs(20);

/// The priority level `apf-hot` saturates: where the clients' service account falls.
const APF_HOT_LEVEL: &str = "workload-low";

/// The client certificate a scenario's clients present (a file of the kubeadm layout): in
/// `apf-hot` a service account's, whose requests priority and fairness limits; otherwise the
/// administrator's.
pub fn client_identity(name: &str) -> &'static str {
    if name == "apf-hot" {
        "service-account"
    } else {
        "admin"
    }
}

/// The flags of a replica before the `upgrade` scenario: Kubernetes 1.33, with
/// `resource.k8s.io/v1beta1` turned on (1.33 has no v1).
pub fn before_upgrade() -> Vec<String> {
    [
        "--binary-version",
        "1.33.4",
        "--runtime-config",
        "resource.k8s.io/v1beta1=true",
    ]
    .map(String::from)
    .to_vec()
}

/// After it: 1.34, which serves `resource.k8s.io/v1`, and v1beta1 no longer turned on.
pub fn after_upgrade() -> Vec<String> {
    ["--binary-version", "1.34.1"].map(String::from).to_vec()
}

/// The clients every run of scenario `name` has against its gateway: components, short-lived
/// clients and watchers, with the scenario's writers and discovery readers.
pub fn clients(name: &str) -> traffic::Mix {
    traffic::Mix {
        components: 3,
        writers: writers(name),
        writer_pause: Duration::from_millis(10),
        short_lived: 2,
        watchers: 2,
        discovering: discovering(name),
        first_id: 0,
    }
}

/// Clients that read discovery and use what it shows at once, in scenario `name`: the
/// `upgrade` scenario's measure.
pub fn discovering(name: &str) -> usize {
    if name == "upgrade" {
        2
    } else {
        0
    }
}

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
        watch_cache: false,
        version: if name == "upgrade" {
            before_upgrade()
        } else {
            Vec::new()
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
    /// `freeze-leader`: how long the leader's replica is stopped: past the lease duration
    /// (15 s), so that a renewal stuck on it cannot be saved by the replica coming back.
    pub freeze_leader: Duration,
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
        freeze_leader: Duration::from_secs(30),
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
        freeze_leader: Duration::from_secs(20),
        crash_down: Duration::from_secs(5),
        not_ready: Duration::from_secs(6),
        flaps: 2,
        slow_start: "5s",
        rolling: 2,
        etcd_down: Duration::from_secs(10),
    };
}

/// Runs scenario `name`; `now` gives ms since the run began, `leader_replica` the replica the
/// elected leader renews its lease through.
pub async fn run(
    name: &str,
    cp: &mut ControlPlane,
    pace: Pace,
    events: &Events,
    now: &(dyn Fn() -> u64 + Sync),
    phase: &(dyn Fn(&str) + Sync),
    leader_replica: &(dyn Fn() -> Option<usize> + Sync),
) -> anyhow::Result<()> {
    let sleep = tokio::time::sleep;
    // A fault's step, shown as the run's phase and kept as an event of its timeline.
    let step = |what: String| {
        phase(&what);
        events.add(now(), what);
    };
    // The replica single-replica faults hit.
    let first = cp.name(0);
    match name {
        "rolling-restart" | "rolling-restart-goaway" => {
            for i in 0..cp.len().min(pace.rolling) {
                let r = cp.name(i);
                phase(&format!("SIGTERM {r}"));
                stopped(cp, i, events, format!("SIGTERM {r}"), now).await?;
                phase(&format!("restart {r}"));
                cp.restart(i, "1s").await?;
                cp.wait_ready(i, Duration::from_secs(30)).await?;
                events.add(now(), format!("{r} ready"));
                sleep(Duration::from_secs(2)).await;
            }
        }
        "upgrade" => {
            // A rolling upgrade as kubeadm's: one replica at a time, SIGTERM, the new
            // version started in its place (its post-start hooks take a second), ready, on.
            for i in 0..cp.len() {
                let r = cp.name(i);
                phase(&format!("upgrade {r}"));
                stopped(cp, i, events, format!("SIGTERM {r} (upgrade)"), now).await?;
                cp.restart_as(i, "1s", after_upgrade()).await?;
                cp.wait_ready(i, Duration::from_secs(30)).await?;
                events.add(now(), format!("{r} ready at 1.34"));
                sleep(Duration::from_secs(3)).await;
            }
        }
        "crash" | "crash-writes" => {
            step(format!("SIGKILL {first}"));
            cp.kill(0).await?;
            sleep(pace.crash_down).await;
            step(format!("restart {first}"));
            cp.restart(0, "1s").await?;
            cp.wait_ready(0, Duration::from_secs(30)).await?;
            events.add(now(), format!("{first} ready"));
        }
        "freeze" => {
            step(format!("SIGSTOP {first}"));
            cp.freeze(0).await?;
            sleep(pace.freeze).await;
            step(format!("SIGCONT {first}"));
            cp.thaw(0).await?;
        }
        "freeze-leader" => {
            // The replica the leader's renewals go through: behind a balancer that keeps
            // connections, its lease now depends on how soon a dead connection is noticed.
            let deadline = Instant::now() + Duration::from_secs(30);
            let i = loop {
                if let Some(i) = leader_replica() {
                    break i;
                }
                anyhow::ensure!(Instant::now() < deadline, "no leader elected within 30 s");
                sleep(Duration::from_millis(100)).await;
            };
            let r = cp.name(i);
            step(format!("SIGSTOP {r} (the leader's)"));
            cp.freeze(i).await?;
            sleep(pace.freeze_leader).await;
            step(format!("SIGCONT {r}"));
            cp.thaw(i).await?;
        }
        "flap" => {
            for n in 0..pace.flaps {
                phase(&format!("flap {}/{}", n + 1, pace.flaps));
                events.add(now(), format!("{first} readyz fails"));
                cp.force_check(0, "etcd", true).await?;
                sleep(Duration::from_secs(2)).await;
                events.add(now(), format!("{first} readyz passes"));
                cp.force_check(0, "etcd", false).await?;
                sleep(Duration::from_secs(2)).await;
            }
        }
        "slow-start" => {
            step(format!("SIGTERM {first}"));
            let exited = cp.terminate(0, Duration::from_secs(70)).await?;
            anyhow::ensure!(exited, "{first} did not exit after SIGTERM");
            phase(&format!("slow restart {first}"));
            events.add(
                now(),
                format!("restart {first} (startup {})", pace.slow_start),
            );
            cp.restart(0, pace.slow_start).await?;
            cp.wait_ready(0, Duration::from_secs(60)).await?;
            events.add(now(), format!("{first} ready"));
        }
        "not-ready" => {
            phase(&format!("{first} etcd check fails"));
            events.add(now(), format!("{first} etcd fails"));
            cp.force_check(0, "etcd", true).await?;
            sleep(pace.not_ready).await;
            events.add(now(), format!("{first} etcd passes"));
            cp.force_check(0, "etcd", false).await?;
        }
        "all-down" => {
            phase("SIGTERM every replica");
            events.add(now(), "SIGTERM all");
            let exited = cp.terminate_all(Duration::from_secs(70)).await?;
            anyhow::ensure!(exited, "a replica did not exit after SIGTERM");
            events.add(now(), "all exited");
            phase("restart every replica");
            for i in 0..cp.len() {
                cp.restart(i, "1s").await?;
            }
            wait_all_ready(cp, events, now, Duration::from_secs(60)).await?;
        }
        "etcd-down" => etcd_away(cp, pace.etcd_down, events, now, phase).await?,
        "blackout" => etcd_away(cp, BLACKOUT, events, now, phase).await?,
        "calm" => {
            // No fault, as long as `apf-hot`'s: the figures others are compared with.
            phase("calm");
            events.add(now(), "calm");
            sleep(APF_HOT).await;
            events.add(now(), "calm ends");
        }
        "apf-hot" => {
            // Its rejections ask for 1 s, the least a level asks: the hardest case for a
            // gateway that keeps away from a rejecting replica for its Retry-After.
            step(format!("{first} {APF_HOT_LEVEL} saturated"));
            cp.saturate_level(0, APF_HOT_LEVEL, Some(1))?;
            sleep(APF_HOT).await;
            events.add(now(), format!("{first} {APF_HOT_LEVEL} calm"));
            cp.saturate_level(0, APF_HOT_LEVEL, None)?;
        }
        other => anyhow::bail!("unknown scenario {other}; known: {}", ALL.join(", ")),
    }
    Ok(())
}

/// Stops etcd for `away`, starts it again and waits until every replica is ready: meanwhile
/// no replica is ready, and requests that need storage fail at the replicas.
async fn etcd_away(
    cp: &mut ControlPlane,
    away: Duration,
    events: &Events,
    now: &(dyn Fn() -> u64 + Sync),
    phase: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<()> {
    phase("etcd stopped");
    events.add(now(), "etcd stopped");
    let stopped = cp.stop_etcd(Duration::from_secs(30)).await?;
    anyhow::ensure!(stopped, "etcd did not exit after SIGTERM");
    tokio::time::sleep(away).await;
    phase("etcd started");
    events.add(now(), "etcd started");
    cp.start_etcd().await?;
    wait_all_ready(cp, events, now, Duration::from_secs(60)).await
}

/// Sends replica `i` SIGTERM (logged as `what`) and waits for it to exit, logged too.
async fn stopped(
    cp: &mut ControlPlane,
    i: usize,
    events: &Events,
    what: String,
    now: &(dyn Fn() -> u64 + Sync),
) -> anyhow::Result<()> {
    let r = cp.name(i);
    events.add(now(), what);
    let exited = cp.terminate(i, Duration::from_secs(70)).await?;
    anyhow::ensure!(exited, "{r} did not exit after SIGTERM");
    events.add(now(), format!("{r} exited"));
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
    let mut ready = vec![false; cp.len()];
    while ready.contains(&false) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "replicas not ready after {limit:?}"
        );
        for (i, done) in ready.iter_mut().enumerate() {
            if !*done && cp.ready(i).await {
                *done = true;
                events.add(now(), format!("{} ready", cp.name(i)));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
