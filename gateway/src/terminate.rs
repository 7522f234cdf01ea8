//! Terminate mode (L7): kubegate ends the client's TLS, and balances each request over the
//! pool's ready backends on HTTP/2 connections of its own, with the client's identity passed on
//! by the apiserver's front-proxy scheme.
//!
//! | module | job |
//! |---|---|
//! | `listener` | TLS handshake (with a deadline), the client's certificate identity, the HTTP/1.1 or HTTP/2 server, GOAWAY / `Connection: close` when kubegate drains |
//! | `forward` | one request: identity headers, body held for replay, pick, send, retry where provably unprocessed |
//! | `h2client` | the HTTP/2 client toward backends, on `h2` directly: a request's own task sends it and waits for its response |
//! | `upgrade` | exec, attach, port-forward: HTTP/1.1 end to end, 101 passed on, then bytes both ways |
//! | `upstream` | per backend: HTTP/2 connections, requests in flight (the load signal), drain and close |
//! | `watch` | watch continuity: a watch whose replica goes away continues on another from its last position |
//! | `resets` | the rapid reset rule: a connection whose streams are mostly reset at once is closed |
//! | `retry` | the pure rule of when a request may go to another backend |
//! | `tls`, `body`, `status` | certificates, response bodies, the `Status` errors kubegate answers itself |
//!
//! What a request and a watch are on the apiserver's wire (verbs, long-running requests, watch
//! framing and positions, identity headers) is the `kubegate-wire` crate's.

mod body;
mod forward;
mod h2client;
mod listener;
mod resets;
mod retry;
mod status;
mod tls;
mod upgrade;
mod upstream;
mod watch;

pub use kubegate_wire::classify::Verb;
pub use listener::{serve, TerminateListener};
pub use retry::Failure;
pub use upstream::{Gauges, Upstream};
pub use watch::{Break, Ended};

use arc_swap::ArcSwap;
use kubegate_config::UpstreamConfig;
use kubegate_wire::identity::IdentityHeaders;
use std::sync::Arc;
use tls::UpstreamTls;

/// Terminate mode's shared state: its listeners' certificates, how it reaches the backends
/// and whom it vouches for.
pub struct TerminateMode {
    upstream: ArcSwap<Upstreams>,
    listeners: Vec<Arc<TerminateListener>>,
}

/// Everything taken from `upstream`, replaced whole on a reload or a certificate change.
pub struct Upstreams {
    tls: UpstreamTls,
    identity: IdentityHeaders,
}

impl Upstreams {
    /// Reads the CA and front-proxy files of `upstream` now.
    pub fn load(upstream: &UpstreamConfig) -> Result<Upstreams, String> {
        let identity = match &upstream.front_proxy {
            Some(fp) => IdentityHeaders::new(fp)?,
            None => IdentityHeaders::default(),
        };
        Ok(Upstreams {
            tls: UpstreamTls::new(upstream)?,
            identity,
        })
    }
}

impl TerminateMode {
    /// From `upstream`, serving `listeners`.
    pub fn new(
        upstream: &UpstreamConfig,
        listeners: Vec<Arc<TerminateListener>>,
    ) -> Result<TerminateMode, String> {
        Ok(TerminateMode {
            upstream: ArcSwap::from_pointee(Upstreams::load(upstream)?),
            listeners,
        })
    }

    /// The terminate-mode listeners.
    pub fn listeners(&self) -> &[Arc<TerminateListener>] {
        &self.listeners
    }

    /// New upstream connections use `upstreams`; open ones keep what they were made with.
    pub fn replace(&self, upstreams: Upstreams) {
        self.upstream.store(Arc::new(upstreams));
    }

    fn upstreams(&self) -> Arc<Upstreams> {
        self.upstream.load_full()
    }
}
