//! The client listeners as the operator sees them (where each listens, its mode, how many
//! clients it has open now), and the slots that admit client connections: at most
//! `limits.max_client_connections` open at once, over every listener and both modes.
//!
//! The count is process-wide (a process runs one gateway). A slot points at its listener's
//! count; a passthrough connection's slot lives in its backend's registry (`relays.rs`), not
//! in the relay task, which is kept to 256 bytes (`passthrough/copy.rs`).

use kubegate_config::ListenerMode;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Client connections open now, on every listener.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One client listener and its open client connections.
#[derive(Debug)]
pub struct ClientListener {
    /// Where it listens.
    pub address: SocketAddr,
    /// Its data plane.
    pub mode: ListenerMode,
    /// The replicas' other port it forwards to (`backend_port`), if not the apiserver's.
    pub backend_port: Option<u16>,
    open: AtomicUsize,
}

impl ClientListener {
    /// A listener on `address` for `mode`, for the life of the process: every client slot
    /// points at it (a pointer, where an `Arc` would add a reference count per connection).
    pub fn leak(address: SocketAddr, mode: ListenerMode) -> &'static ClientListener {
        ClientListener::leak_forwarding(address, mode, None)
    }

    /// The same, forwarding to the replicas' `backend_port`.
    pub fn leak_forwarding(
        address: SocketAddr,
        mode: ListenerMode,
        backend_port: Option<u16>,
    ) -> &'static ClientListener {
        Box::leak(Box::new(ClientListener {
            address,
            mode,
            backend_port,
            open: AtomicUsize::new(0),
        }))
    }

    /// Client connections open on it now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A slot for a new client connection on this listener, if fewer than `limit` are open on
    /// every listener together.
    pub fn admit(&'static self, limit: usize) -> Option<ClientSlot> {
        OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()?;
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(ClientSlot { listener: self })
    }
}

/// One admitted client connection; its slot frees when this drops.
pub struct ClientSlot {
    listener: &'static ClientListener,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.listener.open.fetch_sub(1, Ordering::Relaxed);
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test in this binary that takes slots: the count is process-wide.
    #[test]
    fn slots_are_bounded_over_every_listener_and_free_on_drop() {
        let one =
            ClientListener::leak("127.0.0.1:6443".parse().unwrap(), ListenerMode::Passthrough);
        let two = ClientListener::leak("127.0.0.1:6444".parse().unwrap(), ListenerMode::Terminate);
        let a = one.admit(2).expect("first");
        let b = two.admit(2).expect("second");
        assert_eq!((one.open(), two.open()), (1, 1));
        assert!(one.admit(2).is_none(), "a third over a limit of 2");
        drop(a);
        assert_eq!(one.open(), 0);
        let _c = one.admit(2).expect("a freed slot is taken again");
        assert!(two.admit(2).is_none());
        drop(b);
        // A lowered limit (a reload) turns away new connections, not open ones.
        assert!(two.admit(1).is_none());
        assert!(two.admit(3).is_some());
    }
}
