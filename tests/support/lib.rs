//! The end-to-end test harness: real `kubegate` and `kubegate-sim` processes on loopback,
//! certificates generated per test, and clients that speak real TLS — on the test bed
//! (`kubegate-testbed`) the load test and `kubegate-sim cluster` share.
//!
//! Every process started here is killed by its PID when its handle drops, on success and on
//! failure alike. Waits are conditions with deadlines, never fixed sleeps.

pub mod attack;
mod browser;
mod client;
mod cluster;
mod container;
pub mod h2raw;
mod haproxy;
mod kubegate;
mod proc;
pub mod replicas;
mod sim;
mod testssl;
mod watch;

pub use browser::Browser;
pub use client::{
    client_config_as, tls12_client_config, tls_client_config, tls_connect, tls_connect_from,
    tls_connect_to, Conn, Lines, Response,
};
pub use cluster::{probes_rarely, terminating, Cluster, Started, DEV_TOKENS};
pub use container::{hard_nofile, pod_probe, wait_pod_probes, Container, ContainerSpec};
pub use haproxy::haproxy;
pub use kubegate::{
    assert_check_refuses, assert_problems, bin, check_config, cluster_spec, dispatch_rules,
    kubectl_bin, ms, secs, terminate_files, terminate_yaml, wait_for, wait_refused_after, Kubegate,
    KubegateConfig,
};
pub use kubegate_testbed::kubegate::TerminateFiles;
pub use kubegate_testbed::{free_port, plain_http, plain_post, Etcd, FrontProxyPki, Pki};
pub use proc::{promtool_check_metrics, repo, run_ok, said, Proc};
pub use sim::{Sim, SimOptions};
pub use testssl::{finding, testssl};
pub use watch::{Watch, WatchEvent};

/// The ConfigMaps of the `default` namespace: the collection most tests read and write.
pub const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// etcd with its data in `dir`, started.
pub fn etcd(dir: &std::path::Path) -> Etcd {
    Etcd::new(dir).start().unwrap_or_else(|e| panic!("{e:#}"))
}
