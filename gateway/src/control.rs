//! The control plane of the gateway: everything that is not traffic. Health checks start here,
//! the admin endpoint answers probes and scrapes, configuration and certificates follow their
//! files, discovery follows the cluster's endpoint slices, and an upgrade of kubegate itself
//! hands the listening sockets to a successor.
//!
//! | module | job |
//! |---|---|
//! | `service` | the control runtime (a pingora background service): starts every task below |
//! | `admin` | `/livez`, `/readyz`, `/metrics`, `/debug/backends`, `/debug/config`, drain calls |
//! | `status` | `kubegate status`: the admin endpoint's backends as a table |
//! | `drain` | `kubegate drain` and `undrain`: a replica's work moved ahead of its restart |
//! | `generation` | the one path a configuration comes in force by, at start-up and at each reload: the next generation from the one in force |
//! | `reload` | SIGHUP and file-change reloads: all or nothing |
//! | `certs` | serving and front-proxy certificates that follow their files |
//! | `terminated` | the tasks that follow each cluster terminate mode serves, ended with it |
//! | `expiry` | every certificate file's expiry, exported |
//! | `files` | the file checks `kubegate check` and every load run |
//! | `discovery` | backends from the `default/kubernetes` EndpointSlices |
//! | `shed`, `shed_call` | rules put in force at run time, what they must be, their state file; `kubegate shed` and `unshed` |
//! | `auto_shed` | `terminate.auto_shed`'s task for each cluster: each second's look, logged and counted |
//! | `shed_object`, `shed_follow` | a cluster's shed object: its format, and every gateway following it |
//! | `upgrade` | zero-downtime upgrades of kubegate itself (sockets over `SCM_RIGHTS`) |
//! | `notify` | systemd's `sd_notify` |

mod admin;
mod auto_shed;
mod certs;
mod discovery;
pub mod drain;
mod expiry;
mod files;
mod generation;
pub mod notify;
mod reload;
mod service;
mod shed;
pub mod shed_call;
mod shed_follow;
pub mod shed_object;
pub mod status;
mod terminated;
pub mod upgrade;

pub use admin::AdminTls;
pub use files::{check_files_and_tls, log_warnings};
pub use generation::Plan;
pub use service::{Control, ControlParts, UpgradeState};
