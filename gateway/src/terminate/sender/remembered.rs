//! A table of review answers (tokens' names, access decisions), each kept until its TTL, at
//! most a bound: when full, the expired go first, then the least recently used. Keyed by a
//! digest, so an entry's size does not depend on what the client sent.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries remembered until their TTL, at most a bound, least-recently-used forgotten first.
pub struct Remembered<K, V> {
    entries: HashMap<K, Entry<V>>,
}

struct Entry<V> {
    value: V,
    /// When the review answered.
    at: Instant,
    /// The owner's lookup count at its last use (its clock).
    used: u64,
}

impl<K, V> Default for Remembered<K, V> {
    fn default() -> Self {
        Remembered {
            entries: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V: Clone> Remembered<K, V> {
    /// The value of `key` if it is younger than `ttl`, marked as used at `clock`.
    pub fn get(&mut self, key: &K, ttl: Duration, now: Instant, clock: u64) -> Option<V> {
        let e = self.entries.get_mut(key)?;
        if now.duration_since(e.at) >= ttl {
            self.entries.remove(key);
            return None;
        }
        e.used = clock;
        Some(e.value.clone())
    }

    /// The value of `key` and its age if it is younger than `ttl`, marked as used at `clock`.
    pub fn get_aged(
        &mut self,
        key: &K,
        ttl: Duration,
        now: Instant,
        clock: u64,
    ) -> Option<(V, Duration)> {
        let at = self.entries.get(key)?.at;
        let value = self.get(key, ttl, now, clock)?;
        Some((value, now.saturating_duration_since(at)))
    }

    /// Remembers `key`; a full table first forgets what is older than `ttl`, then the least
    /// recently used eighth (sorted once per eighth: a flood costs O(log n) per insert).
    pub fn insert(&mut self, key: K, value: V, at: Instant, clock: u64, max: usize, ttl: Duration) {
        if max == 0 {
            return;
        }
        if self.entries.len() >= max && !self.entries.contains_key(&key) {
            self.entries.retain(|_, e| at.duration_since(e.at) < ttl);
            if self.entries.len() >= max {
                let mut by_use: Vec<(u64, K)> =
                    self.entries.iter().map(|(k, e)| (e.used, *k)).collect();
                let drop = self
                    .entries
                    .len()
                    .div_ceil(8)
                    .max(self.entries.len() + 1 - max);
                by_use.select_nth_unstable_by_key(drop - 1, |(used, _)| *used);
                for (_, k) in &by_use[..drop] {
                    self.entries.remove(k);
                }
            }
        }
        self.entries.insert(
            key,
            Entry {
                value,
                at,
                used: clock,
            },
        );
    }

    pub fn remove(&mut self, key: &K) -> bool {
        self.entries.remove(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_forgets_the_expired_first_then_the_least_recently_used() {
        let ttl = Duration::from_secs(120);
        let now = Instant::now();
        let mut t: Remembered<u32, u32> = Remembered::default();
        t.insert(1, 1, now, 1, 3, ttl);
        t.insert(2, 2, now - Duration::from_secs(600), 2, 3, ttl);
        t.insert(3, 3, now, 3, 3, ttl);
        // Full: the expired one goes, nothing else.
        t.insert(4, 4, now, 4, 3, ttl);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&2, ttl, now, 5), None);
        // 1 is used now, so 3 is the least recently used and goes first.
        assert_eq!(t.get(&1, ttl, now, 6), Some(1));
        t.insert(5, 5, now, 7, 3, ttl);
        assert_eq!(t.get(&3, ttl, now, 8), None);
        assert_eq!(t.get(&1, ttl, now, 9), Some(1));
        assert_eq!(t.get(&5, ttl, now, 10), Some(5));
        assert!(t.len() <= 3);
    }
}
