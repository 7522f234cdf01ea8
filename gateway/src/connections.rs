//! Passthrough's per-backend state: the open proxied connections of one backend, so that
//! kubegate can close them (backend down, drain deadline, shutdown grace). Each connection is a
//! relay task, closed by aborting it (dropping its sockets).

use crate::metrics::{BackendMetrics, Metrics};
use crate::planes::Backend;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::task::AbortHandle;

/// A slot is reserved when the connection registers and filled once its task is spawned.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: HashMap<u64, Option<AbortHandle>>,
}

/// The open passthrough connections of one backend.
pub struct Connections {
    registry: Mutex<Registry>,
    open: AtomicUsize,
    /// Connection lifetimes are kept as ms of this clock (half the size of an `Instant`: every
    /// open connection holds one).
    clock: Instant,
    metrics: ArcSwap<BackendMetrics>,
}

impl Connections {
    /// No connections yet; metric series of backend `name`.
    pub fn new(metrics: &Metrics, name: &str) -> Connections {
        Connections {
            registry: Mutex::default(),
            open: AtomicUsize::new(0),
            clock: Instant::now(),
            metrics: ArcSwap::from_pointee(BackendMetrics::new(metrics, name)),
        }
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The backend was renamed: new connections count under the new name.
    pub fn rename(&self, metrics: &Metrics, name: &str) {
        self.metrics
            .store(Arc::new(BackendMetrics::new(metrics, name)));
    }

    /// Registers a new connection to `backend`; the guard deregisters it when dropped. Hand the
    /// connection's task to [`Connections::attach`] once it is spawned.
    pub fn register(backend: &Arc<Backend>) -> ConnectionGuard {
        let this = &backend.planes().passthrough;
        let id = {
            let mut r = this.registry();
            let id = r.next_id;
            r.next_id += 1;
            r.open.insert(id, None);
            id
        };
        this.open.fetch_add(1, Ordering::Relaxed);
        let metrics = this.metrics.load_full();
        metrics.connections.inc();
        metrics.connections_total.inc();
        ConnectionGuard {
            opened_ms: this.clock.elapsed().as_millis() as u64,
            backend: backend.clone(),
            id,
            metrics,
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

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One registered connection. Dropping it deregisters the connection and records its lifetime.
pub struct ConnectionGuard {
    backend: Arc<Backend>,
    id: u64,
    metrics: Arc<BackendMetrics>,
    opened_ms: u64,
}

impl ConnectionGuard {
    /// The connection's key in its backend's registry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Metric handles (as they were when the connection opened).
    pub fn metrics(&self) -> &BackendMetrics {
        &self.metrics
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let this = &self.backend.planes().passthrough;
        // The handle is dropped outside the lock.
        let handle = this.registry().open.remove(&self.id);
        drop(handle);
        let was = this.open.fetch_sub(1, Ordering::Relaxed);
        self.metrics.connections.dec();
        self.metrics.connection_duration.observe(
            this.clock
                .elapsed()
                .as_millis()
                .saturating_sub(self.opened_ms.into()) as f64
                / 1e3,
        );
        if was == 1 {
            self.backend.work_ended();
        }
    }
}
