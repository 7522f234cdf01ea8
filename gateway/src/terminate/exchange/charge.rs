//! Bytes kubegate holds for several clients, counted against shared bounds: every cluster's
//! together, one client connection's share, and a gauge. What a joined read's answer or a
//! watch-list's initial events hold (`join`), given back with the last response that sends them.

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where held bytes are counted: every cluster's together, the connection of the read that
/// holds them (if it is counted), and the gauge.
#[derive(Clone)]
pub struct Charged {
    held: Arc<AtomicU64>,
    connection: Option<Arc<AtomicU64>>,
    gauge: prometheus::IntGauge,
}

impl Charged {
    /// Counted in `held`, in `connection` if given, and in `gauge`.
    pub fn new(
        held: &Arc<AtomicU64>,
        connection: Option<Arc<AtomicU64>>,
        gauge: &prometheus::IntGauge,
    ) -> Charged {
        Charged {
            held: held.clone(),
            connection,
            gauge: gauge.clone(),
        }
    }

    /// Counts `n` bytes more if they fit: `max_held` in all, `max_connection` for the
    /// connection's share; says whether they did.
    pub fn take(&self, n: u64, max_held: u64, max_connection: u64) -> bool {
        let fits = |count: &AtomicU64, max: u64| {
            count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    (h + n <= max).then_some(h + n)
                })
                .is_ok()
        };
        if !fits(&self.held, max_held) {
            return false;
        }
        if let Some(c) = &self.connection {
            if !fits(c, max_connection) {
                self.held.fetch_sub(n, Ordering::AcqRel);
                return false;
            }
        }
        self.gauge.add(n as i64);
        true
    }

    /// Gives back `n` bytes counted.
    pub fn give_back(&self, n: u64) {
        self.held.fetch_sub(n, Ordering::AcqRel);
        if let Some(c) = &self.connection {
            c.fetch_sub(n, Ordering::AcqRel);
        }
        self.gauge.sub(n as i64);
    }
}

/// Bytes several responses share, counted in [`Charged`] until the last holder lets go.
pub struct SharedBytes {
    bytes: Bytes,
    charged: Charged,
}

impl SharedBytes {
    /// `bytes`, already counted in `charged`.
    pub fn new(bytes: Bytes, charged: Charged) -> SharedBytes {
        SharedBytes { bytes, charged }
    }

    /// The bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        self.charged.give_back(self.bytes.len() as u64);
    }
}
