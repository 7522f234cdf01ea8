//! kubegate's configuration as plain data.
//!
//! The pipeline, one step per module:
//!
//! ```text
//! file ──read──▶ text ──serde (schema)──▶ Config ──validate──▶ Config (checked, paths resolved)
//!                  └──locate (YAML events)──▶ PathIndex ─┐         │
//!                                                          └─▶ errors as FILE:LINE:COLUMN
//! running Config + new Config ──diff──▶ Vec<Change>   (applied by the gateway on reload)
//! ```
//!
//! Nothing here knows about sockets or the gateway: a reload is unit-tested as data.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cidr;
mod cluster;
mod diff;
mod dispatch;
mod duration;
mod error;
mod load;
mod locate;
mod object;
mod parts;
mod schema;
mod since;
mod timestamp;
mod tls;
mod validate;

pub use cidr::Cidr;
pub use cluster::ServerNamePattern;
pub use diff::{diff, from_nothing, Change};
pub use dispatch::validate as validate_dispatch;
pub use dispatch::{
    DispatchRule, Fallback, RuleLimit, RuleMatch, RuleReject, MAX_REJECT_RETRY_AFTER,
    NON_RESOURCE_VERBS, VERBS,
};
pub use error::{ConfigError, Problem};
pub use load::{load_file, load_file_with, load_str, load_str_with, warnings, Check};
pub use object::{is_label, ObjectName};
pub use schema::{
    AccessLogConfig, AccessLogFormat, AccessReviewConfig, AdminConfig, AutoShedConfig, BackendSpec,
    BalancePolicy, ClusterConfig, ClusterSpec, Config, ConnectConfig, DiscoveryConfig, DrainConfig,
    FlapDamping, FrontProxy, HealthConfig, HealthTls, JoinReadsConfig, KeepaliveConfig,
    LimitsConfig, ListenerMode, ListenerSpec, NoReadyBackendPolicy, PortProbe, ProxyProtocol,
    ServingTls, ShutdownConfig, TerminateConfig, TokenReviewConfig, UpgradeConfig, UpstreamConfig,
    UpstreamTls, VersionSkewConfig, IMPLICIT,
};
pub use since::{keys_newer_than, parse_version, version_text, Version, ADDED};
pub use tls::TlsVersion;
pub use validate::Finding;
