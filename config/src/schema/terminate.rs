//! The L7 plane's settings: how terminate-mode listeners treat their clients (bounds, token
//! reviews, version skew, the access log) and how they reach the apiservers (`upstream`: TLS and
//! the front-proxy identity).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
    /// An HTTP/2 client connection from which nothing was read for this long is sent a PING
    /// (`0s`: never): a client that vanished (its host gone, a network partition) is noticed,
    /// and its connection closed, before what it holds — its watches upstream, their held
    /// events — outlives it for TCP's own timeouts.
    #[serde(with = "crate::duration")]
    pub client_ping_interval: Duration,
    /// How long a client has to answer that PING before its connection is closed.
    #[serde(with = "crate::duration")]
    pub client_ping_timeout: Duration,
    /// How long a watch's client may read nothing while an event waits for it (its stream
    /// full) before the watch is cut, alone: what it holds — a replica's watcher, kubegate's
    /// queue of its events — is given back, and the client's other streams go on.
    #[serde(with = "crate::duration")]
    pub slow_watch_timeout: Duration,
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
    /// While no backend of a cluster is `ready`, how long new work waits for the first that
    /// becomes ready, before `no_ready_backend` decides: a terminate-mode request, a watch
    /// kubegate continues, and a passthrough connection too (before its dial). A brief outage
    /// (an etcd leader election failing every `/readyz` for a few seconds, every replica
    /// restarted at once) is then a wait rather than a failure. `0s`: none waits.
    #[serde(with = "crate::duration")]
    pub hold_when_none_ready: Duration,
    /// Connections and requests waiting at once under `hold_when_none_ready` and
    /// `hold_reads_when_storage_fails`, over every cluster: one more is not held, so that what
    /// clients can make kubegate hold stays bounded and a real outage still shows.
    pub max_held_when_none_ready: usize,
    /// How long after it arrived a read (GET, LIST, a new watch) that every replica tried
    /// answered with a storage failure — the seconds before their `/readyz` notices etcd is
    /// away — is asked again, after pauses of at most a second, until one serves it; never past
    /// its own `?timeout=`. Only a read: a failed write may have reached etcd. `0s`: the client
    /// gets the last replica's answer at once.
    #[serde(with = "crate::duration")]
    pub hold_reads_when_storage_fails: Duration,
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
    pub trusted_proxies: Vec<crate::cidr::Cidr>,
    /// One line per request on standard output (off by default).
    pub access_log: AccessLogConfig,
    /// Routing around replicas that serve different API group-versions (a control-plane
    /// upgrade in progress).
    pub version_skew: VersionSkewConfig,
    /// Naming bearer-token clients (for `dispatch` rules, the access log and the status
    /// page) with a TokenReview.
    pub token_review: TokenReviewConfig,
    /// Asking the apiserver whether a sender may read what another sender's request already
    /// on its way upstream asks (SubjectAccessReviews), for `join_reads.across_senders` and
    /// `shared_watches.across_senders`.
    pub access_review: AccessReviewConfig,
    /// Answering identical reads of one sender from one upstream request.
    pub join_reads: JoinReadsConfig,
    /// Feeding identical watches of one sender from one upstream watch.
    pub shared_watches: SharedWatchesConfig,
    /// Where the rules put in force at run time (`kubegate shed`) are written at each change
    /// and read back at start-up, so a restarted kubegate keeps them until they expire. None:
    /// kept in memory only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shed_state_file: Option<PathBuf>,
    /// The ConfigMap, `NAMESPACE/NAME`, whose rules (`kubegate shed --kubeconfig`) every
    /// kubegate in front of a cluster watches through its own upstream connections, as its
    /// front-proxy user, and puts in force for that cluster. None: no rules are read from the
    /// cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shed_object: Option<String>,
    /// Shedding on its own: while a replica's flow control rejects a priority level (or its
    /// latency for the level passes a bound), the senders costing that level far more than
    /// their peers have a growing share of their requests of the level answered 429 at the
    /// gateway, until it stops. Off by default.
    pub auto_shed: AutoShedConfig,
}

/// `terminate.auto_shed`: who is a runaway, and for how long it is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoShedConfig {
    /// Turned on.
    pub enabled: bool,
    /// A runaway costs the level at least this many times what the median of its other
    /// senders does (over the last 20 s: replica time, requests, bytes).
    pub factor: u32,
    /// ... and at least this share of the level's whole cost, in percent.
    pub min_share_percent: u32,
    /// A level whose response latency on a replica passes this is troubled as one rejected
    /// is. None: only rejections count.
    #[serde(
        default,
        with = "crate::duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub latency_bound: Option<Duration>,
    /// The most senders held back at once per cluster.
    pub max_senders: usize,
    /// The longest one sender is held back at a time (then let go, and held back again only
    /// if the level is still troubled and it still the runaway).
    #[serde(with = "crate::duration")]
    pub lasts: Duration,
    /// What its 429s' `Retry-After` says.
    #[serde(with = "crate::duration")]
    pub retry_after: Duration,
}

impl Default for AutoShedConfig {
    fn default() -> Self {
        AutoShedConfig {
            enabled: false,
            factor: 10,
            min_share_percent: 20,
            latency_bound: None,
            max_senders: 3,
            lasts: Duration::from_secs(300),
            retry_after: Duration::from_secs(5),
        }
    }
}

/// Shared watches: a watch from a resourceVersion that asks what a watch of the same sender
/// kubegate already holds upstream asks (path, selectors, every answer-deciding header) is fed
/// from that watch: its events since the client's position from a window of recent events,
/// then live, with the client's own `timeoutSeconds` and bookmarks. Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharedWatchesConfig {
    /// Share identical watches of one sender.
    pub enabled: bool,
    /// Recent events each shared watch keeps for clients that join or come back from an older
    /// position (a client from before them gets a watch of its own).
    pub window_events: u32,
    /// Bytes of those events each shared watch keeps at most.
    pub window_bytes: u64,
    /// Event bytes every shared watch holds together, over every cluster (its window, and
    /// what its channel still holds for clients behind): at it, a window keeps only its
    /// newest event (a client behind it gets a watch of its own), and no new shared watch
    /// opens.
    pub max_held_bytes: u64,
    /// Events a client may fall behind the shared watch before its stream is ended (it
    /// watches again from its last position, as from an apiserver's cacher): a slow client
    /// never slows the others.
    pub max_lag_events: u32,
    /// Share watches of `secrets` too (off: each has its own).
    pub secrets: bool,
    /// Feed a watch from another sender's shared watch too, once a SubjectAccessReview
    /// (`access_review`) says its own sender may watch what it asks. Off: only watches of one
    /// sender are shared.
    pub across_senders: bool,
}

impl Default for SharedWatchesConfig {
    fn default() -> Self {
        SharedWatchesConfig {
            enabled: false,
            window_events: 1000,
            window_bytes: 16 * 1024 * 1024,
            max_held_bytes: 256 * 1024 * 1024,
            max_lag_events: 1024,
            secrets: false,
            across_senders: false,
        }
    }
}

/// Joined reads: a GET or LIST that asks exactly what a request of the same sender already
/// on its way upstream asks (path, query, every header that shapes the answer) is answered
/// from that request's answer, as the apiserver's freshness rules allow: a read with a
/// `resourceVersion` or a `continue` token joins its in-flight twin; a consistent read (no
/// `resourceVersion`) joins only one sent after it arrived. Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct JoinReadsConfig {
    /// Join identical reads of one sender.
    pub enabled: bool,
    /// Largest answer shared: a larger one is streamed to its own client alone, and the
    /// requests that waited on it are sent on their own.
    pub max_answer_bytes: u64,
    /// Answer bytes held for joined requests at once, over every cluster; an answer that
    /// would go beyond is not shared.
    pub max_held_bytes: u64,
    /// Join reads of `secrets` too (off: each is sent on its own).
    pub secrets: bool,
    /// Join a read to another sender's identical read too, once a SubjectAccessReview
    /// (`access_review`) says its own sender may read what it asks. Off: only reads of one
    /// sender are joined.
    pub across_senders: bool,
}

impl Default for JoinReadsConfig {
    fn default() -> Self {
        JoinReadsConfig {
            enabled: false,
            max_answer_bytes: 16 * 1024 * 1024,
            max_held_bytes: 256 * 1024 * 1024,
            secrets: false,
            across_senders: false,
        }
    }
}

/// SubjectAccessReviews (`authorization.k8s.io/v1`), sent as kubegate's own front-proxy
/// identity (user `kubegate`, which needs the `system:auth-delegator` ClusterRole): whether a
/// sender may read (verb, resource, namespace, name, label and field selectors) what another
/// sender's request kubegate already holds upstream asks, before that request's answer is
/// shared with it. Answers are kept per sender and attributes for a short while; a review that
/// cannot be had in time (every slot busy, the apiserver slow) only means the request goes
/// upstream on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessReviewConfig {
    /// How long an allowed answer is kept (the apiserver's webhook authorizer keeps 5
    /// minutes; shorter here, as a binding removed should soon stop the sharing).
    #[serde(with = "crate::duration")]
    pub ttl: Duration,
    /// How long a denied answer is kept.
    #[serde(with = "crate::duration")]
    pub negative_ttl: Duration,
    /// Answers kept at most; beyond, the expired and then the least recently used are
    /// forgotten.
    pub max_entries: u32,
    /// Longest a request waits for its review; then it goes upstream on its own.
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// Reviews in flight at once for a cluster; a request that would need one more goes
    /// upstream on its own.
    pub max_in_flight: u32,
}

impl Default for AccessReviewConfig {
    fn default() -> Self {
        AccessReviewConfig {
            ttl: Duration::from_secs(10),
            negative_ttl: Duration::from_secs(10),
            max_entries: 10_000,
            timeout: Duration::from_secs(1),
            max_in_flight: 16,
        }
    }
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
    /// Reviews in flight at once for a cluster, shared by the clients' sources (an IPv4
    /// address or an IPv6 /64) in turn, a quarter kept for renewals of names kubegate knows;
    /// one source starts at most 20 reviews of new tokens a second (a burst of 40) and has
    /// at most 16 of each kind waiting. A request waits, within `timeout`, for its turn;
    /// one that gets none is unreviewed.
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
            // client-go's own: a PING after 30 s without a frame, 15 s to answer it.
            client_ping_interval: Duration::from_secs(30),
            client_ping_timeout: Duration::from_secs(15),
            slow_watch_timeout: Duration::from_secs(60),
            max_request_body_bytes: 3 * 1024 * 1024,
            max_request_body_bytes_per_connection: 8 * 1024 * 1024,
            max_request_body_bytes_in_total: 128 * 1024 * 1024,
            request_body_timeout: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            watch_moves_per_second: 50,
            hold_when_none_ready: Duration::ZERO,
            max_held_when_none_ready: 1000,
            hold_reads_when_storage_fails: Duration::from_secs(10),
            max_header_list_bytes: 64 * 1024,
            rapid_reset_min_streams: 100,
            trusted_proxies: Vec::new(),
            access_log: AccessLogConfig::default(),
            version_skew: VersionSkewConfig::default(),
            token_review: TokenReviewConfig::default(),
            access_review: AccessReviewConfig::default(),
            join_reads: JoinReadsConfig::default(),
            shared_watches: SharedWatchesConfig::default(),
            shed_state_file: None,
            shed_object: None,
            auto_shed: AutoShedConfig::default(),
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
    pub min_version: Option<crate::tls::TlsVersion>,
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
