//! What kubegate itself runs as, whichever plane serves: its listeners (their mode, their TLS,
//! the clusters they serve), the bounds on what clients hold, client keepalive, the admin
//! endpoint, its own shutdown and upgrades.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// PROXY protocol headers from the balancers in front (AWS NLB, GCP, HAProxy's
    /// `send-proxy-v2`): the client each names is the client everywhere kubegate uses one.
    /// Absent: no header is read, and a connection's client is its peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Another port of the same replicas this listener forwards to (passthrough only): a
    /// control plane's other service on the apiservers' hosts (konnectivity-server 8132, RKE2's
    /// supervisor 9345), balanced, drained and discovered with the cluster. Absent: the
    /// apiserver's own port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_port: Option<u16>,
    /// How `backend_port`'s readiness is known: absent, it follows the replica's (`/readyz`);
    /// `tcp`, the port must also accept a connection, probed every `health.interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_probe: Option<PortProbe>,
}

/// How a listener's `backend_port` is probed, beside the replica's own readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortProbe {
    /// A TCP connect within `health.timeout`.
    Tcp,
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
            proxy_protocol: None,
            backend_port: None,
            backend_probe: None,
        }
    }
}

/// A listener's PROXY protocol (v1 or v2): who may name the client, and what is asked of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyProtocol {
    /// The balancers, and only they: addresses or ranges (`10.0.0.0/24`, `fd00::/64`) whose
    /// connections start with a header. Whoever connects from them names any client it likes
    /// (its `X-Forwarded-For` then judged by `terminate.trusted_proxies` as that client's). A
    /// connection from anywhere else is its own, and refused if it starts with a header.
    pub trusted: Vec<crate::cidr::Cidr>,
    /// Whether a trusted balancer's connection must start with a header (default): a balancer
    /// that stopped sending them would otherwise make every client look like the balancer.
    /// `false` serves such a connection as the balancer's own (its health checks, when they
    /// send no header).
    #[serde(default = "required_by_default")]
    pub required: bool,
    /// How long a header may take to arrive whole (at most 30 s); a slower connection is
    /// closed.
    #[serde(default = "header_timeout", with = "crate::duration")]
    pub timeout: Duration,
}

fn required_by_default() -> bool {
    true
}

fn header_timeout() -> Duration {
    Duration::from_secs(5)
}

impl ProxyProtocol {
    /// Headers from `trusted`, required of them, within 5 s.
    pub fn from(trusted: Vec<crate::cidr::Cidr>) -> ProxyProtocol {
        ProxyProtocol {
            trusted,
            required: true,
            timeout: header_timeout(),
        }
    }

    /// Whether a connection from `peer` may name its client.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        self.trusted.iter().any(|range| range.contains(peer))
    }
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
    pub min_version: Option<crate::tls::TlsVersion>,
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
