//! `kubegate-loadtest herd`: N kube-proxy-like informers of one identity (`--tokens`: one
//! service account, each informer with its own token of it, as kube-proxy pods) start at once,
//! as a DaemonSet's agents do after a rollout or after a control-plane restart: each on its own
//! HTTP/2 connection, each LISTs every Service and every EndpointSlice with kube-proxy's label
//! selector as client-go's reflector starts (`limit=500&resourceVersion=0`), retrying a failure
//! as it does (a 429 after its `Retry-After`, else after a backoff), then watches both from
//! its lists' resourceVersions while a writer churns the endpoints (a new EndpointSlice each
//! write). Straight to the replicas (`direct`, spread over them), and through each gateway.
//!
//! Measured for the start: the LISTs the replicas received and the body bytes they sent (their
//! fault port's `/state`, before and after), how long each informer waited for its two lists
//! (p50, p99), the failures, and the gateway's CPU time. For the churn: the watches the replicas
//! received, the bytes they sent, each event's lag at each informer (from the write's answer
//! to the event's arrival, p50 and p99), the events an informer missed, the gateway's CPU per
//! event delivered and its memory at the end. The replicas answer every API request after
//! 100 ms (`--latency`), as a LIST of a few hundred objects takes on a busy apiserver: a
//! start-up's LISTs overlap, as they do in a real cluster.

use crate::client::{Client, ClientTls, WatchEvents};
use crate::control_plane::{ControlPlane, ReplicaSettings};
use crate::gateways;
use crate::sampler::Sampler;
use crate::scale::counts;
use http_body_util::BodyExt;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The namespace the Services and EndpointSlices are made in.
const NAMESPACE: &str = "herd";
/// The collections a kube-proxy watches, every namespace's.
const COLLECTIONS: [&str; 2] = [
    "/api/v1/services",
    "/apis/discovery.k8s.io/v1/endpointslices",
];
/// kube-proxy's label selector on both (`!service.kubernetes.io/headless,
/// !service.kubernetes.io/service-proxy-name`), encoded.
const SELECTOR: &str =
    "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";

/// What client-go's reflector asks of `collection` when it starts: a page of 500 from the
/// watch cache.
fn list_of(collection: &str) -> String {
    format!("{collection}?{SELECTOR}&limit=500&resourceVersion=0")
}

/// Tries of one informer's LIST.
const TRIES: usize = 10;
/// How long every informer has to hear every write, after the last.
const HEAR_WITHIN: Duration = Duration::from_secs(30);

/// What to run.
pub struct Plan {
    /// Informers, each on its own connection.
    pub informers: usize,
    /// Services in the namespace, and as many EndpointSlices (about 1 KiB each).
    pub objects: usize,
    /// `direct`, or gateways (see `run --gateways`).
    pub gateways: Vec<String>,
    /// Writes during the churn (each a new EndpointSlice: one event at every informer).
    pub writes: usize,
    /// Tokens of one service account the informers use, informer `i` token `i % tokens`; 0:
    /// the node certificate for all.
    pub tokens: usize,
    /// Writes per second.
    pub writes_per_second: u32,
    /// Informers start with a watch-list rather than a LIST.
    pub watch_list: bool,
    /// Working directory.
    pub dir: PathBuf,
}

/// One gateway's start-up.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The gateway, or `direct`.
    pub gateway: String,
    /// `ok`, or why it did not run.
    pub status: String,
    /// Informers started.
    pub informers: usize,
    /// Of them, listed (200).
    pub listed: usize,
    /// Of them, failed after their tries.
    pub failed: usize,
    /// Whether the informers started with watch-lists (`lists_at_replicas` counts those).
    pub watch_list: bool,
    /// LISTs the replicas received (watch-lists, with `watch_list`).
    pub lists_at_replicas: u64,
    /// TokenReviews and SubjectAccessReviews the replicas answered (kubegate's, naming
    /// token clients and allowing them to share).
    pub reviews_at_replicas: u64,
    /// Body bytes the replicas sent.
    pub bytes_from_replicas: u64,
    /// How long an informer waited for its list: median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The gateway's CPU time over the start-up, ms (none: `direct`).
    pub gateway_cpu_ms: Option<u64>,
    /// The churn that followed.
    pub churn: Churn,
}

/// The informers' watches through the churn.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Churn {
    /// Watches that opened (200).
    pub watching: usize,
    /// WATCH requests the replicas received for them.
    pub watches_at_replicas: u64,
    /// Body bytes the replicas sent from the watches' opening to the last event heard.
    pub bytes_from_replicas: u64,
    /// Events the informers heard of the writes.
    pub events: u64,
    /// Events an informer never heard.
    pub missed: u64,
    /// An event's lag at an informer, from its write's answer: median, ms.
    pub lag_p50_ms: f64,
    /// 99th percentile, ms.
    pub lag_p99_ms: f64,
    /// The gateway's CPU time per event delivered, µs (none: `direct`).
    pub gateway_cpu_us_per_event: Option<f64>,
    /// The gateway's resident memory at the end, MiB.
    pub gateway_rss_mib: Option<f64>,
}

/// Runs every gateway in turn, each in front of a control plane of its own.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for gateway in &plan.gateways {
        let dir = plan.dir.join(gateway);
        let _ = std::fs::remove_dir_all(&dir);
        rows.push(one(plan, gateway, &dir).await?);
    }
    Ok(rows)
}

async fn one(plan: &Plan, gateway: &str, dir: &Path) -> anyhow::Result<Row> {
    let settings = ReplicaSettings {
        shutdown_delay: "0s".into(),
        goaway_chance: 0.0,
        latency: Duration::from_millis(100),
        watch_cache: true,
        version: Vec::new(),
    };
    let cp = ControlPlane::start(dir, 3, settings).await?;
    eprintln!(
        "{gateway}: seeding {} Services and EndpointSlices",
        plan.objects
    );
    seed(&cp, plan.objects).await?;
    let gw = if gateway == "direct" {
        None
    } else {
        match gateways::start_before(gateway, dir, &cp)? {
            Ok(gw) => Some(gw),
            Err(why) => return Ok(not_run(gateway, plan, why)),
        }
    };
    let tls = ClientTls::load_as(&cp.pki(), "node")?;
    // Informer `i`'s settings: the node certificate, or token `i % tokens` of one service
    // account.
    let tokens = plan.tokens.min(crate::control_plane::HERD_TOKENS);
    let token_tls = ClientTls::with_token(&cp.pki(), &crate::control_plane::herd_token(0))?;
    // Each from an address of its own, as each kube-proxy runs on a node of its own: what
    // kubegate shares per client source (its token reviews) is shared as in a cluster.
    let tls_of = |i: usize| -> anyhow::Result<ClientTls> {
        let tls = match tokens {
            0 => tls.clone(),
            n => token_tls.bearing(&crate::control_plane::herd_token(i % n))?,
        };
        Ok(tls.dialing_from(node_address(i)))
    };
    let replicas = cp.addresses();
    let addr_of = |i: usize| match &gw {
        Some(gw) => gw.listen,
        None => replicas[i % replicas.len()],
    };
    wait_serving(addr_of(0), &tls, gateway).await?;
    eprintln!("{gateway}: connecting {} informers", plan.informers);
    let mut clients = Vec::with_capacity(plan.informers);
    for i in 0..plan.informers {
        let tls = tls_of(i)?;
        let c = Client::connect(addr_of(i), &tls, true)
            .await
            .map_err(|e| anyhow::anyhow!("{gateway}: connect: {e:?}"))?;
        clients.push((c, tls));
    }
    let ports = cp.fault_ports();
    let before = replica_totals(&ports).await?;
    let sampler = gw
        .as_ref()
        .and_then(|g| g.pid())
        .map(|pid| Sampler::start(pid, Instant::now()));
    let cpu_before = sampler.as_ref().map(|s| s.latest().cpu_ms);
    eprintln!("{gateway}: {} informers start", plan.informers);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, (c, tls))| tokio::spawn(informer(c, (addr_of(i), tls), plan.watch_list)))
        .collect();
    let mut waited = Vec::with_capacity(tasks.len());
    let mut listed = Vec::with_capacity(tasks.len());
    let mut failed = 0;
    for t in tasks {
        match t.await? {
            Some((ms, client, rv)) => {
                waited.push(ms);
                listed.push((client, rv));
            }
            None => failed += 1,
        }
    }
    let cpu_ms = sampler
        .as_ref()
        .zip(cpu_before)
        .map(|(s, b)| s.latest().cpu_ms.saturating_sub(b));
    let after = replica_totals(&ports).await?;
    waited.sort_by(|a, b| a.total_cmp(b));
    eprintln!(
        "{gateway}: {} informers watch through {} writes",
        listed.len(),
        plan.writes
    );
    let churn = churn(plan, &cp, listed, (&ports, sampler.as_ref())).await?;
    Ok(Row {
        gateway: gateway.to_string(),
        status: "ok".into(),
        informers: plan.informers,
        listed: waited.len(),
        failed,
        watch_list: plan.watch_list,
        lists_at_replicas: after.0 - before.0,
        reviews_at_replicas: after.3 - before.3,
        bytes_from_replicas: after.1 - before.1,
        p50_ms: crate::report::percentile(&waited, 0.50),
        p99_ms: crate::report::percentile(&waited, 0.99),
        gateway_cpu_ms: cpu_ms,
        churn,
    })
}

fn not_run(gateway: &str, plan: &Plan, why: String) -> Row {
    Row {
        gateway: gateway.to_string(),
        status: why,
        informers: plan.informers,
        listed: 0,
        failed: 0,
        watch_list: plan.watch_list,
        lists_at_replicas: 0,
        reviews_at_replicas: 0,
        bytes_from_replicas: 0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        gateway_cpu_ms: None,
        churn: Churn::default(),
    }
}

/// Waits until `addr` answers the informers' LIST (a gateway that has found its replicas
/// ready), within 30 s.
async fn wait_serving(addr: SocketAddr, tls: &ClientTls, gateway: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = Client::connect(addr, tls, true).await {
            let list = list_of(COLLECTIONS[0]);
            if matches!(c.send("GET", &list, None).await, Ok(r) if r.status == 200) {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{gateway} did not serve within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One informer's start: its two LISTs (Services, then EndpointSlices), each retried as
/// client-go's reflector retries a failed list — after a 429's `Retry-After`, else after a
/// backoff from 1 s doubling to 8 s — up to [`TRIES`] times, on a new connection to `addr`
/// after one broke; how long it waited for both (ms), its connection and the lists'
/// resourceVersions, or `None` when it got none.
async fn informer(
    mut c: Client,
    (addr, tls): (SocketAddr, ClientTls),
    watch_list: bool,
) -> Option<(f64, Client, [String; 2])> {
    let started = Instant::now();
    let services = list(&mut c, COLLECTIONS[0], (addr, &tls), watch_list).await?;
    let slices = list(&mut c, COLLECTIONS[1], (addr, &tls), watch_list).await?;
    let waited = started.elapsed().as_secs_f64() * 1e3;
    Some((waited, c, [services, slices]))
}

/// One LIST of `collection` (a watch-list's initial events, with `watch_list`), retried as
/// [`informer`] says: the list's resourceVersion.
async fn list(
    c: &mut Client,
    collection: &str,
    (addr, tls): (SocketAddr, &ClientTls),
    watch_list: bool,
) -> Option<String> {
    if watch_list {
        return synced(c, collection, (addr, tls)).await;
    }
    let path = list_of(collection);
    let mut backoff = Duration::from_secs(1);
    for _ in 0..TRIES {
        let sent = tokio::time::timeout(Duration::from_secs(60), c.send("GET", &path, None));
        let wait = match sent.await {
            Ok(Ok(r)) if r.status == 200 => {
                let list: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
                return list["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string);
            }
            Ok(Ok(r)) => r.retry_after.map(Duration::from_secs),
            Ok(Err(_)) | Err(_) => {
                // The connection may be gone: a new one, as client-go dials again.
                if let Ok(fresh) = Client::connect(addr, tls, true).await {
                    *c = fresh;
                }
                None
            }
        };
        tokio::time::sleep(wait.unwrap_or(backoff)).await;
        backoff = (backoff * 2).min(Duration::from_secs(8));
    }
    None
}

/// What client-go's reflector asks of `collection` when it starts with a watch-list: the
/// current objects as events, then changes, from a consistent state.
fn watch_list_of(collection: &str) -> String {
    format!(
        "{collection}?{SELECTOR}&watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=600"
    )
}

/// One watch-list of `collection`, read to the bookmark that ends its initial events (then
/// closed: the informer watches from that position, as after a LIST), retried as [`list`]:
/// the bookmark's resourceVersion.
async fn synced(
    c: &mut Client,
    collection: &str,
    (addr, tls): (SocketAddr, &ClientTls),
) -> Option<String> {
    let path = watch_list_of(collection);
    let mut backoff = Duration::from_secs(1);
    for _ in 0..TRIES {
        let read = tokio::time::timeout(Duration::from_secs(60), async {
            let (status, mut body) = c.watch(&path).await.map_err(|_| ())?;
            if status != 200 {
                return Err(());
            }
            let mut events = WatchEvents::default();
            while let Some(Ok(frame)) = body.frame().await {
                for e in events.take(frame) {
                    let end = &e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"];
                    if e["type"] == "BOOKMARK" && end == "true" {
                        let rv = e["object"]["metadata"]["resourceVersion"].as_str();
                        return rv.map(str::to_string).ok_or(());
                    }
                }
            }
            Err(())
        });
        if let Ok(Ok(rv)) = read.await {
            return Some(rv);
        }
        // The connection may be gone (a replica closes one idle while the herd connects): a
        // new one, as client-go dials again.
        if let Ok(fresh) = Client::connect(addr, tls, true).await {
            *c = fresh;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(8));
    }
    None
}

/// `objects` Services in [`NAMESPACE`], each with an EndpointSlice of 8 endpoints, about 1 KiB
/// each, made 16 at a time.
async fn seed(cp: &ControlPlane, objects: usize) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for lane in 0..16 {
        let (addr, tls) = (cp.addresses()[0], cp.tls().clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr, &tls, true)
                .await
                .map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
            for i in (lane..objects).step_by(16) {
                let name = format!("svc-{i}");
                let service = serde_json::json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": name, "annotations": {"padding": "x".repeat(700)}},
                    "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": name}}});
                let path = format!("/api/v1/namespaces/{NAMESPACE}/services");
                create(&mut c, &path, &service).await?;
                create(&mut c, &slices_path(), &slice(&name, &name, i)).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Where EndpointSlices of [`NAMESPACE`] are made.
fn slices_path() -> String {
    format!("/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices")
}

/// EndpointSlice `name` of Service `service`: 8 endpoints, the `n`th block of addresses.
fn slice(name: &str, service: &str, n: usize) -> serde_json::Value {
    let endpoints: Vec<_> = (0..8)
        .map(|e| {
            serde_json::json!({"addresses": [format!("10.{}.{}.{e}", n / 256 % 256, n % 256)],
                               "conditions": {"ready": true}, "nodeName": format!("node-{e}")})
        })
        .collect();
    serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "", "port": 8080, "protocol": "TCP"}]})
}

/// POSTs `obj` to `path`: made (or there already).
async fn create(c: &mut Client, path: &str, obj: &serde_json::Value) -> anyhow::Result<()> {
    let body = obj.to_string();
    let post = ("POST", path, Some(body.as_str()));
    c.expect(post, &[201, 409], &format!("seed {path}")).await?;
    Ok(())
}

/// When each write was answered, by the EndpointSlice's name.
type Written = Arc<Mutex<HashMap<String, Instant>>>;

/// What the informers heard: each event's lag (ms), and how many events.
type Heard = (Arc<Mutex<Vec<f64>>>, Arc<Mutex<u64>>);

/// The informers watch Services and EndpointSlices from their lists' positions while
/// `plan.writes` EndpointSlices are made: what that cost the replicas and the gateway, and what
/// the informers heard.
async fn churn(
    plan: &Plan,
    cp: &ControlPlane,
    listed: Vec<(Client, [String; 2])>,
    (ports, sampler): (&[u16], Option<&Sampler>),
) -> anyhow::Result<Churn> {
    let before = replica_totals(ports).await?;
    let written: Written = Arc::default();
    let heard: Heard = Default::default();
    // Every watch opens at once (each waits the replicas' latency), then hears the writes.
    let (informers, opening): (Vec<_>, Vec<_>) = listed
        .into_iter()
        .map(|(mut c, rvs)| {
            let (written, heard, writes) = (written.clone(), heard.clone(), plan.writes);
            let (opened, open) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                // Both watches, Services' first; the endpoints' events are what it hears.
                let mut bodies = Vec::with_capacity(2);
                for (collection, rv) in COLLECTIONS.iter().zip(&rvs) {
                    let path = format!(
                        "{collection}?{SELECTOR}&watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=600"
                    );
                    let watching =
                        tokio::time::timeout(Duration::from_secs(60), c.watch(&path)).await;
                    let Ok(Ok((200, body))) = watching else {
                        let _ = opened.send(false);
                        return;
                    };
                    bodies.push(body);
                }
                let _ = opened.send(true);
                let (Some(slices), _services) = (bodies.pop(), bodies.pop()) else {
                    return;
                };
                hear(slices, writes, &written, &heard).await;
            });
            (task, open)
        })
        .unzip();
    let mut watching = 0;
    for open in opening {
        watching += usize::from(open.await.unwrap_or(false));
    }
    let open = replica_totals(ports).await?;
    let cpu_before = sampler.map(|s| s.latest().cpu_ms);
    let mut writer = Client::connect(cp.addresses()[0], cp.tls(), true)
        .await
        .map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
    let path = slices_path();
    let every = Duration::from_secs_f64(1.0 / f64::from(plan.writes_per_second.max(1)));
    for i in 0..plan.writes {
        // Endpoints churn: a new slice of a Service each write.
        let name = format!("churn-{i}");
        let body = slice(
            &name,
            &format!("svc-{}", i % plan.objects.max(1)),
            60_000 + i,
        );
        let r = writer
            .send("POST", &path, Some(&body.to_string()))
            .await
            .map_err(|e| anyhow::anyhow!("write: {e:?}"))?;
        anyhow::ensure!(r.status == 201, "write: {}", r.status);
        written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, Instant::now());
        tokio::time::sleep(every).await;
    }
    for t in informers {
        let _ = tokio::time::timeout(HEAR_WITHIN, t).await;
    }
    let after = replica_totals(ports).await?;
    let events = *heard.1.lock().unwrap_or_else(|e| e.into_inner());
    let mut lags = heard.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    lags.sort_by(|a, b| a.total_cmp(b));
    let cpu_ms = sampler
        .zip(cpu_before)
        .map(|(s, b)| s.latest().cpu_ms.saturating_sub(b));
    Ok(Churn {
        watching,
        watches_at_replicas: open.2 - before.2,
        bytes_from_replicas: after.1 - open.1,
        events,
        missed: (watching * plan.writes) as u64 - events,
        lag_p50_ms: crate::report::percentile(&lags, 0.50),
        lag_p99_ms: crate::report::percentile(&lags, 0.99),
        gateway_cpu_us_per_event: cpu_ms
            .filter(|_| events > 0)
            .map(|ms| ms as f64 * 1e3 / events as f64),
        gateway_rss_mib: sampler.map(|s| s.latest().rss_kib as f64 / 1024.0),
    })
}

/// One informer's watch: reads its events until it has heard every write (or its body ends),
/// each write's lag recorded.
async fn hear(mut body: hyper::body::Incoming, writes: usize, written: &Written, heard: &Heard) {
    let mut events = WatchEvents::default();
    let mut seen = 0;
    while seen < writes {
        let Some(Ok(frame)) = body.frame().await else {
            return;
        };
        for e in events.take(frame) {
            if e["type"] != "ADDED" {
                continue;
            }
            let Some(name) = e["object"]["metadata"]["name"].as_str() else {
                continue;
            };
            let at = written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .copied();
            // An event can come before its write's answer: no lag.
            let lag = at.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
            heard.0.lock().unwrap_or_else(|e| e.into_inner()).push(lag);
            *heard.1.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            seen += 1;
        }
    }
}

/// LISTs received, body bytes sent and WATCHes received, over every replica.
async fn replica_totals(ports: &[u16]) -> anyhow::Result<(u64, u64, u64, u64)> {
    let mut totals = (0, 0, 0, 0);
    for &port in ports {
        let state = counts::state(port)
            .await
            .ok_or_else(|| anyhow::anyhow!("the replica at fault port {port} did not answer"))?;
        // Initial syncs: LISTs, or watch-lists.
        totals.0 += state["lists_received"].as_u64().unwrap_or(0)
            + state["watch_lists_received"].as_u64().unwrap_or(0);
        totals.1 += state["bytes_sent"].as_u64().unwrap_or(0);
        totals.2 += state["watches_received"].as_u64().unwrap_or(0);
        totals.3 += state["token_reviews_received"].as_u64().unwrap_or(0)
            + state["access_reviews_received"].as_u64().unwrap_or(0);
    }
    Ok(totals)
}

/// The report as Markdown: the start-up, then the churn.
pub fn markdown(rows: &[Row]) -> String {
    let syncs = if rows.iter().any(|r| r.watch_list) {
        "watch-lists"
    } else {
        "LISTs"
    };
    let mut out = format!(
        "| gateway | informers listed (failed) | {syncs} at the replicas | reviews at the replicas | bytes the replicas sent | wait p50 / p99 | gateway CPU |\n|---|---|---|---|---|---|---|\n",
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for r in rows {
        if r.status != "ok" {
            out.push_str(&format!("| {} | {} | | | | | |\n", r.gateway, r.status));
            continue;
        }
        out.push_str(&format!(
            "| {} | {} ({}) | {} | {} | {:.1} MiB | {:.0} / {:.0} ms | {} |\n",
            r.gateway,
            r.listed,
            r.failed,
            r.lists_at_replicas,
            r.reviews_at_replicas,
            mib(r.bytes_from_replicas),
            r.p50_ms,
            r.p99_ms,
            r.gateway_cpu_ms
                .map_or_else(|| "-".to_string(), |ms| format!("{ms} ms")),
        ));
    }
    out.push_str(
        "\n| gateway | watching | WATCHes at the replicas | bytes the replicas sent | events heard (missed) | lag p50 / p99 | gateway CPU per event | gateway RSS |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows.iter().filter(|r| r.status == "ok") {
        let c = &r.churn;
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} MiB | {} ({}) | {:.1} / {:.1} ms | {} | {} |\n",
            r.gateway,
            c.watching,
            c.watches_at_replicas,
            mib(c.bytes_from_replicas),
            c.events,
            c.missed,
            c.lag_p50_ms,
            c.lag_p99_ms,
            c.gateway_cpu_us_per_event
                .map_or_else(|| "-".to_string(), |us| format!("{us:.1} µs")),
            c.gateway_rss_mib
                .map_or_else(|| "-".to_string(), |m| format!("{m:.0} MiB")),
        ));
    }
    out
}

/// The loopback address informer `i` connects from: 127.1.x.y, one per informer.
fn node_address(i: usize) -> std::net::IpAddr {
    let (x, y) = ((i / 250) % 256, i % 250 + 1);
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 1, x as u8, y as u8))
}
