//! `kubegate`: a readiness-aware, highly available gateway for Kubernetes API servers.
//!
//! The module tree, by plane. Imports run one way, from the top of this list down; the two
//! data planes never import each other (`tests/layout.rs` checks it):
//!
//! | module | job |
//! |---|---|
//! | [`app`] | start-up (prepare, then serve under pingora) and the shutdown sequence |
//! | [`init`] | `kubegate init`, offline: what a node needs to run kubegate, written for the chosen shape (no runtime part) |
//! | [`control`] | admin endpoint, `kubegate status`, reloads, certificates, discovery, self-upgrade |
//! | [`passthrough`] | the L4 plane: a relay per client connection, TLS untouched |
//! | [`terminate`] | the L7 plane: TLS ends here, each request is balanced |
//! | [`net`] | accept loops, admission, the one pick → connect → eject loop |
//! | [`state`] | shared state: running configuration, backends (with each plane's share), lifecycle |
//! | [`telemetry`] | metrics, their label values, the pool's events, the allocator |
//!
//! `main.rs` is the command line only.
#![forbid(unsafe_code)]

pub mod app;
pub mod control;
pub mod init;
pub mod net;
pub mod passthrough;
pub mod state;
pub mod telemetry;
pub mod terminate;
