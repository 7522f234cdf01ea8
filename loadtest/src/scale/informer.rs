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

use crate::client::{Client, ClientTls, ErrorClass};
use crate::traffic::NAMESPACE;
use http_body_util::BodyExt;
use serde_json::Value;
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
    /// ERROR events with 410.
    pub expired: AtomicU64,
    /// Events and bookmarks received.
    pub events: AtomicU64,
    /// For each break, ms from it until the informer's watch was open again.
    pub reopened_after_ms: Mutex<Vec<u64>>,
    /// For each informer, the longest time without an event or bookmark once measuring began.
    pub longest_silence_ms: Mutex<Vec<u64>>,
}

/// What an informer watches: ConfigMaps of one group (a label), as a kubelet watches its node's
/// pods.
pub fn selector(group: usize) -> String {
    format!("scale-group%3Dg{group}")
}

/// Runs one informer until `stop`; silences count once `measure_from` is set.
pub async fn run(
    conn: Arc<SharedConnection>,
    group: usize,
    seen: Arc<Seen>,
    mut stop: watch::Receiver<bool>,
    measure_from: Arc<OnceLock<Instant>>,
) {
    let base = format!(
        "/api/v1/namespaces/{NAMESPACE}/configmaps?labelSelector={}",
        selector(group)
    );
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
                    backoff.reset();
                }
                _ => or_stop!(tokio::time::sleep(backoff.next())),
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
        let mut buf = Vec::new();
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
                    if let Ok(data) = f.into_data() {
                        buf.extend_from_slice(&data);
                    }
                    while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=pos).collect();
                        let Ok(ev) = serde_json::from_slice::<Value>(&line) else {
                            continue;
                        };
                        let now = Instant::now();
                        if measure_from.get().is_some_and(|m| last_heard >= *m) {
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

/// Keeps the watched objects changing: `per_second` updates, cycling over the groups, each
/// an unconditional PUT of the group's ConfigMap; returns how many succeeded and failed.
pub async fn writer(
    conn: Arc<SharedConnection>,
    groups: usize,
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
        let group = (n as usize) % groups;
        n += 1;
        let put = async {
            let mut c = conn.handle().await?;
            c.send(
                "PUT",
                &format!("/api/v1/namespaces/{NAMESPACE}/configmaps/scale-g{group}"),
                Some(&object(group, n)),
            )
            .await
        };
        match tokio::time::timeout(Duration::from_secs(10), put).await {
            Ok(Ok(r)) if r.status < 300 => ok += 1,
            _ => failed += 1,
        }
    }
}

/// Creates each group's ConfigMap (before the informers list).
pub async fn seed(conn: &SharedConnection, groups: usize) -> anyhow::Result<()> {
    for group in 0..groups {
        let mut c = conn
            .handle()
            .await
            .map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
        let r = c
            .send(
                "POST",
                &format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
                Some(&object(group, 0)),
            )
            .await
            .map_err(|e| anyhow::anyhow!("create: {e:?}"))?;
        anyhow::ensure!(
            r.status == 201 || r.status == 409,
            "create scale-g{group}: {}",
            r.status
        );
    }
    Ok(())
}

fn object(group: usize, n: u64) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("scale-g{group}"), "namespace": NAMESPACE,
                     "labels": {"scale-group": format!("g{group}")}},
        "data": {"n": n.to_string()},
    })
    .to_string()
}
