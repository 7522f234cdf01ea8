//! `kubegate-loadtest herd`: N informers of one identity start at once, as a DaemonSet's
//! agents do after a rollout or every controller after a control-plane restart: each on its own
//! HTTP/2 connection, each LISTs a namespace of ConfigMaps as client-go's reflector starts
//! (`limit=500&resourceVersion=0`), retrying a 429 after its `Retry-After`. Straight to the
//! replicas (`direct`, spread over them), and through each gateway.
//!
//! Measured: the LISTs the replicas received and the body bytes they sent (their fault port's
//! `/state`, before and after), how long each informer waited for its list (p50, p99), the
//! failures, and the gateway's CPU time for the whole start. The replicas answer every API
//! request after 100 ms (`--latency`), as a LIST of a few hundred objects takes on a busy
//! apiserver: a start-up's LISTs overlap, as they do in a real cluster.

use crate::client::{Client, ClientTls};
use crate::control_plane::{ControlPlane, ReplicaSettings};
use crate::gateways;
use crate::sampler::Sampler;
use crate::scale::counts;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The namespace the informers list.
const NAMESPACE: &str = "herd";
/// What client-go's reflector asks when it starts: a page of 500 from the watch cache.
const LIST: &str = "/api/v1/namespaces/herd/configmaps?limit=500&resourceVersion=0";
/// Tries of one informer's LIST (client-go retries a 429 after its `Retry-After`).
const TRIES: usize = 10;

/// What to run.
pub struct Plan {
    /// Informers, each on its own connection.
    pub informers: usize,
    /// Objects in the namespace (about 1 KiB each).
    pub objects: usize,
    /// `direct`, or gateways (see `run --gateways`).
    pub gateways: Vec<String>,
    /// Working directory.
    pub dir: PathBuf,
}

/// One gateway's start-up.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The gateway, or `direct`.
    pub gateway: String,
    /// `ok`, or why it did not run.
    pub status: String,
    /// Informers started.
    pub informers: usize,
    /// Of them, listed (200).
    pub listed: usize,
    /// Of them, failed after their tries.
    pub failed: usize,
    /// LISTs the replicas received.
    pub lists_at_replicas: u64,
    /// Body bytes the replicas sent.
    pub bytes_from_replicas: u64,
    /// How long an informer waited for its list: median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The gateway's CPU time over the start-up, ms (none: `direct`).
    pub gateway_cpu_ms: Option<u64>,
}

/// Runs every gateway in turn, each in front of a control plane of its own.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for gateway in &plan.gateways {
        let dir = plan.dir.join(gateway);
        let _ = std::fs::remove_dir_all(&dir);
        rows.push(one(plan, gateway, &dir).await?);
    }
    Ok(rows)
}

async fn one(plan: &Plan, gateway: &str, dir: &Path) -> anyhow::Result<Row> {
    let settings = ReplicaSettings {
        shutdown_delay: "0s".into(),
        goaway_chance: 0.0,
        latency: Duration::from_millis(100),
        watch_cache: true,
        version: Vec::new(),
    };
    let cp = ControlPlane::start(dir, 3, settings).await?;
    eprintln!("{gateway}: seeding {} objects", plan.objects);
    crate::storm::seed(&cp, NAMESPACE, plan.objects).await?;
    let gw = if gateway == "direct" {
        None
    } else {
        match gateways::start_before(gateway, dir, &cp)? {
            Ok(gw) => Some(gw),
            Err(why) => return Ok(not_run(gateway, plan.informers, why)),
        }
    };
    let tls = ClientTls::load_as(&cp.pki(), "node")?;
    let replicas = cp.addresses();
    let addr_of = |i: usize| match &gw {
        Some(gw) => gw.listen,
        None => replicas[i % replicas.len()],
    };
    wait_serving(addr_of(0), &tls, gateway).await?;
    eprintln!("{gateway}: connecting {} informers", plan.informers);
    let mut clients = Vec::with_capacity(plan.informers);
    for i in 0..plan.informers {
        let c = Client::connect(addr_of(i), &tls, true)
            .await
            .map_err(|e| anyhow::anyhow!("{gateway}: connect: {e:?}"))?;
        clients.push(c);
    }
    let ports = cp.fault_ports();
    let before = replica_totals(&ports).await?;
    let sampler = gw
        .as_ref()
        .and_then(|g| g.pid())
        .map(|pid| Sampler::start(pid, Instant::now()));
    let cpu_before = sampler.as_ref().map(|s| s.latest().cpu_ms);
    eprintln!("{gateway}: {} informers start", plan.informers);
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| tokio::spawn(informer(c)))
        .collect();
    let mut waited = Vec::with_capacity(tasks.len());
    let mut failed = 0;
    for t in tasks {
        match t.await? {
            Some(ms) => waited.push(ms),
            None => failed += 1,
        }
    }
    let cpu_ms = sampler
        .as_ref()
        .zip(cpu_before)
        .map(|(s, b)| s.latest().cpu_ms.saturating_sub(b));
    let after = replica_totals(&ports).await?;
    waited.sort_by(|a, b| a.total_cmp(b));
    Ok(Row {
        gateway: gateway.to_string(),
        status: "ok".into(),
        informers: plan.informers,
        listed: waited.len(),
        failed,
        lists_at_replicas: after.0 - before.0,
        bytes_from_replicas: after.1 - before.1,
        p50_ms: crate::report::percentile(&waited, 0.50),
        p99_ms: crate::report::percentile(&waited, 0.99),
        gateway_cpu_ms: cpu_ms,
    })
}

fn not_run(gateway: &str, informers: usize, why: String) -> Row {
    Row {
        gateway: gateway.to_string(),
        status: why,
        informers,
        listed: 0,
        failed: 0,
        lists_at_replicas: 0,
        bytes_from_replicas: 0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        gateway_cpu_ms: None,
    }
}

/// Waits until `addr` answers the informers' LIST (a gateway that has found its replicas
/// ready), within 30 s.
async fn wait_serving(addr: SocketAddr, tls: &ClientTls, gateway: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = Client::connect(addr, tls, true).await {
            if matches!(c.send("GET", LIST, None).await, Ok(r) if r.status == 200) {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{gateway} did not serve within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One informer's start: its LIST, a 429 retried after `Retry-After`; how long it waited for
/// its list (ms), or `None` when it got none.
async fn informer(mut c: Client) -> Option<f64> {
    let started = Instant::now();
    for _ in 0..TRIES {
        let sent = tokio::time::timeout(Duration::from_secs(60), c.send("GET", LIST, None));
        match sent.await {
            Ok(Ok(r)) if r.status == 200 => return Some(started.elapsed().as_secs_f64() * 1e3),
            Ok(Ok(r)) if r.status == 429 => {
                tokio::time::sleep(Duration::from_secs(r.retry_after.unwrap_or(1))).await;
            }
            _ => return None,
        }
    }
    None
}

/// LISTs received and body bytes sent, over every replica.
async fn replica_totals(ports: &[u16]) -> anyhow::Result<(u64, u64)> {
    let mut totals = (0, 0);
    for &port in ports {
        let state = counts::state(port)
            .await
            .ok_or_else(|| anyhow::anyhow!("the replica at fault port {port} did not answer"))?;
        totals.0 += state["lists_received"].as_u64().unwrap_or(0);
        totals.1 += state["bytes_sent"].as_u64().unwrap_or(0);
    }
    Ok(totals)
}

/// The report as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| gateway | informers listed (failed) | LISTs at the replicas | bytes the replicas sent | wait p50 / p99 | gateway CPU |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        if r.status != "ok" {
            out.push_str(&format!("| {} | {} | | | | |\n", r.gateway, r.status));
            continue;
        }
        out.push_str(&format!(
            "| {} | {} ({}) | {} | {:.1} MiB | {:.0} / {:.0} ms | {} |\n",
            r.gateway,
            r.listed,
            r.failed,
            r.lists_at_replicas,
            r.bytes_from_replicas as f64 / (1024.0 * 1024.0),
            r.p50_ms,
            r.p99_ms,
            r.gateway_cpu_ms
                .map_or_else(|| "-".to_string(), |ms| format!("{ms} ms")),
        ));
    }
    out
}
