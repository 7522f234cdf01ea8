//! Learns each replica's version and served group-versions from the replica itself: its
//! `/version`, `/api` and `/apis` (legacy discovery, which every apiserver still serves), and
//! which group-versions its APIServices hand to extension servers (whose answers are not the
//! replica's: `signals`; listing them needs `apiregistration.k8s.io` `apiservices` `list`), read
//! over terminate mode's own upstream connections as kubegate (requestheader identity
//! `kubegate`; `system:discovery` lets any authenticated user read them). A replica is read
//! as soon as it is ready and again every `terminate.version_skew.refresh`; it is forgotten
//! the moment it leaves `ready`, since it may come back as another version. What is learned
//! is published as metrics here, in one place, at each look; and at each look what the cluster
//! knows of a replica that left its pool (what it served, its flow control) is forgotten.

use crate::state::{Backend, Gateway, Kind};
use crate::terminate::exchange::h2client;
use crate::terminate::upstream::connect::stream_to;
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::replicas::PerReplica;
use crate::terminate::upstream::served::{ApiSet, GroupVersions, Served, ServedApis};
use crate::terminate::upstream::upstreams::{LiveUpstreams, Upstreams};
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use kubegate_health::BackendState;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the replicas' states are looked at: a replica that became ready, or was found
/// not to serve what it was learned to, is read within this.
const TICK: Duration = Duration::from_millis(250);
/// Limit for one discovery read.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document read (a large cluster's `/apis` is some tens of KiB).
const MAX_DOCUMENT: usize = 4 << 20;

/// Follows the replicas until the process ends.
pub async fn learn(gw: Arc<Gateway>, upstreams: Arc<LiveUpstreams>) {
    let reading: Arc<Mutex<HashSet<SocketAddr>>> = Arc::default();
    let mut published = Published::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let refresh = gw.config().load().terminate.version_skew.refresh;
        let now = upstreams.load();
        let backends = now.pool().backends();
        // What is known of a replica that left the pool goes with it.
        let addresses: Vec<SocketAddr> = backends.iter().map(|b| b.address).collect();
        now.served.keep_only(&addresses);
        now.flows.keep_only(&addresses);
        for b in &backends {
            // A removed replica only drains: what it serves no longer matters, and a replica
            // re-added at its address while it drains is the one the entry speaks for.
            if b.state() == BackendState::Removed {
                continue;
            }
            let apis = now.served.of(b.address);
            let served = apis.get();
            if b.state() != BackendState::Ready {
                if **served != Served::Unknown {
                    apis.set(Served::Unknown);
                }
                continue;
            }
            let due = match &**served {
                Served::Unknown => true,
                Served::Learned(_, at) | Served::Unreadable(_, at) => at.elapsed() >= refresh,
            };
            if !due
                || !reading
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(b.address)
            {
                continue;
            }
            let (gw, upstreams, b, reading) =
                (gw.clone(), upstreams.clone(), b.clone(), reading.clone());
            tokio::spawn(async move {
                read(&gw, &upstreams, &b).await;
                reading
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&b.address);
            });
        }
        published.update(&gw, &now.served, &backends);
    }
}

/// Reads `backend`'s version and group-versions, and records them (or why they could not be
/// read); and, side by side, which group-versions its APIServices hand to extension servers.
/// What it serves is recorded once those are known — from any replica's list — or its own
/// list has ended, so that its first answers are read for what they are; listing APIServices
/// reads storage (an etcd outage holds it up to the read's timeout) while discovery is served
/// from memory, so a list that is slow holds nothing up once another replica's told.
async fn read(gw: &Gateway, live: &LiveUpstreams, backend: &Arc<Backend>) {
    let name = backend.info().name.clone();
    // One set of upstream settings for every read: a reload may change them meanwhile.
    let upstreams = live.load();
    let (listed, list_ended) = tokio::sync::oneshot::channel::<()>();
    let listing = async {
        match get(gw, &upstreams, backend, APISERVICES)
            .await
            .and_then(|list| aggregated(&list))
        {
            // The cluster's, alike on every replica.
            Ok(gvs) => upstreams.extensions.learn(gvs),
            // Without the right to list them (or during an etcd outage), what was known
            // stays; never known, no group-version beyond the built-in groups counts as the
            // replicas' own.
            Err(why) => {
                tracing::debug!(backend = %name, error = %why, "the replica's APIServices cannot be listed")
            }
        }
        let _ = listed.send(());
    };
    let discovery = async {
        let learned = tokio::time::timeout(READ_TIMEOUT * 3, read_apis(gw, &upstreams, backend))
            .await
            .unwrap_or_else(|_| Err("timed out".to_string()));
        tokio::select! {
            () = upstreams.extensions.known() => {}
            _ = list_ended => {}
        }
        settle(gw, &upstreams.served, backend, learned);
    };
    tokio::join!(listing, discovery);
}

/// Records what reading `backend`'s discovery found, unless it left `ready` meanwhile (what
/// it served then is not news).
fn settle(
    gw: &Gateway,
    served: &PerReplica<ServedApis>,
    backend: &Backend,
    learned: Result<ApiSet, String>,
) {
    if backend.state() != BackendState::Ready {
        return;
    }
    match learned {
        Ok(set) => record(&served.of(backend.address), backend, set),
        Err(why) => {
            let name = &backend.info().name;
            gw.metrics()
                .terminate
                .backend_discovery_failures
                .with_label_values(&[name])
                .inc();
            let before = served
                .of(backend.address)
                .set(Served::Unreadable(why.clone(), Instant::now()));
            if !matches!(&*before, Served::Unreadable(..)) {
                tracing::warn!(backend = %name, error = %why, "could not read the replica's discovery: it is routed as if it served every group-version");
            }
        }
    }
}

/// Records `set` as what `backend` serves now, logging a change of what it serves.
fn record(apis: &ServedApis, backend: &Backend, set: ApiSet) {
    let set = Arc::new(set);
    let before = apis.set(Served::Learned(set.clone(), Instant::now()));
    let changed = match &*before {
        Served::Learned(old, _) => {
            old.version != set.version || old.group_versions != set.group_versions
        }
        _ => true,
    };
    if changed {
        tracing::info!(backend = %backend.info().name, version = %set.version, group_versions = set.group_versions.len(), "learned the replica's version and API group-versions");
    }
}

/// `/version`, `/api` and `/apis` of `backend`, as an [`ApiSet`].
async fn read_apis(
    gw: &Gateway,
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
) -> Result<ApiSet, String> {
    let version = get(gw, upstreams, backend, "/version").await?;
    let core = get(gw, upstreams, backend, "/api").await?;
    let groups = get(gw, upstreams, backend, "/apis").await?;
    parse(&version, &core, &groups)
}

/// Where a replica lists its APIServices.
const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// The group-versions of an `APIServiceList` whose `spec.service` is set (an extension server
/// answers for them; the others are the apiserver's own, a custom resource's among them).
fn aggregated(list: &[u8]) -> Result<GroupVersions, String> {
    let list: Value = serde_json::from_slice(list).map_err(|e| format!("{APISERVICES}: {e}"))?;
    let items = list["items"]
        .as_array()
        .ok_or_else(|| format!("{APISERVICES}: no items"))?;
    Ok(items
        .iter()
        .filter(|a| !a["spec"]["service"].is_null())
        .filter_map(|a| {
            let (g, v) = (a["spec"]["group"].as_str()?, a["spec"]["version"].as_str()?);
            Some((g.into(), v.into()))
        })
        .collect())
}

/// The set described by the three documents.
fn parse(version: &[u8], core: &[u8], groups: &[u8]) -> Result<ApiSet, String> {
    let json = |what: &str, body: &[u8]| {
        serde_json::from_slice::<Value>(body).map_err(|e| format!("{what}: {e}"))
    };
    let version = json("/version", version)?;
    let core = json("/api", core)?;
    let groups = json("/apis", groups)?;
    let field = |k: &str| version[k].as_str().unwrap_or("");
    let number = |k: &str| -> u32 { field(k).trim_end_matches('+').parse().unwrap_or(0) };
    let git = field("gitVersion");
    if git.is_empty() {
        return Err("/version has no gitVersion".to_string());
    }
    // gitVersion is `v1.34.1` (with a suffix sometimes): its patch orders replicas of one
    // minor version.
    let patch = git
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let (major, minor) = (number("major"), number("minor"));
    let emulated = match (number("emulationMajor"), number("emulationMinor")) {
        (0, _) => (major, minor),
        e => e,
    };
    let label = if emulated == (major, minor) {
        git.to_string()
    } else {
        format!("{git} (emulating {}.{})", emulated.0, emulated.1)
    };
    let mut gvs: GroupVersions = Vec::new();
    for v in core["versions"].as_array().into_iter().flatten() {
        if let Some(v) = v.as_str() {
            gvs.push(("".into(), v.into()));
        }
    }
    for g in groups["groups"].as_array().into_iter().flatten() {
        for v in g["versions"].as_array().into_iter().flatten() {
            let gv = v["groupVersion"].as_str().unwrap_or("");
            if let Some((group, version)) = gv.split_once('/') {
                gvs.push((group.into(), version.into()));
            }
        }
    }
    if gvs.is_empty() {
        return Err("/api and /apis list no group-version".to_string());
    }
    Ok(ApiSet::new(
        label,
        [emulated.0, emulated.1, major, minor, patch],
        gvs,
    ))
}

/// One discovery document of `backend`, read whole.
async fn get(
    gw: &Gateway,
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    path: &'static str,
) -> Result<Bytes, String> {
    // Anonymous users may read /version but not /api or /apis (`system:discovery` is bound to
    // authenticated users): nothing to ask without an identity.
    let outgoing = Outgoing::as_kubegate(upstreams, Method::GET, Uri::from_static(path), Bytes::new()).ok_or(
        "no front-proxy certificate (upstream.front_proxy): discovery is read as an authenticated user",
    )?;
    let exchange = async {
        // The task's own request, under the generation in force as it is sent.
        let config = gw.config().load_full();
        let stream = stream_to((gw, &config), upstreams, backend, Kind::WithIdentity)
            .await
            .map_err(|f| format!("{path}: {}", f.as_str()))?;
        let resp = h2client::send(stream.sender(), outgoing.head(), outgoing.body())
            .await
            .map_err(|f| format!("{path}: {}", f.as_str()))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_DOCUMENT)
            .collect()
            .await
            .map_err(|e| format!("{path}: reading the answer: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(format!("{path}: {status}"));
        }
        Ok(body)
    };
    tokio::time::timeout(READ_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("{path}: timed out")))
}

/// The series of `kubegate_backend_version_info` and `kubegate_backend_serves` set now, so
/// that those of a replica that left `ready` (or the pool) are removed.
#[derive(Default)]
struct Published {
    by_backend: BTreeMap<String, Arc<ApiSet>>,
}

impl Published {
    fn update(&mut self, gw: &Gateway, served: &PerReplica<ServedApis>, backends: &[Arc<Backend>]) {
        let m = &gw.metrics().terminate;
        let mut now: BTreeMap<String, Arc<ApiSet>> = BTreeMap::new();
        for b in backends {
            if b.state() != BackendState::Ready {
                continue;
            }
            if let Served::Learned(set, _) = &**served.of(b.address).get() {
                now.insert(b.info().name.clone(), set.clone());
            }
        }
        for (name, old) in &self.by_backend {
            if now
                .get(name)
                .is_some_and(|new| Arc::ptr_eq(new, old) || **new == **old)
            {
                continue;
            }
            let _ = m.backend_version.remove_label_values(&[name, &old.version]);
            for gv in old.names() {
                let _ = m.backend_serves.remove_label_values(&[name, &gv]);
            }
        }
        for (name, set) in &now {
            if self
                .by_backend
                .get(name)
                .is_some_and(|old| Arc::ptr_eq(set, old) || **set == **old)
            {
                continue;
            }
            m.backend_version
                .with_label_values(&[name, &set.version])
                .set(1);
            for gv in set.names() {
                m.backend_serves.with_label_values(&[name, &gv]).set(1);
            }
        }
        self.by_backend = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_documents_make_a_set() {
        let version = br#"{"major":"1","minor":"34","emulationMajor":"1","emulationMinor":"33","gitVersion":"v1.34.2-kubegate-sim"}"#;
        let core = br#"{"kind":"APIVersions","versions":["v1"]}"#;
        let groups = br#"{"kind":"APIGroupList","groups":[
            {"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}]},
            {"name":"resource.k8s.io","versions":[{"groupVersion":"resource.k8s.io/v1","version":"v1"},{"groupVersion":"resource.k8s.io/v1beta1","version":"v1beta1"}]}]}"#;
        let set = parse(version, core, groups).unwrap();
        assert_eq!(set.version, "v1.34.2-kubegate-sim (emulating 1.33)");
        assert_eq!(set.rank, [1, 33, 1, 34, 2]);
        assert!(set.serves("", "v1"));
        assert!(set.serves("resource.k8s.io", "v1beta1"));
        assert!(!set.serves("apps", "v1beta1"));
        // A provider's minor version carries a `+`.
        let gke = br#"{"major":"1","minor":"33+","gitVersion":"v1.33.5-gke.100"}"#;
        assert_eq!(parse(gke, core, groups).unwrap().rank, [1, 33, 1, 33, 5]);
        assert!(parse(b"{}", core, groups).is_err());
        let list = br#"{"kind":"APIServiceList","items":[
            {"metadata":{"name":"v1.apps"},"spec":{"group":"apps","version":"v1","service":null}},
            {"metadata":{"name":"v1.kubegate.example.com"},"spec":{"group":"kubegate.example.com","version":"v1"}},
            {"metadata":{"name":"v1beta1.metrics.k8s.io"},"spec":{"group":"metrics.k8s.io","version":"v1beta1","service":{"namespace":"kube-system","name":"metrics-server"}}}]}"#;
        assert_eq!(
            aggregated(list).unwrap(),
            [("metrics.k8s.io".into(), "v1beta1".into())]
        );
        assert!(aggregated(b"{}").is_err());
        assert!(parse(version, b"{}", b"{}").is_err());
    }
}
