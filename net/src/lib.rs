//! What kubegate's health checks and data planes share below HTTP.
//!
//! - [`tls`]: the one owner of TLS material — the crypto provider, certificates, roots and keys
//!   read from a file or from bytes (a kubeconfig's inline data), the checks that a key belongs
//!   to its certificate, and serving certificates that follow their files.
//! - [`dial`]: one TCP connect with a deadline.
//! - [`out_of_resources`]: whether an I/O error says kubegate itself ran out of descriptors or
//!   memory, which is never held against a backend.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod dial;
mod resources;
pub mod tls;

pub use dial::dial;
pub use resources::out_of_resources;
