//! File descriptors: every client connection costs one or two, and containers commonly start
//! processes with a soft limit of 1024 — about 500 passthrough connections. As the Go runtime
//! does for every Go program (since 1.19), kubegate raises its soft `RLIMIT_NOFILE` to the
//! hard limit at start; then it works out how many client connections the limit leaves room
//! for, and `limits.max_client_connections` is held to that (logged; `kubegate_client_connection_limit`).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept for everything but client connections: listeners, the admin endpoint and
/// its clients, probes, terminate mode's upstream connections, discovery, the runtime.
const RESERVED: u64 = 256;

/// What a passthrough connection costs: the client's socket and the backend's. A terminate-mode
/// client costs one, plus its share of upstream connections: two is the bound for both.
const PER_CLIENT: u64 = 2;

/// The soft limit before and after raising it, and the client connections it leaves room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit kubegate started with.
    pub soft_before: Option<u64>,
    /// The soft limit now (the hard limit, unless raising failed).
    pub soft: Option<u64>,
    /// The hard limit.
    pub hard: Option<u64>,
}

impl Descriptors {
    /// Client connections the soft limit leaves room for (unbounded when it is).
    pub fn client_capacity(&self) -> usize {
        capacity(self.soft)
    }
}

/// Raises the soft limit to the hard one, and says what it was and is.
pub fn raise() -> Descriptors {
    let before = getrlimit(Resource::Nofile);
    let mut after = before;
    if before.current != before.maximum {
        let wanted = Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        match setrlimit(Resource::Nofile, wanted) {
            Ok(()) => after = wanted,
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
        }
    }
    let d = Descriptors {
        soft_before: before.current,
        soft: after.current,
        hard: after.maximum,
    };
    tracing::info!(
        soft_before = %shown(d.soft_before),
        soft = %shown(d.soft),
        hard = %shown(d.hard),
        client_capacity = d.client_capacity(),
        "open-files limit"
    );
    d
}

fn shown(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".into(), |n| n.to_string())
}

/// Client connections a soft limit of `soft` descriptors leaves room for.
fn capacity(soft: Option<u64>) -> usize {
    match soft {
        None => usize::MAX,
        Some(n) => usize::try_from(n.saturating_sub(RESERVED) / PER_CLIENT).unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_leaves_room_for_half_its_descriptors_beyond_the_reserve() {
        assert_eq!(capacity(Some(1024)), 384);
        assert_eq!(capacity(Some(1_048_576)), 524_160);
        assert_eq!(capacity(Some(100)), 0);
        assert_eq!(capacity(None), usize::MAX);
    }
}
