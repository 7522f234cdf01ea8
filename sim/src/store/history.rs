//! A store's recent past: the keys as they were at a revision (`since`), and every change after
//! it, at most a bound of them. From it, the changes after any revision from `since` on are
//! replayed (a watch resuming), and the keys as they were at any such revision are read again
//! (a LIST's continue page at its first page's revision).
//!
//! The second is what the apiserver's watch cache does with its snapshots since 1.34
//! (KEP-4988, `ListFromCacheSnapshot`): `store/snapshotter.go` snapshots the cache after each
//! event it observes and drops those older than its history window, so a replica serves an
//! exact revision from memory while the revision is within its window, and delegates to etcd
//! otherwise (`Cacher.ShouldDelegateContinue` → `shouldDelegateExactRV` →
//! `CanServeExactRV`). Here a revision's keys are rebuilt from `base` and the changes up to it:
//! the same answer, kept in less memory.

use super::contract::{StoreEvent, Stored};
use std::collections::{BTreeMap, VecDeque};

/// The keys at `since`, and the changes after it.
pub struct History {
    since: i64,
    base: BTreeMap<String, Stored>,
    changes: VecDeque<StoreEvent>,
    bound: usize,
}

impl History {
    /// `base` as the keys at revision `since`; at most `bound` changes kept.
    pub fn new(since: i64, base: impl IntoIterator<Item = Stored>, bound: usize) -> History {
        History {
            since,
            base: base.into_iter().map(|kv| (kv.key.clone(), kv)).collect(),
            changes: VecDeque::new(),
            bound,
        }
    }

    /// The oldest revision whose keys can be read again (and after which changes replay).
    pub fn since(&self) -> i64 {
        self.since
    }

    /// The newest revision known: the last change's, or `since`.
    pub fn newest(&self) -> i64 {
        self.changes.back().map_or(self.since, StoreEvent::revision)
    }

    /// The changes kept, oldest first.
    pub fn changes(&self) -> &VecDeque<StoreEvent> {
        &self.changes
    }

    /// Records `change`; beyond the bound the oldest is folded into the base.
    pub fn push(&mut self, change: StoreEvent) {
        self.changes.push_back(change);
        while self.changes.len() > self.bound {
            let Some(oldest) = self.changes.pop_front() else {
                break;
            };
            self.since = oldest.revision();
            apply(&mut self.base, &oldest);
        }
    }

    /// The keys under `prefix` as they were at `revision`, in key order; `None` when it is
    /// older than `since`.
    pub fn at(&self, prefix: &str, revision: i64) -> Option<Vec<Stored>> {
        if revision < self.since {
            return None;
        }
        let mut keys: BTreeMap<String, Stored> = self
            .base
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for change in self
            .changes
            .iter()
            .take_while(|c| c.revision() <= revision)
            .filter(|c| c.key().starts_with(prefix))
        {
            apply(&mut keys, change);
        }
        Some(keys.into_values().collect())
    }
}

/// `change` made to `keys`.
fn apply(keys: &mut BTreeMap<String, Stored>, change: &StoreEvent) {
    match change {
        StoreEvent::Put { kv, .. } => {
            keys.insert(kv.key.clone(), kv.clone());
        }
        StoreEvent::Delete { prev, .. } => {
            keys.remove(&prev.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, rev: i64) -> Stored {
        Stored {
            key: key.into(),
            value: format!("v{rev}").into_bytes(),
            mod_revision: rev,
        }
    }

    fn put(key: &str, rev: i64) -> StoreEvent {
        StoreEvent::Put {
            kv: kv(key, rev),
            created: true,
        }
    }

    fn keys(list: &[Stored]) -> Vec<(&str, i64)> {
        list.iter()
            .map(|s| (s.key.as_str(), s.mod_revision))
            .collect()
    }

    #[test]
    fn the_keys_at_any_revision_in_the_window_are_read_again() {
        let mut h = History::new(10, [kv("/r/a", 3), kv("/s/x", 4)], 2);
        h.push(put("/r/b", 11));
        h.push(StoreEvent::Delete {
            prev: kv("/r/a", 3),
            revision: 12,
        });
        assert_eq!(keys(&h.at("/r/", 10).unwrap()), [("/r/a", 3)]);
        assert_eq!(keys(&h.at("/r/", 11).unwrap()), [("/r/a", 3), ("/r/b", 11)]);
        assert_eq!(keys(&h.at("/r/", 12).unwrap()), [("/r/b", 11)]);
        // A third change folds the oldest into the base: revision 10 is out of the window.
        h.push(put("/r/c", 13));
        assert_eq!((h.since(), h.newest()), (11, 13));
        assert!(h.at("/r/", 10).is_none());
        assert_eq!(keys(&h.at("/r/", 11).unwrap()), [("/r/a", 3), ("/r/b", 11)]);
        assert_eq!(
            keys(&h.at("/r/", 13).unwrap()),
            [("/r/b", 11), ("/r/c", 13)]
        );
    }
}
