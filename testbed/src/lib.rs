//! The test bed kubegate's end-to-end tests, its load test and `kubegate-sim cluster` share:
//! everything it takes to stand up a control plane on loopback and put kubegate in front of it.
//! Share harness, never the code under test: the simulator's own checks of kubegate's
//! behaviour (identities, `Status` bodies) stay independent of kubegate's.
//!
//! | module | job |
//! |---|---|
//! | [`process`] | child processes, logged, signalled and ended by PID |
//! | [`ports`] | loopback ports, waiting for a listener, one plain HTTP/1.1 exchange |
//! | [`wait`] | waiting on a condition with a deadline |
//! | [`bins`] | finding the workspace's binaries |
//! | [`etcd`] | a single-member etcd that can be stopped and started again |
//! | [`replica`] | a `kubegate-sim` replica: its flags, its process, its fault port |
//! | [`pki`] | certificates made at run time: a test PKI, and a kubeadm-like layout |
//! | [`kubegate`] | kubegate's configuration, built from `kubegate-config`'s own types |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bins;
pub mod etcd;
pub mod kubegate;
pub mod pki;
pub mod ports;
pub mod process;
pub mod replica;
pub mod wait;

pub use bins::binary;
pub use etcd::Etcd;
pub use pki::{FrontProxyPki, Pki};
pub use ports::{free_addr, free_port, plain_http, plain_post, wait_listening};
pub use process::ChildProcess;
pub use replica::{Replica, ReplicaFlags};
pub use wait::{wait_until, TimedOut};
