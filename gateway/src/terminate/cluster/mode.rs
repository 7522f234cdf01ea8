//! Terminate mode's long-lived state for one cluster it serves, kept across generations while
//! the cluster is: what it learned (reviewed tokens, access decisions), what it shares (joined
//! reads, fed watches), and the owner of its upstream settings across replacements
//! (`upstream::upstreams::LiveUpstreams`: the replicas' flow control, their extension APIs,
//! the certificate presented). What one generation makes for it — its upstream settings and
//! rules in force, its handshake — is the plane's table (`server::clusters`).

use crate::state::{Cluster, Pool};
use crate::terminate::cluster::auto_shed::AutoShed;
use crate::terminate::cluster::shed::ShedRules;
use crate::terminate::join::feeds::Feeds;
use crate::terminate::join::Joins;
use crate::terminate::sender::access::AccessReviews;
use crate::terminate::sender::tokens::TokenReviews;
use crate::terminate::upstream::upstreams::{LiveUpstreams, Upstreams};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Shared by every terminate-mode listener, one per cluster.
pub struct TerminateMode {
    cluster: Arc<Cluster>,
    upstream: Arc<LiveUpstreams>,
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
    /// The rules put in force at run time, as this cluster compiled them.
    shed: ShedRules,
    /// The senders `terminate.auto_shed` holds back.
    auto_shed: AutoShed,
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
    /// The cluster `upstreams` reach; what it holds counted in `held`, with every other
    /// cluster's.
    pub fn with(upstreams: Upstreams, held: &HeldInTotal) -> TerminateMode {
        TerminateMode {
            cluster: upstreams.cluster.clone(),
            upstream: Arc::new(LiveUpstreams::new(upstreams)),
            tokens: Arc::default(),
            access: Arc::default(),
            body_bytes: held.request_bodies.clone(),
            joins: Arc::new(Joins::new(held.joined_answers.clone())),
            feeds: Arc::new(Feeds::new(held.watch_windows.clone())),
            shed: ShedRules::default(),
            auto_shed: AutoShed::default(),
        }
    }

    /// The rules put in force at run time, as this cluster compiled them.
    pub fn shed(&self) -> &ShedRules {
        &self.shed
    }

    /// The senders `terminate.auto_shed` holds back.
    pub fn auto_shed(&self) -> &AutoShed {
        &self.auto_shed
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

    /// New upstream connections use `upstreams` (`LiveUpstreams::replace`); the plane puts
    /// them in its table (`TerminatePlane::put`, `renew_upstreams`).
    pub fn replace(&self, upstreams: Upstreams) {
        self.upstream.replace(upstreams);
    }

    /// The upstream settings in force now.
    pub fn upstreams(&self) -> Arc<Upstreams> {
        self.upstream.load()
    }

    /// The upstream settings in force, as they are replaced.
    pub fn live_upstreams(&self) -> &Arc<LiveUpstreams> {
        &self.upstream
    }
}
