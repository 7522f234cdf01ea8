//! Choosing a backend for new work (a connection in passthrough, a request in terminate mode),
//! from a load signal the data plane supplies.

use crate::backend::Backend;
use kubegate_config::BalancePolicy;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How busy a backend is, as one data plane sees it: open connections (passthrough), requests
/// in flight weighted by latency (terminate mode). Lower is less busy.
pub trait Load<P> {
    /// The backend's current load.
    fn load(&self, backend: &Backend<P>) -> u64;
}

impl<P, F: Fn(&Backend<P>) -> u64> Load<P> for F {
    fn load(&self, backend: &Backend<P>) -> u64 {
        self(backend)
    }
}

/// Picks among `candidates` with `policy` by `load`, skipping addresses in `tried` and, while
/// others are left, passively ejected backends. `cursor` rotates round-robin and breaks
/// least-load ties, so that equal backends share new work.
pub fn pick<P>(
    policy: BalancePolicy,
    candidates: &[Arc<Backend<P>>],
    tried: &[SocketAddr],
    cursor: &AtomicUsize,
    load: &impl Load<P>,
) -> Option<Arc<Backend<P>>> {
    // No allocation: the candidate list is short, so it is simply walked again when needed.
    let untried = |b: &Arc<Backend<P>>| !tried.contains(&b.address);
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
            .min_by_key(|(i, b)| (load.load(b), (i + n - start) % n))
            .map(|(_, b)| b)
            .expect("n > 0"),
        BalancePolicy::PowerOfTwo if n == 1 => nth(0),
        BalancePolicy::PowerOfTwo => {
            // Two distinct backends: the second draw skips the first.
            let i = fastrand::usize(..n);
            let j = fastrand::usize(..n - 1);
            let j = if j >= i { j + 1 } else { j };
            let (a, b) = (nth(i), nth(j));
            if load.load(b) < load.load(a) {
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
    use crate::test_support::{backends, TestPlanes};
    use std::time::Duration;

    fn open(b: &Backend<TestPlanes>) -> u64 {
        b.planes().load()
    }

    fn ports(policy: BalancePolicy, set: &[Arc<Backend<TestPlanes>>], picks: usize) -> Vec<u16> {
        let cursor = AtomicUsize::new(0);
        (0..picks)
            .map(|_| {
                pick(policy, set, &[], &cursor, &open)
                    .unwrap()
                    .address
                    .port()
            })
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
    fn least_load_prefers_the_emptiest_and_rotates_ties() {
        let set = backends(3);
        set[0].planes().set_load(2);
        set[1].planes().set_load(1);
        assert_eq!(ports(BalancePolicy::LeastConnections, &set, 1), [3]);
        set[2].planes().set_load(1);
        // backends 2 and 3 now tie at one each; the cursor alternates between them.
        let got = ports(BalancePolicy::LeastConnections, &set, 4);
        assert!(got.iter().all(|p| *p == 2 || *p == 3), "{got:?}");
        assert!(got.contains(&2) && got.contains(&3), "{got:?}");
    }

    #[test]
    fn power_of_two_never_picks_the_busier_of_two() {
        let set = backends(2);
        set[0].planes().set_load(5);
        // Two distinct draws out of two backends always compare both.
        let picks = ports(BalancePolicy::PowerOfTwo, &set, 400);
        assert!(picks.iter().all(|p| *p == 2), "{picks:?}");
    }

    #[test]
    fn power_of_two_never_picks_the_busiest_of_several() {
        let set = backends(5);
        set[3].planes().set_load(9);
        for b in [&set[0], &set[1], &set[2], &set[4]] {
            b.planes().set_load(1);
        }
        // The busiest loses every comparison it is drawn into, and it is never drawn twice.
        let picks = ports(BalancePolicy::PowerOfTwo, &set, 400);
        assert!(!picks.contains(&4), "{picks:?}");
        for port in [1, 2, 3, 5] {
            assert!(picks.contains(&port), "{port} never picked: {picks:?}");
        }
    }

    #[test]
    fn power_of_two_with_one_candidate_picks_it() {
        let set = backends(1);
        assert_eq!(ports(BalancePolicy::PowerOfTwo, &set, 3), [1, 1, 1]);
    }

    #[test]
    fn tried_backends_are_skipped() {
        let set = backends(3);
        let cursor = AtomicUsize::new(0);
        let tried = [set[0].address, set[1].address];
        for _ in 0..5 {
            let b = pick(BalancePolicy::RoundRobin, &set, &tried, &cursor, &open).unwrap();
            assert_eq!(b.address.port(), 3);
        }
        let all: Vec<_> = set.iter().map(|b| b.address).collect();
        assert!(pick(BalancePolicy::RoundRobin, &set, &all, &cursor, &open).is_none());
    }

    #[test]
    fn ejected_backends_are_skipped_unless_nothing_else_is_left() {
        let set = backends(2);
        set[0].failed_passively(Duration::from_secs(60));
        assert_eq!(ports(BalancePolicy::RoundRobin, &set, 4), [2, 2, 2, 2]);
        set[1].failed_passively(Duration::from_secs(60));
        assert_eq!(ports(BalancePolicy::RoundRobin, &set, 2), [1, 2]);
    }
}
