//! kubegate's memory per configured cluster, at rest and under traffic, and the cost of a
//! reload that adds a cluster.
//!
//! The replicas of every cluster are started once (3 per cluster, each its own in-memory
//! store: nothing restarts here, and every client's LIST and watch stay on the connection's
//! one replica); for each mode and count N a kubegate serves the first N clusters by server
//! name (passthrough: spliced; terminate: each cluster's own certificate, client CA, upstream
//! connections and front-proxy identity). At rest, its memory is read once every backend is
//! ready and the probes have run a while; busy, while every cluster has a client listing and a
//! client watching. Then, at the largest count and under that traffic, a reload adds one more
//! cluster.

use super::setup::{cluster_spec, kubegate_config, server_name, Kubegate, Mode};
use crate::client::ClientTls;
use crate::record::{Kind, Recorder};
use crate::resumes::Scrape;
use crate::sampler::Sampler;
use crate::traffic::{self, tokio_util_like::Stop, Call, Target};
use kubegate_config::{ClusterSpec, Config};
use kubegate_testbed::pki::write_kubeadm_layout_answering;
use kubegate_testbed::{free_addr, Replica, ReplicaFlags};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replicas per cluster.
const REPLICAS: usize = 3;
/// How long each reading waits.
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    /// How long the probes run before memory at rest is read.
    pub at_rest: Duration,
    /// How long every cluster's clients run before busy memory is read (its peak meanwhile).
    pub busy: Duration,
}

impl Windows {
    /// The documented run's.
    pub const FULL: Windows = Windows {
        at_rest: Duration::from_secs(10),
        busy: Duration::from_secs(15),
    };
    /// CI's: long enough for every client to have been answered, not for a steady figure.
    pub const SHORT: Windows = Windows {
        at_rest: Duration::from_secs(3),
        busy: Duration::from_secs(5),
    };
}
/// Traffic after the reload, before its cost is read.
const AFTER_RELOAD: Duration = Duration::from_secs(5);

/// kubegate serving N clusters.
#[derive(Debug, Serialize)]
pub struct ScaleRow {
    /// kubegate's listener mode.
    pub mode: Mode,
    /// Clusters configured.
    pub clusters: usize,
    /// Backends over all of them.
    pub backends: usize,
    /// RSS once every backend was ready and probed a while, KiB.
    pub idle_rss_kib: u64,
    /// Heap allocated then (`kubegate_heap_allocated_bytes`), KiB.
    pub idle_heap_kib: u64,
    /// Peak RSS while every cluster had a listing and a watching client, KiB.
    pub busy_rss_kib: u64,
    /// Heap allocated at the end of that traffic, KiB.
    pub busy_heap_kib: u64,
    /// Open descriptors at the end of that traffic.
    pub busy_fds: u64,
    /// Requests the clients made meanwhile.
    pub requests: u64,
    /// Those that failed (after client-go's retries).
    pub failures: u64,
    /// Watches that broke.
    pub watch_breaks: usize,
    /// `ok`, or what failed.
    pub status: String,
}

/// A reload adding one cluster to a kubegate serving N, under traffic to all N.
#[derive(Debug, Serialize)]
pub struct ReloadCost {
    /// kubegate's listener mode.
    pub mode: Mode,
    /// Clusters before the reload.
    pub clusters_before: usize,
    /// From SIGHUP until every backend of the new cluster was ready, ms.
    pub serving_after_ms: u64,
    /// RSS before the reload, KiB.
    pub rss_before_kib: u64,
    /// RSS after it (and after the new cluster's first requests), KiB.
    pub rss_after_kib: u64,
    /// Heap allocated before and after, KiB.
    pub heap_kib: (u64, u64),
    /// The new cluster answered a request through kubegate.
    pub new_cluster_answered: bool,
    /// Requests the other clusters' clients made across the reload.
    pub requests: u64,
    /// Those that failed.
    pub failures: u64,
    /// The other clusters' watches that broke.
    pub watch_breaks: usize,
    /// Reloads kubegate counted as succeeded and as refused.
    pub reloads: (u64, u64),
    /// `ok`, or what failed.
    pub status: String,
}

/// A simulated cluster: its replicas and their addresses as kubegate's backends.
struct SimCluster {
    name: String,
    backends: Vec<(String, SocketAddr)>,
    _replicas: Vec<Replica>,
}

/// Measures every count in `sizes` in each of `modes`, then the reload adding one cluster to
/// the largest.
pub async fn run(
    sizes: &[usize],
    modes: &[Mode],
    windows: Windows,
    dir: &Path,
) -> anyhow::Result<(Vec<ScaleRow>, Vec<ReloadCost>)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let names: Vec<String> = (1..=largest + 1).map(|i| format!("c{i}")).collect();
    let pki = dir.join("pki");
    let answered: Vec<String> = names.iter().map(|n| server_name(n)).collect();
    let answered: Vec<&str> = answered.iter().map(String::as_str).collect();
    write_kubeadm_layout_answering(&pki, "https://127.0.0.1:6443", &answered)?;
    eprintln!(
        "clusters: scale: starting {} replicas ({} clusters of {REPLICAS})",
        names.len() * REPLICAS,
        names.len()
    );
    let mut sims = Vec::new();
    for name in &names {
        sims.push(start_cluster(name, &pki, dir)?);
    }
    let tls = ClientTls::load(&pki)?;
    let mut rows = Vec::new();
    let mut reloads = Vec::new();
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    for &mode in modes {
        for &n in &sorted {
            eprintln!("clusters: scale: {n} clusters, {}", mode.as_str());
            let dir = dir.join(format!("{n}-clusters-{}", mode.as_str()));
            let (listen, admin) = (free_addr(), free_addr());
            let config = |count: usize| {
                kubegate_config(listen, admin, mode, |base| {
                    specs(&sims[..count], &pki, mode, base)
                })
            };
            let kubegate = Kubegate::start(&dir, &config(n))?;
            let row = match measure(&kubegate, mode, &sims[..n], &tls, windows).await {
                Ok((row, clients)) => {
                    if n == largest {
                        eprintln!("clusters: scale: a reload adding a cluster to {n}");
                        let cost =
                            reload_adding(&kubegate, mode, &config(n + 1), &sims[n], &tls, clients)
                                .await
                                .unwrap_or_else(|e| ReloadCost::failed(mode, n, format!("{e:#}")));
                        reloads.push(cost);
                    } else {
                        clients.end().await;
                    }
                    row
                }
                Err(e) => ScaleRow::failed(mode, n, format!("{e:#}")),
            };
            eprintln!(
                "clusters: scale: {n} clusters, {}: {}",
                mode.as_str(),
                row.status
            );
            rows.push(row);
        }
    }
    Ok((rows, reloads))
}

/// Cluster `name`'s replicas (`name-1` ...), serving with the shared `pki` and trusting its
/// front-proxy CA (terminate mode's identity).
fn start_cluster(name: &str, pki: &Path, dir: &Path) -> anyhow::Result<SimCluster> {
    let mut replicas = Vec::new();
    for r in 1..=REPLICAS {
        let replica = format!("{name}-{r}");
        let mut flags = ReplicaFlags::new(
            &replica,
            (pki.join("apiserver.crt"), pki.join("apiserver.key")),
            &pki.join("ca.crt"),
        );
        flags.startup = Some("0s".into());
        flags.front_proxy_ca = Some(pki.join("front-proxy-ca.crt"));
        replicas.push(Replica::start(flags, &dir.join(format!("{replica}.log")))?);
    }
    Ok(SimCluster {
        name: name.into(),
        backends: replicas
            .iter()
            .map(|r| (r.name().to_string(), r.addr()))
            .collect(),
        _replicas: replicas,
    })
}

fn specs(sims: &[SimCluster], pki: &Path, mode: Mode, base: &Config) -> Vec<ClusterSpec> {
    sims.iter()
        .map(|c| cluster_spec(&c.name, &c.backends, pki, mode, base))
        .collect()
}

/// Clients of several clusters, until ended.
struct Clients {
    rec: Arc<Recorder>,
    stop: Stop,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    /// A listing and a watching client for each of `sims`.
    fn start(kubegate: &Kubegate, sims: &[SimCluster], tls: &ClientTls) -> anyhow::Result<Clients> {
        let rec = Arc::new(Recorder::new(Instant::now()));
        let stop = Stop::default();
        let mut tasks = Vec::new();
        for c in sims {
            let target = Target {
                addr: kubegate.listen,
                tls: tls.clone().naming(&server_name(&c.name))?,
            };
            tasks.push(tokio::spawn(lister(
                target.clone(),
                rec.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(traffic::watcher(
                target,
                rec.clone(),
                stop.clone(),
            )));
        }
        Ok(Clients { rec, stop, tasks })
    }

    /// Requests so far, failed ones, broken watches.
    fn counts(&self) -> (u64, u64, usize) {
        let samples = self.rec.samples();
        let failed = samples.iter().filter(|s| s.final_error.is_some()).count();
        (
            samples.len() as u64,
            failed as u64,
            self.rec.watch_breaks().len(),
        )
    }

    async fn end(self) {
        self.stop.stop();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

/// LISTs configmaps every 100 ms on one long-lived HTTP/2 connection, as a controller's
/// resync would, with client-go's retries.
async fn lister(target: Target, rec: Arc<Recorder>, stop: Stop) {
    let mut conn = None;
    let path = format!("/api/v1/namespaces/{}/configmaps", traffic::NAMESPACE);
    while !stop.stopped() {
        let started = Instant::now();
        let outcome = traffic::client_go(&target, &mut conn, true, Call::get(&path)).await;
        rec.add(Kind::List, started, outcome, None);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// kubegate's memory at rest over `sims`, then under their clients (left running).
async fn measure(
    kubegate: &Kubegate,
    mode: Mode,
    sims: &[SimCluster],
    tls: &ClientTls,
    windows: Windows,
) -> anyhow::Result<(ScaleRow, Clients)> {
    let backends = (sims.len() * REPLICAS) as u64;
    kubegate
        .wait_ready_backends(backends, Duration::from_secs(120))
        .await?;
    tokio::time::sleep(windows.at_rest).await;
    let sampler = Sampler::start(kubegate.pid()?, Instant::now());
    let idle = sampler.latest();
    let idle_heap = heap_kib(kubegate).await;
    let clients = Clients::start(kubegate, sims, tls)?;
    tokio::time::sleep(windows.busy).await;
    let last = sampler.latest();
    let busy_rss = (sampler.all().iter().chain([&last]))
        .map(|r| r.rss_kib)
        .max()
        .unwrap_or_default();
    let (requests, failures, watch_breaks) = clients.counts();
    let mut status = Vec::new();
    if requests == 0 {
        status.push("no request was made".to_string());
    }
    if failures > 0 {
        status.push(format!("{failures} requests failed"));
    }
    if watch_breaks > 0 {
        status.push(format!("{watch_breaks} watches broke"));
    }
    let row = ScaleRow {
        mode,
        clusters: sims.len(),
        backends: backends as usize,
        idle_rss_kib: idle.rss_kib,
        idle_heap_kib: idle_heap,
        busy_rss_kib: busy_rss,
        busy_heap_kib: heap_kib(kubegate).await,
        busy_fds: last.fds,
        requests,
        failures,
        watch_breaks,
        status: status_line(status),
    };
    Ok((row, clients))
}

/// Reloads `kubegate` onto `next` (one cluster more: `added`) while `clients` run against the
/// others.
async fn reload_adding(
    kubegate: &Kubegate,
    mode: Mode,
    next: &Config,
    added: &SimCluster,
    tls: &ClientTls,
    clients: Clients,
) -> anyhow::Result<ReloadCost> {
    let sampler = Sampler::start(kubegate.pid()?, Instant::now());
    let rss_before = sampler.latest().rss_kib;
    let heap_before = heap_kib(kubegate).await;
    let (requests_before, failures_before, breaks_before) = clients.counts();
    let backends = ((next.clusters.len()) * REPLICAS) as u64;
    kubegate.reload(next)?;
    let serving_after = kubegate
        .wait_ready_backends(backends, Duration::from_secs(60))
        .await;
    let target = Target {
        addr: kubegate.listen,
        tls: tls.clone().naming(&server_name(&added.name))?,
    };
    let mut conn = None;
    let path = format!("/api/v1/namespaces/{}/configmaps", traffic::NAMESPACE);
    let answer = traffic::client_go(&target, &mut conn, true, Call::get(&path)).await;
    drop(conn);
    tokio::time::sleep(AFTER_RELOAD).await;
    let rss_after = sampler.latest().rss_kib;
    let heap_after = heap_kib(kubegate).await;
    let (requests, failures, breaks) = clients.counts();
    clients.end().await;
    let scrape = Scrape::of(kubegate.admin).await;
    let reloads = scrape.map_or((0, 0), |s| {
        (
            s.sum("kubegate_config_reloads_total{result=\"success\""),
            s.sum("kubegate_config_reloads_total{result=\"failure\""),
        )
    });
    let mut cost = ReloadCost {
        mode,
        clusters_before: next.clusters.len() - 1,
        serving_after_ms: 0,
        rss_before_kib: rss_before,
        rss_after_kib: rss_after,
        heap_kib: (heap_before, heap_after),
        new_cluster_answered: answer.last.is_none(),
        requests: requests - requests_before,
        failures: failures - failures_before,
        watch_breaks: breaks - breaks_before,
        reloads,
        status: String::new(),
    };
    let mut status = Vec::new();
    match serving_after {
        Ok(took) => cost.serving_after_ms = took.as_millis() as u64,
        Err(e) => status.push(format!("the new cluster's backends: {e:#}")),
    }
    if !cost.new_cluster_answered {
        status.push("the new cluster did not answer".into());
    }
    if cost.failures > 0 {
        status.push(format!("{} requests failed", cost.failures));
    }
    if cost.watch_breaks > 0 {
        status.push(format!("{} watches broke", cost.watch_breaks));
    }
    if cost.reloads.0 == 0 || cost.reloads.1 > 0 {
        status.push(format!(
            "reloads: {} succeeded, {} refused",
            cost.reloads.0, cost.reloads.1
        ));
    }
    cost.status = status_line(status);
    Ok(cost)
}

async fn heap_kib(kubegate: &Kubegate) -> u64 {
    Scrape::of(kubegate.admin)
        .await
        .map_or(0, |s| s.sum("kubegate_heap_allocated_bytes") / 1024)
}

fn status_line(failed: Vec<String>) -> String {
    if failed.is_empty() {
        "ok".into()
    } else {
        format!("failed: {}", failed.join(", "))
    }
}

impl ScaleRow {
    fn failed(mode: Mode, clusters: usize, why: String) -> ScaleRow {
        ScaleRow {
            mode,
            clusters,
            backends: clusters * REPLICAS,
            idle_rss_kib: 0,
            idle_heap_kib: 0,
            busy_rss_kib: 0,
            busy_heap_kib: 0,
            busy_fds: 0,
            requests: 0,
            failures: 0,
            watch_breaks: 0,
            status: format!("failed: {why}"),
        }
    }
}

impl ReloadCost {
    fn failed(mode: Mode, clusters_before: usize, why: String) -> ReloadCost {
        ReloadCost {
            mode,
            clusters_before,
            serving_after_ms: 0,
            rss_before_kib: 0,
            rss_after_kib: 0,
            heap_kib: (0, 0),
            new_cluster_answered: false,
            requests: 0,
            failures: 0,
            watch_breaks: 0,
            reloads: (0, 0),
            status: format!("failed: {why}"),
        }
    }
}

/// The rows, the memory per cluster between the smallest and the largest count of each mode,
/// and the reloads, as Markdown.
pub fn markdown(rows: &[ScaleRow], reloads: &[ReloadCost]) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let mut out = String::from(
        "### Memory per configured cluster (3 replicas each; busy: a listing and a watching client per cluster)\n\n\
         | mode | clusters | backends | RSS at rest (MiB) | heap at rest (MiB) | RSS busy, peak (MiB) | heap busy (MiB) | descriptors busy | requests | failures | watch breaks | status |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.2} | {:.1} | {:.2} | {} | {} | {} | {} | {} |\n",
            r.mode.as_str(),
            r.clusters,
            r.backends,
            mib(r.idle_rss_kib),
            mib(r.idle_heap_kib),
            mib(r.busy_rss_kib),
            mib(r.busy_heap_kib),
            r.busy_fds,
            r.requests,
            r.failures,
            r.watch_breaks,
            r.status
        ));
    }
    for mode in [Mode::Passthrough, Mode::Terminate] {
        let ok: Vec<&ScaleRow> = rows
            .iter()
            .filter(|r| r.mode == mode && r.status == "ok")
            .collect();
        let (Some(first), Some(last)) = (ok.first(), ok.last()) else {
            continue;
        };
        if last.clusters > first.clusters {
            let per =
                |a: u64, b: u64| (b as f64 - a as f64) / (last.clusters - first.clusters) as f64;
            out.push_str(&format!(
                "\n{}: per cluster added ({} → {} clusters): {:.0} KiB RSS and {:.0} KiB heap at rest; {:.0} KiB RSS and {:.0} KiB heap busy.\n",
                mode.as_str(),
                first.clusters,
                last.clusters,
                per(first.idle_rss_kib, last.idle_rss_kib),
                per(first.idle_heap_kib, last.idle_heap_kib),
                per(first.busy_rss_kib, last.busy_rss_kib),
                per(first.busy_heap_kib, last.busy_heap_kib),
            ));
        }
    }
    for r in reloads {
        out.push_str(&format!(
            "\n{}: a reload adding cluster {} to {} (under the busy traffic): every new backend ready {} ms after SIGHUP; the new cluster answered: {}; RSS {:.1} → {:.1} MiB, heap {:.2} → {:.2} MiB; the other clusters' clients: {} requests, {} failed, {} watch breaks; reloads {} succeeded, {} refused: {}.\n",
            r.mode.as_str(),
            r.clusters_before + 1,
            r.clusters_before,
            r.serving_after_ms,
            if r.new_cluster_answered { "yes" } else { "no" },
            mib(r.rss_before_kib),
            mib(r.rss_after_kib),
            mib(r.heap_kib.0),
            mib(r.heap_kib.1),
            r.requests,
            r.failures,
            r.watch_breaks,
            r.reloads.0,
            r.reloads.1,
            r.status
        ));
    }
    out
}
