//! The control runtime: health checks, the admin endpoint and the reload watcher, in a pingora
//! background service of their own so a busy data path never delays a probe.

use crate::certs::Reloadable;
use crate::gateway::Gateway;
use crate::lifecycle::Phase;
use crate::{admin, notify, reload, upgrade};
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
    /// The admin endpoint's TLS, loaded before pingora starts for the same reason.
    pub admin_tls: Option<Arc<admin::AdminTls>>,
    /// With `upgrade.socket` configured: what this process hands over, and what it took over.
    pub upgrade: Mutex<Option<UpgradeState>>,
    /// With `discovery` configured: its settings and credentials, read before pingora starts
    /// so an unusable kubeconfig fails the start.
    pub discovery: Mutex<
        Option<(
            kubegate_config::DiscoveryConfig,
            crate::discovery::Credentials,
        )>,
    >,
}

/// Upgrades of kubegate itself, as this process starts (`upgrade.rs`).
pub struct UpgradeState {
    /// `upgrade.socket`.
    pub path: std::path::PathBuf,
    /// The socket, already bound (a process that did not take over from another).
    pub socket: Option<std::os::unix::net::UnixListener>,
    /// Duplicates of this process's listening sockets, for its successor.
    pub sockets: upgrade::Sockets,
    /// The connection to the predecessor this process takes over from.
    pub predecessor: Option<std::os::unix::net::UnixStream>,
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
        let discovery = self
            .discovery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((settings, creds)) = discovery {
            let name = gw.config().load().health.tls.server_name.clone();
            tokio::spawn(crate::discovery::run(gw.clone(), settings, creds, name));
        }
        reload::record_initial_load(&gw);
        tokio::spawn(admin::serve(admin, self.admin_tls.clone(), gw.clone()));
        tokio::spawn(reload::watch(gw.clone()));
        let mut serving: Vec<Arc<dyn Reloadable>> = Vec::new();
        if let Some(t) = gw.terminate() {
            serving.extend(
                t.listeners()
                    .iter()
                    .map(|l| l.clone() as Arc<dyn Reloadable>),
            );
        }
        if let Some(t) = &self.admin_tls {
            serving.push(t.clone());
        }
        tokio::spawn(crate::certs::watch_certificates(gw.clone(), serving));
        let upgrade = self
            .upgrade
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(state) = upgrade {
            tokio::spawn(upgrades(gw.clone(), state));
        }
        gw.advance(Phase::Serving);
        notify::ready();
        // Keep the service alive; the process ends through the shutdown sequence.
        std::future::pending::<()>().await;
    }
}

/// Takes over from the predecessor, if there is one, then waits for a successor.
async fn upgrades(gw: Arc<Gateway>, state: UpgradeState) {
    let UpgradeState {
        path,
        socket,
        sockets,
        predecessor,
    } = state;
    let socket = match (socket, predecessor) {
        (Some(socket), _) => socket,
        (None, Some(predecessor)) => {
            take_over(&gw, predecessor).await;
            // The predecessor removed its socket before confirming: claim the path.
            let claim = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || upgrade::bind(&path)).await
            };
            match claim {
                Ok(Ok(socket)) => socket,
                Ok(Err(e)) => {
                    tracing::error!(error = %format!("{e:#}"), "upgrade: cannot claim the socket; no further upgrade possible");
                    return;
                }
                Err(_) => return,
            }
        }
        (None, None) => return,
    };
    std::thread::spawn(move || upgrade::serve(socket, path, sockets, gw));
}

/// Accepts once a backend can take the connections (the predecessor accepts meanwhile), then
/// lets the predecessor go.
async fn take_over(gw: &Gateway, predecessor: std::os::unix::net::UnixStream) {
    let pool = gw.pool();
    let ready = async {
        while pool.routing().ready.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(upgrade::READY_WAIT, ready)
        .await
        .is_err()
    {
        tracing::warn!("upgrade: no backend ready yet; accepting anyway");
    }
    gw.lifecycle().start_accepting();
    // Before the predecessor may exit, so systemd follows this process instead.
    crate::notify::main_pid();
    match tokio::task::spawn_blocking(move || upgrade::complete(predecessor)).await {
        Ok(Ok(())) => tracing::info!("upgrade: took over; the old process drains"),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "upgrade: the old process did not confirm; serving anyway")
        }
        Err(e) => tracing::warn!(error = %e, "upgrade: handshake task failed"),
    }
}
