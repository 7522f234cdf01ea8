//! Admission of client connections: at most `limits.max_client_connections` open at once, over
//! every listener and both modes.
//!
//! One over the limit is accepted and closed at once rather than left in the kernel's backlog:
//! the client learns immediately (and retries elsewhere, or later), and a flood of idle or
//! half-open connections cannot take the descriptors and memory that the admin endpoint, the
//! probes and the clients already served need. Counting is one atomic per connection; the
//! limit is read from the running configuration, so a reload applies to the next accept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Client connections open now.
#[derive(Default)]
pub struct ClientSlots {
    open: Arc<AtomicUsize>,
}

/// One admitted client connection; its slot frees when this drops.
pub struct ClientSlot {
    open: Arc<AtomicUsize>,
}

impl ClientSlots {
    /// A slot if fewer than `limit` client connections are open.
    pub fn try_take(&self, limit: usize) -> Option<ClientSlot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| ClientSlot {
                open: self.open.clone(),
            })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_free_on_drop() {
        let slots = ClientSlots::default();
        let a = slots.try_take(2).expect("first");
        let b = slots.try_take(2).expect("second");
        assert!(slots.try_take(2).is_none(), "a third over a limit of 2");
        drop(a);
        let _c = slots.try_take(2).expect("a freed slot is taken again");
        assert!(slots.try_take(2).is_none());
        drop(b);
        // A lowered limit (a reload) turns away new connections, not open ones.
        assert!(slots.try_take(1).is_none());
        assert!(slots.try_take(3).is_some());
    }
}
