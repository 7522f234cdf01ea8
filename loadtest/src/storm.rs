//! A runaway client: one identity (a kubelet's certificate, `system:node:node-1`, or a
//! service account's bearer token, `--runaway token`) LISTs a large namespace from many
//! connections at once, as a misbehaving agent on every node or a controller in a relist loop
//! does. Beside it, the usual users: kubectl-like clients (a new
//! connection per LIST) and real kubectl processes. Measured through `kubegate-l7` twice:
//! without a rule, and with a `dispatch` rule limiting that identity (`kubegate-l7-limited`,
//! `max_in_flight: 1`); each time a calm phase, then the storm. What the others see (latency
//! of their requests and kubectl runs) and what the storm gets (answers, 429s that client-go
//! retries after `Retry-After`, failures) are the figures (docs/failover.md, "Runaway client").

use crate::client::{Client, ClientTls, ErrorClass};
use crate::control_plane::{ControlPlane, ReplicaSettings};
use crate::gateways;
use crate::traffic::{self, tokio_util_like::Stop, Target};
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The namespace the storm LISTs.
const STORM_NAMESPACE: &str = "storm";

/// What to run.
pub struct Plan {
    /// Objects in the storm's namespace (about 1 KiB each).
    pub objects: usize,
    /// Concurrent LIST loops of the runaway identity, each on a connection of its own.
    pub concurrency: usize,
    /// How long each phase (calm, storm) lasts.
    pub phase: Duration,
    /// Who the runaway is.
    pub runaway: Runaway,
    /// Working directory.
    pub dir: PathBuf,
}

/// How the runaway client authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Runaway {
    /// A kubelet's client certificate (`system:node:node-1`).
    Certificate,
    /// A service account's bearer token (`storm:runaway`).
    Token,
}

/// One phase of one gateway's run.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `kubegate-l7` or `kubegate-l7-limited`.
    pub gateway: String,
    /// `calm` or `storm`.
    pub phase: String,
    /// The other users' LISTs: how many, how many failed, and their latency.
    pub others: Latency,
    /// Real kubectl runs (`kubectl get configmaps`): how many, failed, and their duration.
    pub kubectl: Latency,
    /// The runaway identity's LISTs answered 200.
    pub storm_ok: u64,
    /// Its attempts answered 429 (each retried after `Retry-After`).
    pub storm_429: u64,
    /// Its LISTs that failed otherwise (resets, timeouts, 5xx), after client-go's retries.
    pub storm_failed: u64,
}

/// How many, how many failed, p50 and p99 of those that succeeded (ms).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Requests (or runs).
    pub count: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

/// Latencies of one kind of request, and failures.
#[derive(Default)]
pub struct Timings {
    /// When each that succeeded began, and how long it took (ms).
    ok: Mutex<Vec<(Instant, f64)>>,
    /// When each that failed began.
    failed: Mutex<Vec<Instant>>,
}

impl Timings {
    /// How many, failed, p50 and p99.
    pub fn summary(&self) -> Latency {
        self.summary_since(None)
    }

    /// The same of those that began at `since` or later (all when `None`).
    pub fn summary_since(&self, since: Option<Instant>) -> Latency {
        let after = |began: &Instant| since.is_none_or(|s| *began >= s);
        let ok = self.ok.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok: Vec<f64> = ok
            .iter()
            .filter(|(began, _)| after(began))
            .map(|(_, ms)| *ms)
            .collect();
        ok.sort_by(|a, b| a.total_cmp(b));
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        let failed = failed.iter().filter(|began| after(began)).count() as u64;
        Latency {
            count: ok.len() as u64 + failed,
            failed,
            p50_ms: crate::report::percentile(&ok, 0.50),
            p99_ms: crate::report::percentile(&ok, 0.99),
        }
    }

    fn record(&self, started: Instant, ok: bool) {
        if ok {
            self.ok
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((started, started.elapsed().as_secs_f64() * 1e3));
        } else {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(started);
        }
    }
}

#[derive(Default)]
struct StormCounts {
    ok: AtomicU64,
    limited: AtomicU64,
    failed: AtomicU64,
}

/// Runs both gateways, each through a calm phase and a storm.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for gateway in ["kubegate-l7", "kubegate-l7-limited"] {
        rows.extend(one(plan, gateway, &plan.dir.join(gateway)).await?);
    }
    Ok(rows)
}

async fn one(plan: &Plan, gateway: &str, dir: &Path) -> anyhow::Result<Vec<Row>> {
    let cp = seeded(dir, gateway, STORM_NAMESPACE, plan.objects, false).await?;
    let gw = gateways::start_before(gateway, dir, &cp)?
        .map_err(|why| anyhow::anyhow!("{gateway}: {why}"))?;
    let others = Target {
        addr: gw.listen,
        tls: cp.tls().clone(),
    };
    traffic::seed_when_ready(&others, gateway).await?;
    let runaway = Target {
        addr: gw.listen,
        tls: match plan.runaway {
            Runaway::Certificate => ClientTls::load_as(&cp.pki(), "node")?,
            Runaway::Token => {
                ClientTls::with_token(&cp.pki(), crate::control_plane::RUNAWAY_TOKEN)?
            }
        },
    };
    let kubeconfig = crate::kubectl::kubeconfig_for(&cp.pki(), gw.listen, &dir.join("kubeconfig"))?;
    let kubectl = crate::kubectl::find();
    let mut rows = Vec::new();
    for phase in ["calm", "storm"] {
        eprintln!("{gateway}: {phase}");
        let stop = Stop::default();
        let Bystanders {
            others: timings,
            kubectl: kubectl_timings,
            mut tasks,
        } = bystanders(&others, kubectl.as_ref(), &kubeconfig, &stop);
        let counts = Arc::new(StormCounts::default());
        if phase == "storm" {
            for _ in 0..plan.concurrency {
                let (t, counts, stop) = (runaway.clone(), counts.clone(), stop.clone());
                tasks.push(tokio::spawn(storm(t, counts, stop)));
            }
        }
        tokio::time::sleep(plan.phase).await;
        stop.stop();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        rows.push(Row {
            gateway: gateway.to_string(),
            phase: phase.to_string(),
            others: timings.summary(),
            kubectl: kubectl_timings.summary(),
            storm_ok: counts.ok.load(Ordering::Relaxed),
            storm_429: counts.limited.load(Ordering::Relaxed),
            storm_failed: counts.failed.load(Ordering::Relaxed),
        });
    }
    Ok(rows)
}

/// Three replicas (with their watch caches if `watch_cache`) started afresh in `dir`, their
/// namespace `namespace` filled with `objects` ConfigMaps; `who` names the run in what is said.
pub async fn seeded(
    dir: &Path,
    who: &str,
    namespace: &str,
    objects: usize,
    watch_cache: bool,
) -> anyhow::Result<ControlPlane> {
    let _ = std::fs::remove_dir_all(dir);
    let settings = ReplicaSettings {
        shutdown_delay: "0s".into(),
        goaway_chance: 0.0,
        latency: Duration::ZERO,
        watch_cache,
        version: Vec::new(),
    };
    let cp = ControlPlane::start(dir, 3, settings).await?;
    eprintln!("{who}: seeding {objects} objects");
    seed(&cp, namespace, objects).await?;
    Ok(cp)
}

/// Fills namespace `namespace` with `objects` ConfigMaps of about 1 KiB, straight through
/// the first replica.
pub async fn seed(cp: &ControlPlane, namespace: &str, objects: usize) -> anyhow::Result<()> {
    let mut c = Client::connect(cp.addresses()[0], cp.tls(), true)
        .await
        .map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
    let padding = "x".repeat(900);
    let path = format!("/api/v1/namespaces/{namespace}/configmaps");
    for i in 0..objects {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("bulk-{i}")},
                          "data": {"padding": padding}});
        let r = c
            .send("POST", &path, Some(&body.to_string()))
            .await
            .map_err(|e| anyhow::anyhow!("seed: {e:?}"))?;
        anyhow::ensure!(r.status == 201 || r.status == 409, "seed: {}", r.status);
    }
    Ok(())
}

/// The users beside a runaway in one phase, and their tasks.
pub struct Bystanders {
    /// The kubectl-like users' LISTs.
    pub others: Arc<Timings>,
    /// The real kubectl runs.
    pub kubectl: Arc<Timings>,
    /// Their tasks, which end at the phase's stop.
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Two kubectl-like users through `target` and, with `kubectl` here, real kubectl runs with
/// `kubeconfig`, until `stop`.
pub fn bystanders(
    target: &Target,
    kubectl: Option<&PathBuf>,
    kubeconfig: &Path,
    stop: &Stop,
) -> Bystanders {
    let others = Arc::new(Timings::default());
    let runs = Arc::new(Timings::default());
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (t, timings, stop) = (target.clone(), others.clone(), stop.clone());
        tasks.push(tokio::spawn(other_user(t, timings, stop)));
    }
    if let Some(bin) = kubectl {
        let (bin, kc, timings, stop) = (
            bin.clone(),
            kubeconfig.to_path_buf(),
            runs.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(kubectl_user(bin, kc, timings, stop)));
    }
    Bystanders {
        others,
        kubectl: runs,
        tasks,
    }
}

/// A kubectl-like user: a new connection per LIST of a small namespace.
async fn other_user(target: Target, timings: Arc<Timings>, stop: Stop) {
    let path = format!("/api/v1/namespaces/{}/configmaps", traffic::NAMESPACE);
    while !stop.stopped() {
        let started = Instant::now();
        let ok = match Client::connect(target.addr, &target.tls, true).await {
            Ok(mut c) => matches!(
                tokio::time::timeout(Duration::from_secs(30), c.send("GET", &path, None)).await,
                Ok(Ok(r)) if r.status == 200
            ),
            Err(_) => false,
        };
        timings.record(started, ok);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Real kubectl, one `get configmaps` after another.
async fn kubectl_user(bin: PathBuf, kubeconfig: PathBuf, timings: Arc<Timings>, stop: Stop) {
    while !stop.stopped() {
        let started = Instant::now();
        let out = tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "configmaps", "-n", traffic::NAMESPACE, "-o", "name"])
            .args(["--request-timeout", "30s"])
            .kill_on_drop(true)
            .output()
            .await;
        timings.record(started, out.is_ok_and(|o| o.status.success()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One of the runaway identity's LIST loops, on its own HTTP/2 connection, retrying a 429
/// after its `Retry-After` as client-go does.
async fn storm(target: Target, counts: Arc<StormCounts>, stop: Stop) {
    let path = format!("/api/v1/namespaces/{STORM_NAMESPACE}/configmaps");
    let mut conn: Option<Client> = None;
    while !stop.stopped() {
        let Ok(c) = traffic::connected(&mut conn, &target, true).await else {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        match tokio::time::timeout(Duration::from_secs(60), c.send("GET", &path, None)).await {
            Ok(Ok(r)) if r.status == 200 => {
                counts.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(r)) if r.status == 429 => {
                counts.limited.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(r.retry_after.unwrap_or(1))).await;
            }
            Ok(Ok(_)) | Ok(Err(ErrorClass::Http5xx)) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(_)) | Err(_) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}

/// The report as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| gateway | phase | others' LISTs (failed) | p50 / p99 | kubectl runs (failed) | p50 / p99 | storm LISTs answered | storm 429s (retried) | storm failures |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} ({}) | {:.1} / {:.1} ms | {} ({}) | {:.0} / {:.0} ms | {} | {} | {} |\n",
            r.gateway,
            r.phase,
            r.others.count,
            r.others.failed,
            r.others.p50_ms,
            r.others.p99_ms,
            r.kubectl.count,
            r.kubectl.failed,
            r.kubectl.p50_ms,
            r.kubectl.p99_ms,
            r.storm_ok,
            r.storm_429,
            r.storm_failed,
        ));
    }
    out
}
