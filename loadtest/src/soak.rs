//! `kubegate-loadtest soak`: one kubegate (a passthrough and a terminate-mode listener) in
//! front of replicas on etcd, steady control-plane-like traffic through both, and a random
//! fault every few seconds for as long as asked. What must hold, checked at the end:
//!
//! - every create a client saw succeed is in the store (nothing lost), and no create was
//!   applied twice (a unique name answered 409 would mean a processed write was sent again);
//! - kubegate never restarted (one PID throughout, still running);
//! - its descriptors return to their baseline once the traffic stops, and its RSS stays
//!   bounded (sampled every 2 s, plotted);
//! - every failure a client saw (first attempts, failures after client-go's retries, watch
//!   breaks, leaderships lost) is explained: a fault's window covers it (from the fault's
//!   start to [`AFTERMATH`] past its end) and the fault has a mechanism for it
//!   (`explain.rs`).
//!
//! | module | job |
//! |---|---|
//! | `faults` | the fault plan (seeded) and carrying out each fault |
//! | `verdict` | the checks above, the report and the plot |

mod faults;
mod soaked;
mod verdict;

use crate::control_plane::ControlPlane;
use crate::record::Recorder;
use crate::sampler::Sampler;
use crate::traffic::{self, tokio_util_like::Stop, Target};
use faults::{ConfigState, Fault, Window};
use kubegate_testbed::{binary, free_addr, wait_listening, ChildProcess as Proc};
use soaked::{Layout, Soaked};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use verdict::{markdown, svg, SoakReport, AFTERMATH};

/// What to run.
pub struct SoakPlan {
    /// How long faults are injected (traffic runs a little longer on each side).
    pub duration: Duration,
    /// Seed of the fault plan: the same seed gives the same faults in the same order.
    pub seed: u64,
    /// Working directory (configs, logs).
    pub dir: PathBuf,
}

/// Runs the soak; the report says what held.
pub async fn soak(plan: &SoakPlan) -> anyhow::Result<SoakReport> {
    let dir = &plan.dir;
    let _ = std::fs::remove_dir_all(dir.join("cp"));
    eprintln!("soak: starting etcd and 4 replicas (kubegate starts with 3)");
    let mut cp = ControlPlane::start(
        &dir.join("cp"),
        4,
        crate::scenarios::replica_settings("rolling-restart"),
    )
    .await?;
    let mut gw = start_kubegate(dir, &cp)?;
    let targets = [
        (
            "passthrough",
            Target {
                addr: gw.layout.passthrough,
                tls: cp.tls().clone(),
            },
        ),
        (
            "terminate",
            Target {
                addr: gw.layout.terminate,
                tls: cp.tls().clone(),
            },
        ),
    ];
    for (_, t) in &targets {
        wait_serving(t).await?;
    }
    let pid = gw
        .pid()
        .ok_or_else(|| anyhow::anyhow!("kubegate has no PID"))?;
    let start = Instant::now();
    let sampler = Sampler::start(pid, start);
    // Idle baseline: every backend ready (and its version learned), no client yet.
    crate::resumes::at_rest(gw.layout.admin, ConfigState::INITIAL.backends, true).await?;
    let baseline = sampler.latest();

    let stop = Stop::default();
    let mut tasks = Vec::new();
    let mut recorders = Vec::new();
    for (n, (name, target)) in targets.iter().enumerate() {
        let rec = Arc::new(Recorder::new(start));
        // Distinct ids per listener: created names (`w{id}-{turn}`) must never collide, and
        // components renew the leases `traffic::seed` made (ids 0 to 7). Writers at a steady
        // controller's pace, so that a 30-minute soak's objects stay listable.
        let mix = traffic::Mix {
            components: 2,
            writers: 1,
            writer_pause: Duration::from_millis(100),
            short_lived: 1,
            // Several watches through terminate mode, so that a replica back from a restart
            // has watches moved onto it while the faults go on.
            watchers: if *name == "terminate" { 6 } else { 1 },
            discovering: 0,
            first_id: n * 4,
        };
        tasks.extend(mix.spawn(target, &rec, &stop));
        if *name == "terminate" {
            tasks.push(tokio::spawn(crate::resumes::follow(
                gw.layout.admin,
                rec.clone(),
                stop.clone(),
            )));
        }
        // A leader election per listener, on a Lease of its own.
        let leadership = Arc::new(crate::leader::Leadership::default());
        for candidate in ["candidate-a", "candidate-b"] {
            let clock = rec.clone();
            tasks.push(tokio::spawn(crate::leader::candidate(
                candidate.into(),
                format!("{}-{name}", crate::leader::LEASE),
                target.addr,
                target.tls.clone(),
                leadership.clone(),
                move || clock.now_ms(),
                stop.clone(),
            )));
        }
        recorders.push((*name, rec, leadership));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;

    let mut rng = fastrand::Rng::with_seed(plan.seed);
    let mut windows: Vec<Window> = Vec::new();
    let mut state = ConfigState::INITIAL;
    let faults_until = Instant::now() + plan.duration;
    while Instant::now() < faults_until {
        let fault = Fault::pick(&mut rng, state.backends);
        let from_ms = start.elapsed().as_millis() as u64;
        eprintln!("soak: {:>5} s  {}", from_ms / 1000, fault.describe());
        let outcome = fault.carry_out(&mut cp, &gw, &mut state).await;
        let mut to_ms = start.elapsed().as_millis() as u64;
        if fault.kind() == faults::FaultKind::RemoveBackend {
            // The removed backend's connections stay until its drain deadline, where
            // passthrough closes what is left: the fault lasts until then.
            to_ms = to_ms.max(from_ms + faults::DRAIN_TIMEOUTS[state.drain].as_millis() as u64);
        }
        windows.push(Window {
            fault: fault.describe(),
            kind: fault.kind(),
            from_ms,
            to_ms,
            problem: outcome.err().map(|e| format!("{e:#}")),
        });
        // A quiet spell between faults: failures in it are unexplained.
        let gap = Duration::from_millis(rng.u64(4_000..9_000));
        tokio::time::sleep(gap).await;
    }
    // Traffic a while longer after the last fault, then stop it.
    tokio::time::sleep(AFTERMATH).await;
    let end_ms = start.elapsed().as_millis() as u64;
    stop.stop();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    eprintln!("soak: traffic stopped; waiting for kubegate's descriptors to settle");
    let added = state.backends.saturating_sub(ConfigState::INITIAL.backends) as u64;
    let kept_fds = KEPT_FDS_PER_BACKEND * added;
    let settled = sampler
        .settle(baseline.fds + kept_fds, Duration::from_secs(60))
        .await;
    let still_running = gw.proc.running() && gw.pid() == Some(pid);
    let watch_resumes_by_cause = crate::resumes::Scrape::of(gw.layout.admin)
        .await
        .map(|m| m.by_label("kubegate_watch_resumes_total"))
        .unwrap_or_default();
    eprintln!("soak: checking every acknowledged write in the store");
    let store = verdict::store_names(&cp).await?;
    let report = verdict::judge(verdict::Evidence {
        duration: plan.duration,
        seed: plan.seed,
        end_ms,
        windows,
        recorders: &recorders,
        store: &store,
        samples: sampler.all(),
        baseline,
        kept_fds,
        settled,
        still_running,
        pid,
        watch_resumes_by_cause,
    });
    gw.proc.kill();
    Ok(report)
}

/// Descriptors kubegate keeps for good for each backend a fault added: terminate mode learns
/// the replica's version over an upstream connection and keeps it (the last of its kind is
/// never retired), and a connection holds two, its socket and the copy kubegate shuts it
/// with.
const KEPT_FDS_PER_BACKEND: u64 = 2;

fn start_kubegate(dir: &Path, cp: &ControlPlane) -> anyhow::Result<Soaked> {
    let gw_dir = dir.join("kubegate");
    std::fs::create_dir_all(&gw_dir)?;
    let layout = Layout {
        passthrough: free_addr(),
        terminate: free_addr(),
        admin: free_addr(),
        config: gw_dir.join("kubegate.yaml"),
        pki: std::fs::canonicalize(cp.pki())?,
        backends: cp.addresses(),
    };
    let initial = ConfigState::INITIAL;
    layout.write_config(
        &layout
            .config(initial.backends, faults::DRAIN_TIMEOUTS[initial.drain])
            .to_yaml(),
    )?;
    let mut cmd = std::process::Command::new(binary("kubegate"));
    cmd.arg("run").arg("--config").arg(&layout.config);
    let proc = Proc::spawn(&mut cmd, &gw_dir.join("kubegate.log"))?;
    wait_listening(layout.admin, Duration::from_secs(15))?;
    Ok(Soaked { proc, layout })
}

/// Waits until `target` passes a request (its backends found ready).
async fn wait_serving(target: &Target) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while traffic::seed(target).await.is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "kubegate did not pass traffic within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
