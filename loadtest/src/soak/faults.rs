//! The soak's faults: each one real (signals to real processes, the simulator's fault port,
//! kubegate's config file and SIGHUP), picked at random from a seeded generator, one at a time,
//! and carried out to its end (the replica ready again, the reload applied) before the next.

use super::soaked::Soaked;
use crate::control_plane::ControlPlane;
use crate::resumes::{metric_reaches, metric_sum};
use serde::Serialize;
use std::time::Duration;

/// `drain.timeout` values a valid reload switches between.
pub const DRAIN_TIMEOUTS: [Duration; 2] = [Duration::from_secs(30), Duration::from_secs(31)];

/// Replicas faults are injected into: the three kubegate always has (the fourth comes and
/// goes as a backend).
const FAULTED: u64 = 3;

/// What the faults changed so far in kubegate's config.
#[derive(Debug, Clone, Copy)]
pub struct ConfigState {
    /// Replicas kubegate has as backends (3, or 4 once the fourth was added).
    pub backends: usize,
    /// Index into [`DRAIN_TIMEOUTS`] of the `drain.timeout` in force.
    pub drain: usize,
}

impl ConfigState {
    /// As kubegate starts.
    pub const INITIAL: ConfigState = ConfigState {
        backends: 3,
        drain: 0,
    };
}

/// One fault.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// SIGTERM a replica, wait for its exit, start it again.
    GracefulRestart(usize),
    /// SIGKILL a replica, start it again 3 s later.
    Crash(usize),
    /// SIGSTOP a replica for 8 s.
    Freeze(usize),
    /// A replica's `/readyz` fails and passes three times, 2 s each.
    Flap(usize),
    /// A replica's `/readyz` fails for 10 s.
    NotReady(usize),
    /// A valid config change (`drain.timeout`), applied by reload.
    ReloadValid,
    /// A config that does not parse: refused, the running one stays; then the valid one back.
    ReloadInvalid,
    /// 20 SIGHUPs within a second.
    SighupStorm,
    /// The fourth replica becomes a backend.
    AddBackend,
    /// The fourth replica stops being a backend (drained).
    RemoveBackend,
}

/// What kind of fault, for the report's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// [`Fault::GracefulRestart`].
    GracefulRestart,
    /// [`Fault::Crash`].
    Crash,
    /// [`Fault::Freeze`].
    Freeze,
    /// [`Fault::Flap`].
    Flap,
    /// [`Fault::NotReady`].
    NotReady,
    /// [`Fault::ReloadValid`].
    ReloadValid,
    /// [`Fault::ReloadInvalid`].
    ReloadInvalid,
    /// [`Fault::SighupStorm`].
    SighupStorm,
    /// [`Fault::AddBackend`].
    AddBackend,
    /// [`Fault::RemoveBackend`].
    RemoveBackend,
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// What was done.
    pub fault: String,
    /// Its kind.
    pub kind: FaultKind,
    /// Start, ms since the soak began.
    pub from_ms: u64,
    /// End (replica ready again, reload applied; a removed backend's drain deadline), ms.
    pub to_ms: u64,
    /// If the fault could not be carried out as planned (a replica slow to come back).
    pub problem: Option<String>,
}

impl Fault {
    /// A random fault, given how many replicas kubegate has as backends (3 or 4).
    pub fn pick(rng: &mut fastrand::Rng, backends: usize) -> Fault {
        let replica = rng.u64(0..FAULTED) as usize;
        match rng.u32(0..10) {
            0 => Fault::GracefulRestart(replica),
            1 => Fault::Crash(replica),
            2 => Fault::Freeze(replica),
            3 => Fault::Flap(replica),
            4 => Fault::NotReady(replica),
            5 => Fault::ReloadValid,
            6 => Fault::ReloadInvalid,
            7 => Fault::SighupStorm,
            _ if backends == 3 => Fault::AddBackend,
            _ => Fault::RemoveBackend,
        }
    }

    /// Its kind.
    pub fn kind(self) -> FaultKind {
        match self {
            Fault::GracefulRestart(_) => FaultKind::GracefulRestart,
            Fault::Crash(_) => FaultKind::Crash,
            Fault::Freeze(_) => FaultKind::Freeze,
            Fault::Flap(_) => FaultKind::Flap,
            Fault::NotReady(_) => FaultKind::NotReady,
            Fault::ReloadValid => FaultKind::ReloadValid,
            Fault::ReloadInvalid => FaultKind::ReloadInvalid,
            Fault::SighupStorm => FaultKind::SighupStorm,
            Fault::AddBackend => FaultKind::AddBackend,
            Fault::RemoveBackend => FaultKind::RemoveBackend,
        }
    }

    /// In words.
    pub fn describe(self) -> String {
        let r = |i: usize| format!("replica-{}", i + 1);
        match self {
            Fault::GracefulRestart(i) => format!("graceful restart of {}", r(i)),
            Fault::Crash(i) => format!("crash (SIGKILL) of {}", r(i)),
            Fault::Freeze(i) => format!("freeze (SIGSTOP 8 s) of {}", r(i)),
            Fault::Flap(i) => format!("readyz flaps on {}", r(i)),
            Fault::NotReady(i) => format!("{} not ready for 10 s", r(i)),
            Fault::ReloadValid => "valid reload".into(),
            Fault::ReloadInvalid => "invalid reload (refused), then valid".into(),
            Fault::SighupStorm => "SIGHUP storm (20 in 1 s)".into(),
            Fault::AddBackend => "replica-4 added as a backend".into(),
            Fault::RemoveBackend => "replica-4 removed (drained)".into(),
        }
    }

    /// Carries the fault out, to its end.
    pub async fn carry_out(
        self,
        cp: &mut ControlPlane,
        gw: &Soaked,
        state: &mut ConfigState,
    ) -> anyhow::Result<()> {
        let sleep = tokio::time::sleep;
        match self {
            Fault::GracefulRestart(i) => {
                let exited = cp.terminate(i, Duration::from_secs(70)).await?;
                anyhow::ensure!(exited, "replica-{} did not exit after SIGTERM", i + 1);
                cp.restart(i, "1s").await?;
                cp.wait_ready(i, Duration::from_secs(60)).await?;
            }
            Fault::Crash(i) => {
                cp.kill(i).await?;
                sleep(Duration::from_secs(3)).await;
                cp.restart(i, "1s").await?;
                cp.wait_ready(i, Duration::from_secs(60)).await?;
            }
            Fault::Freeze(i) => {
                cp.freeze(i).await?;
                sleep(Duration::from_secs(8)).await;
                cp.thaw(i).await?;
            }
            Fault::Flap(i) => {
                for _ in 0..3 {
                    cp.force_check(i, "etcd", true).await?;
                    sleep(Duration::from_secs(2)).await;
                    cp.force_check(i, "etcd", false).await?;
                    sleep(Duration::from_secs(2)).await;
                }
            }
            Fault::NotReady(i) => {
                cp.force_check(i, "etcd", true).await?;
                sleep(Duration::from_secs(10)).await;
                cp.force_check(i, "etcd", false).await?;
            }
            Fault::ReloadValid => {
                // A file with the same content is no change: switch the drain timeout.
                state.drain = 1 - state.drain;
                reload(gw, &config(gw, state), true).await?;
            }
            Fault::ReloadInvalid => {
                reload(gw, "listeners: [\n  this is not: yaml: at all\n", false).await?;
                reload(gw, &config(gw, state), true).await?;
            }
            Fault::SighupStorm => {
                let before = reloads(gw, "success").await;
                for _ in 0..20 {
                    gw.signal(libc::SIGHUP)?;
                    sleep(Duration::from_millis(50)).await;
                }
                wait_for(gw, "success", before + 1).await?;
            }
            Fault::AddBackend => {
                state.backends = 4;
                reload(gw, &config(gw, state), true).await?;
            }
            Fault::RemoveBackend => {
                state.backends = 3;
                reload(gw, &config(gw, state), true).await?;
            }
        }
        Ok(())
    }
}

fn config(gw: &Soaked, state: &ConfigState) -> String {
    gw.layout
        .config(state.backends, DRAIN_TIMEOUTS[state.drain])
        .to_yaml()
}

/// kubegate's reloads with `result` so far.
fn reloads_series(result: &str) -> String {
    format!("kubegate_config_reloads_total{{result=\"{result}\"")
}

async fn reloads(gw: &Soaked, result: &str) -> u64 {
    metric_sum(gw.layout.admin, &reloads_series(result))
        .await
        .unwrap_or(0)
}

/// Writes `text` as kubegate's config and waits for the reload it triggers: applied when
/// `valid`, refused otherwise.
async fn reload(gw: &Soaked, text: &str, valid: bool) -> anyhow::Result<()> {
    let result = if valid { "success" } else { "failure" };
    let before = reloads(gw, result).await;
    gw.layout.write_config(text)?;
    wait_for(gw, result, before + 1).await
}

/// Waits (up to 30 s) until kubegate has counted `at_least` reloads with `result`.
async fn wait_for(gw: &Soaked, result: &str, at_least: u64) -> anyhow::Result<()> {
    let series = reloads_series(result);
    metric_reaches(gw.layout.admin, &series, at_least, Duration::from_secs(30)).await?;
    Ok(())
}
