//! Version skew: while the ready replicas serve different API group-versions (a control-plane
//! upgrade rolling through them, or `--runtime-config` changed on some), a request for a
//! group-version goes only to replicas that serve it, so a client that found the group-version
//! in discovery never meets a replica that answers 404 for it. Discovery requests (`/api`,
//! `/apis`, `/apis/GROUP`, `/openapi/...`) go to the replicas of the newest version: what a
//! client learns there is what the cluster is becoming, and every group-version it shows is
//! served by a replica kubegate can send to. (Merging the replicas' documents would advertise
//! group-versions with preferred versions no apiserver chose, and aggregated discovery's ETag
//! would match no replica's.)
//!
//! Routing around skew is exclusion: the replicas to keep off are placed as already tried, so
//! the balancer picks among the rest by its own policy. A group-version that no ready replica
//! is known to serve is not steered at all: it goes where it would have gone, and the
//! apiserver answers. A replica not learned yet (it just became ready) is kept off while
//! another one is known to serve the group-version; one whose discovery cannot be read is
//! never kept off. With every ready replica serving the same set — all of the time but an
//! upgrade — a request costs one comparison per replica and nothing is parsed.
//!
//! What kubegate learned can be stale: a replica restarted as another version between two
//! probes was never seen leave `ready`. Two signs of a restart make kubegate read a replica
//! again at once: it answered "the apiserver is shutting down", or every connection of
//! kubegate's own identity to it ended on its side (`connect`). And a replica that answers 404
//! "the server could not find the requested resource" for a group-version or a discovery
//! document it was learned to serve has no handler for it after all, so nothing was
//! processed: the request goes to another replica (any verb), and the replica is read again
//! (`not_served`). The apiserver answers the same words for a resource no version has
//! (`/api/v1/nonsense`) and for a group-version nobody serves (`/apis/apps/v99`): so a
//! replica is taken at its word only for what it claimed, and only once its claim is
//! [`MIN_CLAIM_AGE`] old — a claim read since the request went out is the replica's current
//! truth. A 404 for what it never claimed is retried only while a ready replica is being read
//! again (this one or another: what kubegate knew of it may be stale). Any authenticated client can send such
//! requests; this way they cost at most one extra attempt per replica per [`MIN_CLAIM_AGE`]
//! (or while a replica is being read), not a retry each.

use crate::state::{Backend, Gateway};
use crate::terminate::upstream::replicas::PerReplica;
use crate::terminate::upstream::served::{Served, ServedApis};
use crate::terminate::upstream::upstreams::Upstreams;
use http::Uri;
use kubegate_config::Config;
use kubegate_config::NoReadyBackendPolicy;
use kubegate_pool::Candidates;
use kubegate_wire::classify::group_version;
use kubegate_wire::target;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How old what was learned of a replica must be before a 404 from it overrides it.
pub const MIN_CLAIM_AGE: Duration = Duration::from_secs(1);

/// What a request asks for, as version skew sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants<'a> {
    /// A resource (or a group-version's resource list): `group` `""` is core.
    GroupVersion {
        /// The API group.
        group: &'a str,
        /// Its version.
        version: &'a str,
    },
    /// A discovery document that lists group-versions.
    Discovery,
    /// Anything else (`/healthz`, `/version`, `/metrics`).
    Anything,
}

impl<'a> Wants<'a> {
    /// What a request for the decoded `path` wants.
    pub fn of(path: &'a str) -> Wants<'a> {
        match group_version(path) {
            Some((group, version)) if !version.is_empty() => Wants::GroupVersion { group, version },
            _ if is_discovery(path) => Wants::Discovery,
            _ => Wants::Anything,
        }
    }
}

/// `/api`, `/apis`, `/apis/GROUP` and the OpenAPI documents.
fn is_discovery(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    path == "/api"
        || path == "/apis"
        || path.starts_with("/openapi/")
        || path
            .strip_prefix("/apis/")
            .is_some_and(|group| !group.is_empty() && !group.contains('/'))
}

/// Whether a 404 from `backend` for `uri` that said the replica has no handler for what was
/// asked (`signals::Said::NoHandler`, never that an object does not exist) may be answered by
/// another replica: the replica was learned to serve the group-version or
/// discovery document (then what was learned of it is forgotten, to be read again at once: it
/// was restarted as another version, or its APIs changed, unseen), or a ready replica is
/// being read again right now (this one or another: what was known of it may be stale). `false` for a claim younger than [`MIN_CLAIM_AGE`] and with
/// routing by skew off.
pub fn not_served(config: &Config, upstreams: &Upstreams, backend: &Backend, uri: &Uri) -> bool {
    if !config.terminate.version_skew.routing {
        return false;
    }
    // Read as the apiserver read it (a path that does not decode never reached a replica).
    let Ok(path) = target::path(uri.path()) else {
        return false;
    };
    let served = &upstreams.served;
    let apis = served.of(backend.address);
    let claimed = match &**apis.get() {
        Served::Learned(set, at) => {
            at.elapsed() >= MIN_CLAIM_AGE
                && match Wants::of(&path) {
                    Wants::GroupVersion { group, version } => set.serves(group, version),
                    Wants::Discovery => set.claims_document(&path),
                    Wants::Anything => false,
                }
        }
        Served::Unknown | Served::Unreadable(..) => false,
    };
    if claimed {
        apis.set(Served::Unknown);
        tracing::info!(backend = %backend.info().name, path = uri.path(), "the replica does not serve what it was learned to serve: reading its discovery again");
        return true;
    }
    // A replica being read again (it just restarted — this one, perhaps — or became ready)
    // may be another version than kubegate knew: another replica may serve it.
    let table = upstreams.pool().routing();
    let Candidates::Ready(ready) = table.candidates(NoReadyBackendPolicy::Refuse) else {
        return false;
    };
    ready
        .iter()
        .any(|b| matches!(&**served.of(b.address).get(), Served::Unknown))
}

/// Whether the ready replicas differ in what they serve: some serve another set than others,
/// or some are not learned yet while others are.
pub fn skewed(ready: &[Arc<Backend>], served: &PerReplica<ServedApis>) -> bool {
    let mut first = None;
    let mut unknown = false;
    for b in ready {
        match &**served.of(b.address).get() {
            Served::Learned(set, _) => match first {
                None => first = Some(set.fingerprint),
                Some(f) if f != set.fingerprint => return true,
                Some(_) => {}
            },
            Served::Unknown => unknown = true,
            Served::Unreadable(..) => {}
        }
    }
    unknown && first.is_some()
}

/// Appends to `tried` the ready replicas of `upstreams`' cluster (not in it yet) that should not take a
/// request for `uri`; returns how many. The caller removes them once the request is placed.
/// Nothing without `routing` (`terminate.version_skew.routing`).
pub fn steer(
    (gw, routing): (&Gateway, bool),
    upstreams: &Upstreams,
    uri: &Uri,
    tried: &mut Vec<SocketAddr>,
) -> usize {
    if !routing {
        return 0;
    }
    let (cluster, served) = (&upstreams.cluster, &upstreams.served);
    let table = cluster.pool().routing();
    // With no replica ready, whatever the fallback policy offers is taken as it is.
    let Candidates::Ready(ready) = table.candidates(NoReadyBackendPolicy::Refuse) else {
        return 0;
    };
    if !skewed(ready, served) {
        return 0;
    }
    let Ok(path) = target::path(uri.path()) else {
        return 0;
    };
    let wants = Wants::of(&path);
    let open = |b: &&Arc<Backend>| !tried.contains(&b.address);
    let keep_off: Vec<SocketAddr> = match wants {
        Wants::GroupVersion { group, version } => {
            let serves = |b: &Arc<Backend>| match &**served.of(b.address).get() {
                Served::Learned(set, _) => Some(set.serves(group, version)),
                Served::Unreadable(..) => None,
                Served::Unknown => Some(false),
            };
            if !ready.iter().filter(open).any(|b| serves(b) == Some(true)) {
                return 0;
            }
            ready
                .iter()
                .filter(open)
                .filter(|b| serves(b) == Some(false))
                .map(|b| b.address)
                .collect()
        }
        Wants::Discovery => {
            let rank = |b: &Arc<Backend>| match &**served.of(b.address).get() {
                Served::Learned(set, _) => Some(Some(set.rank)),
                Served::Unreadable(..) => None,
                Served::Unknown => Some(None),
            };
            let Some(newest) = ready
                .iter()
                .filter(open)
                .filter_map(|b| rank(b).flatten())
                .max()
            else {
                return 0;
            };
            ready
                .iter()
                .filter(open)
                .filter(|b| matches!(rank(b), Some(r) if r < Some(newest)))
                .map(|b| b.address)
                .collect()
        }
        Wants::Anything => return 0,
    };
    if keep_off.is_empty() {
        return 0;
    }
    let label = match wants {
        Wants::GroupVersion { group: "", version } => version.to_string(),
        Wants::GroupVersion { group, version } => format!("{group}/{version}"),
        _ => "discovery".to_string(),
    };
    gw.metrics()
        .terminate
        .skew_routed
        .with_label_values(&[cluster.name(), &label])
        .inc();
    let n = keep_off.len();
    tried.extend(keep_off);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants(path: &'static str) -> Wants<'static> {
        Wants::of(path)
    }

    #[test]
    fn requests_are_told_apart() {
        assert_eq!(
            wants("/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/x"),
            Wants::GroupVersion {
                group: "resource.k8s.io",
                version: "v1"
            }
        );
        assert_eq!(
            wants("/api/v1/pods"),
            Wants::GroupVersion {
                group: "",
                version: "v1"
            }
        );
        // A group-version's resource list is that group-version's.
        assert_eq!(
            wants("/apis/resource.k8s.io/v1"),
            Wants::GroupVersion {
                group: "resource.k8s.io",
                version: "v1"
            }
        );
        assert_eq!(wants("/apis"), Wants::Discovery);
        assert_eq!(wants("/api"), Wants::Discovery);
        assert_eq!(wants("/apis/resource.k8s.io"), Wants::Discovery);
        assert_eq!(wants("/openapi/v3"), Wants::Discovery);
        assert_eq!(wants("/openapi/v3/apis/apps/v1"), Wants::Discovery);
        assert_eq!(wants("/version"), Wants::Anything);
        assert_eq!(wants("/readyz"), Wants::Anything);
    }
}
