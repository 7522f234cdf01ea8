//! Every test of the workspace's root package, as one test binary: each file of `tests/` is a
//! module here (one link and one copy of every generic instantiation, where 24 binaries each
//! had their own). A test is named by its file: `cargo test --test e2e http2_abuse::` runs
//! `tests/http2_abuse.rs`, `cargo test --test e2e http2_abuse::rapid_reset` one test of it.
//!
//! The load tests (`loadtest::`) each drive a whole control plane and assert what its clients
//! saw: `scripts/test` runs them four at a time, beside the rest (`tests/loadtest.rs`).

#[path = "access_log.rs"]
mod access_log;
#[path = "admin.rs"]
mod admin;
#[path = "apf.rs"]
mod apf;
#[path = "authorized.rs"]
mod authorized;
#[path = "backend_states.rs"]
mod backend_states;
#[path = "bad_clients.rs"]
mod bad_clients;
#[path = "balancing.rs"]
mod balancing;
#[path = "bounded_memory.rs"]
mod bounded_memory;
#[path = "client_sockets.rs"]
mod client_sockets;
#[path = "clients.rs"]
mod clients;
#[path = "clusters.rs"]
mod clusters;
#[path = "continuity.rs"]
mod continuity;
#[path = "copy.rs"]
mod copy;
#[path = "costs.rs"]
mod costs;
#[path = "credentials.rs"]
mod credentials;
#[path = "deploy.rs"]
mod deploy;
#[path = "discovery.rs"]
mod discovery;
#[path = "dispatch.rs"]
mod dispatch;
#[path = "fairness.rs"]
mod fairness;
#[path = "fuzz_corpora.rs"]
mod fuzz_corpora;
#[path = "hold.rs"]
mod hold;
#[path = "http2_abuse.rs"]
mod http2_abuse;
#[path = "http2_rfc.rs"]
mod http2_rfc;
#[path = "identity.rs"]
mod identity;
#[path = "ipv6.rs"]
mod ipv6;
#[path = "join.rs"]
mod join;
#[path = "layout.rs"]
mod layout;
#[path = "lifecycle.rs"]
mod lifecycle;
#[path = "loadtest.rs"]
mod loadtest;
#[path = "observability.rs"]
mod observability;
#[path = "operator.rs"]
mod operator;
#[path = "other_ports.rs"]
mod other_ports;
#[path = "pages.rs"]
mod pages;
#[path = "proxy_protocol.rs"]
mod proxy_protocol;
#[path = "reading.rs"]
mod reading;
#[path = "reload.rs"]
mod reload;
#[path = "replica_failures.rs"]
mod replica_failures;
#[path = "request_bodies.rs"]
mod request_bodies;
#[path = "serving.rs"]
mod serving;
#[path = "shed.rs"]
mod shed;
#[path = "signals.rs"]
mod signals;
#[path = "sim.rs"]
mod sim;
#[path = "skew.rs"]
mod skew;
#[path = "status_page.rs"]
mod status_page;
#[path = "test_commands.rs"]
mod test_commands;
#[path = "tls.rs"]
mod tls;
#[path = "upgrade.rs"]
mod upgrade;
#[path = "vendored.rs"]
mod vendored;
#[path = "vip.rs"]
mod vip;
