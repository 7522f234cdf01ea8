//! Terminate mode (L7): kubegate ends the client's TLS, and balances each request over the
//! pool's ready backends on HTTP/2 connections of its own, with the client's identity passed on
//! by the apiserver's front-proxy scheme.
//!
//! Grouped by stage, as a request meets them, each importing only the stages below it
//! (`tests/layout.rs` holds them to it):
//!
//! | stage | job |
//! |---|---|
//! | `server` | a client connection: its handshake (the cluster its server name chooses, from the plane's table of clusters served), its HTTP server, what one connection may hold |
//! | `request` | one request through its phases: read as the apiserver reads it, its sender named and its access decided, its rule, its body, shaped for the backends, routed (joined, fed or forwarded), answered, logged; upgrades |
//! | `cluster` | what terminate mode keeps per cluster: its long-lived state (reviewed tokens, access decisions, joins, feeds, its upstream settings' owner), and the plane's table of the clusters served in one generation (handshake, upstream settings, rules) |
//! | `watch` | a watch continued across replicas; the share of long-running requests kept even |
//! | `sender` | who sent it: a bearer token's TokenReview, an access decision's SubjectAccessReview |
//! | `join` | identical reads of one sender answered from one upstream request; watches fed from one upstream watch |
//! | `upstream` | placing a request on a backend and sending it over kubegate's HTTP/2 connections; what kubegate knows of each replica |
//! | `exchange` | what every stage speaks: the HTTP/2 stream to a backend, request and response bodies, kubegate's own `Status` errors |
//! | `rules` | `dispatch:` compiled: the rule a request falls under, its backends, its limits and the slot it holds |
//!
//! Each stage's file lists its modules and their jobs.
//!
//! What a request and a watch are on the apiserver's wire (verbs, long-running requests, watch
//! framing and positions, identity headers) is the `kubegate-wire` crate's; what terminate mode
//! keeps per backend for the pool's orders (its HTTP/2 connections, requests in flight) is
//! `state::Upstream`; what it knows of each replica (its flow control, what it serves) is kept
//! per cluster by `upstream`.

mod cluster;
mod exchange;
pub mod join;
pub mod request;
mod rules;
mod sender;
mod server;
mod upstream;
mod watch;

pub use cluster::auto_shed::{
    preview as auto_shed_preview, troubled as auto_shed_troubled, Change as AutoShedChange,
    LevelPreview, WINDOW as AUTO_SHED_WINDOW,
};
pub use cluster::mode::TerminateMode;
pub use cluster::plane::{ClusterFiles, TerminatePlane, TerminatedCluster};
pub use cluster::shed::names_reserve;
pub use rules::Rules;
pub use server::listener::TerminateListener;
pub use upstream::outgoing::Outgoing;
pub use upstream::own::{send as send_own, OwnAnswer, Unanswered};
pub use upstream::served::Served as ReplicaServed;
pub use upstream::upstreams::{UpstreamFiles, Upstreams};
pub use upstream::versions::learn as learn_versions;
pub use watch::share::keep as keep_share;
