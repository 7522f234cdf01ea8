//! Control-plane-like traffic through the gateway, judged twice: by its first attempt, and as a
//! client-go client would have seen it after its retries.
//!
//! client-go's rules (k8s.io/client-go `rest/with_retry.go`, `tools/cache/reflector.go`):
//! 429 or 5xx with an integer `Retry-After` is retried for every verb; a network error (reset,
//! EOF, GOAWAY) only for GET; connection refused is not retried; at most 10 retries. HTTP/2
//! connections ping after 30 s without reads and give up after 15 s more. A watch that ends is
//! re-opened from its last resourceVersion; 410 means relist; errors back off 0.8 s.

use crate::client::{Client, ClientTls, ErrorClass, Resp, WatchEvents};
use crate::record::{Kind, Outcome, Recorder, WatchEndSeen, Write};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util_like::Stop;

/// Namespace the load test writes in.
pub const NAMESPACE: &str = "loadtest";
/// The annotation a lease renewal carries its write id in.
pub const WRITE_ANNOTATION: &str = "loadtest.kubegate.io/write";
const MAX_RETRIES: u32 = 10;
/// The `timeoutSeconds` informer watches ask for (client-go's reflector picks 5–10 min).
const WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch that ends this close to its `timeoutSeconds` ended as asked.
const WATCH_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// A minimal stop flag shared by the traffic tasks.
pub mod tokio_util_like {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Set once: every loop ends at its next turn.
    #[derive(Clone, Default)]
    pub struct Stop(Arc<AtomicBool>);

    impl Stop {
        /// Asks every loop to end.
        pub fn stop(&self) {
            self.0.store(true, Ordering::Release);
        }
        /// Was stop asked for.
        pub fn stopped(&self) -> bool {
            self.0.load(Ordering::Acquire)
        }
    }
}

/// Where the traffic goes and how much of it.
#[derive(Clone)]
pub struct Target {
    /// The gateway's listener.
    pub addr: SocketAddr,
    /// Client TLS.
    pub tls: ClientTls,
}

fn ok_status(r: &Resp) -> Result<(), ErrorClass> {
    match r.status {
        200..=299 => Ok(()),
        429 => Err(ErrorClass::Http429),
        500..=599 => Err(ErrorClass::Http5xx),
        code => Err(ErrorClass::Http(code)),
    }
}

/// The connection in `slot`, opened anew when there is none or it has closed (as a client's
/// transport redials).
pub async fn connected<'a>(
    slot: &'a mut Option<Client>,
    target: &Target,
    h2: bool,
) -> Result<&'a mut Client, ErrorClass> {
    if slot.as_ref().is_none_or(Client::closed) {
        *slot = Some(Client::connect(target.addr, &target.tls, h2).await?);
    }
    Ok(slot.as_mut().expect("connected just now"))
}

/// One request a client sends: its method, path, body and how long it may take.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    method: &'a str,
    path: &'a str,
    body: Option<&'a str>,
    deadline: Option<Duration>,
}

impl<'a> Call<'a> {
    /// A GET of `path`.
    pub fn get(path: &'a str) -> Self {
        Self::new("GET", path, None)
    }

    /// A POST of `body` to `path`.
    pub fn post(path: &'a str, body: &'a str) -> Self {
        Self::new("POST", path, Some(body))
    }

    /// A PUT of `body` to `path`.
    pub fn put(path: &'a str, body: &'a str) -> Self {
        Self::new("PUT", path, Some(body))
    }

    fn new(method: &'a str, path: &'a str, body: Option<&'a str>) -> Self {
        Self {
            method,
            path,
            body,
            deadline: None,
        }
    }

    /// The same call, each attempt given up after `deadline`.
    pub fn within(self, deadline: Duration) -> Self {
        Self {
            deadline: Some(deadline),
            ..self
        }
    }
}

/// Runs one logical request with client-go's retry rules on a long-lived connection slot
/// (reconnecting as the transport would).
pub async fn client_go(
    target: &Target,
    conn: &mut Option<Client>,
    h2: bool,
    call: Call<'_>,
) -> Outcome {
    client_go_read(target, conn, h2, call).await.0
}

/// [`client_go`], with the body of the answer when it succeeded.
async fn client_go_read(
    target: &Target,
    conn: &mut Option<Client>,
    h2: bool,
    call: Call<'_>,
) -> (Outcome, Option<Bytes>) {
    let Call {
        method,
        path,
        body,
        deadline,
    } = call;
    let started = Instant::now();
    let mut outcome = Outcome::default();
    let write = method != "GET";
    // Ends the request with `error`; `processed_unknown` says whether it leaves the client
    // unable to tell if a write was applied.
    let fail = |mut o: Outcome, error: ErrorClass, processed_unknown: bool| {
        o.first.get_or_insert(error);
        o.last = Some(error);
        o.ambiguous = write && processed_unknown;
        o
    };
    for attempt in 0..=MAX_RETRIES {
        let c = match connected(conn, target, h2).await {
            Ok(c) => c,
            Err(e) => {
                // Refused is not retried; a dial timeout or reset is, for GET. Nothing was
                // sent: never ambiguous.
                if e == ErrorClass::Refused || write {
                    return (fail(outcome, e, false), None);
                }
                outcome.first.get_or_insert(e);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let fut = c.send(method, path, body);
        let result = match deadline {
            Some(d) => match tokio::time::timeout(d.saturating_sub(started.elapsed()), fut).await {
                Ok(r) => r,
                Err(_) => Err(ErrorClass::Timeout),
            },
            None => fut.await,
        };
        let (error, retry_after) = match result {
            Ok(r) => match ok_status(&r) {
                Ok(()) => {
                    outcome.replica = r.replica;
                    return (outcome, Some(r.body));
                }
                Err(e) => (e, r.retry_after),
            },
            Err(e) => {
                *conn = None;
                (e, None)
            }
        };
        outcome.first.get_or_insert(error);
        let retry = match (error, retry_after) {
            (ErrorClass::Http429 | ErrorClass::Http5xx, Some(secs)) => {
                Some(Duration::from_secs(secs))
            }
            (ErrorClass::Reset, _) if !write => {
                Some(Duration::from_millis(100 * (attempt as u64 + 1)))
            }
            _ => None,
        };
        let unknown = match error {
            ErrorClass::Reset | ErrorClass::Timeout => true,
            ErrorClass::Http5xx => retry_after.is_none(),
            _ => false,
        };
        let Some(wait) = retry else {
            return (fail(outcome, error, unknown), None);
        };
        if deadline.is_some_and(|d| started.elapsed() + wait >= d) {
            return (fail(outcome, ErrorClass::Timeout, unknown), None);
        }
        tokio::time::sleep(wait).await;
    }
    let last = outcome.first.unwrap_or(ErrorClass::Other);
    (fail(outcome, last, false), None)
}

/// client-go's create of a ConfigMap with a name nothing else uses, so whether it was applied
/// can be looked up afterwards.
async fn create_configmap(
    target: &Target,
    conn: &mut Option<Client>,
    name: &str,
    turn: u64,
) -> Outcome {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name}, "data": {"turn": turn.to_string()}});
    client_go(target, conn, true, Call::post(&path, &body.to_string())).await
}

/// A component-like client (controller, scheduler): one long-lived HTTP/2 connection
/// multiplexing GET, LIST, lease renewals and creates.
pub async fn component(id: usize, target: Target, rec: Arc<Recorder>, stop: Stop) {
    let mut conn = None;
    let ns = NAMESPACE;
    let lease = format!("component-{id}");
    let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease}");
    let configmaps = format!("/api/v1/namespaces/{ns}/configmaps");
    let mut turn = 0u64;
    while !stop.stopped() {
        turn += 1;
        let started = Instant::now();
        let (kind, outcome, write) = match turn % 4 {
            0 => (
                Kind::Get,
                client_go(
                    &target,
                    &mut conn,
                    true,
                    Call::get(&format!("{configmaps}/seed-{}", id % 3)),
                )
                .await,
                None,
            ),
            1 => (
                Kind::List,
                client_go(&target, &mut conn, true, Call::get(&configmaps)).await,
                None,
            ),
            2 => {
                let write_id = format!("{id}-{turn}");
                let body = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": lease, "namespace": ns,
                                 "annotations": {WRITE_ANNOTATION: write_id}},
                    "spec": {"holderIdentity": lease, "leaseDurationSeconds": 15,
                             "renewTime": format!("2026-01-01T00:00:{:02}.000000Z", turn % 60)},
                });
                // Leader election renews with a deadline (RenewDeadline 10 s).
                let outcome = client_go(
                    &target,
                    &mut conn,
                    true,
                    Call::put(&lease_path, &body.to_string()).within(Duration::from_secs(10)),
                )
                .await;
                let write = Write::LeaseRenewal {
                    lease: lease.clone(),
                    write_id,
                };
                (Kind::Update, outcome, Some(write))
            }
            _ => {
                let name = format!("c{id}-{turn}");
                let outcome = create_configmap(&target, &mut conn, &name, turn).await;
                (Kind::Create, outcome, Some(Write::Create { name }))
            }
        };
        rec.add(kind, started, outcome, write);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many clients of each kind run against one target.
pub struct Mix {
    /// [`component`]s.
    pub components: usize,
    /// [`writer`]s.
    pub writers: usize,
    /// The pause between a writer's creates.
    pub writer_pause: Duration,
    /// [`short_lived`] clients.
    pub short_lived: usize,
    /// [`watcher`]s.
    pub watchers: usize,
    /// [`discovering`] clients.
    pub discovering: usize,
    /// Ids start here (they name leases and created objects: two mixes against one store
    /// need ranges apart).
    pub first_id: usize,
}

impl Mix {
    /// Starts every client; each runs until `stop`.
    pub fn spawn(
        &self,
        target: &Target,
        rec: &Arc<Recorder>,
        stop: &Stop,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let ids = |n: usize| self.first_id..self.first_id + n;
        let mut tasks = Vec::new();
        // Each loop of a kind with its id, on the same target, recorder and stop.
        let mut spawn = |n: usize, run: fn(usize, Target, Arc<Recorder>, Stop) -> Loop| {
            for id in ids(n) {
                tasks.push(tokio::spawn(run(
                    id,
                    target.clone(),
                    rec.clone(),
                    stop.clone(),
                )));
            }
        };
        spawn(self.components, |id, t, r, s| {
            Box::pin(component(id, t, r, s))
        });
        spawn(self.short_lived, |id, t, r, s| {
            Box::pin(short_lived(id, t, r, s))
        });
        spawn(self.discovering, |id, t, r, s| {
            Box::pin(discovering(id, t, r, s))
        });
        for id in ids(self.writers) {
            let (t, r, s) = (target.clone(), rec.clone(), stop.clone());
            tasks.push(tokio::spawn(writer(id, t, r, s, self.writer_pause)));
        }
        for _ in 0..self.watchers {
            tasks.push(tokio::spawn(watcher(
                target.clone(),
                rec.clone(),
                stop.clone(),
            )));
        }
        tasks
    }
}

/// One client loop, boxed so that loops of different kinds share a spawner.
type Loop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A writer (a busy controller): creates `pause` apart on one long-lived HTTP/2 connection
/// (back to back with a short pause, so writes are in flight whenever a replica dies).
pub async fn writer(id: usize, target: Target, rec: Arc<Recorder>, stop: Stop, pause: Duration) {
    let mut conn = None;
    let mut turn = 0u64;
    while !stop.stopped() {
        turn += 1;
        let name = format!("w{id}-{turn}");
        let started = Instant::now();
        let outcome = create_configmap(&target, &mut conn, &name, turn).await;
        rec.add(Kind::Create, started, outcome, Some(Write::Create { name }));
        tokio::time::sleep(pause).await;
    }
}

/// The group whose versions change in the `upgrade` scenario.
pub const UPGRADED_GROUP: &str = "resource.k8s.io";

/// A client through a control-plane upgrade (`upgrade`): reads its group's discovery
/// document, then uses at once the group-version it prefers, as a client that rebuilds its
/// REST mapping would: creates the object it reads if there is none, and reads it. A 404
/// here is a replica that does not serve what discovery just showed. Even ids keep one
/// connection (a controller); odd ones open a new connection for every request, as kubectl
/// runs do with their discovery cached on disk, so that behind an L4 balancer discovery and
/// use may come from different replicas.
pub async fn discovering(id: usize, target: Target, rec: Arc<Recorder>, stop: Stop) {
    let mut conn = None;
    let name = format!("claim-{id}");
    let fresh = id % 2 == 1;
    let mut exists = false;
    while !stop.stopped() {
        if fresh {
            conn = None;
        }
        let started = Instant::now();
        let (outcome, body) = client_go_read(
            &target,
            &mut conn,
            true,
            Call::get(&format!("/apis/{UPGRADED_GROUP}")),
        )
        .await;
        let gv = body
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|g| {
                g["preferredVersion"]["groupVersion"]
                    .as_str()
                    .map(str::to_string)
            });
        let Some(gv) = gv else {
            rec.add(Kind::Discovered, started, outcome, None);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let claims = format!("/apis/{gv}/namespaces/{NAMESPACE}/resourceclaims");
        if fresh {
            conn = None;
        }
        if !exists {
            // The first turn: the object this client reads, created in the group-version
            // discovery showed (it may exist from an earlier run: 409).
            let started = Instant::now();
            let claim = json!({"apiVersion": gv, "kind": "ResourceClaim",
                               "metadata": {"name": name}});
            let create = client_go(
                &target,
                &mut conn,
                true,
                Call::post(&claims, &claim.to_string()),
            )
            .await;
            exists = create.last.is_none() || create.last == Some(ErrorClass::Http(409));
            if !exists {
                rec.add(Kind::Discovered, started, create, None);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            if fresh {
                conn = None;
            }
        }
        let started = Instant::now();
        let outcome = client_go(
            &target,
            &mut conn,
            true,
            Call::get(&format!("{claims}/{name}")),
        )
        .await;
        rec.add(Kind::Discovered, started, outcome, None);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A kubectl-like client: a new connection per request, alternating HTTP/1.1 and HTTP/2.
pub async fn short_lived(id: usize, target: Target, rec: Arc<Recorder>, stop: Stop) {
    let mut turn = id as u64;
    while !stop.stopped() {
        turn += 1;
        let started = Instant::now();
        let mut conn = None;
        let outcome = client_go(
            &target,
            &mut conn,
            turn.is_multiple_of(2),
            Call::get(&format!(
                "/api/v1/namespaces/{NAMESPACE}/configmaps?limit=500"
            )),
        )
        .await;
        drop(conn);
        rec.add(Kind::Short, started, outcome, None);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An informer-like watcher: list, then watch from the list's resourceVersion, resuming from
/// the last one seen whenever the stream ends.
pub async fn watcher(target: Target, rec: Arc<Recorder>, stop: Stop) {
    let list_path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let mut rv: Option<String> = None;
    let mut conn: Option<Client> = None;
    while !stop.stopped() {
        let Ok(c) = connected(&mut conn, &target, true).await else {
            tokio::time::sleep(Duration::from_millis(800)).await;
            continue;
        };
        let Some(from) = rv.clone() else {
            match c.send("GET", &list_path, None).await {
                Ok(r) if r.status == 200 => {
                    let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
                    rv = v["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                }
                _ => {
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(800)).await;
                }
            }
            continue;
        };
        let path = format!(
            "{list_path}?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds={}",
            WATCH_TIMEOUT.as_secs()
        );
        // Every way a watch ends before the client stops is a break the client saw — it failed
        // to open, was refused, or its stream ended — except the end it asked for: its
        // `timeoutSeconds` passed.
        let opened = Instant::now();
        let (status, mut body) = match c.watch(&path).await {
            Ok(pair) => pair,
            Err(_) => {
                rec.watch_broke(WatchEndSeen::NotSent);
                conn = None;
                tokio::time::sleep(Duration::from_millis(800)).await;
                continue;
            }
        };
        if status != 200 {
            rec.watch_broke(WatchEndSeen::Status(status));
            tokio::time::sleep(Duration::from_millis(800)).await;
            continue;
        }
        let mut expired = false;
        let mut lines = WatchEvents::default();
        let ended_cleanly = loop {
            tokio::select! {
                frame = body.frame() => match frame {
                    None => break true,
                    Some(Err(_)) => break false,
                    Some(Ok(f)) => {
                        for ev in lines.take(f) {
                            if ev["type"] == "ERROR" {
                                if ev["object"]["code"] == 410 {
                                    Recorder::count(&rec.watch_relists);
                                    expired = true;
                                    rv = None;
                                }
                                continue;
                            }
                            Recorder::count(&rec.watch_events);
                            if let Some(v) = ev["object"]["metadata"]["resourceVersion"].as_str() {
                                rv = Some(v.to_string());
                            }
                        }
                    }
                },
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.stopped() { return; }
                }
            }
        };
        if stop.stopped() {
            return;
        }
        if ended_cleanly && !expired && opened.elapsed() + WATCH_TIMEOUT_SLACK >= WATCH_TIMEOUT {
            Recorder::count(&rec.watch_timeouts);
            continue;
        }
        rec.watch_broke(if expired {
            WatchEndSeen::Expired
        } else if ended_cleanly {
            WatchEndSeen::Ended
        } else {
            WatchEndSeen::Failed
        });
        if !ended_cleanly {
            conn = None;
        }
        if rv.is_some() {
            Recorder::count(&rec.watch_resumes);
        }
    }
}

/// Seeds through `target` until it passes traffic (its backends found ready), up to 20 s.
pub async fn seed_when_ready(target: &Target, gateway: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while seed(target).await.is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{gateway} did not pass traffic within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Creates the namespace's seed objects through `target`.
pub async fn seed(target: &Target) -> anyhow::Result<()> {
    let mut conn = None;
    // The namespace, on a cluster that does not have it yet (a real one).
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    let _ = client_go(
        target,
        &mut conn,
        true,
        Call::post("/api/v1/namespaces", &ns.to_string()),
    )
    .await;
    for i in 0..3 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("seed-{i}")}, "data": {"seed": "yes"}});
        let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
        let err = client_go(target, &mut conn, true, Call::post(&path, &cm.to_string()))
            .await
            .last;
        // Already there from an earlier attempt: fine.
        anyhow::ensure!(
            err.is_none() || err == Some(ErrorClass::Http(409)),
            "seeding failed: {err:?}"
        );
    }
    // The seeds read back: a gateway that loses the client's identity gets 403 here.
    let read = client_go(
        target,
        &mut conn,
        true,
        Call::get(&format!("/api/v1/namespaces/{NAMESPACE}/configmaps/seed-0")),
    )
    .await;
    anyhow::ensure!(
        read.last.is_none(),
        "reading a seed failed: {:?} (403: the gateway did not pass the client's identity on)",
        read.last
    );
    for id in 0..8 {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": format!("component-{id}")}, "spec": {"holderIdentity": format!("component-{id}")}});
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let _ = client_go(
            target,
            &mut conn,
            true,
            Call::post(&path, &lease.to_string()),
        )
        .await;
    }
    Ok(())
}
