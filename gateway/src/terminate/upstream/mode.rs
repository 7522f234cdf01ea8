//! Terminate mode's shared state for the cluster it serves: which backends (the cluster's
//! pool), how it reaches them and whom it vouches for, replaced whole when the configuration
//! or the front-proxy certificate changes; and the compiled dispatch rules, replaced when
//! `dispatch:` changes.

use crate::state::{Cluster, Pool};
use crate::telemetry::TerminateMetrics;
use crate::terminate::join::feeds::Feeds;
use crate::terminate::join::Joins;
use crate::terminate::request::rules::Rules;
use crate::terminate::sender::access::AccessReviews;
use crate::terminate::sender::tokens::TokenReviews;
use crate::terminate::upstream::flow::Flows;
use crate::terminate::upstream::rotation;
use crate::terminate::upstream::signals::ExtensionApis;
use crate::terminate::upstream::tls::UpstreamTls;
use arc_swap::ArcSwap;
use kubegate_config::{DispatchRule, UpstreamConfig};
use kubegate_wire::identity::IdentityHeaders;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Shared by every terminate-mode listener, one per cluster.
pub struct TerminateMode {
    cluster: Arc<Cluster>,
    upstream: ArcSwap<Upstreams>,
    rules: ArcSwap<Rules>,
    /// What bearer tokens were found to name (kept across reloads).
    tokens: Arc<TokenReviews>,
    /// What senders were found allowed to read (kept across reloads).
    access: Arc<AccessReviews>,
    /// Request body bytes held for all clients together (`bodies`).
    body_bytes: Arc<AtomicU64>,
    /// Reads in flight that identical reads may join.
    joins: Arc<Joins>,
    /// Upstream watches identical watches are fed from.
    feeds: Arc<Feeds>,
}

/// Everything taken from `upstream`, replaced whole on a reload or a certificate change, and
/// the cluster whose backends it reaches.
pub struct Upstreams {
    /// The cluster the requests go to.
    pub(crate) cluster: Arc<Cluster>,
    /// Client TLS toward the backends.
    pub(crate) tls: UpstreamTls,
    /// The front-proxy header names.
    pub(crate) identity: IdentityHeaders,
    /// What the replicas' flow control said (kept across replacements).
    pub(crate) flows: Arc<Flows>,
    /// Which group-versions extension servers answer for (kept across replacements).
    pub(crate) extensions: Arc<ExtensionApis>,
}

impl Upstreams {
    /// The backends the requests go to.
    pub fn pool(&self) -> &Pool {
        self.cluster.pool()
    }

    /// Reads the CA and front-proxy files of `upstream` (`cluster`'s) now.
    pub fn load(upstream: &UpstreamConfig, cluster: Arc<Cluster>) -> Result<Upstreams, String> {
        Ok(UpstreamFiles::load(upstream)?.of(cluster))
    }
}

/// What [`Upstreams`] reads from its files, loaded before the cluster it is for exists (a
/// reload adding a cluster reads every file before it changes anything).
pub struct UpstreamFiles {
    tls: UpstreamTls,
    identity: IdentityHeaders,
}

impl UpstreamFiles {
    /// Reads the CA and front-proxy files of `upstream` now.
    pub fn load(upstream: &UpstreamConfig) -> Result<UpstreamFiles, String> {
        let identity = match &upstream.front_proxy {
            Some(fp) => IdentityHeaders::new(fp)?,
            None => IdentityHeaders::default(),
        };
        Ok(UpstreamFiles {
            tls: UpstreamTls::new(upstream)?,
            identity,
        })
    }

    /// The settings, reaching `cluster`'s backends.
    pub fn of(self, cluster: Arc<Cluster>) -> Upstreams {
        Upstreams {
            cluster,
            tls: self.tls,
            identity: self.identity,
            flows: Arc::default(),
            extensions: Arc::default(),
        }
    }
}

/// What the clusters' terminate states hold together, each bounded over every cluster.
#[derive(Clone, Default)]
pub struct HeldInTotal {
    /// Request body bytes (`bodies`).
    pub request_bodies: Arc<AtomicU64>,
    /// Answer bytes held for joined reads (`join`).
    pub joined_answers: Arc<AtomicU64>,
    /// Event bytes the shared watches' windows keep (`join::feeds`).
    pub watch_windows: Arc<AtomicU64>,
}

impl TerminateMode {
    /// The cluster `upstreams` reach, with `rules`; what it holds counted in `held`, with
    /// every other cluster's.
    pub fn with(upstreams: Upstreams, rules: Rules, held: &HeldInTotal) -> TerminateMode {
        TerminateMode {
            cluster: upstreams.cluster.clone(),
            upstream: ArcSwap::from_pointee(upstreams),
            rules: ArcSwap::from_pointee(rules),
            tokens: Arc::default(),
            access: Arc::default(),
            body_bytes: held.request_bodies.clone(),
            joins: Arc::new(Joins::new(held.joined_answers.clone())),
            feeds: Arc::new(Feeds::new(held.watch_windows.clone())),
        }
    }

    /// Its reads that identical reads may join.
    pub fn joins(&self) -> &Arc<Joins> {
        &self.joins
    }

    /// Its watches that identical watches are fed from.
    pub fn feeds(&self) -> &Arc<Feeds> {
        &self.feeds
    }

    /// The cluster served.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The cluster's backends.
    pub fn pool(&self) -> &Pool {
        self.cluster.pool()
    }

    /// The access decisions kubegate has asked for.
    pub fn access(&self) -> &Arc<AccessReviews> {
        &self.access
    }

    /// The bearer tokens kubegate has reviewed.
    pub fn tokens(&self) -> &Arc<TokenReviews> {
        &self.tokens
    }

    /// Request body bytes held for all clients together.
    pub fn body_bytes(&self) -> &Arc<AtomicU64> {
        &self.body_bytes
    }

    /// New requests fall under `dispatch`, compiled for this cluster; requests in flight keep
    /// their rule's slot. The series of rules `dispatch` no longer names are forgotten in
    /// `metrics`.
    pub fn replace_rules(&self, dispatch: &[DispatchRule], metrics: &TerminateMetrics) {
        let rules = Rules::compile(self.cluster.name(), dispatch, metrics);
        let kept: Vec<&str> = rules.names().collect();
        metrics.forget_rules(self.cluster.name(), &kept);
        self.rules.store(Arc::new(rules));
    }

    /// The rules new requests fall under.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// New upstream connections use `upstreams`; open ones keep what they were made with —
    /// except what they present: the identity is one cell for every generation (a request
    /// holding older settings still dials with the certificate of now), and connections that
    /// present a replaced one are retired (`rotation`). What the replicas' flow control said,
    /// and which APIs extension servers answer for, are kept: the replicas are the same.
    pub fn replace(&self, mut upstreams: Upstreams) {
        let old = self.upstream.load();
        upstreams.flows = old.flows.clone();
        upstreams.extensions = old.extensions.clone();
        let now = upstreams.tls.presented();
        let before = old.tls.identity.swap(now.clone());
        upstreams.tls.identity = old.tls.identity.clone();
        self.upstream.store(Arc::new(upstreams));
        if let Some(before) = before {
            if now.as_ref().map(|p| p.fingerprint) != Some(before.fingerprint) {
                rotation::retire_presented(
                    self.cluster.pool(),
                    self.cluster.name(),
                    &before,
                    now.as_deref(),
                );
            }
        }
    }

    /// What new requests use.
    pub fn upstreams(&self) -> Arc<Upstreams> {
        self.upstream.load_full()
    }
}
