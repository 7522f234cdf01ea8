//! The end-to-end test harness: real `kubegate` and `kubegate-sim` processes on loopback,
//! certificates generated per test, and clients that speak real TLS.
//!
//! Every process started here is killed by its PID when its handle drops, on success and on
//! failure alike. Waits are conditions with deadlines, never fixed sleeps.

mod client;
pub mod h2raw;
mod pki;
mod process;
mod watch;

pub use client::{tls_client_config, tls_connect, Conn, Lines, Response};
pub use pki::{FrontProxyPki, Pki};
pub use process::{
    bin, free_port, plain_http, wait_for, Etcd, Kubegate, KubegateConfig, Proc, Sim, SimOptions,
    TerminateFiles,
};
pub use watch::{Watch, WatchEvent};
