//! A cluster as the file writes it (`clusters[]`), and as the gateway runs it, with what it
//! inherits filled in (`Config::clusters`, `cluster.rs`).

use super::backends::{BackendSpec, DiscoveryConfig, HealthConfig};
use super::listeners::ServingTls;
use super::terminate::UpstreamConfig;
use serde::{Deserialize, Serialize};

/// The name of the one cluster of a file without `clusters:`.
pub const IMPLICIT: &str = "default";

/// One control plane, as the file writes it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Names the cluster in listeners, metrics, logs and the status page: lower-case letters,
    /// digits and `-`, as a DNS label.
    pub name: String,
    /// The TLS server names (SNI) that reach this cluster: exact names (`a.example`) and
    /// wildcards (`*.a.example`: any name ending in `.a.example`). An exact name wins over a
    /// wildcard, a longer wildcard over a shorter one.
    #[serde(default)]
    pub server_names: Vec<String>,
    /// The cluster's apiserver replicas.
    #[serde(default)]
    pub backends: Vec<BackendSpec>,
    /// Its replicas found from its own `default/kubernetes` EndpointSlices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<DiscoveryConfig>,
    /// How its replicas are probed; absent: the top-level `health`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthConfig>,
    /// How terminate mode reaches its replicas (their CA, its front-proxy credentials);
    /// absent: the top-level `upstream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamConfig>,
    /// Terminate mode's routing rules for its requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dispatch: Vec<crate::dispatch::DispatchRule>,
    /// Terminate mode's serving side for this cluster's clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServingTls>,
}

/// One cluster with everything it inherits filled in: what the gateway runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// Its name ([`IMPLICIT`] for a file without `clusters:`).
    pub name: String,
    /// The server names that reach it; empty for the implicit cluster, which every name
    /// reaches.
    pub server_names: Vec<String>,
    /// Its replicas.
    pub backends: Vec<BackendSpec>,
    /// Its discovery.
    pub discovery: Option<DiscoveryConfig>,
    /// Its probes.
    pub health: HealthConfig,
    /// Its upstream.
    pub upstream: UpstreamConfig,
    /// Its rules.
    pub dispatch: Vec<crate::dispatch::DispatchRule>,
    /// Its serving side.
    pub tls: Option<ServingTls>,
}

/// [`Config::clusters`], resolved once per configuration. Never compared (two configurations
/// are equal by what their files say) and not copied by a clone (a clone may be changed before
/// it is used; a configuration is not changed once its clusters were asked for).
#[derive(Default)]
pub(crate) struct Resolved(pub(crate) std::sync::OnceLock<Vec<ClusterConfig>>);

impl Clone for Resolved {
    fn clone(&self) -> Resolved {
        Resolved::default()
    }
}

impl PartialEq for Resolved {
    fn eq(&self, _: &Resolved) -> bool {
        true
    }
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolved")
    }
}
