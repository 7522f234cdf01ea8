//! `kubegate-loadtest scale`: a large cluster's clients through one gateway while the replicas
//! restart one by one. C HTTP/2 connections (as kubelets and controllers hold them) carry W
//! informers in all, each watching one group of ConfigMaps that a writer keeps changing; the
//! replicas run with a watch cache (`kubegate-sim --watch-cache`), as apiservers do, and count
//! the LIST and WATCH requests they receive.
//!
//! What a failover costs, per gateway: the watches the clients saw break, those the gateway
//! continued by itself, the relists (LISTs that followed a break) and every LIST that reached
//! the replicas during the restart, the 410s and 429s that reached clients, events an informer
//! missed or heard twice, how soon broken watches were open again and the longest silence any
//! informer heard, each replica's watches before and after a settle period (and how soon they
//! were evenly shared again), and the gateway's memory, descriptors and CPU at rest and during
//! the restart.
//!
//! | module | job |
//! |---|---|
//! | `informer` | client-go's reflector over shared connections, and the writer |
//! | `counts` | the replicas' counters, followed across their restarts |
//! | `report` | the table, the cost curve and its plot |

pub mod counts;
mod informer;
mod report;

use crate::control_plane::{ControlPlane, ReplicaSettings};
use crate::gateways;
use crate::sampler::{Reading, Sampler};
use crate::scenarios::{self, Events, Pace};
use crate::traffic::{self, Target};
use counts::ReplicaCounts;
use informer::{Seen, SharedConnection, Subject, Writes};
pub use report::{markdown, svg, ScaleRun};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
pub struct Plan {
    /// Gateways, in order.
    pub gateways: Vec<String>,
    /// (connections, watches) pairs, each run against every gateway.
    pub sizes: Vec<(usize, usize)>,
    /// Groups the watches are spread over (each write reaches watches/groups informers).
    pub groups: usize,
    /// The share of the watches that are quiet (bookmarks only).
    pub quiet: f64,
    /// The share of the watches of the custom resource.
    pub custom: f64,
    /// How long the run goes on after the last replica is ready again.
    pub settle: Duration,
    /// Writes per second.
    pub writes_per_second: u32,
    /// Restart two replicas rather than all three.
    pub short: bool,
    /// Working directory.
    pub dir: PathBuf,
}

/// How long the gateway is measured at rest, with every watch open.
const REST: Duration = Duration::from_secs(10);

/// The share is even when the busiest replica holds at most this much more than the mean.
const EVEN_SHARE: f64 = 1.2;

/// What informer `i` of `watches` watches: `quiet` and `custom` are shares of the watches,
/// interleaved so that every connection carries each kind.
fn subject(plan: &Plan, i: usize) -> Subject {
    const SLOTS: usize = 60;
    let slot = i % SLOTS;
    let quiet = (plan.quiet * SLOTS as f64).round() as usize;
    let custom = (plan.custom * SLOTS as f64).round() as usize;
    let group = (i / SLOTS) % plan.groups;
    if slot < quiet {
        Subject::Quiet(group)
    } else if slot < quiet + custom {
        Subject::Custom(group % custom_groups(plan))
    } else {
        Subject::Busy(group)
    }
}

/// Custom-resource objects: a quarter as many as the ConfigMap groups, so their watches share
/// the writes as the ConfigMaps' do.
fn custom_groups(plan: &Plan) -> usize {
    (plan.groups / 4).max(1)
}

/// Every object the run creates, and the ones the writer changes in turn.
fn subjects(plan: &Plan) -> (Vec<Subject>, Vec<Subject>) {
    let custom = if plan.custom > 0.0 {
        custom_groups(plan)
    } else {
        0
    };
    let written: Vec<Subject> = (0..plan.groups)
        .map(Subject::Busy)
        .chain((0..custom).map(Subject::Custom))
        .collect();
    let all = written
        .iter()
        .copied()
        .chain((0..plan.groups).map(Subject::Quiet))
        .collect();
    (all, written)
}

/// The busiest replica's watches over the mean (1.0: even); `None` while a replica is not
/// answering.
fn share_over_mean(open: &[i64]) -> Option<f64> {
    if open.is_empty() || open.iter().any(|n| *n < 0) {
        return None;
    }
    let mean = open.iter().sum::<i64>() as f64 / open.len() as f64;
    let max = *open.iter().max()? as f64;
    Some(if mean == 0.0 { 1.0 } else { max / mean })
}

/// Runs every size against every gateway.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<ScaleRun>> {
    let mut runs = Vec::new();
    for &(connections, watches) in &plan.sizes {
        for gateway in &plan.gateways {
            eprintln!("scale: {gateway}, {connections} connections, {watches} watches");
            let dir = plan.dir.join(format!("w{watches}")).join(gateway);
            let run = match one(plan, gateway, connections, watches, &dir).await {
                Ok(r) => r,
                Err(e) => ScaleRun::failed(gateway, connections, watches, format!("{e:#}")),
            };
            eprintln!("scale: {gateway}: {}", run.status);
            runs.push(run);
        }
    }
    Ok(runs)
}

async fn one(
    plan: &Plan,
    gateway: &str,
    connections: usize,
    watches: usize,
    dir: &Path,
) -> anyhow::Result<ScaleRun> {
    let _ = std::fs::remove_dir_all(dir);
    let settings = ReplicaSettings {
        version: Vec::new(),
        watch_cache: true,
        ..scenarios::replica_settings("rolling-restart")
    };
    let mut cp = ControlPlane::start(dir, 3, settings).await?;
    let gw = match gateways::start_before(gateway, dir, &cp)? {
        Ok(g) => g,
        Err(why) => return Ok(ScaleRun::failed(gateway, connections, watches, why)),
    };
    let target = Target {
        addr: gw.listen,
        tls: cp.tls().clone(),
    };
    traffic::seed_when_ready(&target, gateway).await?;
    if let Some(admin) = gw.admin {
        crate::resumes::at_rest(admin, cp.len(), gw.terminates).await?;
    }
    let start = Instant::now();
    let pid = gw
        .pid()
        .ok_or_else(|| anyhow::anyhow!("{gateway} has no process"))?;
    let sampler = Sampler::start(pid, start);
    let idle = sampler.latest();
    let writer_conn = Arc::new(SharedConnection::new(gw.listen, cp.tls().clone()));
    let (every_subject, written) = subjects(plan);
    informer::seed(&writer_conn, &every_subject).await?;
    let writes = Arc::new(Writes::new(written));

    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let counts = Arc::new(ReplicaCounts::new(cp.fault_ports()));
    let follower = tokio::spawn(counts.clone().follow(stop.clone()));
    let seen = Arc::new(Seen::default());
    // Silences count from when every watch is open.
    let measure_from = Arc::new(std::sync::OnceLock::new());
    let conns: Vec<Arc<SharedConnection>> = (0..connections.max(1))
        .map(|_| Arc::new(SharedConnection::new(gw.listen, cp.tls().clone())))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..watches {
        let conn = conns[i % conns.len()].clone();
        let (seen, stop, measure_from) = (seen.clone(), stop.clone(), measure_from.clone());
        let (subject, writes) = (subject(plan, i), writes.clone());
        tasks.push(tokio::spawn(async move {
            // Spread the first LISTs over a few seconds, as clients start over time.
            tokio::time::sleep(Duration::from_millis(fastrand::u64(..3000))).await;
            informer::run(conn, subject, writes, seen, stop, measure_from).await
        }));
    }
    let writer = tokio::spawn(informer::writer(
        writer_conn,
        writes,
        plan.writes_per_second,
        stop.clone(),
    ));
    // Every watch open.
    let limit = Duration::from_secs(60) + Duration::from_millis(watches as u64 * 10);
    let opened_by = Instant::now() + limit;
    while (seen.open.load(Ordering::Relaxed) as usize) < watches {
        if Instant::now() > opened_by {
            let _ = stop_tx.send(true);
            anyhow::bail!(
                "only {} of {watches} watches open after {limit:?}",
                seen.open.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_open_ms = start.elapsed().as_millis() as u64;
    let _ = measure_from.set(Instant::now());
    tokio::time::sleep(REST).await;
    let rest_end = sampler.latest();
    let rest_start = sampler
        .all()
        .into_iter()
        .find(|r| r.at_ms >= all_open_ms)
        .unwrap_or(rest_end);
    let before = Snapshot::take(&seen, &counts).await;

    let events = Events::default();
    let now = || start.elapsed().as_millis() as u64;
    let pace = if plan.short { Pace::SHORT } else { Pace::FULL };
    let fault_start = sampler.latest();
    scenarios::run(
        "rolling-restart",
        &mut cp,
        pace,
        &events,
        &now,
        &|p| eprintln!("scale: {gateway}: {p}"),
        &|| None,
    )
    .await?;
    let fault_end = sampler.latest();
    // The settle period: the share (as the follower last read it) looked at every second, and
    // when it was even again (staying so until the end).
    let last_ready = Instant::now();
    let settle_end = last_ready + plan.settle.max(REST);
    let mut even_since: Option<Duration> = None;
    while Instant::now() < settle_end {
        let even = share_over_mean(&counts.open()).is_some_and(|s| s <= EVEN_SHARE);
        even_since = match (even, even_since) {
            (true, None) => Some(last_ready.elapsed()),
            (true, since) => since,
            (false, _) => None,
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let after = Snapshot::take(&seen, &counts).await;
    // kubegate's own counts, read once.
    let scrape = match gw.admin {
        Some(admin) => crate::resumes::Scrape::of(admin).await,
        None => None,
    };
    let (resumes, freshened, watches_ended) = match &scrape {
        Some(m) => (
            m.sum("kubegate_watch_resumes_total"),
            m.by_label("kubegate_watch_positions_freshened_total"),
            m.by_label("kubegate_watches_ended_total"),
        ),
        None => (0, Default::default(), Default::default()),
    };
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let (writes_ok, writes_failed) = tokio::time::timeout(Duration::from_secs(15), writer)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    follower.abort();
    drop(conns);
    // Every client gone: what the gateway keeps.
    // Long enough for idle upstream connections to be given back (30 s idle).
    let settled = sampler.settle(idle.fds, Duration::from_secs(60)).await;
    let peak = sampler
        .all()
        .into_iter()
        .map(|r| r.rss_kib)
        .max()
        .unwrap_or_default();
    let reopened = seen
        .reopened_after_ms
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut silences = seen
        .longest_silence_ms
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    silences.sort_unstable();
    Ok(ScaleRun {
        gateway: gateway.to_string(),
        connections,
        watches,
        status: "ok".into(),
        all_open_s: all_open_ms as f64 / 1e3,
        breaks: after.breaks - before.breaks,
        gateway_resumes: resumes,
        gateway_freshened: freshened,
        gateway_watches_ended: watches_ended,
        relists: after.relists - before.relists,
        expired: after.expired - before.expired,
        throttled: after.throttled - before.throttled,
        gaps: after.gaps - before.gaps,
        duplicates: after.duplicates - before.duplicates,
        lists_at_replicas: after.lists - before.lists,
        watches_at_replicas: after.watch_requests - before.watch_requests,
        longest_reopen_ms: reopened.iter().copied().max().unwrap_or(0),
        longest_silence_ms: silences.last().copied().unwrap_or(0),
        p99_silence_ms: silences
            .get(silences.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or(0),
        share_before: before.open_per_replica,
        share_over_mean: share_over_mean(&after.open_per_replica).unwrap_or(0.0),
        share_after: after.open_per_replica,
        share_even_after_s: even_since.map(|d| d.as_secs_f64()),
        quiet_watches: (0..watches)
            .filter(|i| matches!(subject(plan, *i), Subject::Quiet(_)))
            .count(),
        custom_watches: (0..watches)
            .filter(|i| matches!(subject(plan, *i), Subject::Custom(_)))
            .count(),
        events: seen.events.load(Ordering::Relaxed),
        writes_ok,
        writes_failed,
        idle,
        rest: rest_end,
        peak_rss_kib: peak,
        settled,
        cpu_rest_per_s: cpu_per_s(rest_start, rest_end),
        cpu_restart_per_s: cpu_per_s(fault_start, fault_end),
        fault_events: events.all(),
    })
}

/// CPU seconds per second between two readings.
fn cpu_per_s(a: Reading, b: Reading) -> f64 {
    let wall = b.at_ms.saturating_sub(a.at_ms);
    if wall == 0 {
        return 0.0;
    }
    b.cpu_ms.saturating_sub(a.cpu_ms) as f64 / wall as f64
}

/// The counters at one moment.
struct Snapshot {
    breaks: u64,
    relists: u64,
    expired: u64,
    throttled: u64,
    gaps: u64,
    duplicates: u64,
    lists: u64,
    watch_requests: u64,
    open_per_replica: Vec<i64>,
}

impl Snapshot {
    async fn take(seen: &Seen, counts: &ReplicaCounts) -> Snapshot {
        let open_per_replica = counts.poll().await;
        let (lists, watch_requests) = counts.totals();
        Snapshot {
            breaks: seen.breaks.load(Ordering::Relaxed),
            relists: seen.relists.load(Ordering::Relaxed),
            expired: seen.expired.load(Ordering::Relaxed),
            throttled: seen.throttled.load(Ordering::Relaxed),
            gaps: seen.gaps.load(Ordering::Relaxed),
            duplicates: seen.duplicates.load(Ordering::Relaxed),
            lists,
            watch_requests,
            open_per_replica,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_of_watch_take_their_shares_and_the_share_is_read_against_the_mean() {
        let plan = Plan {
            gateways: Vec::new(),
            sizes: Vec::new(),
            groups: 20,
            quiet: 1.0 / 3.0,
            custom: 0.1,
            settle: Duration::ZERO,
            short: true,
            writes_per_second: 10,
            dir: PathBuf::new(),
        };
        let kinds: Vec<Subject> = (0..6000).map(|i| subject(&plan, i)).collect();
        let count = |f: fn(&Subject) -> bool| kinds.iter().filter(|s| f(s)).count();
        assert_eq!(count(|s| matches!(s, Subject::Quiet(_))), 2000);
        assert_eq!(count(|s| matches!(s, Subject::Custom(_))), 600);
        // Every object watched is one the run creates.
        let (all, written) = subjects(&plan);
        assert!(kinds.iter().all(|s| all.contains(s)), "{all:?}");
        assert!(written.iter().all(|s| s.written()));
        assert_eq!(share_over_mean(&[5000, 5000, 0]), Some(1.5));
        assert_eq!(
            share_over_mean(&[3400, 3300, 3300]),
            Some(3400.0 / (10000.0 / 3.0))
        );
        assert_eq!(share_over_mean(&[10, -1, 10]), None);
    }
}
