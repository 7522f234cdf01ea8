//! The pool: the configured backends, the routing table, and the one place where a backend's
//! state changes and its consequences (drain, close, forget) are set in motion.

use crate::backend::{Backend, BackendInfo, BackendSource, Health};
use crate::events::PoolEvents;
use crate::orders::{order_for, CloseReason, Order};
use crate::own_failure::{failure_is_own, witness_due, LastProbe, Witness};
use crate::planes::DataPlanes;
use crate::routing::RoutingTable;
use arc_swap::ArcSwap;
use kubegate_config::{BackendSpec, DrainConfig};
use kubegate_health::{
    spawn_checker, BackendState, HealthObserver, HealthTracker, Pace, ProbeOutcome, ProbeRecord,
    ProbeSettings, ProbeSignal, Thresholds, Transition,
};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// The settings the pool decides with; replaced whole on a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSettings {
    /// Counts that decide transitions.
    pub thresholds: Thresholds,
    /// Drain deadlines.
    pub drain: DrainConfig,
    /// Time between probes of one backend (`health.interval`): how far apart the probes that
    /// show a failure to be one backend's own must be (`own_failure.rs`).
    pub probe_interval: Duration,
}

/// Makes a new backend's data-plane state from its name.
type PlanesFactory<P> = Box<dyn Fn(&str) -> P + Send + Sync>;

/// Every backend, configured or removed and still draining.
pub struct Pool<P> {
    members: Mutex<Vec<Arc<Backend<P>>>>,
    routing: ArcSwap<RoutingTable<P>>,
    cursor: AtomicUsize,
    /// What checkers probe with; `None`: no checkers, probes are fed by hand (unit tests).
    probes: Option<Arc<ArcSwap<ProbeSettings>>>,
    settings: ArcSwap<PoolSettings>,
    events: Arc<dyn PoolEvents>,
    new_planes: PlanesFactory<P>,
    /// Woken whenever some backend's work drops to none.
    idle: Arc<Notify>,
    /// How many backends are ready, published on every rebuild of the routing table: drains
    /// wait on it (see [`Pool::apply`]).
    ready: tokio::sync::watch::Sender<usize>,
    /// Bumped after every probe observed: drains waiting for a failure to show itself one
    /// backend's own look again.
    probed: tokio::sync::watch::Sender<u64>,
    /// Bumped after every passing probe, whatever the backend's state: work held while none is
    /// ready may go to a backend answering again before it has passed `rise` probes.
    passed: tokio::sync::watch::Sender<u64>,
    /// Every backend is being removed with the pool itself (its cluster left the
    /// configuration): no drain waits for another backend to be ready.
    retiring: std::sync::atomic::AtomicBool,
    this: Weak<Pool<P>>,
}

impl<P: DataPlanes> Pool<P> {
    /// An empty pool. `probes`: what checkers probe with (`None` starts no checkers); `events`
    /// counts decisions; `new_planes` makes a backend's data-plane state from its name.
    pub fn new(
        settings: PoolSettings,
        probes: Option<ProbeSettings>,
        events: Arc<dyn PoolEvents>,
        new_planes: impl Fn(&str) -> P + Send + Sync + 'static,
    ) -> Arc<Pool<P>> {
        Arc::new_cyclic(|this| Pool {
            members: Mutex::new(Vec::new()),
            routing: ArcSwap::from_pointee(RoutingTable::default()),
            cursor: AtomicUsize::new(0),
            probes: probes.map(|p| Arc::new(ArcSwap::from_pointee(p))),
            settings: ArcSwap::from_pointee(settings),
            events,
            new_planes: Box::new(new_planes),
            idle: Arc::new(Notify::new()),
            ready: tokio::sync::watch::Sender::new(0),
            probed: tokio::sync::watch::Sender::new(0),
            passed: tokio::sync::watch::Sender::new(0),
            retiring: std::sync::atomic::AtomicBool::new(false),
            this: this.clone(),
        })
    }

    fn members(&self) -> MutexGuard<'_, Vec<Arc<Backend<P>>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every backend, configured or draining after removal.
    pub fn backends(&self) -> Vec<Arc<Backend<P>>> {
        self.members().clone()
    }

    /// Who may get new work, read lock-free; the handle may be kept across awaits (a connect
    /// and its retries use one table).
    pub fn routing(&self) -> Arc<RoutingTable<P>> {
        self.routing.load_full()
    }

    /// Returns once some backend is ready: at once when one is.
    pub async fn some_ready(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives as long as the pool, which `self` keeps.
        let _ = ready.wait_for(|n| *n > 0).await;
    }

    /// Returns at the next passing probe of any backend, or at once when one is ready.
    pub async fn some_passing(&self) {
        let mut passed = self.passed.subscribe();
        passed.mark_unchanged();
        if self.routing().ready.is_empty() {
            // The sender lives as long as the pool, which `self` keeps.
            let _ = passed.changed().await;
        }
    }

    /// Rotates round-robin picks and breaks least-load ties.
    pub fn cursor(&self) -> &AtomicUsize {
        &self.cursor
    }

    /// Work open on every backend.
    pub fn open(&self) -> usize {
        self.members().iter().map(|b| b.planes().open()).sum()
    }

    /// Sets or clears the operator's drain of the backend named `name` (`kubegate drain`):
    /// while set, new work goes to the other ready backends. Returns whether the backend
    /// exists. The drain lives as long as the backend: a reload keeps it, a restart of
    /// kubegate forgets it.
    pub fn drain_by_operator(&self, name: &str, drained: bool) -> bool {
        // Every member of that name: a backend re-added while its old self still drains too.
        let named: Vec<_> = self
            .members()
            .iter()
            .filter(|b| b.info().name == name)
            .cloned()
            .collect();
        let changed = named
            .iter()
            .filter(|b| b.set_drained_by_operator(drained) != drained)
            .count();
        if changed > 0 {
            tracing::info!(backend = %name, drained, "backend drained by the operator");
            self.rebuild_routing();
        }
        !named.is_empty()
    }

    /// Adds a backend in `unknown` and starts probing it. Must run inside the runtime that is
    /// to carry its health checks.
    pub fn add(&self, spec: &BackendSpec) {
        self.add_from(spec, BackendSource::Static);
    }

    /// Adds a backend that came from `source`; none to a retired pool (its cluster left the
    /// configuration while discovery still found replicas).
    pub fn add_from(&self, spec: &BackendSpec, source: BackendSource) {
        if self.retiring.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(address = %spec.address, "a retired pool takes no backend");
            return;
        }
        let info = BackendInfo {
            name: spec.display_name(),
            probe_address: spec.probe_address(),
            addresses: spec.addresses(),
            source,
        };
        let tracker = HealthTracker::new(self.settings.load().thresholds);
        let backend = Arc::new(Backend::new(
            spec.address,
            info.clone(),
            tracker,
            (self.new_planes)(&info.name),
            self.idle.clone(),
        ));
        self.events.backend_added(&info.name, BackendState::Unknown);
        // Its checker starts before any lock of the pool is taken: a first probe may lock
        // the backend's health and then the members (a change of state).
        self.start_checker(&backend);
        {
            // Under the members' lock, as `retire` sets `retiring`: a backend is either added
            // before the pool retires, and retired with it, or not at all.
            let mut members = self.members();
            if !self.retiring.load(std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(backend = %info.name, address = %spec.address, "backend added");
                // A backend re-added while its old self still drains: the old one keeps
                // draining.
                members.push(backend);
                return;
            }
        }
        // The pool retired meanwhile: no probe goes on, nothing of it is kept.
        backend.health().checker = None;
        self.events.forgotten(&info.name);
    }

    /// A kept backend got another name or probe address: its state, tracker and work stay.
    pub fn update(&self, after: &BackendSpec) {
        let Some(backend) = self.configured(after.address) else {
            return;
        };
        let old = backend.info().as_ref().clone();
        let info = BackendInfo {
            name: after.display_name(),
            probe_address: after.probe_address(),
            addresses: after.addresses(),
            source: old.source,
        };
        backend.set_info(info.clone());
        if old.name != info.name {
            backend.planes().renamed(&info.name);
            self.events
                .backend_renamed(&old.name, &info.name, backend.state());
        }
        if old.addresses != info.addresses {
            backend.addresses_changed();
        }
        if old.probe_address != info.probe_address || old.addresses != info.addresses {
            self.start_checker(&backend);
        }
        tracing::info!(backend = %info.name, previous_name = %old.name, probe_address = %info.probe_address, "backend updated");
    }

    /// Stops probing a backend and drains it; it is forgotten once its work has ended.
    pub fn remove(&self, spec: &BackendSpec) {
        let Some(backend) = self.configured(spec.address) else {
            return;
        };
        let mut health = backend.health();
        health.checker = None;
        if let Some(t) = health.tracker.remove() {
            self.apply(&backend, &mut health, t, "removed from configuration");
        }
    }

    /// Removes every backend, the pool going with them (its cluster left the configuration):
    /// each drains until the drain deadline without waiting for another backend to be
    /// ready, since none will be, and is forgotten once its work has ended.
    pub fn retire(&self) {
        {
            let _members = self.members();
            self.retiring
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for b in self.backends() {
            let mut health = b.health();
            health.checker = None;
            if let Some(t) = health.tracker.remove() {
                self.apply(&b, &mut health, t, "its cluster removed from configuration");
            }
        }
    }

    /// New thresholds, drain deadlines and probe settings (a reload). Every backend keeps its
    /// state, its counts in progress and its flap damping; checkers pick up the new probe
    /// settings at their next probe.
    pub fn reconfigure(&self, settings: PoolSettings, probes: Option<ProbeSettings>) {
        if let (Some(shared), Some(p)) = (&self.probes, probes) {
            shared.store(Arc::new(p));
        }
        for b in self.backends() {
            let mut health = b.health();
            health.tracker.set_thresholds(settings.thresholds);
            b.set_passes_to_ready(health.tracker.rise_needed());
        }
        self.settings.store(Arc::new(settings));
    }

    /// Closes all open work (kubegate's shutdown grace ran out); returns how much.
    pub fn close_all(&self, reason: CloseReason) -> usize {
        self.backends().iter().map(|b| self.close(b, reason)).sum()
    }

    /// Returns once no backend has open work.
    pub async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The backend at `address` that is not being removed, if any.
    pub fn configured(&self, address: SocketAddr) -> Option<Arc<Backend<P>>> {
        self.members()
            .iter()
            .find(|b| b.address == address && b.state() != BackendState::Removed)
            .cloned()
    }

    fn start_checker(&self, backend: &Arc<Backend<P>>) {
        let Some(probes) = &self.probes else { return };
        // Probed at its health address, else at each of its addresses (the one in use first).
        let info = backend.info();
        let mut addrs = match info.probe_address == backend.address {
            true => info.addresses.clone(),
            false => vec![info.probe_address],
        };
        let in_use = backend.connect_address();
        if let Some(i) = addrs.iter().position(|a| *a == in_use) {
            addrs.swap(0, i);
        }
        let checker = spawn_checker(
            addrs,
            probes.clone(),
            Arc::new(ProbeSink {
                pool: self.this.clone(),
                backend: Arc::downgrade(backend),
            }),
        );
        backend.health().checker = Some(checker);
    }

    /// One probe of `backend` finished: the tracker decides, the consequences follow. Returns
    /// the pace of the next probe.
    pub fn observe(&self, backend: &Arc<Backend<P>>, record: &ProbeRecord) -> Pace {
        let name = backend.info().name.clone();
        self.events.probed(&name, record);
        let mut health = backend.health();
        let Some(signal) = record.outcome.signal() else {
            // Nothing was learned about the backend: its state, failing checks and last
            // probe stay as they were.
            if let ProbeOutcome::NotRun(detail) = &record.outcome {
                tracing::warn!(backend = %name, detail = %detail, "probe not run");
            }
            return health.tracker.pace();
        };
        let failing_before = backend
            .last_probe()
            .map(|p| p.outcome.failing_checks().to_vec())
            .unwrap_or_default();
        let failing_now = record.outcome.failing_checks();
        if failing_before != failing_now {
            self.events
                .failing_checks(&name, &failing_before, failing_now);
        }
        if signal == ProbeSignal::Pass {
            backend.clear_ejection();
        }
        let shutting_down = signal
            == ProbeSignal::Fail {
                shutting_down: true,
            };
        let was_shutting_down = backend.record_probe(record, shutting_down);
        let transition = health.tracker.observe(signal);
        backend.set_passes_to_ready(health.tracker.rise_needed());
        match transition {
            Some(t) => self.apply(backend, &mut health, t, &record.outcome.describe()),
            // A not-ready backend that starts shutting down moves to the last resort.
            None if shutting_down != was_shutting_down => self.rebuild_routing(),
            None => {}
        }
        let pace = health.tracker.pace();
        drop(health);
        backend.planes().probed();
        self.probed.send_modify(|n| *n += 1);
        if signal == ProbeSignal::Pass {
            self.passed.send_modify(|n| *n += 1);
        }
        pace
    }

    /// The other backends that are ready now.
    fn ready_others(&self, backend: &Backend<P>) -> Vec<Arc<Backend<P>>> {
        self.members()
            .iter()
            .filter(|b| b.address != backend.address && b.state() == BackendState::Ready)
            .cloned()
            .collect()
    }

    /// Whether `backend`, failing `/readyz`, fails alone: another backend is a witness (see
    /// `own_failure.rs`).
    fn failure_is_own(&self, backend: &Backend<P>) -> bool {
        let last = |b: &Backend<P>| {
            b.last_probe().map(|p| LastProbe {
                at: p.at,
                passed: p.outcome.passed(),
            })
        };
        let Some(failing_last) = last(backend) else {
            return false;
        };
        let since = backend.failures().since.unwrap_or(failing_last.at);
        let witnesses: Vec<Witness> = self
            .ready_others(backend)
            .iter()
            .filter_map(|b| {
                Some(Witness {
                    last: last(b)?,
                    last_failed: b.failures().last,
                })
            })
            .collect();
        failure_is_own(
            since,
            failing_last,
            witnesses,
            self.settings.load().probe_interval,
        )
    }

    /// Asks the other ready backends' checkers for a probe now, once their passes can count
    /// as witnesses for `backend`'s failure (rather than at their next turn, up to an interval
    /// later).
    async fn ask_witnesses(&self, backend: &Backend<P>) {
        let since = backend
            .failures()
            .since
            .unwrap_or_else(std::time::SystemTime::now);
        let due = witness_due(since, self.settings.load().probe_interval);
        if let Ok(wait) = due.duration_since(std::time::SystemTime::now()) {
            tokio::time::sleep(wait).await;
        }
        for other in self.ready_others(backend) {
            if let Some(checker) = &other.health().checker {
                checker.probe_soon();
            }
        }
    }

    /// Carries out a state change: publish it, log it once, order the data planes, reroute.
    fn apply(&self, backend: &Arc<Backend<P>>, health: &mut Health, t: Transition, reason: &str) {
        backend.publish_state(t.to);
        // Whatever drain was under way belongs to the state just left.
        if let Some(drain) = health.drain.take() {
            drain.abort();
        }
        let name = backend.info().name.clone();
        self.events.state_changed(&name, t);
        let open = backend.planes().open();
        let drain = self.settings.load().drain.clone();
        let order = order_for(t.to, backend.shutting_down(), &drain);
        tracing::info!(
            backend = %name,
            from = t.from.as_str(),
            to = t.to.as_str(),
            reason,
            open,
            order = ?order,
            passes_to_ready = backend.passes_to_ready(),
            "backend state changed"
        );
        match order {
            Order::Keep => {}
            Order::Close(why) => {
                if open > 0 {
                    tracing::warn!(backend = %name, open, reason = why.as_str(), "closing work open on the backend");
                }
                self.close(backend, why);
            }
            // A backend failing a check moves its work only to backends shown to pass it,
            // once its failure is shown to be its own (`own_failure.rs`): when every backend
            // is about to fail the same way, moving clients breaks them for nothing.
            Order::Drain { timeout }
                if t.to == BackendState::NotReady
                    && !backend.shutting_down()
                    && !self.failure_is_own(backend) =>
            {
                tracing::info!(backend = %name, open, failing = ?backend.last_probe().map(|p| p.outcome.failing_checks().to_vec()).unwrap_or_default(), "the drain waits until another backend shows the failure is this one's alone");
                health.drain =
                    Some(self.spawn_drain(backend, timeout, t.to, DrainWait::OwnFailure));
            }
            // A drain moves work to other backends; with none ready there is nowhere better
            // for it to go (and `no_ready_backend: alive` sends new work here anyway), so the
            // drain begins when another backend is ready.
            Order::Drain { timeout }
                if !self.retiring.load(std::sync::atomic::Ordering::Relaxed)
                    && !self
                        .members()
                        .iter()
                        .any(|b| b.state() == BackendState::Ready) =>
            {
                tracing::info!(backend = %name, open, "no other backend is ready: the drain waits for one");
                health.drain = Some(self.spawn_drain(backend, timeout, t.to, DrainWait::Ready));
            }
            Order::Drain { timeout } => {
                backend.planes().drain();
                let removed = t.to == BackendState::Removed;
                if open > 0 {
                    self.events.drain_started(&name);
                    health.drain = Some(self.spawn_drain(backend, timeout, t.to, DrainWait::None));
                } else if removed {
                    self.forget(backend);
                }
            }
        }
        self.rebuild_routing();
    }

    /// The drain of `backend` (entering `to`): open work may finish for `timeout`, then what
    /// is left is closed. `wait`: what must hold before the drain is ordered. A removed backend
    /// is forgotten as soon as its work has ended, by itself or closed at the deadline. The
    /// task is aborted when the state changes again.
    fn spawn_drain(
        &self,
        backend: &Arc<Backend<P>>,
        timeout: Duration,
        to: BackendState,
        wait: DrainWait,
    ) -> tokio::task::AbortHandle {
        let backend = backend.clone();
        let pool = self.this.clone();
        let mut ready = self.ready.subscribe();
        let mut probed = self.probed.subscribe();
        let removed = to == BackendState::Removed;
        tokio::spawn(async move {
            if wait != DrainWait::None {
                match wait {
                    DrainWait::Ready => {
                        if ready.wait_for(|n| *n > 0).await.is_err() {
                            return;
                        }
                    }
                    DrainWait::OwnFailure => {
                        let ask = {
                            let (pool, backend) = (pool.clone(), backend.clone());
                            tokio::spawn(async move {
                                if let Some(pool) = pool.upgrade() {
                                    pool.ask_witnesses(&backend).await;
                                }
                            })
                        };
                        let shown = loop {
                            if probed.changed().await.is_err() {
                                break false;
                            }
                            match pool.upgrade() {
                                Some(pool) if pool.failure_is_own(&backend) => break true,
                                Some(_) => {}
                                None => break false,
                            }
                        };
                        ask.abort();
                        if !shown {
                            return;
                        }
                    }
                    DrainWait::None => {}
                }
                let name = &backend.info().name;
                tracing::info!(backend = %name, why = wait.as_str(), "the drain begins");
                backend.planes().drain();
                if let Some(pool) = pool.upgrade() {
                    pool.events.drain_started(name);
                }
            }
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let expired = tokio::select! {
                _ = &mut deadline => true,
                _ = backend.idle(), if removed => false,
            };
            let Some(pool) = pool.upgrade() else { return };
            if expired {
                let closed = pool.close(&backend, CloseReason::DrainTimeout);
                if closed > 0 {
                    tracing::warn!(backend = %backend.info().name, closed, ?timeout, "drain deadline: closing open work");
                }
            }
            if removed {
                backend.idle().await;
                pool.forget(&backend);
            }
        })
        .abort_handle()
    }

    /// Closes the work open on `backend` now and counts it.
    fn close(&self, backend: &Backend<P>, reason: CloseReason) -> usize {
        let closed = backend.planes().close(reason);
        self.events.closed(&backend.info().name, reason, closed);
        closed
    }

    /// Drops a removed backend; its metric series go unless a configured backend has its name.
    fn forget(&self, backend: &Arc<Backend<P>>) {
        let name = backend.info().name.clone();
        let name_in_use = {
            let mut members = self.members();
            members.retain(|b| !Arc::ptr_eq(b, backend));
            members.iter().any(|b| b.info().name == name)
        };
        if !name_in_use {
            self.events.forgotten(&name);
        }
        tracing::info!(backend = %name, "backend forgotten");
    }

    /// Recomputes who may get new work.
    pub fn rebuild_routing(&self) {
        let table = {
            let members = self.members();
            RoutingTable {
                ready: members
                    .iter()
                    .filter(|b| b.state() == BackendState::Ready)
                    .cloned()
                    .collect(),
                undrained: members
                    .iter()
                    .filter(|b| b.state() == BackendState::Ready && !b.drained_by_operator())
                    .cloned()
                    .collect(),
                fallback: members
                    .iter()
                    .filter(|b| b.state() == BackendState::NotReady && !b.shutting_down())
                    .cloned()
                    .collect(),
                shutting_down: members
                    .iter()
                    .filter(|b| b.state() == BackendState::NotReady && b.shutting_down())
                    .cloned()
                    .collect(),
            }
        };
        let ready = table.ready.len();
        self.routing.store(Arc::new(table));
        self.ready.send_replace(ready);
        self.events.routing_changed(ready);
    }
}

/// What a drain waits for before it is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainWait {
    /// Nothing: ordered at once.
    None,
    /// Some backend to be ready.
    Ready,
    /// The failure to be shown the backend's own (`own_failure.rs`).
    OwnFailure,
}

impl DrainWait {
    fn as_str(self) -> &'static str {
        match self {
            DrainWait::None => "at once",
            DrainWait::Ready => "another backend is ready",
            DrainWait::OwnFailure => "another backend passes what this one fails",
        }
    }
}

/// Routes one backend's probes into the pool. Weak on both sides: a forgotten backend or a
/// dropped pool ends the loop's effects without a reference cycle.
struct ProbeSink<P> {
    pool: Weak<Pool<P>>,
    backend: Weak<Backend<P>>,
}

impl<P: DataPlanes> HealthObserver for ProbeSink<P> {
    fn probed(&self, record: &ProbeRecord) -> Pace {
        match (self.pool.upgrade(), self.backend.upgrade()) {
            (Some(pool), Some(backend)) => pool.observe(&backend, record),
            _ => Pace::Normal,
        }
    }

    fn moved_to(&self, to: SocketAddr) {
        if let Some(backend) = self.backend.upgrade() {
            backend.moved_to(to);
        }
    }
}

#[cfg(test)]
mod tests;
