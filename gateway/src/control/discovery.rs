//! Backends from the cluster: the apiservers listed in the `default/kubernetes` EndpointSlices
//! (label `kubernetes.io/service-name=kubernetes`), which each apiserver's lease reconciler
//! keeps. Read — list, then watch — directly from a backend (ready ones first, never through
//! kubegate's own listeners) with the credentials of `discovery.kubeconfig`; the static
//! `backends` are the seeds.
//!
//! A discovered address becomes a backend that must still pass `/readyz` like any other. One
//! that leaves the slices is removed from the pool, which drains it (`drain.timeout`), never
//! cuts it. Changes apply once the list has been stable for `discovery.debounce` (a starting
//! apiserver adds, removes and re-adds itself), an empty list is never applied (a slice
//! momentarily empty must not empty the pool), and the last applied list is kept in
//! `discovery.state_file` so a restarted kubegate whose seeds are gone still finds the replicas.

mod kubeconfig;
mod slices;

pub use kubeconfig::{load as load_credentials, Credentials};

use crate::state::{Cluster, Gateway, Pool};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use kubegate_config::{BackendSpec, DiscoveryConfig};
use kubegate_pool::BackendSource;
use rustls::pki_types::ServerName;
use serde_json::Value;
use slices::Slices;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes";
/// A watch ends after this long and is opened again, so a silent connection cannot hide
/// changes forever.
const WATCH_SECONDS: u64 = 300;
/// Limit for connecting and for a list's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between attempts when no backend answers.
const MAX_PAUSE: Duration = Duration::from_secs(30);

type Found = Option<BTreeSet<SocketAddr>>;

/// Follows the slices of `cluster` until the process ends. `server_name` verifies the
/// backends when the kubeconfig names none.
pub async fn run(
    gw: Arc<Gateway>,
    cluster: Arc<Cluster>,
    settings: DiscoveryConfig,
    creds: Credentials,
    server_name: String,
) {
    let (found, latest) = watch::channel::<Found>(None);
    let mut applied = BTreeSet::new();
    if let Some(path) = &settings.state_file {
        if let Some(remembered) = read_state(path) {
            tracing::info!(backends = remembered.len(), file = %path.display(), "discovery: starting from the state file");
            apply(&gw, &cluster, &mut applied, &remembered);
        }
    }
    let applying = tokio::spawn(apply_changes(
        gw.clone(),
        cluster.clone(),
        settings.clone(),
        latest,
        applied,
    ));
    // Ended with this task (a reload removed the cluster), in whatever it was doing.
    let _applying = AbortOnDrop(applying.abort_handle());
    let name = creds.server_name.clone().unwrap_or(server_name);
    let Ok(name) = ServerName::try_from(name.clone()) else {
        tracing::error!(name, "discovery: not a valid TLS server name");
        return;
    };
    let mut pause = Duration::from_secs(1);
    loop {
        for target in candidates(cluster.pool()) {
            match follow(target, &creds, &name, &found).await {
                Ok(()) => pause = Duration::from_secs(1),
                Err(e) => {
                    gw.metrics().control.discovery_errors.inc();
                    tracing::warn!(backend = %target, error = %e, "discovery: cannot read the endpoint slices there");
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Where to ask: ready backends first, then every other one still configured, each at its
/// address in use.
fn candidates(pool: &Pool) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = pool
        .routing()
        .ready
        .iter()
        .map(|b| b.connect_address())
        .collect();
    for b in pool.backends() {
        let at = b.connect_address();
        if pool.configured(b.address).is_some() && !out.contains(&at) {
            out.push(at);
        }
    }
    out
}

/// Lists the slices on `target`, then watches them until the watch ends (Ok) or fails.
async fn follow(
    target: SocketAddr,
    creds: &Credentials,
    name: &ServerName<'static>,
    found: &watch::Sender<Found>,
) -> Result<(), String> {
    let list = tokio::time::timeout(REQUEST_TIMEOUT, get(target, creds, name, SLICES))
        .await
        .map_err(|_| "list timed out".to_string())??;
    let list: Value =
        serde_json::from_slice(&list.collect().await.map_err(|e| e.to_string())?.to_bytes())
            .map_err(|e| format!("list: {e}"))?;
    let mut slices = Slices::from_list(&list);
    found.send_replace(Some(slices.all()));
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0");
    let path = format!(
        "{SLICES}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}"
    );
    let mut body = tokio::time::timeout(REQUEST_TIMEOUT, get(target, creds, name, &path))
        .await
        .map_err(|_| "watch timed out".to_string())??;
    let mut buf = Vec::new();
    // A watch that goes quiet beyond its own end (plus margin) is a dead connection.
    let silence = Duration::from_secs(WATCH_SECONDS + 30);
    loop {
        let frame = tokio::time::timeout(silence, body.frame())
            .await
            .map_err(|_| "the watch went silent".to_string())?;
        let Some(frame) = frame else { return Ok(()) };
        let frame = frame.map_err(|e| e.to_string())?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        if buf.len() > 4 * 1024 * 1024 {
            return Err("a watch event over 4 MiB".into());
        }
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if event["type"] == "ERROR" {
                // 410 and the like: list again.
                return Ok(());
            }
            slices.apply(&event);
            found.send_replace(Some(slices.all()));
        }
    }
}

/// One GET on `target` over a new TLS connection; the response body, if it answered 200.
async fn get(
    target: SocketAddr,
    creds: &Credentials,
    name: &ServerName<'static>,
    path: &str,
) -> Result<hyper::body::Incoming, String> {
    let tcp = tokio::net::TcpStream::connect(target)
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(creds.tls.clone())
        .connect(name.clone(), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = http::Request::get(path)
        .header(http::header::HOST, "kubernetes")
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("kubegate/", env!("CARGO_PKG_VERSION"), " (discovery)"),
        );
    if let Some(token) = &creds.token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let resp = send
        .send_request(req.body(Empty::<Bytes>::new()).expect("a valid request"))
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != http::StatusCode::OK {
        return Err(format!("answered {}", resp.status()));
    }
    Ok(resp.into_body())
}

/// Applies what was found once it has been stable for the debounce period.
async fn apply_changes(
    gw: Arc<Gateway>,
    cluster: Arc<Cluster>,
    settings: DiscoveryConfig,
    mut latest: watch::Receiver<Found>,
    mut applied: BTreeSet<SocketAddr>,
) {
    loop {
        if latest.changed().await.is_err() {
            return;
        }
        // Quiet for the whole debounce period, or start waiting again.
        loop {
            match tokio::time::timeout(settings.debounce, latest.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return,
                Err(_) => break,
            }
        }
        let Some(found) = latest.borrow_and_update().clone() else {
            continue;
        };
        if found.is_empty() {
            tracing::warn!("discovery: the endpoint slices list no apiserver; keeping the backends as they are");
            continue;
        }
        if found == applied {
            continue;
        }
        apply(&gw, &cluster, &mut applied, &found);
        if let Some(path) = &settings.state_file {
            if let Err(e) = write_state(path, &found).await {
                tracing::warn!(file = %path.display(), error = %e, "discovery: cannot write the state file");
            }
        }
    }
}

/// Adds what is new and removes (drains) what left, leaving the static backends alone.
fn apply(
    gw: &Gateway,
    cluster: &Cluster,
    applied: &mut BTreeSet<SocketAddr>,
    found: &BTreeSet<SocketAddr>,
) {
    let statics: Vec<SocketAddr> = gw
        .config()
        .load()
        .clusters()
        .iter()
        .filter(|c| c.name == cluster.name())
        .flat_map(|c| c.backends.iter().flat_map(|b| b.addresses()))
        .collect();
    // A static backend's other addresses are that replica too, never a backend of their own.
    let is_static = |a: &SocketAddr| statics.contains(a);
    let pool = cluster.pool();
    let spec = |address: SocketAddr| BackendSpec {
        name: None,
        address,
        health_address: None,
        other_addresses: Vec::new(),
    };
    for a in found.iter().filter(|a| !is_static(a)) {
        if pool.configured(*a).is_none() {
            tracing::info!(address = %a, "discovery: new apiserver");
            gw.metrics().init_backend(&a.to_string());
            pool.add_from(&spec(*a), BackendSource::Discovered);
        }
    }
    for a in applied.difference(found).filter(|a| !is_static(a)) {
        tracing::info!(address = %a, "discovery: apiserver left the endpoint slices; draining it");
        pool.remove(&spec(*a));
    }
    pool.rebuild_routing();
    *applied = found.clone();
    publish_discovered(gw);
}

/// Publishes how many backends discovery found, over every cluster that discovers its
/// replicas (after a change, and after a reload removed a cluster).
pub fn publish_discovered(gw: &Gateway) {
    let discovered = gw
        .clusters()
        .all()
        .iter()
        .flat_map(|c| {
            c.pool().backends().into_iter().filter(|b| {
                b.info().source == BackendSource::Discovered
                    && c.pool().configured(b.address).is_some()
            })
        })
        .count();
    gw.metrics()
        .control
        .discovered_backends
        .set(discovered as i64);
}

fn read_state(path: &Path) -> Option<BTreeSet<SocketAddr>> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text)
        .inspect_err(|e| tracing::warn!(file = %path.display(), error = %e, "discovery: ignoring an unreadable state file"))
        .ok()?;
    let set: BTreeSet<SocketAddr> = v["backends"]
        .as_array()?
        .iter()
        .filter_map(|a| a.as_str()?.parse().ok())
        .collect();
    (!set.is_empty()).then_some(set)
}

/// Writes the list whole (a temporary file renamed over the old one), so a crash mid-write
/// leaves the previous list.
async fn write_state(path: &Path, found: &BTreeSet<SocketAddr>) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(&serde_json::json!({
        "backends": found.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    }))
    .expect("serializable");
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, text).await?;
    tokio::fs::rename(&tmp, path).await
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
