//! A cluster's upstream settings: how kubegate reaches its backends and whom it vouches for,
//! read from `upstream` and replaced whole by a reload or a certificate change; what the
//! replicas said (flow control, extension APIs) kept across replacements.

use crate::state::{Cluster, Pool};
use crate::terminate::upstream::flow::Flows;
use crate::terminate::upstream::replicas::PerReplica;
use crate::terminate::upstream::rotation;
use crate::terminate::upstream::served::ServedApis;
use crate::terminate::upstream::signals::ExtensionApis;
use crate::terminate::upstream::tls::UpstreamTls;
use arc_swap::ArcSwap;
use kubegate_config::UpstreamConfig;
use kubegate_wire::identity::IdentityHeaders;
use std::sync::Arc;

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
    /// What each replica serves, its version and group-versions (kept across replacements).
    pub(crate) served: Arc<PerReplica<ServedApis>>,
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
            served: Arc::default(),
            extensions: Arc::default(),
        }
    }
}

/// A cluster's upstream settings in force, replaced whole by a reload or a certificate change.
pub struct LiveUpstreams {
    current: ArcSwap<Upstreams>,
}

impl LiveUpstreams {
    /// `upstreams` in force.
    pub fn new(upstreams: Upstreams) -> LiveUpstreams {
        LiveUpstreams {
            current: ArcSwap::from_pointee(upstreams),
        }
    }

    /// What new requests use.
    pub fn load(&self) -> Arc<Upstreams> {
        self.current.load_full()
    }

    /// New upstream connections use `upstreams`; open ones keep what they were made with —
    /// except what they present: the identity is one cell for every generation (a request
    /// holding older settings still dials with the certificate of now), and connections that
    /// present a replaced one are retired (`rotation`). What the replicas' flow control said,
    /// what each serves and which APIs extension servers answer for are kept: the replicas
    /// are the same.
    pub fn replace(&self, mut upstreams: Upstreams) {
        let old = self.current.load();
        upstreams.flows = old.flows.clone();
        upstreams.served = old.served.clone();
        upstreams.extensions = old.extensions.clone();
        let now = upstreams.tls.presented();
        let before = old.tls.identity.swap(now.clone());
        upstreams.tls.identity = old.tls.identity.clone();
        let cluster = upstreams.cluster.clone();
        self.current.store(Arc::new(upstreams));
        if let Some(before) = before {
            if now.as_ref().map(|p| p.fingerprint) != Some(before.fingerprint) {
                rotation::retire_presented(cluster.pool(), cluster.name(), &before, now.as_deref());
            }
        }
    }
}
