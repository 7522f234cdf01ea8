//! Watch: a stream of `{"type": ..., "object": ...}` lines.
//!
//! - no `resourceVersion` (or `0`): the current objects as ADDED, then changes;
//! - `resourceVersion=N`: every change after N, from any replica (they share the store);
//! - `fieldSelector=metadata.name=...` and `labelSelector` (equality terms) filter the events;
//! - N compacted away: one ERROR event with a 410 `Expired` Status (the client relists);
//! - N beyond a lagging watch cache (after its 3 s wait): one ERROR event with a 504
//!   `Timeout` Status whose cause is `ResourceVersionTooLarge`;
//! - `allowWatchBookmarks`: a BOOKMARK every `--bookmark-interval` (1 min, the cacher's
//!   `bookmarkFrequency`, KEP-1904) and one 2 s before the watch's deadline; with a watch
//!   cache it carries the cache's progress (changes to other objects move it), without one the
//!   last resourceVersion sent;
//! - `timeoutSeconds`: the stream ends cleanly then (default: 30–60 min, as the apiserver);
//! - `sendInitialEvents=true` (with `resourceVersionMatch=NotOlderThan`, as the apiserver
//!   requires): the current objects as ADDED, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`, then changes;
//! - protobuf (`Accept: application/vnd.kubernetes.protobuf`, for the kinds `protobuf.rs`
//!   encodes): length-prefixed `WatchEvent` frames instead of JSON lines;
//! - shutdown with a watch termination grace period ends the stream cleanly;
//! - etcd going away does not end the stream: like the watch cache's reflector, the replica
//!   re-watches etcd every second from the last revision it sent, and the stream continues
//!   when etcd is back (a new watch meanwhile fails: the simulator has no cache to serve it).

use crate::objects;
use crate::resources::{Resource, Target};
use crate::respond::{self, Reply};
use crate::state::Sim;
use crate::store::{StoreError, StoreEvent};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// One JSON object per line (`application/json`).
    Json,
    /// A `Table` per event, JSON (`kubectl get -w`).
    Table,
    /// Length-prefixed protobuf `WatchEvent`s.
    Protobuf,
}

/// Starts a watch for `target` with the request's query `params`.
pub async fn serve(
    sim: Arc<Sim>,
    target: &Target<'_>,
    params: &[(String, String)],
    encoding: Encoding,
) -> Reply {
    let param = |k: &str| crate::query::first(params, k).map(str::to_string);
    let resource = target.resource;
    let prefix = resource.prefix(target.namespace);
    let name_filter = target.name.map(str::to_string).or_else(|| {
        param("fieldSelector").and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string))
    });
    let label_selector = param("labelSelector").filter(|s| !s.is_empty());
    let bookmarks = param("allowWatchBookmarks").is_some_and(|v| crate::query::truthy(&v));
    let timeout = param("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or_else(|| Duration::from_secs(1800 + fastrand::u64(..1800)));
    let requested = param("resourceVersion").filter(|rv| !rv.is_empty() && rv != "0");
    let initial_events = param("sendInitialEvents").is_some_and(|v| crate::query::truthy(&v));
    if initial_events
        && (param("resourceVersionMatch").as_deref() != Some("NotOlderThan") || !bookmarks)
    {
        return respond::status(
            422,
            "Invalid",
            "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
            None,
        );
    }

    let mut initial = Vec::new();
    let start = match requested {
        Some(rv) if !initial_events => match rv.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                return respond::status(
                    400,
                    "BadRequest",
                    &format!("invalid resource version: {rv}"),
                    None,
                )
            }
        },
        // No version (or `sendInitialEvents`): the current objects first.
        _ => match sim.store.list(&prefix).await {
            Ok((kvs, revision)) => {
                initial = kvs
                    .iter()
                    .map(|kv| objects::from_store(kv, resource))
                    .collect();
                revision
            }
            Err(e) => return unavailable(e),
        },
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    match sim.store.watch(&prefix, start).await {
        Ok(events) => {
            let stream = Stream {
                sim: sim.clone(),
                resource,
                prefix: prefix.clone(),
                name_filter,
                label_selector,
                encoding,
                first_table: true,
                last_revision: start,
                tx,
            };
            tokio::spawn(stream.run(initial, initial_events, events, bookmarks, timeout));
        }
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => {
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {requested} ({compacted})"),
                "reason": "Expired", "code": 410,
            });
            let _ = tx.try_send(encode(encoding, "ERROR", &status));
        }
        // The cacher's `newErrWatcher`: the error as the stream's only event.
        Err(e @ StoreError::TooLarge { .. }) => {
            let _ = tx.try_send(encode(
                encoding,
                "ERROR",
                &crate::store_errors::too_large(&e),
            ));
        }
        Err(e) => return unavailable(e),
    }
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
    }));
    let content_type = match encoding {
        Encoding::Protobuf => "application/vnd.kubernetes.protobuf;stream=watch",
        Encoding::Json | Encoding::Table => "application/json",
    };
    let mut reply = Reply::new(StatusCode::OK, Bytes::new())
        .header("content-type", content_type)
        .header("cache-control", "no-cache, private");
    reply.stream = Some(body.boxed());
    reply
}

/// The store failed the watch's start: the etcd client's error as the apiserver passes it on
/// ([`crate::store_errors::storage_failed`]).
fn unavailable(e: StoreError) -> Reply {
    match e {
        StoreError::Unavailable(why) => crate::store_errors::storage_failed(&why),
        e => crate::store_errors::storage_failed(&e.to_string()),
    }
}

/// One event in `encoding`.
fn encode(encoding: Encoding, kind: &str, object: &Value) -> Bytes {
    match encoding {
        Encoding::Protobuf => Bytes::from(crate::protobuf::watch_frame(kind, object)),
        Encoding::Json | Encoding::Table => {
            let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("json");
            v.push(b'\n');
            Bytes::from(v)
        }
    }
}

struct Stream {
    sim: Arc<Sim>,
    resource: &'static Resource,
    prefix: String,
    name_filter: Option<String>,
    label_selector: Option<String>,
    encoding: Encoding,
    first_table: bool,
    last_revision: i64,
    tx: mpsc::Sender<Bytes>,
}

impl Stream {
    async fn run(
        mut self,
        initial: Vec<Value>,
        initial_events_end: bool,
        events: crate::store::EventStream,
        bookmarks: bool,
        timeout: Duration,
    ) {
        // None while etcd is away: the stream stays open and re-watches from the last
        // revision it sent, as the watch cache's reflector does.
        let mut events = Some(events);
        let mut rewatch = tokio::time::interval(Duration::from_secs(1));
        self.sim.watches.fetch_add(1, Ordering::AcqRel);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        // The cacher also sends a bookmark 2 s before the watch's deadline, so that the
        // client resumes from a fresh position.
        let pre_deadline = tokio::time::sleep(timeout.saturating_sub(Duration::from_secs(2)));
        tokio::pin!(pre_deadline);
        let mut pre_deadline_sent = timeout <= Duration::from_secs(2);
        let mut bookmark = tokio::time::interval(self.sim.behaviour.bookmark_interval);
        bookmark.tick().await;
        let mut open = true;
        for obj in initial {
            if !self.send("ADDED", obj).await {
                open = false;
                break;
            }
        }
        if open && initial_events_end {
            let obj = self.bookmark(Some(json!({"k8s.io/initial-events-end": "true"})));
            open = self
                .tx
                .send(encode(self.encoding, "BOOKMARK", &obj))
                .await
                .is_ok();
        }
        while open {
            tokio::select! {
                e = next(&mut events) => match e {
                    Some(Ok(event)) => open = self.forward(event).await,
                    Some(Err(StoreError::Compacted { requested, compacted })) => {
                        self.expired(requested, compacted).await;
                        open = false;
                    }
                    // etcd went away: keep the client's stream, find etcd again.
                    Some(Err(_)) | None => {
                        events = None;
                        rewatch.reset();
                    }
                },
                _ = rewatch.tick(), if events.is_none() => {
                    match self.sim.store.watch(&self.prefix, self.last_revision).await {
                        Ok(again) => events = Some(again),
                        Err(StoreError::Compacted { requested, compacted }) => {
                            self.expired(requested, compacted).await;
                            open = false;
                        }
                        Err(_) => {}
                    }
                }
                _ = bookmark.tick(), if bookmarks => {
                    open = self.send_bookmark(events.as_ref()).await;
                }
                () = &mut pre_deadline, if bookmarks && !pre_deadline_sent => {
                    pre_deadline_sent = true;
                    open = self.send_bookmark(events.as_ref()).await;
                }
                _ = &mut deadline => open = false,
                _ = self.sim.end_watches.cancelled() => open = false,
                _ = self.tx.closed() => open = false,
            }
        }
        self.sim.watches.fetch_sub(1, Ordering::AcqRel);
    }

    /// Ends the stream as the apiserver does when the position is gone: an ERROR event with
    /// a 410 Expired Status.
    async fn expired(&self, requested: i64, compacted: i64) {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {requested} ({compacted})"),
            "reason": "Expired", "code": 410,
        });
        let _ = self.tx.send(encode(self.encoding, "ERROR", &status)).await;
    }

    /// A BOOKMARK's object: the kind with only the resourceVersion (and `annotations`).
    /// A BOOKMARK at the newest position the stream can vouch for: with a watch cache, its
    /// progress (changes to other objects move it, as the cacher's resourceVersion moves with
    /// etcd's progress notifications), so a quiet watch's position stays fresh; false once the
    /// client is gone.
    async fn send_bookmark(&mut self, events: Option<&crate::store::EventStream>) -> bool {
        if let Some(events) = events {
            // Read before looking whether anything waits: when nothing does, every change the
            // progress covers has been forwarded.
            if let Some(progress) = events.progress() {
                if events.is_empty() {
                    self.last_revision = self.last_revision.max(progress);
                }
            }
        }
        let obj = self.bookmark(None);
        self.tx
            .send(encode(self.encoding, "BOOKMARK", &obj))
            .await
            .is_ok()
    }

    fn bookmark(&self, annotations: Option<Value>) -> Value {
        let mut obj = json!({
            "kind": self.resource.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": {"resourceVersion": self.last_revision.to_string()},
        });
        if let Some(a) = annotations {
            obj["metadata"]["annotations"] = a;
        }
        obj
    }

    async fn forward(&mut self, event: StoreEvent) -> bool {
        self.last_revision = event.revision();
        let (kind, obj) = match &event {
            StoreEvent::Put { kv, created } => (
                if *created { "ADDED" } else { "MODIFIED" },
                objects::from_store(kv, self.resource),
            ),
            StoreEvent::Delete { prev, revision } => (
                "DELETED",
                objects::with_revision(prev, *revision, self.resource),
            ),
        };
        self.send(kind, obj).await
    }

    async fn send(&mut self, kind: &str, obj: Value) -> bool {
        if let Some(name) = &self.name_filter {
            if obj["metadata"]["name"].as_str() != Some(name) {
                return true;
            }
        }
        if !crate::selectors::matches_labels(&obj, self.label_selector.as_deref()) {
            return true;
        }
        let obj = if self.encoding == Encoding::Table {
            let mut t = objects::table(self.resource, &[obj], None);
            if !std::mem::replace(&mut self.first_table, false) {
                if let Some(map) = t.as_object_mut() {
                    map.remove("columnDefinitions");
                }
            }
            t
        } else {
            obj
        };
        self.tx
            .send(encode(self.encoding, kind, &obj))
            .await
            .is_ok()
    }
}

/// The next store event, or never while there is no store watch.
async fn next(
    events: &mut Option<crate::store::EventStream>,
) -> Option<Result<StoreEvent, StoreError>> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
