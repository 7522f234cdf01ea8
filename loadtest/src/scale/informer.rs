//! Informers as client-go's reflector runs them, many to a connection as a kubelet's or a
//! controller's share one: LIST, then WATCH from the list's resourceVersion with bookmarks.
//!
//! What the reflector (`k8s.io/client-go/tools/cache/reflector.go`) does when a watch ends,
//! which decides what a failover costs the apiservers:
//! - the stream ends (the server closed it, the connection broke) after it ran a while: it
//!   watches again from the last resourceVersion it saw, no LIST;
//! - it ends within a second with no event ("very short watch"), or with an ERROR event (410
//!   Expired: the replica's watch cache does not reach back that far): it LISTs again — a
//!   relist;
//! - opening it fails with connection refused or 429: it waits and watches again; with any other
//!   error (a reset, a 5xx, a timeout): it LISTs again.
//!
//! Pauses follow the reflector's backoff: 800 ms, doubling to 30 s, with jitter.
//!
//! Each informer also checks what it heard: every write to its object reaches it once, in
//! order (a duplicate or a gap is a move the client saw), and it counts the 410s and 429s that
//! reached it.

use crate::client::{Client, ClientTls, ErrorClass, WatchEvents};
use crate::traffic::NAMESPACE;
use http_body_util::BodyExt;
use serde_json::Value;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `timeoutSeconds` the informers ask for: the reflector picks 5–10 min at random.
const WATCH_TIMEOUT: (u64, u64) = (300, 600);
/// A watch that ends this close to its `timeoutSeconds` ended as asked.
const WATCH_TIMEOUT_SLACK: Duration = Duration::from_secs(5);
/// The reflector's "very short watch".
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// One HTTP/2 connection shared by several informers; whoever finds it broken dials again.
pub struct SharedConnection {
    addr: SocketAddr,
    tls: ClientTls,
    current: tokio::sync::Mutex<Option<Client>>,
}

impl SharedConnection {
    /// A connection to `addr`, dialed when first used.
    pub fn new(addr: SocketAddr, tls: ClientTls) -> SharedConnection {
        SharedConnection {
            addr,
            tls,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// A handle on the live connection, dialing a new one if there is none.
    async fn handle(&self) -> Result<Client, ErrorClass> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref().filter(|c| !c.closed()) {
            return Ok(c.another_handle().expect("HTTP/2"));
        }
        let c = Client::connect(self.addr, &self.tls, true).await?;
        let handle = c.another_handle().expect("HTTP/2");
        *current = Some(c);
        Ok(handle)
    }
}

/// What the informers saw, shared by all of them.
#[derive(Default)]
pub struct Seen {
    /// Watches open right now.
    pub open: AtomicU64,
    /// Watches that ended before their `timeoutSeconds` or failed to open (breaks).
    pub breaks: AtomicU64,
    /// Watches that ended at their `timeoutSeconds` (not breaks).
    pub timeouts: AtomicU64,
    /// LISTs after the first (each informer's first LIST is its start, not a relist).
    pub relists: AtomicU64,
    /// 410s that reached the informer: ERROR events with 410, or a watch or LIST answered 410.
    pub expired: AtomicU64,
    /// Watches and LISTs answered 429 (a replica whose cache was initializing, or one shutting
    /// down, passed on to the client).
    pub throttled: AtomicU64,
    /// Events heard twice (a write's event again, or an older one after a newer).
    pub duplicates: AtomicU64,
    /// Events never heard: a write that succeeded whose event an informer skipped.
    pub gaps: AtomicU64,
    /// Events and bookmarks received.
    pub events: AtomicU64,
    /// For each break, ms from it until the informer's watch was open again.
    pub reopened_after_ms: Mutex<Vec<u64>>,
    /// For each informer, the longest time without an event or bookmark once measuring began.
    pub longest_silence_ms: Mutex<Vec<u64>>,
}

/// What an informer watches: one object of a group (a label), as a kubelet watches its node's
/// pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A ConfigMap the writer keeps changing.
    Busy(usize),
    /// A ConfigMap never changed after it is created: the informer hears only bookmarks, once
    /// a minute, as a kubelet's watch of its own pods does; its position is that old.
    Quiet(usize),
    /// A custom resource (the simulator's widgets) the writer keeps changing: its watch cache
    /// initializes after the replica's `/readyz` passes.
    Custom(usize),
}

impl Subject {
    /// The collection's path and the object's name.
    fn path_and_name(self) -> (String, String) {
        let configmaps = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
        match self {
            Subject::Busy(g) => (configmaps, format!("scale-g{g}")),
            Subject::Quiet(g) => (configmaps, format!("scale-q{g}")),
            Subject::Custom(g) => (
                format!("/apis/kubegate.example.com/v1/namespaces/{NAMESPACE}/widgets"),
                format!("scale-w{g}"),
            ),
        }
    }

    /// The label value that selects the object.
    fn label(self) -> String {
        match self {
            Subject::Busy(g) => format!("g{g}"),
            Subject::Quiet(g) => format!("q{g}"),
            Subject::Custom(g) => format!("w{g}"),
        }
    }

    /// What the informer LISTs and WATCHes: its collection, selected by label.
    fn list_path(self) -> String {
        format!(
            "{}?labelSelector=scale-group%3D{}",
            self.path_and_name().0,
            self.label()
        )
    }

    /// The object itself, as the writer PUTs it.
    fn object_path(self) -> String {
        let (collection, name) = self.path_and_name();
        format!("{collection}/{name}")
    }

    /// The object with `n` as its data.
    fn object(self, n: u64) -> String {
        let (api_version, kind) = match self {
            Subject::Custom(_) => ("kubegate.example.com/v1", "Widget"),
            _ => ("v1", "ConfigMap"),
        };
        serde_json::json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": self.path_and_name().1, "namespace": NAMESPACE,
                         "labels": {"scale-group": self.label()}},
            "data": {"n": n.to_string()},
        })
        .to_string()
    }

    /// Whether the writer changes it (and so the informer hears events, not only bookmarks).
    pub fn written(self) -> bool {
        !matches!(self, Subject::Quiet(_))
    }
}

/// The writes, as the informers check what they heard: the writer writes its subjects in
/// turn, numbering writes 1, 2, ..., so one subject's writes are as many apart as there are
/// subjects.
pub struct Writes {
    /// The subjects written, in turn.
    subjects: Vec<Subject>,
    /// Writes that failed (their number); an informer does not miss what was never written.
    failed: Mutex<HashSet<u64>>,
}

impl Writes {
    /// Writes to `subjects`, in turn.
    pub fn new(subjects: Vec<Subject>) -> Writes {
        Writes {
            subjects,
            failed: Mutex::new(HashSet::new()),
        }
    }

    /// How many of the writes between `heard` and `next` (one subject's, exclusive) succeeded:
    /// the events an informer missed.
    fn missed_between(&self, heard: u64, next: u64) -> u64 {
        let stride = self.subjects.len().max(1) as u64;
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        (heard + stride..next)
            .step_by(stride as usize)
            .filter(|n| !failed.contains(n))
            .count() as u64
    }
}

/// The write number an event or a listed object carries.
fn write_number(object: &Value) -> Option<u64> {
    object["data"]["n"].as_str()?.parse().ok()
}

/// Runs one informer until `stop`; silences count once `measure_from` is set (and only for a
/// subject that is written: a quiet one hears a bookmark a minute).
pub async fn run(
    conn: Arc<SharedConnection>,
    subject: Subject,
    writes: Arc<Writes>,
    seen: Arc<Seen>,
    mut stop: watch::Receiver<bool>,
    measure_from: Arc<OnceLock<Instant>>,
) {
    let base = subject.list_path();
    // The last write heard (from a LIST or an event).
    let mut heard: Option<u64> = None;
    let mut rv: Option<String> = None;
    let mut listed_once = false;
    let mut backoff = Backoff::default();
    let mut broken_at: Option<Instant> = None;
    let mut longest_silence = Duration::ZERO;
    let mut last_heard = Instant::now();
    // Runs `$fut` unless `stop` fires first.
    macro_rules! or_stop {
        ($fut:expr) => {
            tokio::select! {
                r = $fut => r,
                _ = stop.changed() => break,
            }
        };
    }
    loop {
        if *stop.borrow() {
            break;
        }
        let Some(from) = rv.clone() else {
            // LIST.
            let listed = or_stop!(async {
                let mut c = conn.handle().await?;
                c.send("GET", &base, None).await
            });
            if listed_once {
                seen.relists.fetch_add(1, Ordering::Relaxed);
            }
            listed_once = true;
            match listed {
                Ok(r) if r.status == 200 => {
                    let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
                    rv = v["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    // A LIST is the whole state: what came before it need not be heard.
                    heard = v["items"].get(0).and_then(write_number);
                    backoff.reset();
                }
                Ok(r) => {
                    seen.count_refusal(r.status);
                    or_stop!(tokio::time::sleep(backoff.next()))
                }
                Err(_) => or_stop!(tokio::time::sleep(backoff.next())),
            }
            continue;
        };
        let timeout = fastrand::u64(WATCH_TIMEOUT.0..=WATCH_TIMEOUT.1);
        let path = format!(
            "{base}&watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds={timeout}"
        );
        let opened = or_stop!(async {
            let mut c = conn.handle().await?;
            c.watch(&path).await
        });
        if let Ok((status, _)) = &opened {
            seen.count_refusal(*status);
        }
        let mut body = match opened {
            Ok((200, body)) => body,
            // The reflector retries these without a LIST.
            Err(ErrorClass::Refused) | Ok((429, _)) => {
                seen.breaks.fetch_add(1, Ordering::Relaxed);
                broken_at.get_or_insert_with(Instant::now);
                or_stop!(tokio::time::sleep(backoff.next()));
                continue;
            }
            Ok(_) | Err(_) => {
                seen.breaks.fetch_add(1, Ordering::Relaxed);
                broken_at.get_or_insert_with(Instant::now);
                rv = None;
                or_stop!(tokio::time::sleep(backoff.next()));
                continue;
            }
        };
        if let Some(at) = broken_at.take() {
            seen.reopened_after_ms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(at.elapsed().as_millis() as u64);
        }
        seen.open.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let mut events = 0u64;
        let mut expired = false;
        let mut lines = WatchEvents::default();
        let ended_cleanly = loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = stop.changed() => {
                    seen.open.fetch_sub(1, Ordering::Relaxed);
                    return finish(&seen, longest_silence);
                }
            };
            match frame {
                None => break true,
                Some(Err(_)) => break false,
                Some(Ok(f)) => {
                    for ev in lines.take(f) {
                        let now = Instant::now();
                        if subject.written() && measure_from.get().is_some_and(|m| last_heard >= *m)
                        {
                            longest_silence = longest_silence.max(now - last_heard);
                        }
                        last_heard = now;
                        if ev["type"] == "ERROR" {
                            if ev["object"]["code"] == 410 {
                                seen.expired.fetch_add(1, Ordering::Relaxed);
                                expired = true;
                            }
                            continue;
                        }
                        events += 1;
                        seen.events.fetch_add(1, Ordering::Relaxed);
                        if ev["type"] != "BOOKMARK" {
                            if let Some(n) = write_number(&ev["object"]) {
                                seen.check_order(&writes, heard, n);
                                heard = Some(heard.map_or(n, |h| h.max(n)));
                            }
                        }
                        if let Some(v) = ev["object"]["metadata"]["resourceVersion"].as_str() {
                            rv = Some(v.to_string());
                        }
                    }
                }
            }
        };
        seen.open.fetch_sub(1, Ordering::Relaxed);
        if *stop.borrow() {
            break;
        }
        let lasted = started.elapsed();
        if ended_cleanly && !expired && lasted + WATCH_TIMEOUT_SLACK >= Duration::from_secs(timeout)
        {
            seen.timeouts.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        seen.breaks.fetch_add(1, Ordering::Relaxed);
        broken_at = Some(Instant::now());
        if expired || (lasted < SHORT_WATCH && events == 0) {
            rv = None;
        }
        if lasted >= SHORT_WATCH {
            backoff.reset();
        }
        // The reflector waits out its backoff before watching again only after a failure; a
        // watch that ran normally is re-opened at once.
        if rv.is_none() {
            or_stop!(tokio::time::sleep(backoff.next()));
        }
    }
    finish(&seen, longest_silence);
}

impl Seen {
    /// Counts a 410 or 429 answer that reached the informer.
    fn count_refusal(&self, status: u16) {
        match status {
            410 => self.expired.fetch_add(1, Ordering::Relaxed),
            429 => self.throttled.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// Checks an event carrying write `n` against the last write heard.
    fn check_order(&self, writes: &Writes, heard: Option<u64>, n: u64) {
        let Some(heard) = heard else { return };
        if n <= heard {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        } else {
            self.gaps
                .fetch_add(writes.missed_between(heard, n), Ordering::Relaxed);
        }
    }
}

fn finish(seen: &Seen, longest_silence: Duration) {
    seen.longest_silence_ms
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(longest_silence.as_millis() as u64);
}

/// client-go's reflector backoff: 800 ms doubling to 30 s, ±jitter.
#[derive(Default)]
struct Backoff {
    steps: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let base = 800u64 << self.steps.min(5);
        self.steps += 1;
        let ms = base.min(30_000);
        Duration::from_millis(ms + fastrand::u64(..=ms / 2))
    }

    fn reset(&mut self) {
        self.steps = 0;
    }
}

/// Keeps the watched objects changing: `per_second` updates, cycling over the written
/// subjects, each an unconditional PUT of the subject's object; returns how many succeeded and
/// failed.
pub async fn writer(
    conn: Arc<SharedConnection>,
    writes: Arc<Writes>,
    per_second: u32,
    mut stop: watch::Receiver<bool>,
) -> (u64, u64) {
    let (mut ok, mut failed) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return (ok, failed),
        }
        let subject = writes.subjects[(n as usize) % writes.subjects.len()];
        n += 1;
        let put = async {
            let mut c = conn.handle().await?;
            c.send("PUT", &subject.object_path(), Some(&subject.object(n)))
                .await
        };
        match tokio::time::timeout(Duration::from_secs(10), put).await {
            Ok(Ok(r)) if r.status < 300 => ok += 1,
            _ => {
                // Recorded before the next write to the subject: an informer hearing that one
                // knows this one was never made (or may have been: then it hears it too).
                writes
                    .failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(n);
                failed += 1
            }
        }
    }
}

/// Creates every subject's object (before the informers list).
pub async fn seed(conn: &SharedConnection, subjects: &[Subject]) -> anyhow::Result<()> {
    for subject in subjects {
        let mut c = conn
            .handle()
            .await
            .map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
        let (collection, name) = subject.path_and_name();
        let object = subject.object(0);
        let post = ("POST", collection.as_str(), Some(object.as_str()));
        c.expect(post, &[201, 409], &format!("create {name}"))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_informer_misses_only_writes_that_succeeded_and_never_hears_one_twice() {
        // Two subjects in turn: the first's writes are 1, 3, 5, 7, ...
        let writes = Writes::new(vec![Subject::Busy(0), Subject::Custom(0)]);
        writes.failed.lock().unwrap().insert(5);
        let seen = Seen::default();
        seen.check_order(&writes, Some(1), 3);
        assert_eq!(seen.gaps.load(Ordering::Relaxed), 0);
        // 5 failed: hearing 7 after 3 misses nothing.
        seen.check_order(&writes, Some(3), 7);
        assert_eq!(seen.gaps.load(Ordering::Relaxed), 0);
        // 9 and 11 succeeded: hearing 13 after 7 missed two.
        seen.check_order(&writes, Some(7), 13);
        assert_eq!(seen.gaps.load(Ordering::Relaxed), 2);
        seen.check_order(&writes, Some(13), 13);
        seen.check_order(&writes, Some(13), 11);
        assert_eq!(seen.duplicates.load(Ordering::Relaxed), 2);
        // After a LIST nothing before is owed.
        seen.check_order(&writes, None, 99);
        assert_eq!(seen.gaps.load(Ordering::Relaxed), 2);
    }
}
