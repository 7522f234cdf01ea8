//! The `kubernetes` service's endpoints, kept as kube-apiserver's lease reconciler keeps them
//! (`--endpoint-reconciler-type=lease`, `pkg/controlplane/reconcilers/lease.go`): every 10 s
//! each replica refreshes its own key under `/registry/masterleases/` (valid 15 s), then
//! rewrites the EndpointSlice `default/kubernetes` from the keys still valid — never to an empty
//! list. At the start of its shutdown a replica deletes its key and rewrites the slice without
//! itself (`RemoveEndpoints`); a crashed one drops out when its key expires.
//!
//! etcd's own TTL is replaced by an expiry time in the key's value, which every replica checks
//! (they share one clock here), so the in-memory store behaves the same.

use crate::state::Sim;
use crate::store::StoreError;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a replica refreshes its key and rewrites the slice.
const INTERVAL: Duration = Duration::from_secs(10);
/// How long a key stays valid without a refresh.
const TTL: Duration = Duration::from_secs(15);
const LEASES: &str = "/registry/masterleases/";
const SLICE: &str = "/registry/discovery.k8s.io/endpointslices/default/kubernetes";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Refreshes `advertise`'s key and the slice every 10 s until the process ends.
pub async fn run(sim: Arc<Sim>, advertise: SocketAddr) {
    let mut tick = tokio::time::interval(INTERVAL);
    loop {
        tick.tick().await;
        if sim.checks.shutting_down() {
            return;
        }
        if let Err(e) = refresh(&sim, advertise).await {
            tracing::warn!(error = %e, "endpoint reconciler: cannot refresh");
        }
    }
}

/// `RemoveEndpoints`: deletes this replica's key and rewrites the slice without it.
pub async fn remove(sim: &Sim, advertise: SocketAddr) {
    let key = format!("{LEASES}{}", advertise.ip());
    let _ = sim.store.delete(&key).await;
    if let Err(e) = rewrite(sim, advertise.port()).await {
        tracing::warn!(error = %e, "endpoint reconciler: cannot remove this replica");
    } else {
        tracing::info!(%advertise, "endpoint reconciler: removed this replica");
    }
}

async fn refresh(sim: &Sim, advertise: SocketAddr) -> Result<(), StoreError> {
    let key = format!("{LEASES}{}", advertise.ip());
    let value = serde_json::to_vec(&json!({
        "address": advertise.ip().to_string(),
        "expiresUnixMs": now_ms() + TTL.as_millis() as u64,
    }))
    .expect("serializable");
    match sim.store.create(&key, value.clone()).await {
        Err(StoreError::AlreadyExists) => sim.store.update(&key, value, None).await.map(|_| ()),
        other => other.map(|_| ()),
    }?;
    rewrite(sim, advertise.port()).await
}

/// Writes the slice from the valid keys (deleting expired ones), if it changed.
async fn rewrite(sim: &Sim, port: u16) -> Result<(), StoreError> {
    let (keys, _) = sim.store.list(LEASES).await?;
    let now = now_ms();
    let mut addresses = Vec::new();
    for kv in keys {
        let v: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
        match (v["address"].as_str(), v["expiresUnixMs"].as_u64()) {
            (Some(a), Some(expires)) if expires > now => addresses.push(a.to_string()),
            _ => {
                let _ = sim.store.delete(&kv.key).await;
            }
        }
    }
    // An empty list is never written: clients would lose every apiserver.
    if addresses.is_empty() {
        return Ok(());
    }
    addresses.sort();
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    let current = sim.store.get(SLICE).await;
    if let Ok(kv) = &current {
        let v: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
        if v["endpoints"] == json!(endpoints) && v["ports"][0]["port"] == json!(port) {
            return Ok(());
        }
    }
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
            "uid": "00000000-0000-0000-0000-00000000e5e5",
            "creationTimestamp": crate::objects::now(),
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    let value = serde_json::to_vec(&slice).expect("serializable");
    match current {
        Ok(kv) => sim
            .store
            .update(SLICE, value, Some(kv.mod_revision))
            .await
            .map(|_| ()),
        Err(StoreError::NotFound) => sim.store.create(SLICE, value).await.map(|_| ()),
        Err(e) => Err(e),
    }
}
