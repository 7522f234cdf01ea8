//! A cluster's backends and how they are judged and used, in both planes: the replicas (static
//! and discovered), their health checks, balancing, connecting, and draining.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How kubegate finds apiservers beyond its static `backends`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// Credentials that may list and watch `endpointslices` in `default` (client certificate
    /// or token, and the CA). Its `server` is not used: kubegate asks its backends directly.
    pub kubeconfig: PathBuf,
    /// Where the last known list is kept, so a restarted kubegate whose seeds are gone still
    /// finds the replicas. Unset: nothing is remembered.
    #[serde(default)]
    pub state_file: Option<PathBuf>,
    /// A change is applied once the list has stayed the same this long (an apiserver removes
    /// and re-adds itself while it starts).
    #[serde(default = "default_debounce", with = "crate::duration")]
    pub debounce: Duration,
}

fn default_debounce() -> Duration {
    Duration::from_secs(3)
}

/// One apiserver replica.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// Name used in logs, metrics and `/debug/backends`; defaults to the address.
    #[serde(default)]
    pub name: Option<String>,
    /// `IP:PORT` that client connections are forwarded to.
    pub address: SocketAddr,
    /// `IP:PORT` probed for `/readyz`, when it differs from `address` (a sidecar port, or a
    /// plain-TCP backend that exposes its health over TLS elsewhere). Defaults to `address`.
    #[serde(default)]
    pub health_address: Option<SocketAddr>,
    /// The same replica's other addresses (its other address family on a dual-stack host):
    /// when a probe of the address in use fails, each is probed in turn, and the first that
    /// passes takes the replica's new work. One replica, one share and one state, however
    /// many addresses. Not with `health_address`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_addresses: Vec<SocketAddr>,
}

impl BackendSpec {
    /// Backend `name` at `address`, probed there.
    pub fn named(name: &str, address: SocketAddr) -> BackendSpec {
        BackendSpec {
            name: Some(name.to_string()),
            address,
            health_address: None,
            other_addresses: Vec::new(),
        }
    }
}

impl BackendSpec {
    /// The name shown to operators: `name`, or the address.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.address.to_string())
    }

    /// The address that is probed.
    pub fn probe_address(&self) -> SocketAddr {
        self.health_address.unwrap_or(self.address)
    }

    /// Every address of the replica: `address`, then `other_addresses`.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        std::iter::once(self.address)
            .chain(self.other_addresses.iter().copied())
            .collect()
    }
}

/// Active health checking of each backend.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Path probed as `HTTPS GET <path>?verbose`.
    pub path: String,
    /// Time between probes of one backend (each is jittered by ±10%).
    #[serde(with = "crate::duration")]
    pub interval: Duration,
    /// How long one probe (connect + TLS + response) may take before it counts as a failure.
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// Consecutive passing probes before a backend is `ready`.
    pub rise: u32,
    /// Consecutive failing probes before a `ready` backend is taken out.
    pub fall: u32,
    /// Time between probes after a `ready` backend failed one, until `fall` is reached or a
    /// probe passes: a real failure is confirmed within `fall - 1` fast intervals instead of
    /// whole intervals. Equal to `interval` turns it off.
    #[serde(with = "crate::duration")]
    pub fast_interval: Duration,
    /// Keeps a backend that keeps failing and recovering out for longer.
    pub flap_damping: FlapDamping,
    /// TLS towards the backend's health endpoint.
    pub tls: HealthTls,
    /// File holding a bearer token sent with each probe (for apiservers without anonymous access).
    pub bearer_token_file: Option<PathBuf>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: "/readyz".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 2,
            fast_interval: Duration::from_millis(250),
            flap_damping: FlapDamping::default(),
            tls: HealthTls::default(),
            bearer_token_file: None,
        }
    }
}

/// Flap damping: a backend that falls out of `ready` within `window` of entering it needs twice
/// as many passing probes to return as the last time, up to `max_rise`. Staying ready for
/// `window` starts it over at `rise`. A planned shutdown (`[-]shutdown`) never counts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlapDamping {
    /// How long a backend must stay ready for its next failure not to count as a flap.
    #[serde(with = "crate::duration")]
    pub window: Duration,
    /// The most passing probes a flapping backend is asked for; at or below `rise`, no damping.
    pub max_rise: u32,
}

impl Default for FlapDamping {
    fn default() -> Self {
        FlapDamping {
            window: Duration::from_secs(60),
            max_rise: 16,
        }
    }
}

/// TLS settings for probes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthTls {
    /// PEM file with the CA(s) that sign the apiservers' serving certificates.
    pub ca_file: Option<PathBuf>,
    /// SNI sent, and the name verified in the backend's certificate.
    pub server_name: String,
    /// Client certificate (PEM) for apiservers that do not allow anonymous `/readyz`.
    pub client_cert_file: Option<PathBuf>,
    /// Key (PEM) of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
    /// Accept any certificate. Logged as a warning at every (re)load.
    pub insecure_skip_verify: bool,
    /// Lowest TLS version offered: `"1.2"` (default: 1.2 and 1.3) or `"1.3"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_version: Option<crate::tls::TlsVersion>,
    /// Cipher suites offered, by rustls's names (`TLS13_AES_256_GCM_SHA384`,
    /// `TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384`, ...); empty: rustls's defaults. TLS 1.3 and
    /// 1.2 suites are listed together; `kubegate check` names the ones it knows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<String>,
}

impl Default for HealthTls {
    fn default() -> Self {
        HealthTls {
            ca_file: None,
            server_name: "kubernetes".into(),
            client_cert_file: None,
            client_key_file: None,
            insecure_skip_verify: false,
            min_version: None,
            cipher_suites: Vec::new(),
        }
    }
}

/// How a ready backend is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BalancePolicy {
    /// Fewest open connections (ties rotate). Default: apiserver connections are long-lived
    /// HTTP/2, so counting them is what balances load.
    #[default]
    LeastConnections,
    /// Each ready backend in turn.
    RoundRobin,
    /// Two random ready backends, the one with fewer connections wins.
    PowerOfTwo,
}

/// What a new connection gets when no backend is `ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoReadyBackendPolicy {
    /// Fall back to backends that answer their probe but are not ready and not shutting down;
    /// when every one that answers is shutting down, to those (an apiserver serves through its
    /// shutdown delay). Default: when every apiserver fails `/readyz` at once (etcd quorum
    /// lost, a stuck post-start hook, all restarted together) an answer from an apiserver, even
    /// an error, beats a refused connection: operators can still reach `/readyz?verbose`, and
    /// watch caches keep serving. Backends that are `down` are never used.
    #[default]
    Alive,
    /// Close the client connection at once (terminate mode: answer 503 with a `Status`).
    Refuse,
}

/// Connecting to backends.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectConfig {
    /// Time allowed for one TCP connect.
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// Backends tried for one client connection before it is closed (each a different backend).
    pub attempts: u32,
}

impl Default for ConnectConfig {
    fn default() -> Self {
        ConnectConfig {
            timeout: Duration::from_secs(1),
            attempts: 3,
        }
    }
}

/// Draining a backend that stopped being ready.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainConfig {
    /// How long open connections to a backend that is shutting down (`[-]shutdown`) or was
    /// removed may live before they are closed. The apiserver ends them itself when it can.
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// How long open connections to a backend that fails `/readyz` for another reason (etcd
    /// lost, a stuck check) may live. Such an apiserver will not end them, and clients
    /// multiplexed on them keep getting errors: they are closed so clients reconnect to a ready
    /// replica. Default 0 s: `health.fall` already filters out single failed probes.
    #[serde(with = "crate::duration")]
    pub failing_timeout: Duration,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            timeout: Duration::from_secs(30),
            failing_timeout: Duration::ZERO,
        }
    }
}
