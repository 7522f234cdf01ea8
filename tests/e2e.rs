//! Every test of the workspace's root package, as one test binary: each file of `tests/` is a
//! module here (one link and one copy of every generic instantiation, where 24 binaries each
//! had their own). A test is named by its file: `cargo test --test e2e hostile::` runs
//! `tests/hostile.rs`, `cargo test --test e2e hostile::rapid_reset` one test of it.
//!
//! The load tests (`loadtest::`) each drive a whole control plane and assert what its clients
//! saw: `scripts/test` runs them four at a time, beside the rest (`tests/loadtest.rs`).

#[path = "admin.rs"]
mod admin;
#[path = "apf.rs"]
mod apf;
#[path = "authorized.rs"]
mod authorized;
#[path = "clients.rs"]
mod clients;
#[path = "clusters.rs"]
mod clusters;
#[path = "continuity.rs"]
mod continuity;
#[path = "copy.rs"]
mod copy;
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
#[path = "gateway.rs"]
mod gateway;
#[path = "hold.rs"]
mod hold;
#[path = "hostile.rs"]
mod hostile;
#[path = "join.rs"]
mod join;
#[path = "layout.rs"]
mod layout;
#[path = "loadtest.rs"]
mod loadtest;
#[path = "observability.rs"]
mod observability;
#[path = "operator.rs"]
mod operator;
#[path = "reading.rs"]
mod reading;
#[path = "signals.rs"]
mod signals;
#[path = "sim.rs"]
mod sim;
#[path = "skew.rs"]
mod skew;
#[path = "status_page.rs"]
mod status_page;
#[path = "terminate.rs"]
mod terminate;
#[path = "tls.rs"]
mod tls;
#[path = "upgrade.rs"]
mod upgrade;
#[path = "vendored.rs"]
mod vendored;
#[path = "vip.rs"]
mod vip;
