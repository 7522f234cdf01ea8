//! Choosing a backend for a new connection. Knows nothing of connections vs requests, so the
//! future L7 mode picks with the same code.

use crate::backend::Backend;
use kubegate_config::BalancePolicy;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Picks among `candidates` with `policy`, skipping addresses in `tried` and, while others are
/// left, passively ejected backends. `cursor` rotates round-robin and breaks least-connection
/// ties so that equal backends share new connections.
pub fn pick(
    policy: BalancePolicy,
    candidates: &[Arc<Backend>],
    tried: &[SocketAddr],
    cursor: &AtomicUsize,
) -> Option<Arc<Backend>> {
    // No allocation: the candidate list is short, so it is simply walked again when needed.
    let untried = |b: &Arc<Backend>| !tried.contains(&b.address);
    let any_fresh = candidates.iter().any(|b| untried(b) && !b.ejected());
    let eligible = || {
        candidates
            .iter()
            .filter(move |b| untried(b) && !(any_fresh && b.ejected()))
    };
    let n = eligible().count();
    if n == 0 {
        return None;
    }
    let start = cursor.fetch_add(1, Ordering::Relaxed) % n;
    let nth = |k: usize| eligible().nth(k).expect("k < n");
    let chosen = match policy {
        BalancePolicy::RoundRobin => nth(start),
        // Ties go to the first in rotated order, starting at `start`.
        BalancePolicy::LeastConnections => eligible()
            .enumerate()
            .min_by_key(|(i, b)| (b.active_connections(), (i + n - start) % n))
            .map(|(_, b)| b)
            .expect("n > 0"),
        BalancePolicy::PowerOfTwo => {
            let a = nth(fastrand::usize(..n));
            let b = nth(fastrand::usize(..n));
            if b.active_connections() < a.active_connections() {
                b
            } else {
                a
            }
        }
    };
    Some(chosen.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendInfo;
    use crate::metrics::{BackendMetrics, Metrics};
    use kubegate_health::BackendState;
    use std::time::Duration;

    fn backends(n: u16) -> Vec<Arc<Backend>> {
        let m = Metrics::new();
        (1..=n)
            .map(|i| {
                let addr: SocketAddr = format!("127.0.0.1:{i}").parse().unwrap();
                Arc::new(Backend::new(
                    addr,
                    BackendInfo {
                        name: addr.to_string(),
                        probe_address: addr,
                        metrics: BackendMetrics::new(&m, &addr.to_string()),
                    },
                    BackendState::Ready,
                ))
            })
            .collect()
    }

    fn ports(policy: BalancePolicy, set: &[Arc<Backend>], picks: usize) -> Vec<u16> {
        let cursor = AtomicUsize::new(0);
        (0..picks)
            .map(|_| pick(policy, set, &[], &cursor).unwrap().address.port())
            .collect()
    }

    #[test]
    fn round_robin_visits_each_in_turn() {
        let set = backends(3);
        assert_eq!(
            ports(BalancePolicy::RoundRobin, &set, 6),
            [1, 2, 3, 1, 2, 3]
        );
    }

    #[test]
    fn least_connections_prefers_the_emptiest_and_rotates_ties() {
        let set = backends(3);
        let _held: Vec<_> = (0..2).map(|_| set[0].register()).collect();
        let _one = set[1].register();
        assert_eq!(ports(BalancePolicy::LeastConnections, &set, 1), [3]);
        let _two = set[2].register();
        // backends 2 and 3 now tie at one connection each; the cursor alternates between them.
        let got = ports(BalancePolicy::LeastConnections, &set, 4);
        assert!(got.iter().all(|p| *p == 2 || *p == 3), "{got:?}");
        assert!(got.contains(&2) && got.contains(&3), "{got:?}");
    }

    #[test]
    fn power_of_two_never_picks_the_busiest_of_two() {
        let set = backends(2);
        let _held: Vec<_> = (0..5).map(|_| set[0].register()).collect();
        // With two backends, a pick of backend 1 happens only when both draws were backend 1.
        let picks = ports(BalancePolicy::PowerOfTwo, &set, 400);
        let ones = picks.iter().filter(|p| **p == 1).count();
        assert!(ones < 200, "busy backend picked {ones} of 400 times");
    }

    #[test]
    fn tried_backends_are_skipped() {
        let set = backends(3);
        let cursor = AtomicUsize::new(0);
        let tried = [set[0].address, set[1].address];
        for _ in 0..5 {
            let b = pick(BalancePolicy::RoundRobin, &set, &tried, &cursor).unwrap();
            assert_eq!(b.address.port(), 3);
        }
        let all: Vec<_> = set.iter().map(|b| b.address).collect();
        assert!(pick(BalancePolicy::RoundRobin, &set, &all, &cursor).is_none());
    }

    #[test]
    fn ejected_backends_are_skipped_unless_nothing_else_is_left() {
        let set = backends(2);
        set[0].eject_for(Duration::from_secs(60));
        assert_eq!(ports(BalancePolicy::RoundRobin, &set, 4), [2, 2, 2, 2]);
        set[1].eject_for(Duration::from_secs(60));
        assert_eq!(ports(BalancePolicy::RoundRobin, &set, 2), [1, 2]);
    }
}
