//! One apiserver replica as every data plane sees it: its identity (the address), names, health
//! state, passive ejection, and the data planes' own per-backend state. A `Backend` lives across
//! reloads for as long as its address stays configured; a removed one lives until its work
//! ended.

use crate::planes::DataPlanes;
use arc_swap::{ArcSwap, ArcSwapOption};
use kubegate_health::{BackendState, CheckerHandle, HealthTracker, ProbeRecord};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// Where a backend came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendSource {
    /// The configuration's `backends`.
    Static,
    /// The cluster's `default/kubernetes` EndpointSlices (or the state file that remembers
    /// them).
    Discovered,
}

impl BackendSource {
    /// Label in `/debug/backends` and `kubegate status`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendSource::Static => "static",
            BackendSource::Discovered => "discovered",
        }
    }
}

/// Names, replaced as a whole when a reload renames the backend or moves its probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Name in logs and labels.
    pub name: String,
    /// Address probed for readiness.
    pub probe_address: SocketAddr,
    /// Every address of the replica, `address` first (`other_addresses`): the one in use takes
    /// its new work.
    pub addresses: Vec<SocketAddr>,
    /// Where it came from.
    pub source: BackendSource,
}

/// The backend's health as the pool keeps it: the one tracker that decides its state, and the
/// tasks that act on it. Locked only by the pool, never across an await.
pub(crate) struct Health {
    /// Decides the state; the only one for this backend.
    pub tracker: HealthTracker,
    /// The probe loop; `None` once removed.
    pub checker: Option<CheckerHandle>,
    /// The drain in progress: its deadline task, aborted when the state changes again.
    pub drain: Option<AbortHandle>,
}

/// A backend's failed probes, as `own_failure.rs` weighs them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    /// When the current run of failed probes began; `None` while the last probe passed.
    pub since: Option<SystemTime>,
    /// When the last failed probe started; `None` if none ever failed.
    pub last: Option<SystemTime>,
}

/// One configured (or removed, still draining) apiserver replica. `P` is what the data planes
/// keep per backend.
pub struct Backend<P> {
    /// Where work goes; the backend's identity.
    pub address: SocketAddr,
    info: ArcSwap<BackendInfo>,
    pub(crate) health: Mutex<Health>,
    /// The tracker's state, published for lock-free reads; written only by the pool while it
    /// holds `health`.
    state: AtomicU8,
    since_unix_ms: AtomicU64,
    shutting_down: AtomicBool,
    /// The operator asked for its work to move elsewhere ahead of a planned restart.
    drained_by_operator: AtomicBool,
    /// Which of `info().addresses` new work goes to, when not the first: the last that passed
    /// a probe where the one in use was unreachable. An address, not a position, so that a
    /// reload that reorders or extends the list keeps it.
    in_use: Mutex<Option<SocketAddr>>,
    last_probe: ArcSwapOption<ProbeRecord>,
    /// When the current run of failed probes began (none while the last probe passed), and
    /// when the last failed probe started.
    failures: Mutex<Failures>,
    passes_to_ready: AtomicU32,
    ejection: Ejection,
    /// Woken when the data planes' open work on this backend drops to none.
    idle: Notify,
    /// The pool's: woken when any backend's work drops to none.
    pool_idle: Arc<Notify>,
    planes: P,
}

impl<P: DataPlanes> Backend<P> {
    pub(crate) fn new(
        address: SocketAddr,
        info: BackendInfo,
        tracker: HealthTracker,
        planes: P,
        pool_idle: Arc<Notify>,
    ) -> Backend<P> {
        let state = tracker.state();
        let b = Backend {
            address,
            info: ArcSwap::from_pointee(info),
            passes_to_ready: AtomicU32::new(tracker.rise_needed()),
            health: Mutex::new(Health {
                tracker,
                checker: None,
                drain: None,
            }),
            state: AtomicU8::new(state as u8),
            since_unix_ms: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            drained_by_operator: AtomicBool::new(false),
            in_use: Mutex::new(None),
            last_probe: ArcSwapOption::empty(),
            failures: Mutex::new(Failures::default()),
            ejection: Ejection::new(),
            idle: Notify::new(),
            pool_idle,
            planes,
        };
        b.touch_since();
        b
    }

    /// Where new work goes: the replica's address in use (`address` unless a probe moved it
    /// to another of its addresses).
    pub fn connect_address(&self) -> SocketAddr {
        self.in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or(self.address)
    }

    /// A probe found the replica at its address `to` where the one in use was unreachable:
    /// new work goes there, and the data planes stop giving new work to what they opened to
    /// the old one (it may be there no more, and fail silently).
    pub(crate) fn moved_to(&self, to: SocketAddr) {
        let info = self.info();
        if !info.addresses.contains(&to) {
            return; // A checker a reload replaced, still finishing its round.
        }
        let from = {
            let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
            let from = in_use.unwrap_or(self.address);
            if from == to {
                return;
            }
            *in_use = (to != self.address).then_some(to);
            from
        };
        self.planes.moved();
        tracing::warn!(backend = %info.name, %from, %to, "backend unreachable at the address in use; its new work goes to another of its addresses");
    }

    /// Its addresses changed (a reload): the address in use stays if it is still one of them,
    /// else new work goes to the first.
    pub(crate) fn addresses_changed(&self) {
        let info = self.info();
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        if in_use.is_some_and(|a| !info.addresses.contains(&a)) {
            *in_use = None;
        }
    }

    /// The data planes call this when their open work on this backend may have dropped to
    /// none: whoever waits for the backend (a removal, a shutdown) checks again.
    pub fn work_ended(&self) {
        if self.planes.open() == 0 {
            self.idle.notify_waiters();
            self.pool_idle.notify_waiters();
        }
    }

    /// Returns once the data planes hold no open work on this backend.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a `work_ended` between the two is not lost.
            notified.as_mut().enable();
            if self.planes.open() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl<P> Backend<P> {
    /// Names.
    pub fn info(&self) -> arc_swap::Guard<Arc<BackendInfo>> {
        self.info.load()
    }

    pub(crate) fn set_info(&self, info: BackendInfo) {
        self.info.store(Arc::new(info));
    }

    /// The data planes' state for this backend.
    pub fn planes(&self) -> &P {
        &self.planes
    }

    /// Current health state.
    pub fn state(&self) -> BackendState {
        BackendState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Publishes the tracker's new state (the pool, under the health lock).
    pub(crate) fn publish_state(&self, state: BackendState) {
        self.state.store(state as u8, Ordering::Release);
        self.touch_since();
    }

    fn touch_since(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.since_unix_ms.store(ms, Ordering::Release);
    }

    /// When the current state began (Unix ms).
    pub fn since_unix_ms(&self) -> u64 {
        self.since_unix_ms.load(Ordering::Acquire)
    }

    /// The last probe said `[-]shutdown`.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// The operator drained it (`kubegate drain`): it gets new work only when every ready
    /// backend is drained, and terminate mode moves its watches elsewhere.
    pub fn drained_by_operator(&self) -> bool {
        self.drained_by_operator.load(Ordering::Acquire)
    }

    /// Sets the operator's drain; returns whether it was set before.
    pub(crate) fn set_drained_by_operator(&self, drained: bool) -> bool {
        self.drained_by_operator.swap(drained, Ordering::AcqRel)
    }

    /// Records a probe that ran; returns whether the backend was shutting down before it.
    pub(crate) fn record_probe(&self, record: &ProbeRecord, shutting_down: bool) -> bool {
        {
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if record.outcome.passed() {
                f.since = None;
            } else {
                f.since.get_or_insert(record.at);
                f.last = Some(record.at);
            }
        }
        self.last_probe.store(Some(Arc::new(record.clone())));
        self.shutting_down.swap(shutting_down, Ordering::AcqRel)
    }

    /// When the current run of failed probes began (`None` while the last probe passed), and
    /// when the last failed probe started (`None` if none ever failed).
    pub fn failures(&self) -> Failures {
        *self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last probe that ran, if any.
    pub fn last_probe(&self) -> Option<Arc<ProbeRecord>> {
        self.last_probe.load_full()
    }

    pub(crate) fn set_passes_to_ready(&self, passes: u32) {
        self.passes_to_ready.store(passes, Ordering::Relaxed);
    }

    /// Passing probes in a row it needs to (re)enter `ready`: `health.rise`, or more while it
    /// flaps.
    pub fn passes_to_ready(&self) -> u32 {
        self.passes_to_ready.load(Ordering::Relaxed)
    }

    /// Passively ejected right now (a connect to it failed, or it answered a failure of its
    /// own, within the ejection time).
    pub fn ejected(&self) -> bool {
        self.ejection.active()
    }

    /// A connect to this backend failed, or it answered with a failure of its own (its
    /// storage): skip it for new work for `eject_for` (unless nothing else is left), and probe
    /// it now rather than at the next interval, so that its state follows within one probe.
    pub fn failed_passively(&self, eject_for: Duration) {
        self.ejection.eject_for(eject_for);
        if let Some(c) = &self.health().checker {
            c.probe_soon();
        }
    }

    pub(crate) fn clear_ejection(&self) {
        self.ejection.clear();
    }

    pub(crate) fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Passive ejection: after a failed connect, the balancer skips the backend for a while (while
/// others remain) instead of waiting for a probe to notice.
struct Ejection {
    /// Skipped until this many ms after `clock`; 0 when not ejected.
    until_ms: AtomicU64,
    clock: Instant,
}

impl Ejection {
    fn new() -> Ejection {
        Ejection {
            until_ms: AtomicU64::new(0),
            clock: Instant::now(),
        }
    }

    fn eject_for(&self, d: Duration) {
        let until = self.clock.elapsed().saturating_add(d).as_millis() as u64;
        self.until_ms.store(until.max(1), Ordering::Relaxed);
    }

    fn active(&self) -> bool {
        let until = self.until_ms.load(Ordering::Relaxed);
        until != 0 && (self.clock.elapsed().as_millis() as u64) < until
    }

    fn clear(&self) {
        self.until_ms.store(0, Ordering::Relaxed);
    }
}
