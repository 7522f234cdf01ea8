//! `kubegate-loadtest runaway`: a DaemonSet-like client — one service account's token on many
//! connections (`--connections`, 2,000 by default), each LISTing every ConfigMap of the
//! cluster every few seconds (`--interval`), retrying a 429 after its `Retry-After` as
//! client-go does — beside kubectl, kubectl-like users and a leader-elected controller (two
//! candidates renewing a Lease every 2 s, as kube-controller-manager). Three phases per
//! gateway: `calm` (no runaway), `storm`, `shed`. Straight to the replicas (`direct`, spread
//! over them), through HAProxy and Envoy (no lever: the shed phase is more storm), and through
//! kubegate two ways:
//!
//! - `kubegate-l7-shed`: two kubegates in front of the cluster, following its shed object
//!   (`terminate.shed_object`), the runaway's connections split between them; at the shed
//!   phase `kubegate shed --kubeconfig` writes a rule for the service account through the
//!   first, and the time until each gateway turns the runaway away is measured;
//! - `kubegate-l7-auto`: one kubegate with `terminate.auto_shed`; when the storm begins every
//!   replica's flow control rejects the runaway's level (`workload-low`, saturated through the
//!   simulator's fault port, as the runaway's load would on a real apiserver), and the time
//!   until kubegate holds the runaway back is measured.
//!
//! Measured per phase: the runaway's requests, those that reached a replica (all but those
//! kubegate answered itself: its 429s name it), what the replicas sent (bytes, LISTs: their
//! fault port's `/state`), kubectl's and the other users' latency, leaderships lost; and for
//! kubegate, how soon its cost table named the runaway first (`/debug/senders`).

use crate::client::{Client, ClientTls};
use crate::control_plane::RUNAWAY_TOKEN;
use crate::gateways;
use crate::leader::{self, Leadership};
use crate::scale::counts;
use crate::storm::{bystanders, seeded, Bystanders, Latency};
use crate::traffic::{self, tokio_util_like::Stop, Target};
use kubegate_testbed::bins::binary;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The namespace the ConfigMaps the runaway LISTs are made in.
const NAMESPACE: &str = "runaway";
/// The runaway's user, as the apiserver names its token's service account.
pub const RUNAWAY_USER: &str = "system:serviceaccount:storm:runaway";
/// The phases, in order.
const PHASES: [&str; 3] = ["calm", "storm", "shed"];

/// What to run.
pub struct Plan {
    /// ConfigMaps in the cluster (about 1 KiB each): what each LIST reads.
    pub objects: usize,
    /// The runaway's connections, each LISTing once per `interval`.
    pub connections: usize,
    /// How often each of its connections LISTs (with up to a tenth of jitter).
    pub interval: Duration,
    /// How long each phase lasts.
    pub phase: Duration,
    /// `direct`, `haproxy-l7`, `envoy-l7`, `kubegate-l7-shed`, `kubegate-l7-auto`.
    pub gateways: Vec<String>,
    /// Working directory.
    pub dir: PathBuf,
}

/// The modes the runner knows.
pub const MODES: &[&str] = &[
    "direct",
    "haproxy-l7",
    "envoy-l7",
    "kubegate-l7-shed",
    "kubegate-l7-auto",
];

/// One phase of one gateway's run.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The gateway (or `direct`).
    pub gateway: String,
    /// `calm`, `storm` or `shed`; or why the gateway did not run.
    pub phase: String,
    /// The runaway's requests sent (retries after a 429 included).
    pub runaway_sent: u64,
    /// Of those, the ones that reached a replica.
    pub runaway_at_replicas: u64,
    /// Of those, the ones the replicas answered 200.
    pub runaway_served: u64,
    /// LISTs the replicas received (every client's).
    pub replica_lists: u64,
    /// Body bytes the replicas sent (every client's), MiB.
    pub replica_mib: f64,
    /// The other users' LISTs.
    pub others: Latency,
    /// Real kubectl runs.
    pub kubectl: Latency,
    /// Shed phase (kubegate): the kubectl runs begun once every gateway turned the runaway
    /// away.
    pub kubectl_relieved: Option<Latency>,
    /// Leaderships lost (a renewal failing past the renew deadline).
    pub leaderships_lost: usize,
    /// The longest time without a renewal of the Lease, ms.
    pub longest_renewal_gap_ms: u64,
    /// Shed phase (kubegate): from the lever (the shed command, or the level's first
    /// rejection) until each gateway turned the runaway away, ms.
    pub relief_ms: Vec<u64>,
    /// Storm phase (kubegate): from the storm's start until the cost table named the runaway
    /// first by time, ms.
    pub named_first_ms: Option<u64>,
}

/// The runaway's figures of one phase, per gateway it goes through.
#[derive(Default)]
struct RunawayCounts {
    sent: AtomicU64,
    turned_away: AtomicU64,
    served: AtomicU64,
    /// The first time each gateway (by index) turned it away after `since`, ms from `since`.
    relieved: Mutex<Vec<Option<u64>>>,
    since: Mutex<Option<Instant>>,
}

impl RunawayCounts {
    fn relieved_at(&self, gateway: usize) {
        let Some(since) = *self.since.lock().unwrap_or_else(|e| e.into_inner()) else {
            return;
        };
        let mut r = self.relieved.lock().unwrap_or_else(|e| e.into_inner());
        if r.len() <= gateway {
            r.resize(gateway + 1, None);
        }
        r[gateway].get_or_insert(since.elapsed().as_millis() as u64);
    }
}

/// Runs each mode of `plan` in turn.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for mode in &plan.gateways {
        anyhow::ensure!(
            MODES.contains(&mode.as_str()),
            "unknown mode {mode}; known: {}",
            MODES.join(", ")
        );
        rows.extend(one(plan, mode, &plan.dir.join(mode)).await?);
    }
    Ok(rows)
}

async fn one(plan: &Plan, mode: &str, dir: &Path) -> anyhow::Result<Vec<Row>> {
    let cp = seeded(dir, mode, NAMESPACE, plan.objects, true).await?;
    // The gateways, in front of every replica; `direct`: none (clients spread over them).
    let (names, count): (&str, usize) = match mode {
        "direct" => ("", 0),
        "kubegate-l7-shed" => ("kubegate-l7-shed", 2),
        other => (other, 1),
    };
    let mut gws = Vec::new();
    for i in 0..count {
        match gateways::start_before(names, &dir.join(format!("g{i}")), &cp)? {
            Ok(g) => gws.push(g),
            Err(why) => return Ok(vec![not_run(mode, &why)]),
        }
    }
    let entries: Vec<SocketAddr> = match gws.is_empty() {
        true => cp.addresses(),
        false => gws.iter().map(|g| g.listen).collect(),
    };
    let first = Target {
        addr: entries[0],
        tls: cp.tls().clone(),
    };
    traffic::seed_when_ready(&first, mode).await?;
    let runaway_tls = ClientTls::with_token(&cp.pki(), RUNAWAY_TOKEN)?;
    let kubeconfig =
        crate::kubectl::kubeconfig_for(&cp.pki(), entries[0], &dir.join("kubeconfig"))?;
    let kubectl = crate::kubectl::find();
    eprintln!("{mode}: {} runaway connections", plan.connections);
    let mut conns = Vec::with_capacity(plan.connections);
    for i in 0..plan.connections {
        let at = entries[i % entries.len()];
        let c = Client::connect(at, &runaway_tls, true)
            .await
            .map_err(|e| anyhow::anyhow!("{mode}: connect: {e:?}"))?;
        conns.push((i % entries.len(), c));
    }
    let began = Instant::now();
    let leadership = Arc::new(Leadership::default());
    let everything = Stop::default();
    let candidates: Vec<_> = ["candidate-a", "candidate-b"]
        .into_iter()
        .map(|name| {
            tokio::spawn(leader::candidate(
                name.into(),
                leader::LEASE.into(),
                first.addr,
                first.tls.clone(),
                leadership.clone(),
                move || began.elapsed().as_millis() as u64,
                everything.clone(),
            ))
        })
        .collect();
    let ports = cp.fault_ports();
    let counts = Arc::new(RunawayCounts::default());
    let runaway_stop = Stop::default();
    let mut rows = Vec::new();
    let mut runaway_tasks = Vec::new();
    for phase in PHASES {
        eprintln!("{mode}: {phase}");
        let stop = Stop::default();
        let Bystanders {
            others: timings,
            kubectl: kubectl_timings,
            tasks,
        } = bystanders(&first, kubectl.as_ref(), &kubeconfig, &stop);
        let before = totals(&ports).await?;
        let lost_before = leadership.log().lost.len();
        let phase_began = Instant::now();
        let (sent0, away0, served0) = (
            counts.sent.load(Ordering::Relaxed),
            counts.turned_away.load(Ordering::Relaxed),
            counts.served.load(Ordering::Relaxed),
        );
        let mut named_first_ms = None;
        match phase {
            "storm" => {
                if mode == "kubegate-l7-auto" {
                    for i in 0..ports.len() {
                        cp.saturate_level(i, "workload-low", Some(5))?;
                    }
                    *counts.since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                }
                for (gateway, c) in std::mem::take(&mut conns) {
                    let (counts, stop) = (counts.clone(), runaway_stop.clone());
                    let target = Target {
                        addr: entries[gateway],
                        tls: runaway_tls.clone(),
                    };
                    runaway_tasks.push(tokio::spawn(runaway(
                        c,
                        target,
                        gateway,
                        plan.interval,
                        counts,
                        stop,
                    )));
                }
            }
            "shed" if mode == "kubegate-l7-shed" => {
                *counts.since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                shed(&kubeconfig)?;
            }
            _ => {}
        }
        // The cost table names the runaway first (kubegate), looked at through the phase.
        let admin = gws.first().and_then(|g| g.admin);
        while phase_began.elapsed() < plan.phase {
            if let (Some(admin), "storm", None) = (admin, phase, named_first_ms) {
                if costliest(admin).await.as_deref() == Some(RUNAWAY_USER) {
                    named_first_ms = Some(phase_began.elapsed().as_millis() as u64);
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        stop.stop();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        let after = totals(&ports).await?;
        let log = leadership.log();
        let sent = counts.sent.load(Ordering::Relaxed) - sent0;
        let away = counts.turned_away.load(Ordering::Relaxed) - away0;
        let relieved_since = *counts.since.lock().unwrap_or_else(|e| e.into_inner());
        let relief_ms: Vec<u64> = match (mode, phase) {
            ("kubegate-l7-shed", "shed") | ("kubegate-l7-auto", "storm") => counts
                .relieved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|r| r.unwrap_or(u64::MAX))
                .collect(),
            _ => Vec::new(),
        };
        rows.push(Row {
            gateway: mode.to_string(),
            phase: phase.to_string(),
            runaway_sent: sent,
            runaway_at_replicas: sent.saturating_sub(away),
            runaway_served: counts.served.load(Ordering::Relaxed) - served0,
            replica_lists: after.0 - before.0,
            replica_mib: (after.1 - before.1) as f64 / (1024.0 * 1024.0),
            others: timings.summary(),
            kubectl: kubectl_timings.summary(),
            kubectl_relieved: match (phase, relief_ms.iter().max(), relieved_since) {
                ("shed", Some(&last), Some(since)) if last != u64::MAX => {
                    Some(kubectl_timings.summary_since(Some(since + Duration::from_millis(last))))
                }
                _ => None,
            },
            leaderships_lost: log.lost.len() - lost_before,
            longest_renewal_gap_ms: longest_gap(&log.renewals, phase_began, began),
            relief_ms,
            named_first_ms,
        });
    }
    runaway_stop.stop();
    everything.stop();
    for t in runaway_tasks.into_iter().chain(candidates) {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    drop(gws);
    Ok(rows)
}

fn not_run(mode: &str, why: &str) -> Row {
    Row {
        gateway: mode.to_string(),
        phase: why.to_string(),
        runaway_sent: 0,
        runaway_at_replicas: 0,
        runaway_served: 0,
        replica_lists: 0,
        replica_mib: 0.0,
        others: Latency::default(),
        kubectl: Latency::default(),
        kubectl_relieved: None,
        leaderships_lost: 0,
        longest_renewal_gap_ms: 0,
        relief_ms: Vec::new(),
        named_first_ms: None,
    }
}

/// The longest time between two renewals within the phase that began at `phase_began`.
fn longest_gap(renewals: &[u64], phase_began: Instant, began: Instant) -> u64 {
    let from = phase_began.duration_since(began).as_millis() as u64;
    let to = began.elapsed().as_millis() as u64;
    let mut last = from;
    let mut longest = 0;
    for &r in renewals.iter().filter(|r| **r >= from && **r <= to) {
        longest = longest.max(r - last);
        last = r;
    }
    longest.max(to - last)
}

/// LISTs the replicas received and the bytes they sent, summed.
async fn totals(ports: &[u16]) -> anyhow::Result<(u64, u64)> {
    let mut t = (0, 0);
    for &port in ports {
        let state = counts::state(port)
            .await
            .ok_or_else(|| anyhow::anyhow!("the replica at fault port {port} did not answer"))?;
        t.0 += state["lists_received"].as_u64().unwrap_or(0);
        t.1 += state["bytes_sent"].as_u64().unwrap_or(0);
    }
    Ok(t)
}

/// The sender the cost table at `admin` names first by time.
async fn costliest(admin: SocketAddr) -> Option<String> {
    let report = crate::loopback::get_json(admin, "/debug/senders?sort=time&n=1").await?;
    report["senders"][0]["name"].as_str().map(str::to_string)
}

/// `kubegate shed` of the runaway's service account, written to the cluster through the
/// first gateway.
fn shed(kubeconfig: &Path) -> anyhow::Result<()> {
    let out = std::process::Command::new(binary("kubegate"))
        .args([
            "shed",
            "runaway",
            "--service-account",
            "storm:runaway",
            "--for",
            "10m",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubegate shed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// One of the runaway's connections: a LIST of every ConfigMap every `interval` (jittered),
/// a 429 retried after its `Retry-After`.
async fn runaway(
    c: Client,
    target: Target,
    gateway: usize,
    interval: Duration,
    counts: Arc<RunawayCounts>,
    stop: Stop,
) {
    // Spread over the first interval, as a DaemonSet's pods start apart.
    tokio::time::sleep(interval.mul_f64(fastrand::f64())).await;
    let mut conn = Some(c);
    while !stop.stopped() {
        let Ok(c) = traffic::connected(&mut conn, &target, true).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        counts.sent.fetch_add(1, Ordering::Relaxed);
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            c.send("GET", "/api/v1/configmaps?limit=500", None),
        )
        .await;
        let pause = match answer {
            Ok(Ok(r)) if r.status == 200 => {
                counts.served.fetch_add(1, Ordering::Relaxed);
                interval.mul_f64(0.9 + fastrand::f64() * 0.2)
            }
            Ok(Ok(r)) if r.status == 429 => {
                // kubegate's own 429s name it; a replica's (its flow control) do not. One
                // cut off while it waited at a replica reached one (`refused::cut_off`'s
                // words, which tests/shed.rs holds it to).
                let said = String::from_utf8_lossy(&r.body);
                if said.contains("kubegate") {
                    counts.relieved_at(gateway);
                    if !said.contains("came into force while") {
                        counts.turned_away.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Duration::from_secs(r.retry_after.unwrap_or(1))
            }
            Ok(Ok(_)) => interval,
            Ok(Err(_)) | Err(_) => {
                conn = None;
                interval
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// The report as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| gateway | phase | runaway sent | at the replicas | served | replica LISTs | replica MiB | kubectl runs (failed) p50 / p99 | kubectl once relieved: runs, p99 | others p99 | leaderships lost | longest renewal gap | relief | named first |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let relief: Vec<String> = r
            .relief_ms
            .iter()
            .map(|ms| match *ms {
                u64::MAX => "never".to_string(),
                ms => format!("{:.1} s", ms as f64 / 1000.0),
            })
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} ({}) {:.0} / {:.0} ms | {} | {:.0} ms | {} | {:.1} s | {} | {} |\n",
            r.gateway,
            r.phase,
            r.runaway_sent,
            r.runaway_at_replicas,
            r.runaway_served,
            r.replica_lists,
            r.replica_mib,
            r.kubectl.count,
            r.kubectl.failed,
            r.kubectl.p50_ms,
            r.kubectl.p99_ms,
            r.kubectl_relieved
                .as_ref()
                .map_or(String::new(), |k| format!("{}, {:.0} ms", k.count, k.p99_ms)),
            r.others.p99_ms,
            r.leaderships_lost,
            r.longest_renewal_gap_ms as f64 / 1000.0,
            relief.join(", "),
            r.named_first_ms
                .map_or(String::new(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
        ));
    }
    out
}
