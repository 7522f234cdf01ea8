//! The watch cache (`--watch-cache`): one store watch per resource, fanned out in the process,
//! as the apiserver's cacher does. Without it every client watch is a watch on etcd of its
//! own, which a few thousand watches turn into etcd's load rather than the replica's.
//!
//! What a client sees is the apiserver's: the cache's window begins at the revision the store
//! was at when the replica started, so a watch from an older revision — a client moved here from
//! a replica that was up longer, with no change it cares about since — gets 410 "too old
//! resource version" and relists; a watch within the window gets the changes it missed from
//! the cache's history, then live ones. A watcher too slow to keep up is ended with 410 too
//! (the apiserver ends it). While etcd is away, open watches stay open and the cache re-watches
//! every second from the last revision it saw; until the cache has started, watches fail as
//! storage does.
//!
//! A cache told to lag (the fault port's `POST /cache?state=lagging`) stops taking the
//! store's changes, as one whose etcd watch falls behind: a watch from a position beyond what
//! it has seen waits up to 3 s for it, then fails "Too large resource version"
//! (`ResourceVersionTooLarge`, the cacher's `waitUntilFreshAndBlock`), while a watch from an
//! older position is served what it has.

use super::contract::{EventStream, ReadFrom, Store, StoreError, StoreEvent, StoreResult, Stored};
use super::history::History;
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// How many changes a resource's cache keeps for watches that resume within its window.
const HISTORY: usize = 10_000;
/// How many live changes a watcher may fall behind before it is ended.
const LAG: usize = 4_096;

/// Every key the API stores is under this prefix: one cache holds them all.
const ROOT: &str = "/registry/";
/// How long a watch from beyond the cache waits for it (the cacher's `blockTimeout`).
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// A store whose watches are served from one cache.
pub struct WatchCache {
    store: Arc<dyn Store>,
    cacher: Arc<Cacher>,
}

struct Cacher {
    /// `None` until the store answered once.
    window: Mutex<Option<History>>,
    live: broadcast::Sender<StoreEvent>,
    /// Told to lag: the store's changes are not taken until this is false again.
    lagging: tokio::sync::watch::Sender<bool>,
    /// The newest revision the cache has seen.
    seen: tokio::sync::watch::Sender<i64>,
}

impl WatchCache {
    /// Caches watches on `store`, from the store's revision now (or as soon as it answers).
    pub fn new(store: Arc<dyn Store>) -> WatchCache {
        let cacher = Arc::new(Cacher {
            window: Mutex::new(None),
            live: broadcast::channel(LAG).0,
            lagging: tokio::sync::watch::Sender::new(false),
            seen: tokio::sync::watch::Sender::new(0),
        });
        tokio::spawn(fill(store.clone(), cacher.clone()));
        WatchCache { store, cacher }
    }
}

impl Cacher {
    fn window(&self) -> std::sync::MutexGuard<'_, Option<History>> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The window starts over at `since` with the keys then: what came before is not
    /// continuous with what comes.
    fn restart(&self, since: i64, keys: Vec<Stored>) {
        *self.window() = Some(History::new(since, keys, HISTORY));
        self.seen.send_replace(since);
    }

    fn push(&self, event: StoreEvent) {
        let mut w = self.window();
        let Some(w) = w.as_mut() else { return };
        w.push(event.clone());
        self.seen.send_replace(event.revision());
        // Sent under the window's lock, so a watcher that subscribes under it misses nothing
        // and sees nothing twice.
        let _ = self.live.send(event);
    }
}

/// Keeps one store watch on every key open, from the last revision seen, for the process's
/// life.
async fn fill(store: Arc<dyn Store>, cacher: Arc<Cacher>) {
    let mut last = loop {
        if let Ok((keys, now)) = store.list(ROOT).await {
            cacher.restart(now, keys);
            break now;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let mut lagging = cacher.lagging.subscribe();
    loop {
        let compacted = match store.watch(ROOT, last).await {
            Ok(mut events) => loop {
                // Lagging: the store's changes wait in the stream until told to catch up.
                let _ = lagging.wait_for(|l| !*l).await;
                match events.recv().await {
                    Some(Ok(e)) => {
                        last = e.revision();
                        cacher.push(e);
                    }
                    Some(Err(StoreError::Compacted { .. })) => break true,
                    Some(Err(_)) | None => break false,
                }
            },
            Err(StoreError::Compacted { .. }) => true,
            Err(_) => false,
        };
        // The cache fell too far behind the store: start over from now.
        if compacted {
            if let Ok((keys, now)) = store.list(ROOT).await {
                cacher.restart(now, keys);
                last = now;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[async_trait]
impl Store for WatchCache {
    async fn get(&self, key: &str) -> StoreResult<Stored> {
        self.store.get(key).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<(Vec<Stored>, i64)> {
        self.store.list(prefix).await
    }

    /// From memory while `revision` is within the cache's window, once the cache has seen
    /// it (waiting up to 3 s, as `waitUntilFreshAndBlock`); from the store when it is older
    /// than the window (the replica started, or its cache started over, after it).
    async fn list_at(&self, prefix: &str, revision: i64) -> StoreResult<(Vec<Stored>, ReadFrom)> {
        let mut seen = self.cacher.seen.subscribe();
        let fresh = tokio::time::timeout(FRESH_WAIT, seen.wait_for(|&s| s >= revision))
            .await
            .is_ok_and(|seen| seen.is_ok());
        if !fresh {
            return Err(StoreError::TooLarge {
                requested: revision,
                current: *self.cacher.seen.borrow(),
            });
        }
        let cached = self
            .cacher
            .window()
            .as_ref()
            .and_then(|w| w.at(prefix, revision));
        match cached {
            Some(keys) => Ok((keys, ReadFrom::Cache)),
            None => self.store.list_at(prefix, revision).await,
        }
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> StoreResult<i64> {
        self.store.create(key, value).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Option<i64>) -> StoreResult<i64> {
        self.store.update(key, value, expected).await
    }

    async fn delete(&self, key: &str) -> StoreResult<(Stored, i64)> {
        self.store.delete(key).await
    }

    async fn watch(&self, prefix: &str, after: i64) -> StoreResult<EventStream> {
        if *self.cacher.lagging.borrow() {
            // A position beyond what a lagging cache has seen: wait for it, then give up.
            let mut seen = self.cacher.seen.subscribe();
            let reached = tokio::time::timeout(FRESH_WAIT, seen.wait_for(|&s| s >= after)).await;
            if !matches!(reached, Ok(Ok(_))) {
                return Err(StoreError::TooLarge {
                    requested: after,
                    current: *self.cacher.seen.borrow(),
                });
            }
        }
        let (replay, live, looked_to) = {
            let w = self.cacher.window();
            let Some(w) = w.as_ref() else {
                return Err(StoreError::Unavailable(
                    "the watch cache has not started".into(),
                ));
            };
            if after < w.since() {
                return Err(StoreError::Compacted {
                    requested: after,
                    compacted: w.since(),
                });
            }
            // From the newest back: a resuming watch usually missed little.
            let mut replay: Vec<StoreEvent> = w
                .changes()
                .iter()
                .rev()
                .take_while(|e| e.revision() > after)
                .filter(|e| e.key().starts_with(prefix))
                .cloned()
                .collect();
            replay.reverse();
            let newest = w.newest();
            (replay, self.cacher.live.subscribe(), newest)
        };
        Ok(super::contract::stream_from(
            replay,
            live,
            after,
            prefix,
            Some(looked_to),
        ))
    }

    async fn revision(&self) -> StoreResult<i64> {
        self.store.revision().await
    }

    fn set_lagging(&self, lagging: bool) -> bool {
        self.cacher.lagging.send_replace(lagging);
        true
    }

    fn is_cache(&self) -> bool {
        true
    }
}
