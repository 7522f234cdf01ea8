//! Passthrough's per-backend state: the open proxied connections of one backend, so that
//! kubegate can close them (backend down, drain deadline, shutdown grace). Each connection is a
//! relay task, closed by aborting it (dropping its sockets). A relay holds its place here
//! through passthrough's `ConnectionGuard`.

use crate::state::listeners::ClientSlot;
use crate::telemetry::{PassthroughMetrics, RelayHandles};
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::task::AbortHandle;

/// A connection's entry is made when it registers; its task is filled in once spawned.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

/// One open connection: its task (once spawned) and its client's admission slot, which frees
/// with the entry (kept here, not in the relay: see `state/listeners.rs`).
struct Entry {
    task: Option<AbortHandle>,
    _slot: ClientSlot,
}

/// The open passthrough connections of one backend.
pub struct Relays {
    registry: Mutex<Registry>,
    open: AtomicUsize,
    /// Connection lifetimes are kept as ms of this clock (half the size of an `Instant`: every
    /// open connection holds one).
    clock: Instant,
    metrics: ArcSwap<RelayHandles>,
}

/// A connection's place in the registry, as [`Relays::register`] gave it.
pub struct Registered {
    /// The connection's key in the registry.
    pub id: u64,
    /// When it opened, in ms of the registry's clock.
    pub opened_ms: u64,
    /// Metric handles (as they were when the connection opened).
    pub metrics: Arc<RelayHandles>,
}

impl Relays {
    /// No connections yet; metric series of backend `name`.
    pub fn new(metrics: &PassthroughMetrics, name: &str) -> Relays {
        Relays {
            registry: Mutex::default(),
            open: AtomicUsize::new(0),
            clock: Instant::now(),
            metrics: ArcSwap::from_pointee(RelayHandles::new(metrics, name)),
        }
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The backend was renamed: new connections count under the new name.
    pub fn rename(&self, metrics: &PassthroughMetrics, name: &str) {
        self.metrics
            .store(Arc::new(RelayHandles::new(metrics, name)));
    }

    /// Registers a new connection, admitted with `slot`. Hand its task to [`Relays::attach`]
    /// once it is spawned, and give the registration back to [`Relays::deregister`] when it
    /// ends.
    pub fn register(&self, slot: ClientSlot) -> Registered {
        let id = {
            let mut r = self.registry();
            let id = r.next_id;
            r.next_id += 1;
            r.open.insert(
                id,
                Entry {
                    task: None,
                    _slot: slot,
                },
            );
            id
        };
        self.open.fetch_add(1, Ordering::Relaxed);
        let metrics = self.metrics.load_full();
        metrics.connections.inc();
        metrics.connections_total.inc();
        Registered {
            id,
            opened_ms: self.clock.elapsed().as_millis() as u64,
            metrics,
        }
    }

    /// Gives the registry the task that carries connection `id`. A connection closed by
    /// `close_all` between `register` and now is aborted here.
    pub fn attach(&self, id: u64, task: AbortHandle) {
        match self.registry().open.get_mut(&id) {
            Some(entry) => entry.task = Some(task),
            // Closed meanwhile, or already finished (aborting a finished task does nothing).
            None => task.abort(),
        }
    }

    /// A connection ended: deregisters it and records its lifetime. Returns whether it was
    /// the backend's last.
    pub fn deregister(&self, registered: &Registered) -> bool {
        // The entry is dropped outside the lock.
        let entry = self.registry().open.remove(&registered.id);
        drop(entry);
        let was = self.open.fetch_sub(1, Ordering::Relaxed);
        registered.metrics.connections.dec();
        registered.metrics.connection_duration.observe(
            self.clock
                .elapsed()
                .as_millis()
                .saturating_sub(registered.opened_ms.into()) as f64
                / 1e3,
        );
        was == 1
    }

    /// Closes every connection registered so far; later ones are not affected. Returns how many
    /// were open.
    pub fn close_all(&self) -> usize {
        let open = std::mem::take(&mut self.registry().open);
        for task in open.values().filter_map(|e| e.task.as_ref()) {
            task.abort();
        }
        open.len()
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}
