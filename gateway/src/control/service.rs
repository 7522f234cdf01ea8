//! The control runtime: health checks, the admin endpoint, the reload and certificate
//! watchers, discovery and the upgrade socket, in a pingora background service of their own so
//! a busy data path never delays a probe.

use crate::control::admin::{self, AdminTls};
use crate::control::certs::{watch_certificates, Watched};
use crate::control::generation::{self, Plan};
use crate::control::{expiry, notify, reload, shed, upgrade};
use crate::state::{Gateway, Phase};
use crate::terminate::TerminatePlane;
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use std::sync::{Arc, Mutex};

/// What the control tasks start with, prepared (and checked) before pingora starts so that a
/// taken port or an unusable file fails the start cleanly.
pub struct ControlParts {
    /// The admin socket, bound.
    pub admin: std::net::TcpListener,
    /// The admin endpoint's TLS.
    pub admin_tls: Option<Arc<AdminTls>>,
    /// Terminate mode's share of every cluster it serves (each followed by its own tasks;
    /// reloads serve added clusters with it).
    pub terminate: Arc<TerminatePlane>,
    /// The serving certificates of terminate-mode listeners that have their own (a file
    /// without `clusters:`), which follow their files.
    pub serving: Vec<Arc<kubegate_net::tls::ServingCert>>,
    /// With `upgrade.socket` configured: what this process hands over, and what it took over.
    pub upgrade: Option<UpgradeState>,
    /// The first generation: every cluster of the configuration, added to nothing.
    pub first: Plan,
}

/// Starts the control tasks when pingora starts its services.
pub struct Control {
    gateway: Arc<Gateway>,
    parts: Mutex<Option<ControlParts>>,
}

impl Control {
    /// The control service of `gateway`, starting with `parts`.
    pub fn new(gateway: Arc<Gateway>, parts: ControlParts) -> Control {
        Control {
            gateway,
            parts: Mutex::new(Some(parts)),
        }
    }
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
        let parts = self
            .parts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("control starts once");
        let admin = tokio::net::TcpListener::from_std(parts.admin).expect("admin listener");
        // Start-up is the reload from nothing: pools, discovery, terminate state and
        // control tasks, made by the one path that makes every generation.
        // The rules an operator put in force before a restart, before any request is read.
        shed::restore(&gw);
        generation::apply(&gw, &parts.terminate, parts.first);
        reload::record_initial_load(&gw);
        tokio::spawn(admin::serve(
            admin,
            parts.admin_tls.clone(),
            gw.clone(),
            parts.terminate.clone(),
        ));
        tokio::spawn(reload::watch(gw.clone(), parts.terminate.clone()));
        let mut serving = parts.serving;
        if let Some(t) = &parts.admin_tls {
            serving.push(t.serving().clone());
        }
        tokio::spawn(watch_certificates(
            gw.clone(),
            Watched {
                serving,
                terminate: Vec::new(),
                plane: None,
                probes: true,
            },
        ));
        tokio::spawn(expiry::publish_expiry(gw.clone()));
        if let Some(state) = parts.upgrade {
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
    let ready = async {
        while gw.clusters().ready() == 0 {
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
    notify::main_pid();
    match tokio::task::spawn_blocking(move || upgrade::complete(predecessor)).await {
        Ok(Ok(())) => tracing::info!("upgrade: took over; the old process drains"),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "upgrade: the old process did not confirm; serving anyway")
        }
        Err(e) => tracing::warn!(error = %e, "upgrade: handshake task failed"),
    }
}
