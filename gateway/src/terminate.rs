//! Terminate mode (L7): kubegate ends the client's TLS, and balances each request over the
//! pool's ready backends on HTTP/2 connections of its own, with the client's identity passed on
//! by the apiserver's front-proxy scheme.
//!
//! Grouped by stage, as a request meets them:
//!
//! | stage | job |
//! |---|---|
//! | `server` | a client connection: its handshake (the cluster its server name chooses), its HTTP server, what one connection may hold |
//! | `request` | one request: read as the apiserver reads it, its rule, its body, shaped for the backends; upgrades |
//! | `join` | identical reads of one sender answered from one upstream request |
//! | `sender` | who sent it: a bearer token's TokenReview |
//! | `upstream` | a cluster's upstream state, placing a request on a backend and sending it over kubegate's HTTP/2 connections; what kubegate knows of each replica |
//! | `watch` | a watch continued across replicas; the share of long-running requests kept even |
//!
//! Each stage's file lists its modules and their jobs.
//!
//! What a request and a watch are on the apiserver's wire (verbs, long-running requests, watch
//! framing and positions, identity headers) is the `kubegate-wire` crate's; what terminate mode
//! keeps per backend (its HTTP/2 connections, requests in flight) is `state::Upstream`.

pub mod join;
pub mod request;
mod sender;
mod server;
mod upstream;
mod watch;

pub use server::clusters::{ClusterFiles, TerminatePlane, TerminatedCluster};
pub use server::listener::TerminateListener;
pub use upstream::mode::{TerminateMode, UpstreamFiles, Upstreams};
pub use upstream::versions::learn as learn_versions;
pub use watch::share::keep as keep_share;
