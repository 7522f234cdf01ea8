//! The configuration schema: every key an operator can write, with its default.
//!
//! Schema evolution: keys are only ever added, with a default that keeps the old behaviour; a key
//! is never renamed in place (add the new name, accept the old one, warn). Unknown keys are errors,
//! so a typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    pub dispatch: Vec<crate::DispatchRule>,
    /// Several control planes, each chosen by the TLS server name its clients send
    /// (`cluster.rs`). Empty: the top-level keys are the one cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<crate::ClusterSpec>,
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
        }
    }

    /// The configuration as a YAML file kubegate loads back to the same value (what the test
    /// bed writes; `/debug/config` shows the same fields).
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a configuration serializes")
    }
}

impl ListenerSpec {
    /// A passthrough listener on `address`.
    pub fn passthrough(address: SocketAddr) -> ListenerSpec {
        ListenerSpec {
            address,
            mode: ListenerMode::Passthrough,
            tls: None,
            clusters: None,
            default_cluster: None,
        }
    }
}

impl BackendSpec {
    /// Backend `name` at `address`, probed there.
    pub fn named(name: &str, address: SocketAddr) -> BackendSpec {
        BackendSpec {
            name: Some(name.to_string()),
            address,
            health_address: None,
        }
    }
}

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

/// Where a running kubegate hands its listening sockets to its successor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeConfig {
    /// Unix socket the running process listens on; `kubegate run --upgrade` connects to it,
    /// receives the listeners (and the admin socket) and takes over without closing them.
    pub socket: PathBuf,
}

/// One listening address.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSpec {
    /// `IP:PORT` to accept client connections on.
    pub address: SocketAddr,
    /// What kubegate does with the connections it accepts here.
    #[serde(default)]
    pub mode: ListenerMode,
    /// The TLS kubegate terminates (`mode: terminate` only).
    #[serde(default)]
    pub tls: Option<ServingTls>,
    /// The clusters served here, by name (a file with `clusters:` only); absent: every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<String>>,
    /// The cluster a client that sends no server name reaches (a file with `clusters:`
    /// only); absent: such a client is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_cluster: Option<String>,
}

/// What a listener does with its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerMode {
    /// TLS passes through untouched to one backend per connection (L4). Client certificates
    /// reach the apiserver as they are.
    #[default]
    Passthrough,
    /// kubegate terminates TLS and balances each request (L7); identity goes upstream by the
    /// apiserver's front-proxy scheme.
    Terminate,
}

impl ListenerMode {
    /// As the configuration writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerMode::Passthrough => "passthrough",
            ListenerMode::Terminate => "terminate",
        }
    }
}

/// The TLS kubegate serves in terminate mode, and on the admin endpoint: a listener's
/// (`listeners[].tls`, `admin.tls`) or a cluster's (`clusters[].tls`, chosen by the client's
/// server name). One type for all, so each is loaded, checked and followed alike.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServingTls {
    /// Serving certificate chain (PEM) clients see: SANs of the API endpoint (a cluster's:
    /// its API names).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// CA (PEM) that verifies client certificates (a cluster's: only its own clients'; a
    /// certificate another cluster's CA signed is refused); clients without one are still
    /// accepted (bearer tokens, anonymous). Unset: client certificates are not asked for.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Lowest TLS version offered: `"1.2"` (default: 1.2 and 1.3) or `"1.3"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<crate::TlsVersion>,
    /// Cipher suites offered, by rustls's names (`TLS13_AES_256_GCM_SHA384`,
    /// `TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384`, ...); empty: rustls's defaults. TLS 1.3 and
    /// 1.2 suites are listed together; `kubegate check` names the ones it knows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<String>,
}

impl ServingTls {
    /// Serving `cert_file` with `key_file`; no client certificates asked for, rustls's
    /// versions and suites.
    pub fn new(cert_file: PathBuf, key_file: PathBuf) -> ServingTls {
        ServingTls {
            cert_file,
            key_file,
            client_ca_file: None,
            min_version: None,
            cipher_suites: Vec::new(),
        }
    }

    /// The same, its clients' certificates verified by `client_ca_file` (if any).
    pub fn verifying(mut self, client_ca_file: Option<PathBuf>) -> ServingTls {
        self.client_ca_file = client_ca_file;
        self
    }
}

/// Bounds on what clients can make kubegate hold, whatever their listener's mode.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Client connections open at once, over every listener. One more is closed as soon as it
    /// is accepted (counted in `kubegate_client_limit_closes_total{reason="connections"}`), so
    /// kubegate keeps the descriptors and memory its admin endpoint, probes and existing clients
    /// need. Set it below the descriptor limit: a passthrough connection takes two.
    pub max_client_connections: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_client_connections: 20_000,
        }
    }
}

/// How terminate-mode listeners treat their clients.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerminateConfig {
    /// Time a new client connection has to complete its TLS handshake.
    #[serde(with = "crate::duration")]
    pub handshake_timeout: Duration,
    /// Time an HTTP/1.1 client has to send a request's headers.
    #[serde(with = "crate::duration")]
    pub header_read_timeout: Duration,
    /// Streams one HTTP/2 client connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Largest request body accepted. Bodies are held whole so that a request the apiserver
    /// provably did not process can be sent to another replica; larger ones get 413, as the
    /// apiserver (3 MiB) would answer.
    pub max_request_body_bytes: u64,
    /// Request body bytes one client connection may have kubegate hold at once (bodies being
    /// read and bodies held for a retry, over all its streams). A request that would go
    /// beyond gets 413; the connection's other streams go on.
    pub max_request_body_bytes_per_connection: u64,
    /// Request body bytes all clients together may have kubegate hold at once; a request
    /// that would go beyond gets 413.
    pub max_request_body_bytes_in_total: u64,
    /// Time a client has to send a request's whole body; one still sending then gets 408.
    #[serde(with = "crate::duration")]
    pub request_body_timeout: Duration,
    /// A watch without `timeoutSeconds` ends after this times a random factor in [1, 2), as
    /// the apiserver's `--min-request-timeout` (1800 s) ends it, however many replicas it
    /// moved across; a watch with `timeoutSeconds` ends at that time.
    #[serde(with = "crate::duration")]
    pub min_request_timeout: Duration,
    /// Watches moved per second, live, from replicas that hold more than their share of the
    /// long-running requests onto those that hold less (one back from a restart): each move
    /// a resume from the client's last position, unseen by the client, served from the
    /// replica's watch cache (not etcd). 50 evens a restarted replica's third of 10,000
    /// watches in about 40 s. 0 turns moving off.
    pub watch_moves_per_second: u32,
    /// Largest request head accepted: the request line or pseudo-headers and every header,
    /// decoded (HPACK included). Larger ones get 431 (HTTP/1.1) or have their stream refused
    /// (HTTP/2). Envoy's default is 60 KiB; bearer tokens from OIDC providers run to several
    /// KiB.
    pub max_header_list_bytes: u32,
    /// A client connection on which more than half of at least this many HTTP/2 streams were
    /// reset by the client within a second of opening is closed (the rapid reset attack,
    /// CVE-2023-44487; Envoy's premature-reset rule). 0 turns the rule off.
    pub rapid_reset_min_streams: u32,
    /// Clients whose `X-Forwarded-For` is kept (kubegate appends the client's address): other
    /// proxies in front of kubegate. From any other client the header is replaced by the
    /// client's address, so the first address the apiserver's audit log shows is not the
    /// client's to choose.
    pub trusted_proxies: Vec<crate::Cidr>,
    /// One line per request on standard output (off by default).
    pub access_log: AccessLogConfig,
    /// Routing around replicas that serve different API group-versions (a control-plane
    /// upgrade in progress).
    pub version_skew: VersionSkewConfig,
    /// Naming bearer-token clients (for `dispatch` rules, the access log and the status
    /// page) with a TokenReview.
    pub token_review: TokenReviewConfig,
}

/// How kubegate learns who a bearer token belongs to: a TokenReview
/// (`authentication.k8s.io/v1`) sent as kubegate's own front-proxy identity (user `kubegate`,
/// which needs the `system:auth-delegator` ClusterRole), cached by a hash of the token. The
/// token itself is still what the apiserver authenticates: the name only decides which rule a
/// request falls under and what the access log says. A review the apiserver refuses leaves the
/// client unnamed; one that cannot be had in time (busy, slow, 429/5xx) leaves it unreviewed,
/// which is answered 429 where a `dispatch` rule names senders and goes on unnamed otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenReviewConfig {
    /// Review tokens (needs `upstream.front_proxy`).
    pub enabled: bool,
    /// How long a token's name is kept (the apiserver's webhook token cache keeps 2 minutes).
    #[serde(with = "crate::duration")]
    pub ttl: Duration,
    /// How long a token the apiserver did not accept (or a review that failed) stays unnamed
    /// before it is reviewed again.
    #[serde(with = "crate::duration")]
    pub negative_ttl: Duration,
    /// Tokens remembered at most, named and rejected apart (each table this many); beyond,
    /// the expired and then the least recently used are forgotten.
    pub max_entries: u32,
    /// Longest a request waits for its token's review (its wait for a free review
    /// included); then its sender is unreviewed.
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// Reviews in flight at once for a cluster (one client connection: at most 2, and 10 new
    /// a second); a new token beyond waits, within `timeout`, for its connection's share.
    pub max_in_flight: u32,
}

impl Default for TokenReviewConfig {
    fn default() -> Self {
        TokenReviewConfig {
            enabled: true,
            ttl: Duration::from_secs(120),
            negative_ttl: Duration::from_secs(10),
            max_entries: 10_000,
            timeout: Duration::from_secs(2),
            max_in_flight: 16,
        }
    }
}

/// What kubegate learns of each replica's version and served group-versions, and whether it
/// routes by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VersionSkewConfig {
    /// Send a request for a group-version only to ready replicas that serve it (when any
    /// does), and discovery requests to the newest version's replicas. Off: every replica
    /// takes every request; versions are still learned and shown.
    pub routing: bool,
    /// How often each ready replica's `/version` and discovery are read again (a replica that
    /// becomes ready is read at once).
    #[serde(with = "crate::duration")]
    pub refresh: Duration,
}

impl Default for VersionSkewConfig {
    fn default() -> Self {
        VersionSkewConfig {
            routing: true,
            refresh: Duration::from_secs(10),
        }
    }
}

/// The terminate-mode access log: one line per request (identity, verb, resource, namespace,
/// replica, status, retries, bytes, duration, user agent) on standard output, kubegate's own
/// log staying on standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// `off`, `json` or `text` (`key=value` pairs).
    pub format: AccessLogFormat,
    /// Lines written per second at most; more are dropped and counted
    /// (`kubegate_access_log_dropped_total`), so the log never slows requests down.
    pub max_per_second: u32,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            format: AccessLogFormat::Off,
            max_per_second: 1000,
        }
    }
}

/// How access log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// No access log.
    #[default]
    Off,
    /// One JSON object per line.
    Json,
    /// `key=value` pairs (logfmt).
    Text,
}

impl Default for TerminateConfig {
    fn default() -> Self {
        TerminateConfig {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            max_concurrent_streams: 1000,
            max_request_body_bytes: 3 * 1024 * 1024,
            max_request_body_bytes_per_connection: 8 * 1024 * 1024,
            max_request_body_bytes_in_total: 128 * 1024 * 1024,
            request_body_timeout: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            watch_moves_per_second: 50,
            max_header_list_bytes: 64 * 1024,
            rapid_reset_min_streams: 100,
            trusted_proxies: Vec::new(),
            access_log: AccessLogConfig::default(),
            version_skew: VersionSkewConfig::default(),
            token_review: TokenReviewConfig::default(),
        }
    }
}

/// How terminate mode talks to the backends.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// TLS towards the apiservers. Unset fields take `health.tls`'s.
    pub tls: UpstreamTls,
    /// kubegate's identity toward the apiservers (requestheader authentication). Required when
    /// a terminate-mode listener verifies client certificates.
    pub front_proxy: Option<FrontProxy>,
    /// Requests kubegate sends on one HTTP/2 connection to a backend before it opens another:
    /// at most the apiserver's `--http2-max-streams-per-connection` (100 by default).
    pub max_streams_per_connection: u32,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            tls: UpstreamTls::default(),
            front_proxy: None,
            max_streams_per_connection: 100,
        }
    }
}

/// TLS settings toward the apiservers in terminate mode.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTls {
    /// CA (PEM) that signs the apiservers' serving certificates; default `health.tls.ca_file`.
    pub ca_file: Option<PathBuf>,
    /// SNI sent and name verified; default `health.tls.server_name`.
    pub server_name: Option<String>,
    /// Lowest TLS version offered: `"1.2"` (default: 1.2 and 1.3) or `"1.3"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_version: Option<crate::TlsVersion>,
    /// Cipher suites offered, by rustls's names (`TLS13_AES_256_GCM_SHA384`,
    /// `TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384`, ...); empty: rustls's defaults. TLS 1.3 and
    /// 1.2 suites are listed together; `kubegate check` names the ones it knows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<String>,
}

/// kubegate's front-proxy identity: a client certificate from the apiserver's
/// `--requestheader-client-ca-file`, and the header names of its `--requestheader-*` flags.
/// Every name is stripped from every client request (and every `X-Remote-*` header whatever
/// the names); the first username and group header carry the identity kubegate vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FrontProxy {
    /// Client certificate (PEM); its CN must be in `--requestheader-allowed-names`.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// `--requestheader-username-headers`: each stripped, the first set to the user.
    #[serde(default = "default_username_headers")]
    pub username_headers: Vec<String>,
    /// `--requestheader-group-headers`: each stripped, the first set to each group.
    #[serde(default = "default_group_headers")]
    pub group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix`: headers with any of them stripped (kubegate
    /// sends no extra: a certificate carries none).
    #[serde(default = "default_extra_prefixes")]
    pub extra_prefixes: Vec<String>,
    /// `--requestheader-uid-headers`: stripped from every request; the first carries the
    /// UID a verified client certificate's subject names (attribute 1.3.6.1.4.1.57683.2, as
    /// 1.33+ reads it), when it names one.
    #[serde(default = "default_uid_headers")]
    pub uid_headers: Vec<String>,
    /// 0.1.0's one name of `username_headers`; still accepted (not with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_header: Option<String>,
    /// 0.1.0's one name of `group_headers`; still accepted (not with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_header: Option<String>,
    /// 0.1.0's one prefix of `extra_prefixes`; still accepted (not with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_prefix: Option<String>,
    /// 0.1.0's one name of `uid_headers`; still accepted (not with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid_header: Option<String>,
}

impl FrontProxy {
    /// kubegate's front-proxy certificate `cert_file` with its key, and kubeadm's header names
    /// (the defaults).
    pub fn new(cert_file: PathBuf, key_file: PathBuf) -> FrontProxy {
        FrontProxy {
            cert_file,
            key_file,
            username_headers: default_username_headers(),
            group_headers: default_group_headers(),
            extra_prefixes: default_extra_prefixes(),
            uid_headers: default_uid_headers(),
            username_header: None,
            group_header: None,
            extra_prefix: None,
            uid_header: None,
        }
    }
}

fn default_username_headers() -> Vec<String> {
    vec!["X-Remote-User".into()]
}

fn default_group_headers() -> Vec<String> {
    vec!["X-Remote-Group".into()]
}

fn default_extra_prefixes() -> Vec<String> {
    vec!["X-Remote-Extra-".into()]
}

fn default_uid_headers() -> Vec<String> {
    vec!["X-Remote-Uid".into()]
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
    pub min_version: Option<crate::TlsVersion>,
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

/// TCP keepalive on client connections: finds clients that vanished without closing (a node
/// powered off, a cable pulled, a partition), so that their connections and the apiserver watches
/// behind them do not stay open forever. A client connected straight to kube-apiserver gets the
/// same from Go's listener (15 s idle and interval); behind a proxy, the apiserver's probes reach
/// the proxy, which must probe the client itself. Set on the listening sockets, from which
/// accepted connections inherit it: no cost per connection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepaliveConfig {
    /// Idle time before the first probe (whole seconds).
    #[serde(with = "crate::duration")]
    pub idle: Duration,
    /// Time between unanswered probes (whole seconds).
    #[serde(with = "crate::duration")]
    pub interval: Duration,
    /// Unanswered probes after which the connection is dropped: a vanished client is found
    /// `idle + interval × count` after it last spoke.
    pub count: u32,
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        KeepaliveConfig {
            idle: Duration::from_secs(15),
            interval: Duration::from_secs(15),
            count: 4,
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

/// The gateway's own shutdown on SIGTERM.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// After SIGTERM, `/readyz` fails while listeners keep accepting for this long, so an outer
    /// load balancer or keepalived stops sending first.
    #[serde(with = "crate::duration")]
    pub delay: Duration,
    /// After the listeners close, open connections may finish for this long; then they are closed.
    #[serde(with = "crate::duration")]
    pub grace: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            delay: Duration::from_secs(5),
            grace: Duration::from_secs(30),
        }
    }
}

/// The admin HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// `IP:PORT` for `/livez`, `/readyz`, `/metrics`, `/debug/backends`, `/debug/config`.
    /// Plain HTTP unless `tls` is set: keep it on loopback or a management network.
    pub address: SocketAddr,
    /// Serve over TLS; with `client_ca_file`, a verified client certificate authenticates.
    pub tls: Option<ServingTls>,
    /// A file of bearer tokens, one per line, any of which authenticates (`Authorization:
    /// Bearer ...`). Read again on every request, so rotation needs no reload. Needs `tls`.
    pub bearer_token_file: Option<PathBuf>,
    /// Paths answered without authentication when authentication is configured: by default the
    /// probes (`/livez`, `/readyz` and its checks, `/healthz`), as the apiserver allows them
    /// anonymously.
    pub public_paths: Vec<String>,
    /// Connections at once; at the limit a new connection closes the oldest, so idle or slow
    /// clients cannot keep probes out.
    pub max_connections: usize,
    /// Limit for a request's headers to arrive, from the connection's start or the previous
    /// response.
    #[serde(with = "crate::duration")]
    pub header_read_timeout: Duration,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 9444)),
            tls: None,
            bearer_token_file: None,
            public_paths: [
                "/livez",
                "/readyz",
                "/readyz/lifecycle",
                "/readyz/backends",
                "/healthz",
            ]
            .map(String::from)
            .to_vec(),
            max_connections: 64,
            header_read_timeout: Duration::from_secs(5),
        }
    }
}

impl AdminConfig {
    /// Whether requests outside `public_paths` must authenticate.
    pub fn authenticates(&self) -> bool {
        self.bearer_token_file.is_some()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| t.client_ca_file.is_some())
    }
}

fn default_threads() -> usize {
    1
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A configuration with every optional part present and every list non-empty: every key
    /// the schema has appears when it is written out.
    pub fn every_part() -> Config {
        let suites = vec!["TLS13_AES_128_GCM_SHA256".to_string()];
        let tls = ServingTls {
            cert_file: "c".into(),
            key_file: "k".into(),
            client_ca_file: Some("ca".into()),
            min_version: Some(crate::TlsVersion::Tls13),
            cipher_suites: suites.clone(),
        };
        let mut c = Config::new(
            vec![ListenerSpec {
                address: "127.0.0.1:6443".parse().unwrap(),
                mode: ListenerMode::Terminate,
                tls: Some(tls.clone()),
                clusters: Some(vec!["a".into()]),
                default_cluster: Some("a".into()),
            }],
            vec![BackendSpec {
                name: Some("a".into()),
                address: "127.0.0.1:7001".parse().unwrap(),
                health_address: Some("127.0.0.1:7002".parse().unwrap()),
            }],
        );
        c.health.tls.ca_file = Some("ca".into());
        c.health.tls.client_cert_file = Some("c".into());
        c.health.tls.client_key_file = Some("k".into());
        c.health.bearer_token_file = Some("t".into());
        c.health.tls.min_version = Some(crate::TlsVersion::Tls13);
        c.health.tls.cipher_suites = suites.clone();
        c.admin.tls = Some(tls);
        c.admin.bearer_token_file = Some("t".into());
        c.upstream.tls.ca_file = Some("ca".into());
        c.upstream.tls.server_name = Some("kubernetes".into());
        c.upstream.tls.min_version = Some(crate::TlsVersion::Tls13);
        c.upstream.tls.cipher_suites = suites;
        c.upstream.front_proxy = Some(FrontProxy::new("c".into(), "k".into()));
        c.upgrade = Some(UpgradeConfig { socket: "s".into() });
        c.discovery = Some(DiscoveryConfig {
            kubeconfig: "k".into(),
            state_file: Some("s".into()),
            debounce: Duration::from_secs(3),
        });
        let every = vec!["x".to_string()];
        c.dispatch = vec![crate::DispatchRule {
            name: Some("r".into()),
            matches: crate::RuleMatch {
                verbs: every.clone(),
                api_groups: every.clone(),
                resources: every.clone(),
                namespaces: every.clone(),
                users: every.clone(),
                groups: every.clone(),
                service_accounts: every.clone(),
                non_resource_urls: every,
            },
            backends: vec!["a".into()],
            fallback: crate::Fallback::None,
            limit: Some(crate::RuleLimit {
                max_in_flight: Some(1),
                rate: Some(1.0),
                burst: Some(1),
            }),
        }];
        // Not a loadable file (top-level backends beside clusters): only its keys matter.
        c.clusters = vec![crate::ClusterSpec {
            name: "a".into(),
            server_names: vec!["a.example".into()],
            backends: c.backends.clone(),
            discovery: c.discovery.clone(),
            health: Some(c.health.clone()),
            upstream: Some(c.upstream.clone()),
            dispatch: c.dispatch.clone(),
            tls: Some(crate::ServingTls {
                cert_file: "c".into(),
                key_file: "k".into(),
                client_ca_file: Some("ca".into()),
                min_version: Some(crate::TlsVersion::Tls13),
                cipher_suites: vec!["TLS13_AES_256_GCM_SHA384".into()],
            }),
        }];
        c
    }
}
