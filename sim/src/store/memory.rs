//! An in-process store for a single replica (no etcd). Keeps the last changes for watches and
//! compacts older ones, as etcd does.

use super::contract::{EventStream, ReadFrom, Store, StoreError, StoreEvent, StoreResult, Stored};
use super::history::History;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::broadcast;

/// How many changes are kept for watches that resume from an older revision.
const HISTORY: usize = 1000;

/// A store that lives and dies with this process.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    live: broadcast::Sender<StoreEvent>,
}

struct Inner {
    revision: i64,
    data: BTreeMap<String, Stored>,
    /// The last changes; its `since` is the compacted revision.
    history: History,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            inner: Mutex::new(Inner {
                revision: 1,
                data: BTreeMap::new(),
                history: History::new(1, [], HISTORY),
            }),
            live: broadcast::channel(4096).0,
        }
    }
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `key` at the next revision and records the change.
    fn put(&self, inner: &mut Inner, key: &str, value: Vec<u8>, created: bool) -> i64 {
        inner.revision += 1;
        let kv = Stored {
            key: key.to_string(),
            value,
            mod_revision: inner.revision,
        };
        inner.data.insert(key.to_string(), kv.clone());
        let rev = inner.revision;
        self.record(inner, StoreEvent::Put { kv, created });
        rev
    }

    fn record(&self, inner: &mut Inner, event: StoreEvent) {
        inner.history.push(event.clone());
        let _ = self.live.send(event);
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> StoreResult<Stored> {
        self.lock()
            .data
            .get(key)
            .cloned()
            .ok_or(StoreError::NotFound)
    }

    async fn list(&self, prefix: &str) -> StoreResult<(Vec<Stored>, i64)> {
        let inner = self.lock();
        let items = inner
            .data
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        Ok((items, inner.revision))
    }

    async fn list_at(&self, prefix: &str, revision: i64) -> StoreResult<(Vec<Stored>, ReadFrom)> {
        let inner = self.lock();
        if revision > inner.revision {
            return Err(StoreError::TooLarge {
                requested: revision,
                current: inner.revision,
            });
        }
        match inner.history.at(prefix, revision) {
            Some(keys) => Ok((keys, ReadFrom::Store)),
            None => Err(StoreError::Compacted {
                requested: revision,
                compacted: inner.history.since(),
            }),
        }
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> StoreResult<i64> {
        let mut inner = self.lock();
        if inner.data.contains_key(key) {
            return Err(StoreError::AlreadyExists);
        }
        Ok(self.put(&mut inner, key, value, true))
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Option<i64>) -> StoreResult<i64> {
        let mut inner = self.lock();
        let current = inner
            .data
            .get(key)
            .ok_or(StoreError::NotFound)?
            .mod_revision;
        if expected.is_some_and(|e| e != current) {
            return Err(StoreError::Conflict(current));
        }
        Ok(self.put(&mut inner, key, value, false))
    }

    async fn delete(&self, key: &str) -> StoreResult<(Stored, i64)> {
        let mut inner = self.lock();
        let prev = inner.data.remove(key).ok_or(StoreError::NotFound)?;
        inner.revision += 1;
        let revision = inner.revision;
        self.record(
            &mut inner,
            StoreEvent::Delete {
                prev: prev.clone(),
                revision,
            },
        );
        Ok((prev, revision))
    }

    async fn watch(&self, prefix: &str, after: i64) -> StoreResult<EventStream> {
        let (backlog, live) = {
            let inner = self.lock();
            if after < inner.history.since() {
                return Err(StoreError::Compacted {
                    requested: after,
                    compacted: inner.history.since(),
                });
            }
            let backlog: Vec<StoreEvent> = inner
                .history
                .changes()
                .iter()
                .filter(|e| e.revision() > after && e.key().starts_with(prefix))
                .cloned()
                .collect();
            // Subscribing under the lock: no change can fall between backlog and live.
            (backlog, self.live.subscribe())
        };
        Ok(super::contract::stream_from(
            backlog, live, after, prefix, None,
        ))
    }

    async fn revision(&self) -> StoreResult<i64> {
        Ok(self.lock().revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn watch_resumes_after_a_revision_without_gaps() {
        let s = MemoryStore::default();
        let r1 = s.create("/r/a", b"1".to_vec()).await.unwrap();
        let r2 = s.update("/r/a", b"2".to_vec(), Some(r1)).await.unwrap();
        let mut w = s.watch("/r/", r1).await.unwrap();
        let (_, r3) = s.delete("/r/a").await.unwrap();
        assert_eq!(w.recv().await.unwrap().unwrap().revision(), r2);
        assert_eq!(w.recv().await.unwrap().unwrap().revision(), r3);
    }

    #[tokio::test]
    async fn stale_update_conflicts() {
        let s = MemoryStore::default();
        let r1 = s.create("/r/a", b"1".to_vec()).await.unwrap();
        s.update("/r/a", b"2".to_vec(), Some(r1)).await.unwrap();
        assert!(matches!(
            s.update("/r/a", b"3".to_vec(), Some(r1)).await,
            Err(StoreError::Conflict(_))
        ));
    }

    #[tokio::test]
    async fn old_revisions_are_compacted() {
        let s = MemoryStore::default();
        for i in 0..(HISTORY + 10) {
            s.create(&format!("/r/{i}"), vec![]).await.unwrap();
        }
        assert!(matches!(
            s.watch("/r/", 2).await,
            Err(StoreError::Compacted { .. })
        ));
    }
}
