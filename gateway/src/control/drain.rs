//! `kubegate drain NAME` and `kubegate undrain NAME`: the admin endpoint's drain calls, for an
//! operator about to restart an apiserver. `--wait` follows `/debug/backends` until the
//! backend holds no long-running request, so that `kubegate drain a1 --wait && <restart a1>`
//! restarts a replica with nothing left on it to move.

use crate::control::admin::{BackendView, DrainAnswer};
use crate::control::status::{call, AdminTarget};
use anyhow::{bail, Context};
use http::Method;
use std::time::{Duration, Instant};

/// How long one admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `--wait` looks again.
const POLL: Duration = Duration::from_millis(500);

/// What `kubegate drain` was asked.
#[derive(Debug, Clone)]
pub struct DrainRequest {
    /// The backend's name (as `kubegate status` shows it).
    pub backend: String,
    /// Drain (true) or undrain (false).
    pub drain: bool,
    /// Wait, at most this long, until the backend holds no long-running request.
    pub wait: Option<Duration>,
}

/// Carries out `request` against the admin endpoint at `target`, printing what happens.
pub fn run(target: &AdminTarget, request: &DrainRequest) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(drain(target, request))
}

async fn drain(target: &AdminTarget, request: &DrainRequest) -> anyhow::Result<()> {
    let action = if request.drain { "drain" } else { "undrain" };
    let path = format!(
        "/backends/{}/{action}",
        kubegate_wire::target::escape_component(&request.backend)
    );
    let body = timed(call(target, Method::POST, &path)).await?;
    let answer: DrainAnswer =
        serde_json::from_slice(&body).context("unexpected answer to the drain call")?;
    if !answer.drained {
        println!("{}: undrained", answer.backend);
        return Ok(());
    }
    println!(
        "{}: drained; {} long-running requests to move",
        answer.backend, answer.long_running_requests
    );
    let Some(wait) = request.wait else {
        return Ok(());
    };
    let deadline = Instant::now() + wait;
    let mut last = answer.long_running_requests;
    loop {
        let rows: Vec<BackendView> =
            serde_json::from_slice(&timed(call(target, Method::GET, "/debug/backends")).await?)
                .context("unexpected /debug/backends answer")?;
        let held: usize = rows
            .iter()
            .filter(|r| r.name == answer.backend)
            .map(|r| r.long_running_requests)
            .sum();
        if held == 0 {
            println!("{}: holds no long-running request", answer.backend);
            return Ok(());
        }
        if held != last {
            println!("{}: {held} long-running requests left", answer.backend);
            last = held;
        }
        if Instant::now() >= deadline {
            bail!(
                "{}: still holds {held} long-running requests after {} (log streams, exec and port-forwards do not move; watches move at terminate.watch_moves_per_second)",
                answer.backend,
                humantime::format_duration(wait)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn timed<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .with_context(|| format!("admin endpoint did not answer within {CALL_TIMEOUT:?}"))?
}
