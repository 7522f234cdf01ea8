//! Several control planes behind one kubegate, picked by the TLS server name
//! (docs/failover.md, "Several clusters behind one kubegate"):
//!
//! - **Isolation** (`isolation.rs`): clusters a and b, each its own etcd, CA and simulated
//!   replicas; a failover scenario runs in a while b carries the same steady traffic. What b's
//!   clients see — failures, watch breaks, leader changes, latency before and during a's fault —
//!   is the figure; b must see nothing.
//! - **Scale** (`scale.rs`): N clusters of 3 replicas each, kubegate's memory at rest and under
//!   traffic to every cluster, and what a reload adding one more cluster costs: how long until
//!   it serves, its memory, and what the other clusters' clients saw meanwhile.

mod isolation;
mod scale;
mod setup;

pub use isolation::IsolationRun;
pub use scale::{ReloadCost, ScaleRow, Windows};
pub use setup::Mode;

use crate::scenarios::Pace;
use serde::Serialize;
use std::path::PathBuf;

/// What to run.
pub struct Plan {
    /// Scenarios run in cluster a (the matrix's names).
    pub scenarios: Vec<String>,
    /// kubegate's listener modes, each scenario run once per mode.
    pub modes: Vec<Mode>,
    /// Cluster counts of the scale figure, measured in each of `modes` (none: no scale run).
    pub sizes: Vec<usize>,
    /// How long the scale figure's readings wait.
    pub windows: Windows,
    /// Fault durations.
    pub pace: Pace,
    /// Working directory (configs, logs).
    pub dir: PathBuf,
}

/// Everything one `clusters` run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// One per scenario and mode.
    pub isolation: Vec<IsolationRun>,
    /// One per mode and cluster count.
    pub scale: Vec<ScaleRow>,
    /// The reload adding a cluster to the largest count, one per mode.
    pub reloads: Vec<ReloadCost>,
}

impl Report {
    /// The checks that did not hold, each said in a line (none: the run passed).
    pub fn failures(&self) -> Vec<String> {
        let mut failed: Vec<String> = self
            .isolation
            .iter()
            .filter(|r| r.status != "ok")
            .map(|r| format!("{} · {}: {}", r.scenario, r.mode.as_str(), r.status))
            .collect();
        failed.extend(self.scale.iter().filter(|r| r.status != "ok").map(|r| {
            format!(
                "{} clusters · {}: {}",
                r.clusters,
                r.mode.as_str(),
                r.status
            )
        }));
        failed.extend(self.reloads.iter().filter(|r| r.status != "ok").map(|r| {
            format!(
                "reload adding a cluster · {}: {}",
                r.mode.as_str(),
                r.status
            )
        }));
        failed
    }
}

/// Runs the isolation matrix, then the scale figure.
pub async fn run(plan: &Plan) -> anyhow::Result<Report> {
    let mut isolation = Vec::new();
    for scenario in &plan.scenarios {
        for &mode in &plan.modes {
            let label = format!("{scenario} · {}", mode.as_str());
            eprintln!("clusters: {label}: starting two control planes");
            let dir = plan.dir.join(scenario).join(mode.as_str());
            let run = isolation::run(scenario, mode, plan.pace, &dir, &label)
                .await
                .unwrap_or_else(|e| IsolationRun::failed(scenario, mode, format!("{e:#}")));
            eprintln!("clusters: {label}: {}", run.status);
            isolation.push(run);
        }
    }
    let (scale, reloads) = if plan.sizes.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let dir = plan.dir.join("scale");
        scale::run(&plan.sizes, &plan.modes, plan.windows, &dir).await?
    };
    Ok(Report {
        isolation,
        scale,
        reloads,
    })
}

/// The report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    if !report.isolation.is_empty() {
        out.push_str(&isolation::markdown(&report.isolation));
    }
    if !report.scale.is_empty() {
        out.push('\n');
        out.push_str(&scale::markdown(&report.scale, &report.reloads));
    }
    out
}
