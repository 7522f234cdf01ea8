//! What every store is: the [`Store`] trait, the values and events it hands out, its errors,
//! and the stream of events a watch reads (the memory store, etcd and the watch cache each
//! implement or build on it).

use async_trait::async_trait;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

/// One stored key.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// Full key.
    pub key: String,
    /// Object JSON.
    pub value: Vec<u8>,
    /// Revision of the last change (the object's resourceVersion).
    pub mod_revision: i64,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreEvent {
    /// Created or updated; `created` tells which.
    Put {
        /// The key as it is now.
        kv: Stored,
        /// The key did not exist before.
        created: bool,
    },
    /// Deleted at `revision`; `prev` is the last value.
    Delete {
        /// The last value before deletion.
        prev: Stored,
        /// Revision of the deletion.
        revision: i64,
    },
}

impl StoreEvent {
    /// Revision of the change.
    pub fn revision(&self) -> i64 {
        match self {
            StoreEvent::Put { kv, .. } => kv.mod_revision,
            StoreEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// No such key.
    #[error("not found")]
    NotFound,
    /// Create of an existing key.
    #[error("already exists")]
    AlreadyExists,
    /// The precondition revision is not the current one.
    #[error("conflict: current revision {0}")]
    Conflict(i64),
    /// The requested start revision was compacted away.
    #[error("too old resource version: {requested} ({compacted})")]
    Compacted {
        /// What was asked for.
        requested: i64,
        /// Oldest revision still available.
        compacted: i64,
    },
    /// The store cannot be reached.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A watch cache behind the store was asked for a position beyond what it has seen, and
    /// did not reach it within its wait.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLarge {
        /// What was asked for.
        requested: i64,
        /// What the cache has seen.
        current: i64,
    },
}

/// Where a read of a past revision was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// The watch cache's memory (its snapshots).
    Cache,
    /// The store itself (etcd's history).
    Store,
}

/// What a store operation gives, or why it failed.
pub type StoreResult<T> = Result<T, StoreError>;

/// Receives watch events in revision order; ends when the watch ends.
pub struct EventStream {
    rx: mpsc::Receiver<StoreResult<StoreEvent>>,
    /// A watch cache's progress for this watch (see [`EventStream::progress`]).
    progress: Option<Arc<AtomicI64>>,
}

impl EventStream {
    /// A stream of what `rx` receives, with no progress known beyond its events (etcd's
    /// watch, as the apiserver uses it without a cache: no bookmarks come from there).
    pub fn new(rx: mpsc::Receiver<StoreResult<StoreEvent>>) -> EventStream {
        EventStream { rx, progress: None }
    }

    /// The next event, or `None` once the watch ended.
    pub async fn recv(&mut self) -> Option<StoreResult<StoreEvent>> {
        self.rx.recv().await
    }

    /// Whether no event waits to be received.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The newest revision up to which every change under the watch's prefix has been put in
    /// this stream (a cache's progress: changes elsewhere move it too), as a bookmark carries
    /// it; `None` without a cache. Read before [`EventStream::is_empty`]: when nothing waits
    /// after it was read, every change it covers has been received.
    pub fn progress(&self) -> Option<i64> {
        self.progress.as_ref().map(|p| p.load(Ordering::Acquire))
    }
}

/// The operations the API needs.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// One key.
    async fn get(&self, key: &str) -> StoreResult<Stored>;
    /// Every key under `prefix`, and the store revision they were read at.
    async fn list(&self, prefix: &str) -> StoreResult<(Vec<Stored>, i64)>;
    /// Every key under `prefix` as it was at `revision` (a LIST's continue page), and where it
    /// was read; `Compacted` once the store no longer has that revision.
    async fn list_at(&self, prefix: &str, revision: i64) -> StoreResult<(Vec<Stored>, ReadFrom)>;
    /// Creates `key`; fails if it exists.
    async fn create(&self, key: &str, value: Vec<u8>) -> StoreResult<i64>;
    /// Replaces `key`, if `expected` is given only while its mod_revision is that.
    async fn update(&self, key: &str, value: Vec<u8>, expected: Option<i64>) -> StoreResult<i64>;
    /// Deletes `key`; returns the value it had and the deletion revision.
    async fn delete(&self, key: &str) -> StoreResult<(Stored, i64)>;
    /// Changes under `prefix` with revision > `after`, oldest first.
    async fn watch(&self, prefix: &str, after: i64) -> StoreResult<EventStream>;
    /// The current revision (also a health check).
    async fn revision(&self) -> StoreResult<i64>;
    /// Makes a cache in front of the store stop taking the store's changes (`true`) or catch
    /// up again (`false`), as a watch cache whose etcd watch lags; false for a store without
    /// a cache.
    fn set_lagging(&self, _lagging: bool) -> bool {
        false
    }
    /// Whether reads are served from a watch cache (which answers a LIST at any revision,
    /// `resourceVersion=0`, whole).
    fn is_cache(&self) -> bool {
        false
    }
}

impl StoreEvent {
    /// The key it changed.
    pub fn key(&self) -> &str {
        match self {
            StoreEvent::Put { kv, .. } => &kv.key,
            StoreEvent::Delete { prev, .. } => &prev.key,
        }
    }
}

/// A watch's stream, for stores that keep history and broadcast live changes: `backlog` (the
/// changes after `after` already made, oldest first), then every live change under `prefix`
/// newer than what was sent. A watcher too slow for the broadcast gets `Compacted` and ends, as
/// etcd ends a watcher that falls behind. `looked_to` (a cache: the newest revision its
/// history held when `backlog` was taken from it): the stream also says how far it has looked,
/// changes under other prefixes included.
pub(super) fn stream_from(
    backlog: Vec<StoreEvent>,
    mut live: broadcast::Receiver<StoreEvent>,
    after: i64,
    prefix: &str,
    looked_to: Option<i64>,
) -> EventStream {
    let prefix = prefix.to_string();
    let (tx, rx) = mpsc::channel(256);
    let progress = looked_to.map(|_| Arc::new(AtomicI64::new(after)));
    let seen = progress.clone();
    // Stored only once every change up to `revision` under the prefix is in the channel.
    let looked_at = move |revision: i64| {
        if let Some(p) = &seen {
            p.fetch_max(revision, Ordering::Release);
        }
    };
    tokio::spawn(async move {
        let mut last = after;
        for e in backlog {
            last = e.revision();
            if tx.send(Ok(e)).await.is_err() {
                return;
            }
            looked_at(last);
        }
        // The backlog was everything under the prefix up to there.
        if let Some(to) = looked_to {
            looked_at(to);
        }
        loop {
            tokio::select! {
                e = live.recv() => match e {
                    Ok(e) if e.revision() > last && e.key().starts_with(&prefix) => {
                        last = e.revision();
                        if tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                        looked_at(last);
                    }
                    Ok(e) => looked_at(e.revision()),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx
                            .send(Err(StoreError::Compacted {
                                requested: last,
                                compacted: last + 1,
                            }))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tx.closed() => return,
            }
        }
    });
    EventStream { rx, progress }
}
