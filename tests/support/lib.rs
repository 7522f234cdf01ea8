//! e2e support
