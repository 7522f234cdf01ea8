//! The one crypto provider.

use rustls::crypto::CryptoProvider;
use std::sync::{Arc, OnceLock};

/// The crypto provider every TLS configuration of kubegate uses (ring), built once.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}
