//! Admission of client connections: at most `limits.max_client_connections` open at once, over
//! every listener and both modes.
//!
//! One over the limit is accepted and closed at once rather than left in the kernel's backlog:
//! the client learns immediately (and retries elsewhere, or later), and a flood of idle or
//! half-open connections cannot take the descriptors and memory that the admin endpoint, the
//! probes and the clients already served need. The limit is read from the running
//! configuration, so a reload applies to the next accept.
//!
//! The count is process-wide (a process runs one gateway), so that a slot costs no bytes: it
//! lives inside every passthrough relay, which is kept to a 256-byte task (`copy.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Client connections open now.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One admitted client connection; its slot frees when this drops.
pub struct ClientSlot {
    _taken: (),
}

/// A slot if fewer than `limit` client connections are open.
pub fn try_take(limit: usize) -> Option<ClientSlot> {
    OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < limit).then_some(n + 1)
    })
    .ok()
    .map(|_| ClientSlot { _taken: () })
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test in this binary that takes slots: the count is process-wide.
    #[test]
    fn slots_are_bounded_and_free_on_drop() {
        assert_eq!(std::mem::size_of::<ClientSlot>(), 0);
        let a = try_take(2).expect("first");
        let b = try_take(2).expect("second");
        assert!(try_take(2).is_none(), "a third over a limit of 2");
        drop(a);
        let _c = try_take(2).expect("a freed slot is taken again");
        assert!(try_take(2).is_none());
        drop(b);
        // A lowered limit (a reload) turns away new connections, not open ones.
        assert!(try_take(1).is_none());
        assert!(try_take(3).is_some());
    }
}
