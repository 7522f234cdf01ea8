//! TLS material, read in one place: every certificate, root store and key kubegate uses — for
//! probes, terminate-mode listeners and upstream connections, the admin endpoint and discovery —
//! is read here, with errors that name the file (or the kubeconfig field) and what is wrong.
//!
//! | item | job |
//! |---|---|
//! | [`provider`] | the one crypto provider (ring), built once |
//! | `expiry` | when a file's certificates expire |
//! | `pem` | certificates, root stores and private keys from a PEM file or PEM bytes; a key checked against its certificate |
//! | `policy` | the TLS versions and cipher suites an operator chose |
//! | `serving` | a serving certificate that follows its files, and the server config around it |

mod expiry;
mod pem;
mod policy;
mod provider;
mod serving;

pub use expiry::{earliest_expiry, not_after};
pub use pem::{
    certified_key, certified_key_from_pem, certs_from_pem, key_from_pem, load_certs, load_key,
    load_roots, roots_from_pem,
};
pub use policy::{cipher_suite_names, TlsPolicy};
pub use provider::provider;
pub use serving::{server_config, serving, ServingCert};
