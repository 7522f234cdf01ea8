//! Terminate mode's state for one cluster it serves, kept across reloads while the cluster is:
//! what it learned (reviewed tokens, access decisions), what it shares (joined reads, fed
//! watches), and the settings a reload replaces whole — how it reaches the backends and whom
//! it vouches for (`upstream::upstreams`), its compiled dispatch rules (`rules`).

use crate::state::{Cluster, Pool};
use crate::telemetry::TerminateMetrics;
use crate::terminate::join::feeds::Feeds;
use crate::terminate::join::Joins;
use crate::terminate::rules::Rules;
use crate::terminate::sender::access::AccessReviews;
use crate::terminate::sender::tokens::TokenReviews;
use crate::terminate::upstream::upstreams::{LiveUpstreams, Upstreams};
use arc_swap::ArcSwap;
use kubegate_config::DispatchRule;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Shared by every terminate-mode listener, one per cluster.
pub struct TerminateMode {
    cluster: Arc<Cluster>,
    upstream: Arc<LiveUpstreams>,
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
            upstream: Arc::new(LiveUpstreams::new(upstreams)),
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

    /// New upstream connections use `upstreams` (`LiveUpstreams::replace`).
    pub fn replace(&self, upstreams: Upstreams) {
        self.upstream.replace(upstreams);
    }

    /// What new requests use.
    pub fn upstreams(&self) -> Arc<Upstreams> {
        self.upstream.load()
    }

    /// The upstream settings in force, as they are replaced.
    pub fn live_upstreams(&self) -> &Arc<LiveUpstreams> {
        &self.upstream
    }
}
