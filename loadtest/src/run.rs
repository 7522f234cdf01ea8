//! One run of the matrix: for every scenario and gateway, a fresh control plane, the gateway in
//! front, traffic, the fault, and the numbers.

use crate::control_plane::ControlPlane;
use crate::gateways;
use crate::record::Recorder;
use crate::report::{Run, RunReport, WatchReport};
use crate::scenarios::{self, Events, Pace};
use crate::traffic::{self, tokio_util_like::Stop, Target};
use crate::verify;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
pub struct Plan {
    /// Scenario names.
    pub scenarios: Vec<String>,
    /// Gateway names.
    pub gateways: Vec<String>,
    /// Fault durations.
    pub pace: Pace,
    /// Replicas.
    pub replicas: usize,
    /// Run against this control plane instead of simulated replicas.
    pub external: Option<crate::control_plane::ExternalSpec>,
    /// Working directory (configs, logs).
    pub dir: PathBuf,
    /// Traffic before the fault.
    pub warmup: Duration,
    /// Traffic after the fault.
    pub cooldown: Duration,
    /// Run real kubectl processes alongside.
    pub kubectl: bool,
}

/// Progress on stderr: a bar that redraws on a terminal, one line per phase otherwise.
pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    fn show(&self, what: &str) {
        let width = 24;
        let filled = width * self.done / self.total.max(1);
        let bar = format!(
            "[{}{}] {}/{}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            self.done,
            self.total
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{bar} {what}");
        } else {
            let _ = writeln!(err, "{bar} {what}");
        }
        let _ = err.flush();
    }
}

/// Runs every scenario against every gateway, in that order.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<RunReport>> {
    let mut progress = Progress {
        total: plan.scenarios.len() * plan.gateways.len(),
        done: 0,
        tty: std::io::stderr().is_terminal(),
    };
    let mut reports = Vec::new();
    for scenario in &plan.scenarios {
        for gateway in &plan.gateways {
            let label = format!("{scenario} · {gateway}");
            progress.show(&format!("{label}: starting control plane"));
            let dir = plan.dir.join(scenario).join(gateway);
            let report = match one(plan, scenario, gateway, &dir, &progress, &label).await {
                Ok(r) => r,
                Err(e) => RunReport::unavailable(scenario, gateway, format!("failed: {e:#}")),
            };
            progress.done += 1;
            progress.show(&format!("{label}: {}", report.status));
            if progress.tty {
                eprintln!();
            }
            reports.push(report);
        }
    }
    Ok(reports)
}

async fn one(
    plan: &Plan,
    scenario: &str,
    gateway: &str,
    dir: &Path,
    progress: &Progress,
    label: &str,
) -> anyhow::Result<RunReport> {
    let _ = std::fs::remove_dir_all(dir);
    let mut cp = match &plan.external {
        Some(spec) => ControlPlane::external(dir, spec.clone()).await?,
        None => {
            ControlPlane::start(dir, plan.replicas, scenarios::replica_settings(scenario)).await?
        }
    };
    let gw = match gateways::start_before(gateway, dir, &cp)? {
        Ok(g) => g,
        Err(why) => return Ok(RunReport::unavailable(scenario, gateway, why)),
    };
    let tls = match scenarios::client_identity(scenario) {
        "admin" => cp.tls().clone(),
        other => crate::client::ClientTls::load_as(&cp.pki(), other)?,
    };
    let target = Target {
        addr: gw.listen,
        tls,
    };
    // Let the gateway find its backends ready before traffic starts.
    traffic::seed_when_ready(&target, gateway).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let start = Instant::now();
    let rec = Arc::new(Recorder::new(start));
    let stop = Stop::default();
    let mut tasks = scenarios::clients(scenario).spawn(&target, &rec, &stop);
    let leadership = Arc::new(crate::leader::Leadership::default());
    tasks.extend(crate::leader::two_candidates(
        &target,
        &leadership,
        &rec,
        &stop,
    ));
    if let (true, Some(admin)) = (gw.terminates, gw.admin) {
        tasks.push(tokio::spawn(crate::resumes::follow(
            admin,
            rec.clone(),
            stop.clone(),
        )));
    }
    if plan.kubectl {
        if let Some(kubectl) = crate::kubectl::find() {
            let kubeconfig =
                crate::kubectl::kubeconfig_for(&cp.pki(), gw.listen, &dir.join("kubeconfig"))?;
            tasks.push(tokio::spawn(crate::kubectl::loops(
                kubectl.clone(),
                kubeconfig.clone(),
                rec.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(crate::kubectl::watch(
                kubectl,
                kubeconfig,
                rec.clone(),
                stop.clone(),
            )));
        }
    }
    progress.show(&format!("{label}: traffic"));
    tokio::time::sleep(plan.warmup).await;
    let events = Events::default();
    let now = || rec.now_ms();
    let phase = |p: &str| progress.show(&format!("{label}: {p}"));
    let leader_replica = || leadership.leader_replica();
    let outcome = scenarios::run(
        scenario,
        &mut cp,
        plan.pace,
        &events,
        &now,
        &phase,
        &leader_replica,
    )
    .await;
    progress.show(&format!("{label}: cool-down"));
    tokio::time::sleep(plan.cooldown).await;
    let end_ms = rec.now_ms();
    stop.stop();
    for t in tasks {
        // Every loop checks the stop flag at least every second; a request stuck on a frozen
        // connection is abandoned rather than awaited.
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    outcome?;
    progress.show(&format!("{label}: checking ambiguous writes in the store"));
    let ambiguous_writes = verify::ambiguous(&cp, &rec.ambiguous_writes(end_ms)).await?;
    let watch = WatchReport {
        breaks: rec.watch_breaks(),
        resumes: rec.watch_resumes.load(Ordering::Relaxed),
        relists: rec.watch_relists.load(Ordering::Relaxed),
        timeouts: rec.watch_timeouts.load(Ordering::Relaxed),
        events: rec.watch_events.load(Ordering::Relaxed),
        gateway_resumes: rec.gateway_resumes(),
    };
    let samples: Vec<_> = rec
        .samples()
        .into_iter()
        .filter(|s| s.at_ms <= end_ms)
        .collect();
    let mut report = RunReport::from_samples(Run {
        scenario,
        gateway,
        samples: &samples,
        replicas: plan.replicas,
        watch,
        ambiguous_writes,
        events: events.all(),
        end_ms,
        leader: crate::leader::LeaderReport::of(&leadership.log(), 0, end_ms),
    });
    if let (true, Some(admin)) = (gw.terminates, gw.admin) {
        if let Some(scrape) = crate::resumes::Scrape::of(admin).await {
            let mut retried = scrape.by_label("kubegate_request_retries_total");
            retried.retain(|_, n| *n > 0);
            report.upstream = Some(crate::report::UpstreamAttempts {
                answered: scrape.sum("kubegate_requests_total"),
                retried,
            });
        }
    }
    Ok(report)
}
