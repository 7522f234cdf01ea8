//! A failover scenario in cluster a while cluster b carries steady traffic through the same
//! kubegate listener: the matrix's figures for both, and b's latency before and during a's
//! fault. b's clients must see nothing: no failed request (first attempt or after client-go's
//! retries), no broken watch, no change of leader.

use super::setup::{cluster_spec, kubegate_config, server_name, Kubegate, Mode};
use crate::control_plane::ControlPlane;
use crate::leader::{self, LeaderReport, Leadership};
use crate::record::{Kind, Recorder, Sample};
use crate::report::{percentile, Run, RunReport, WatchReport};
use crate::scenarios::{self, Events, Pace};
use crate::traffic::{self, tokio_util_like::Stop, Target};
use crate::verify;
use kubegate_testbed::free_addr;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replicas in each cluster.
const REPLICAS: usize = 3;
/// Traffic before the fault: the calm the fault window is compared with.
const WARMUP: Duration = Duration::from_secs(8);
/// Traffic after the fault.
const COOLDOWN: Duration = Duration::from_secs(10);
/// When, after traffic starts, the calm is measured from: the clients' first connections
/// (handshakes, the first LIST of each watch) are not what a fault is compared with.
const SETTLED: u64 = 3_000;

/// One scenario in one mode.
#[derive(Debug, Serialize)]
pub struct IsolationRun {
    /// The scenario run in cluster a.
    pub scenario: String,
    /// kubegate's listener mode.
    pub mode: Mode,
    /// `ok`, or the checks on cluster b that did not hold (or why the run failed).
    pub status: String,
    /// Cluster a, where the fault ran.
    pub faulted: Option<ClusterSide>,
    /// Cluster b, which only carried traffic.
    pub steady: Option<ClusterSide>,
}

/// What one cluster's clients saw.
#[derive(Debug, Serialize)]
pub struct ClusterSide {
    /// The cluster's name.
    pub cluster: String,
    /// The matrix's figures for its clients.
    pub report: RunReport,
    /// Its successful requests' latency before the fault (from 3 s after traffic started):
    /// p50 and p99, ms.
    pub calm_ms: (f64, f64),
    /// The same from the fault's first event to its last.
    pub fault_ms: (f64, f64),
}

impl IsolationRun {
    /// A run that could not be carried out.
    pub fn failed(scenario: &str, mode: Mode, why: String) -> IsolationRun {
        IsolationRun {
            scenario: scenario.into(),
            mode,
            status: format!("failed: {why}"),
            faulted: None,
            steady: None,
        }
    }
}

/// One cluster's control plane and the clients that run against it.
struct Side {
    name: &'static str,
    cp: ControlPlane,
    target: Target,
    rec: Arc<Recorder>,
    leadership: Arc<Leadership>,
}

/// Runs `scenario` in cluster a, cluster b beside it, through one kubegate in `mode`.
pub async fn run(
    scenario: &str,
    mode: Mode,
    pace: Pace,
    dir: &Path,
    label: &str,
) -> anyhow::Result<IsolationRun> {
    let _ = std::fs::remove_dir_all(dir);
    let start_cluster = |name: &'static str, settings| async move {
        let names = [server_name(name)];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        ControlPlane::start_answering(&dir.join(name), REPLICAS, settings, &names).await
    };
    let a = start_cluster("a", scenarios::replica_settings(scenario)).await?;
    // b's replicas run as the matrix's do in a scenario without special settings.
    let b = start_cluster("b", scenarios::replica_settings("rolling-restart")).await?;
    let (listen, admin) = (free_addr(), free_addr());
    let backends = |name: &str, cp: &ControlPlane| -> Vec<_> {
        (cp.addresses().into_iter().enumerate())
            .map(|(i, addr)| (format!("{name}-{}", i + 1), addr))
            .collect()
    };
    let config = kubegate_config(listen, admin, mode, |base| {
        vec![
            cluster_spec("a", &backends("a", &a), &a.pki(), mode, base),
            cluster_spec("b", &backends("b", &b), &b.pki(), mode, base),
        ]
    });
    let kubegate = Kubegate::start(&dir.join("gateway"), &config)?;
    kubegate
        .wait_ready_backends(2 * REPLICAS as u64, Duration::from_secs(30))
        .await?;

    let start = Instant::now();
    let side = |name: &'static str, cp: ControlPlane| -> anyhow::Result<Side> {
        let tls = cp.tls().clone().naming(&server_name(name))?;
        Ok(Side {
            name,
            cp,
            target: Target {
                addr: kubegate.listen,
                tls,
            },
            rec: Arc::new(Recorder::new(start)),
            leadership: Arc::new(Leadership::default()),
        })
    };
    let (mut a, b) = (side("a", a)?, side("b", b)?);
    for s in [&a, &b] {
        traffic::seed_when_ready(&s.target, &format!("kubegate (cluster {})", s.name)).await?;
    }

    let stop = Stop::default();
    let mut tasks = Vec::new();
    for s in [&a, &b] {
        tasks.extend(clients(s, scenario, &stop));
    }
    eprintln!("clusters: {label}: traffic to both clusters");
    tokio::time::sleep(WARMUP).await;
    let events = Events::default();
    let now = || a.rec.now_ms();
    let phase = |p: &str| eprintln!("clusters: {label}: cluster a: {p}");
    let leadership = a.leadership.clone();
    let leader_replica = || leadership.leader_replica();
    let outcome = scenarios::run(
        scenario,
        &mut a.cp,
        pace,
        &events,
        &now,
        &phase,
        &leader_replica,
    )
    .await;
    eprintln!("clusters: {label}: cool-down");
    tokio::time::sleep(COOLDOWN).await;
    let end_ms = a.rec.now_ms();
    stop.stop();
    for t in tasks {
        // Every loop checks the stop flag at least every second.
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    outcome?;
    let events = events.all();
    let faulted = report(scenario, &a, &events, end_ms).await?;
    let steady = report(scenario, &b, &events, end_ms).await?;
    drop(kubegate);
    Ok(IsolationRun {
        scenario: scenario.into(),
        mode,
        status: verdict(&steady.report),
        faulted: Some(faulted),
        steady: Some(steady),
    })
}

/// The matrix's clients against one cluster: components, short-lived clients, watches and two
/// leader-election candidates.
fn clients(side: &Side, scenario: &str, stop: &Stop) -> Vec<tokio::task::JoinHandle<()>> {
    let mix = traffic::Mix {
        discovering: 0,
        ..scenarios::clients(scenario)
    };
    let mut tasks = mix.spawn(&side.target, &side.rec, stop);
    tasks.extend(leader::two_candidates(
        &side.target,
        &side.leadership,
        &side.rec,
        stop,
    ));
    tasks
}

/// What `side`'s clients saw, with its latency before and during the fault (`events` are the
/// fault's, in cluster a).
async fn report(
    scenario: &str,
    side: &Side,
    events: &[(u64, String)],
    end_ms: u64,
) -> anyhow::Result<ClusterSide> {
    let ambiguous_writes = verify::ambiguous(&side.cp, &side.rec.ambiguous_writes(end_ms)).await?;
    let samples: Vec<Sample> = (side.rec.samples().into_iter())
        .filter(|s| s.at_ms <= end_ms)
        .collect();
    let watch = WatchReport {
        breaks: side.rec.watch_breaks(),
        resumes: side.rec.watch_resumes.load(Ordering::Relaxed),
        relists: side.rec.watch_relists.load(Ordering::Relaxed),
        timeouts: side.rec.watch_timeouts.load(Ordering::Relaxed),
        events: side.rec.watch_events.load(Ordering::Relaxed),
        gateway_resumes: Vec::new(),
    };
    let fault_from = events.first().map_or(end_ms, |e| e.0);
    let fault_to = events.last().map_or(end_ms, |e| e.0);
    // The calm from when every client has its connections open.
    let calm_ms = latency(&samples, SETTLED.min(fault_from), fault_from);
    let fault_ms = latency(&samples, fault_from, fault_to.max(fault_from + 1));
    let gateway = format!("kubegate · cluster {}", side.name);
    let report = RunReport::from_samples(Run {
        scenario,
        gateway: &gateway,
        samples: &samples,
        replicas: REPLICAS,
        watch,
        ambiguous_writes,
        events: events.to_vec(),
        end_ms,
        leader: LeaderReport::of(&side.leadership.log(), 0, end_ms),
    });
    Ok(ClusterSide {
        cluster: side.name.into(),
        report,
        calm_ms,
        fault_ms,
    })
}

/// p50 and p99 of the successful requests that began in `[from_ms, to_ms)`, ms.
fn latency(samples: &[Sample], from_ms: u64, to_ms: u64) -> (f64, f64) {
    let mut ms: Vec<f64> = samples
        .iter()
        .filter(|s| s.kind != Kind::Kubectl && s.final_error.is_none())
        .filter(|s| (from_ms..to_ms).contains(&s.at_ms))
        .map(|s| s.latency_ms)
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    (percentile(&ms, 0.50), percentile(&ms, 0.99))
}

/// `ok` when the steady cluster's clients saw nothing of the other cluster's fault; else what
/// they saw.
fn verdict(steady: &RunReport) -> String {
    let mut seen = Vec::new();
    let first: u64 = steady.first_attempt_failures.values().sum();
    if first > 0 {
        seen.push(format!("{first} first-attempt failures"));
    }
    if steady.client_go_failed() > 0 {
        seen.push(format!("{} client-go failures", steady.client_go_failed()));
    }
    if !steady.watch.breaks.is_empty() {
        seen.push(format!("{} watch breaks", steady.watch.breaks.len()));
    }
    if steady.leader.changes > 0 || !steady.leader.lost.is_empty() {
        seen.push(format!(
            "{} leader changes, {} leaderships lost",
            steady.leader.changes,
            steady.leader.lost.len()
        ));
    }
    let ambiguous = &steady.ambiguous_writes;
    if ambiguous.total > 0 {
        seen.push(format!("{} ambiguous writes", ambiguous.total));
    }
    if seen.is_empty() {
        "ok".into()
    } else {
        format!("failed: cluster b saw {}", seen.join(", "))
    }
}

/// The runs as a table: a row per cluster.
pub fn markdown(runs: &[IsolationRun]) -> String {
    let mut out = String::from(
        "### A fault in cluster a, steady traffic in cluster b\n\n\
         | scenario | mode | cluster | requests | first-attempt failures | client-go failures | watch breaks | leader changes | p50 / p99 before (ms) | p50 / p99 during the fault (ms) | status |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for run in runs {
        let sides = [run.faulted.as_ref(), run.steady.as_ref()];
        if sides.iter().all(Option::is_none) {
            out.push_str(&format!(
                "| {} | {} | — | | | | | | | | {} |\n",
                run.scenario,
                run.mode.as_str(),
                run.status
            ));
        }
        for (i, side) in sides.into_iter().flatten().enumerate() {
            let r = &side.report;
            let role = if i == 0 { "a (fault)" } else { "b (steady)" };
            out.push_str(&format!(
                "| {} | {} | {role} | {} | {} | {} | {} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {} |\n",
                run.scenario,
                run.mode.as_str(),
                r.requests.values().sum::<u64>(),
                r.first_attempt_failures.values().sum::<u64>(),
                r.client_go_failed(),
                r.watch.breaks.len(),
                r.leader.changes,
                side.calm_ms.0,
                side.calm_ms.1,
                side.fault_ms.0,
                side.fault_ms.1,
                if i == 0 { "" } else { run.status.as_str() },
            ));
        }
    }
    out
}
