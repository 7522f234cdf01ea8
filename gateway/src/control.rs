//! The control runtime: health checks, the admin endpoint and the reload watcher, in a pingora
//! background service of their own so a busy data path never delays a probe.

use crate::gateway::Gateway;
use crate::lifecycle::Phase;
use crate::{admin, notify, reload};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use std::sync::{Arc, Mutex};

/// Starts the control tasks when pingora starts its services.
pub struct Control {
    /// Shared gateway state.
    pub gateway: Arc<Gateway>,
    /// The admin socket, bound before pingora starts so a taken port fails the start cleanly.
    pub admin: Mutex<Option<std::net::TcpListener>>,
}

#[async_trait]
impl BackgroundService for Control {
    async fn start(&self, _shutdown: ShutdownWatch) {
        let gw = self.gateway.clone();
        let admin = self
            .admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("control starts once");
        let admin = tokio::net::TcpListener::from_std(admin).expect("admin listener");
        gw.start_backends();
        reload::record_initial_load(&gw);
        tokio::spawn(admin::serve(admin, gw.clone()));
        tokio::spawn(reload::watch(gw.clone()));
        tokio::spawn(crate::terminate::watch_certificates(gw.clone()));
        gw.advance(Phase::Serving);
        notify::ready();
        // Keep the service alive; the process ends through the shutdown sequence.
        std::future::pending::<()>().await;
    }
}
