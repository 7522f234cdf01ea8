//! The configuration schema: every key an operator can write, with its default.
//!
//! Schema evolution: keys are only ever added, with a default that keeps the old behaviour; a key
//! is never renamed in place (add the new name, accept the old one, warn). Unknown keys are errors,
//! so a typo never silently falls back to a default.
//!
//! The settings, by plane: [`listeners`] (what kubegate runs as), [`backends`] (a cluster's
//! replicas, health checks, balancing, draining), [`terminate`] (the L7 plane and `upstream`).
//! [`Config`] gathers them; `clusters` (`cluster.rs`) repeat a cluster's parts.

mod backends;
mod clusters;
mod listeners;
mod terminate;

pub use backends::*;
pub use clusters::{ClusterConfig, ClusterSpec, IMPLICIT};
pub use listeners::*;
pub use terminate::*;

use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where clients connect. At least one.
    pub listeners: Vec<ListenerSpec>,
    /// The apiserver replicas. At least one; addresses and names are unique. With `clusters:`,
    /// each cluster lists its own instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendSpec>,
    /// How backends are probed.
    #[serde(default)]
    pub health: HealthConfig,
    /// How a ready backend is chosen for a new connection.
    #[serde(default)]
    pub balance: BalancePolicy,
    /// What happens to a new connection when no backend is ready.
    #[serde(default)]
    pub no_ready_backend: NoReadyBackendPolicy,
    /// Connecting to a backend.
    #[serde(default)]
    pub connect: ConnectConfig,
    /// TCP keepalive on client connections.
    #[serde(default)]
    pub client_keepalive: KeepaliveConfig,
    /// Bounds on what clients can make kubegate hold.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Connections to a backend that is no longer ready.
    #[serde(default)]
    pub drain: DrainConfig,
    /// The gateway's own shutdown.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// The admin endpoint: `/livez`, `/readyz`, `/metrics`, `/debug/backends`.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Worker threads that carry proxied connections.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// How terminate-mode listeners treat their clients.
    #[serde(default)]
    pub terminate: TerminateConfig,
    /// How terminate mode talks to the backends.
    #[serde(default)]
    pub upstream: UpstreamConfig,
    /// Zero-downtime upgrades of kubegate itself: the listening sockets pass to a new process.
    #[serde(default)]
    pub upgrade: Option<UpgradeConfig>,
    /// Backends from the cluster: the `default/kubernetes` EndpointSlices, read from the
    /// backends themselves; the static `backends` are the seeds.
    #[serde(default)]
    pub discovery: Option<DiscoveryConfig>,
    /// Terminate mode's routing rules: which backends a request may go to and how much of
    /// each kind of traffic is let through (`dispatch.rs`). The first match decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dispatch: Vec<crate::dispatch::DispatchRule>,
    /// Several control planes, each chosen by the TLS server name its clients send
    /// (`cluster.rs`). Empty: the top-level keys are the one cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterSpec>,
    /// `clusters()`, resolved at first use; never written.
    #[serde(skip)]
    pub(crate) resolved: clusters::Resolved,
}

impl Config {
    /// A configuration with `listeners` and `backends` and every other key at its default:
    /// what a file with only those two keys loads as.
    pub fn new(listeners: Vec<ListenerSpec>, backends: Vec<BackendSpec>) -> Config {
        Config {
            listeners,
            backends,
            health: HealthConfig::default(),
            balance: BalancePolicy::default(),
            no_ready_backend: NoReadyBackendPolicy::default(),
            connect: ConnectConfig::default(),
            client_keepalive: KeepaliveConfig::default(),
            limits: LimitsConfig::default(),
            drain: DrainConfig::default(),
            shutdown: ShutdownConfig::default(),
            admin: AdminConfig::default(),
            threads: default_threads(),
            terminate: TerminateConfig::default(),
            upstream: UpstreamConfig::default(),
            upgrade: None,
            discovery: None,
            dispatch: Vec::new(),
            clusters: Vec::new(),
            resolved: Default::default(),
        }
    }

    /// The configuration as a YAML file kubegate loads back to the same value (what the test
    /// bed writes; `/debug/config` shows the same fields).
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a configuration serializes")
    }
}

fn default_threads() -> usize {
    1
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use std::time::Duration;

    /// A configuration with every optional part present and every list non-empty: every key
    /// the schema has appears when it is written out.
    pub fn every_part() -> Config {
        let suites = vec!["TLS13_AES_128_GCM_SHA256".to_string()];
        let tls = ServingTls {
            cert_file: "c".into(),
            key_file: "k".into(),
            client_ca_file: Some("ca".into()),
            min_version: Some(crate::tls::TlsVersion::Tls13),
            cipher_suites: suites.clone(),
        };
        let mut c = Config::new(
            vec![ListenerSpec {
                address: "127.0.0.1:6443".parse().unwrap(),
                mode: ListenerMode::Terminate,
                tls: Some(tls.clone()),
                clusters: Some(vec!["a".into()]),
                default_cluster: Some("a".into()),
                proxy_protocol: Some(ProxyProtocol::from(vec!["10.0.0.0/8".parse().unwrap()])),
                backend_port: None,
                backend_probe: None,
            }],
            vec![BackendSpec {
                name: Some("a".into()),
                address: "127.0.0.1:7001".parse().unwrap(),
                health_address: Some("127.0.0.1:7002".parse().unwrap()),
                other_addresses: vec!["[::1]:7001".parse().unwrap()],
            }],
        );
        c.health.tls.ca_file = Some("ca".into());
        c.health.tls.client_cert_file = Some("c".into());
        c.health.tls.client_key_file = Some("k".into());
        c.health.bearer_token_file = Some("t".into());
        c.health.tls.min_version = Some(crate::tls::TlsVersion::Tls13);
        c.health.tls.cipher_suites = suites.clone();
        c.admin.tls = Some(tls);
        c.admin.bearer_token_file = Some("t".into());
        c.upstream.tls.ca_file = Some("ca".into());
        c.upstream.tls.server_name = Some("kubernetes".into());
        c.upstream.tls.min_version = Some(crate::tls::TlsVersion::Tls13);
        c.upstream.tls.cipher_suites = suites;
        c.upstream.front_proxy = Some(FrontProxy::new("c".into(), "k".into()));
        c.upgrade = Some(UpgradeConfig { socket: "s".into() });
        c.terminate.shed_state_file = Some("s".into());
        c.terminate.shed_object = Some("kube-system/kubegate-shed".into());
        c.discovery = Some(DiscoveryConfig {
            kubeconfig: "k".into(),
            state_file: Some("s".into()),
            debounce: Duration::from_secs(3),
        });
        let every = vec!["x".to_string()];
        c.dispatch = vec![crate::dispatch::DispatchRule {
            name: Some("r".into()),
            matches: crate::dispatch::RuleMatch {
                verbs: every.clone(),
                api_groups: every.clone(),
                resources: every.clone(),
                namespaces: every.clone(),
                users: every.clone(),
                groups: every.clone(),
                service_accounts: every.clone(),
                non_resource_urls: every.clone(),
                kubectl_commands: every.clone(),
                kubectl_sessions: every,
            },
            backends: vec!["a".into()],
            fallback: crate::dispatch::Fallback::None,
            limit: Some(crate::dispatch::RuleLimit {
                max_in_flight: Some(1),
                rate: Some(1.0),
                burst: Some(1),
            }),
            reject: Some(crate::dispatch::RuleReject::default()),
            expires: Some(std::time::SystemTime::UNIX_EPOCH),
        }];
        // Not a loadable file (top-level backends beside clusters): only its keys matter.
        c.clusters = vec![crate::schema::ClusterSpec {
            name: "a".into(),
            server_names: vec!["a.example".into()],
            backends: c.backends.clone(),
            discovery: c.discovery.clone(),
            health: Some(c.health.clone()),
            upstream: Some(c.upstream.clone()),
            dispatch: c.dispatch.clone(),
            tls: Some(crate::schema::ServingTls {
                cert_file: "c".into(),
                key_file: "k".into(),
                client_ca_file: Some("ca".into()),
                min_version: Some(crate::tls::TlsVersion::Tls13),
                cipher_suites: vec!["TLS13_AES_256_GCM_SHA384".into()],
            }),
        }];
        c
    }
}
