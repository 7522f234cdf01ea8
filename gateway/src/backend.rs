//! One apiserver replica as the data path sees it: its health state, and the registry of its
//! open connections through which kubegate closes them. A `Backend` lives across reloads as long as its address stays.

use crate::metrics::BackendMetrics;
use arc_swap::{ArcSwap, ArcSwapOption};
use kubegate_health::{BackendState, CheckerHandle, ProbeRecord};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::AbortHandle;

/// Why kubegate itself closed a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The backend stopped answering probes: its connections are dead or hanging.
    BackendDown,
    /// The backend was not ready (or removed) for longer than `drain.timeout`.
    DrainTimeout,
    /// kubegate is shutting down and `shutdown.grace` ran out.
    ShutdownGrace,
}

impl CloseReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::BackendDown => "backend_down",
            CloseReason::DrainTimeout => "drain_timeout",
            CloseReason::ShutdownGrace => "shutdown_grace",
        }
    }
}

/// The open connections of one backend, so that kubegate can close them: each is a task, closed
/// by aborting it (dropping its sockets). A slot is reserved when the connection registers and
/// filled once its task is spawned.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: HashMap<u64, Option<AbortHandle>>,
}

/// Names and metric handles, replaced as a whole when a reload renames the backend.
pub struct BackendInfo {
    /// Name in logs and labels.
    pub name: String,
    /// Address probed for readiness.
    pub probe_address: SocketAddr,
    /// Hot-path metric handles.
    pub metrics: BackendMetrics,
}

/// One configured (or removed, still draining) apiserver replica.
pub struct Backend {
    /// Where connections go; the backend's identity.
    pub address: SocketAddr,
    info: ArcSwap<BackendInfo>,
    state: AtomicU8,
    /// Bumped on every state change; a drain timer only fires for the state it was set in.
    epoch: AtomicU64,
    since_unix_ms: AtomicU64,
    shutting_down: AtomicBool,
    active: AtomicI64,
    /// Passive ejection after a failed connect: skip until this many ms after `clock`.
    ejected_until_ms: AtomicU64,
    clock: Instant,
    registry: Mutex<Registry>,
    last_probe: ArcSwapOption<ProbeRecord>,
    /// Passing probes needed to (re)enter `ready`; more than `rise` while it flaps.
    passes_to_ready: AtomicU32,
    checker: Mutex<Option<CheckerHandle>>,
}

impl Backend {
    /// A backend in `state` (new ones start `unknown`).
    pub fn new(address: SocketAddr, info: BackendInfo, state: BackendState) -> Backend {
        let b = Backend {
            address,
            info: ArcSwap::from_pointee(info),
            state: AtomicU8::new(state as u8),
            epoch: AtomicU64::new(0),
            since_unix_ms: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            active: AtomicI64::new(0),
            ejected_until_ms: AtomicU64::new(0),
            clock: Instant::now(),
            registry: Mutex::default(),
            last_probe: ArcSwapOption::empty(),
            passes_to_ready: AtomicU32::new(0),
            checker: Mutex::new(None),
        };
        b.touch_since();
        b
    }

    /// Names and metric handles.
    pub fn info(&self) -> arc_swap::Guard<Arc<BackendInfo>> {
        self.info.load()
    }

    /// Replaces names and metric handles (a reload renamed it).
    pub fn set_info(&self, info: BackendInfo) {
        self.info.store(Arc::new(info));
    }

    /// Current health state.
    pub fn state(&self) -> BackendState {
        BackendState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Records a new state; returns the epoch that identifies it.
    pub fn set_state(&self, state: BackendState) -> u64 {
        self.state.store(state as u8, Ordering::Release);
        self.touch_since();
        self.epoch.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The epoch of the current state.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
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

    /// Records the last probe.
    pub fn set_last_probe(&self, record: ProbeRecord, shutting_down: bool) {
        self.shutting_down.store(shutting_down, Ordering::Release);
        self.last_probe.store(Some(Arc::new(record)));
    }

    /// Records the passing probes the checker asks for before `ready`.
    pub fn set_passes_to_ready(&self, passes: u32) {
        self.passes_to_ready.store(passes, Ordering::Relaxed);
    }

    /// Passing probes needed to (re)enter `ready` (0 before the first probe).
    pub fn passes_to_ready(&self) -> u32 {
        self.passes_to_ready.load(Ordering::Relaxed)
    }

    /// The last probe, if any ran.
    pub fn last_probe(&self) -> Option<Arc<ProbeRecord>> {
        self.last_probe.load_full()
    }

    /// Open proxied connections.
    pub fn active_connections(&self) -> i64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Registers a new connection; the returned guard deregisters it when dropped. Hand the
    /// connection's task to [`Backend::attach`] once it is spawned.
    pub fn register(self: &Arc<Self>) -> ConnectionGuard {
        let id = {
            let mut r = self.registry();
            let id = r.next_id;
            r.next_id += 1;
            r.open.insert(id, None);
            id
        };
        self.active.fetch_add(1, Ordering::Relaxed);
        let info = self.info.load_full();
        info.metrics.connections.inc();
        info.metrics.connections_total.inc();
        ConnectionGuard {
            opened_ms: self.clock.elapsed().as_millis() as u64,
            backend: self.clone(),
            id,
            info,
        }
    }

    /// Gives the registry the task that carries connection `id`. A connection closed by
    /// `close_all` between `register` and now is aborted here.
    pub fn attach(&self, id: u64, task: AbortHandle) {
        match self.registry().open.get_mut(&id) {
            Some(slot) => *slot = Some(task),
            // Closed meanwhile, or already finished (aborting a finished task does nothing).
            None => task.abort(),
        }
    }

    /// Closes every connection registered so far; later ones are not affected. Returns how many
    /// were open.
    pub fn close_all(&self) -> usize {
        let open = std::mem::take(&mut self.registry().open);
        for task in open.values().flatten() {
            task.abort();
        }
        open.len()
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Skips this backend for new connections for `d` after a failed connect.
    pub fn eject_for(&self, d: Duration) {
        let until = self.clock.elapsed().saturating_add(d).as_millis() as u64;
        self.ejected_until_ms.store(until, Ordering::Relaxed);
    }

    /// Passively ejected right now.
    pub fn ejected(&self) -> bool {
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        until != 0 && (self.clock.elapsed().as_millis() as u64) < until
    }

    /// Ends passive ejection (a probe passed).
    pub fn clear_ejection(&self) {
        self.ejected_until_ms.store(0, Ordering::Relaxed);
    }

    /// Installs (or replaces, or with `None` stops) the health checker.
    pub fn set_checker(&self, checker: Option<CheckerHandle>) {
        *self.checker.lock().unwrap_or_else(|e| e.into_inner()) = checker;
    }

    /// Asks the checker for a probe now (a connect just failed).
    pub fn probe_soon(&self) {
        if let Some(c) = self
            .checker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            c.probe_soon();
        }
    }
}

/// One registered connection. Dropping it deregisters the connection and records its lifetime.
pub struct ConnectionGuard {
    backend: Arc<Backend>,
    id: u64,
    info: Arc<BackendInfo>,
    /// When it opened, in ms of the backend's clock (half the size of an `Instant`: every open
    /// connection holds one).
    opened_ms: u64,
}

impl ConnectionGuard {
    /// The connection's key in its backend's registry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Metric handles (as they were when the connection opened).
    pub fn metrics(&self) -> &BackendMetrics {
        &self.info.metrics
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        // The handle is dropped outside the lock.
        let handle = self.backend.registry().open.remove(&self.id);
        drop(handle);
        self.backend.active.fetch_sub(1, Ordering::Relaxed);
        self.info.metrics.connections.dec();
        self.info.metrics.connection_duration.observe(
            self.backend
                .clock
                .elapsed()
                .as_millis()
                .saturating_sub(self.opened_ms.into()) as f64
                / 1e3,
        );
    }
}
