//! What terminate mode knows of each replica of a cluster, kept by the stage that learns and
//! uses it (`flow`: its priority levels; `served`: what it serves), keyed by the replica's
//! address — its identity in the pool, kept through a rename or a move to another of its
//! addresses. Read on the request path without a lock; an entry is made the first time a
//! replica is asked about, and dropped at the `versions` task's next look (a quarter second)
//! once no member of the pool has its address. A replica re-added while its old self still
//! drains shares the entry with it: both are the same apiserver.

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// A `T` for each replica of one cluster.
pub struct PerReplica<T> {
    by_address: ArcSwap<HashMap<SocketAddr, Arc<T>>>,
}

impl<T> Default for PerReplica<T> {
    fn default() -> PerReplica<T> {
        PerReplica {
            by_address: ArcSwap::default(),
        }
    }
}

impl<T: Default> PerReplica<T> {
    /// The replica at `address`'s, made now if it had none.
    pub fn of(&self, address: SocketAddr) -> Arc<T> {
        if let Some(known) = self.by_address.load().get(&address) {
            return known.clone();
        }
        let mut made = None;
        self.by_address.rcu(|now| {
            let mut next = HashMap::clone(now);
            made = Some(next.entry(address).or_default().clone());
            next
        });
        made.expect("rcu runs its closure")
    }

    /// The replica at `address`'s, if it has one.
    pub fn known(&self, address: SocketAddr) -> Option<Arc<T>> {
        self.by_address.load().get(&address).cloned()
    }

    /// Forgets every replica but those at `addresses` (the pool's now): a replica that left
    /// the pool takes what was known of it along.
    pub fn keep_only(&self, addresses: &[SocketAddr]) {
        let gone = |now: &HashMap<SocketAddr, Arc<T>>| now.keys().any(|a| !addresses.contains(a));
        if !gone(&self.by_address.load()) {
            return;
        }
        self.by_address.rcu(|now| {
            let mut next = HashMap::clone(now);
            next.retain(|a, _| addresses.contains(a));
            next
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_replica_has_one_entry_until_it_leaves_the_pool() {
        let replicas: PerReplica<AtomicU32> = PerReplica::default();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.2:1".parse().unwrap(),
        );
        assert!(replicas.known(a).is_none());
        replicas.of(a).fetch_add(1, Ordering::Relaxed);
        replicas.of(a).fetch_add(1, Ordering::Relaxed);
        replicas.of(b);
        assert_eq!(replicas.known(a).unwrap().load(Ordering::Relaxed), 2);
        replicas.keep_only(&[a]);
        assert!(replicas.known(b).is_none(), "b left the pool");
        assert_eq!(replicas.of(a).load(Ordering::Relaxed), 2);
    }
}
