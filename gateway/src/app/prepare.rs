//! Everything that can fail at start, done before pingora starts so that a taken address or
//! an unusable file fails the start and names what: the configuration loaded and checked, the
//! listening sockets bound or taken over from the running kubegate (`--upgrade`), the admin
//! socket, certificates, discovery credentials.

use crate::app::descriptors;
use crate::control::{self, upgrade, AdminTls, ControlParts, Plan, UpgradeState};
use crate::net::{self, Serve};
use crate::passthrough::Passthrough;
use crate::state::{ClientListener, Gateway};
use crate::terminate::{TerminateListener, TerminatePlane};
use kubegate_config::{load_file_with, Config, ListenerMode};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

/// A gateway ready to serve.
pub struct Prepared {
    /// The shared state.
    pub gateway: Arc<Gateway>,
    /// The listening sockets, each with its plane.
    pub listeners: Vec<(TcpListener, Arc<dyn Serve>)>,
    /// What the control plane starts with.
    pub control: ControlParts,
    /// Worker threads for the listeners.
    pub threads: usize,
}

/// Loads `config_path` and prepares a gateway for it; with `upgrade`, on the sockets of the
/// kubegate running on `upgrade.socket`.
pub fn prepare(config_path: &Path, upgrade: bool) -> anyhow::Result<Prepared> {
    let config = load_file_with(config_path, &control::check_files_and_tls)?;
    if let Ok(text) = std::fs::read_to_string(config_path) {
        control::log_warnings(config_path, &text, &config);
    }
    let descriptors = descriptors::raise();
    let mut inherited = match (&config.upgrade, upgrade) {
        (Some(u), true) => Some(upgrade::take_over(&u.socket)?),
        (None, true) => anyhow::bail!("--upgrade needs upgrade.socket in the configuration"),
        (_, false) => None,
    };
    // Without --upgrade the socket is claimed now: a kubegate already running there is an
    // error. With it, it is claimed once the predecessor let go (control/service.rs).
    let upgrade_socket = match (&config.upgrade, &inherited) {
        (Some(u), None) => Some(upgrade::bind(&u.socket)?),
        _ => None,
    };
    // A process taking over accepts once it has a backend; until then its predecessor does.
    let accepting = inherited.is_none();
    let counts = config
        .listeners
        .iter()
        .map(|l| ClientListener::leak_forwarding(l.address, l.mode, l.backend_port))
        .collect();
    // Every cluster, read as a reload reads an added one: a file that cannot be used fails
    // the start here; the control runtime puts the generation in force as it starts.
    let first = Plan::first(config.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let gateway = Gateway::new(
        config.clone(),
        config_path.to_path_buf(),
        accepting,
        descriptors.client_capacity(),
        counts,
    );
    let terminate = Arc::new(TerminatePlane::new());
    let (listeners, serving) = bind_listeners(&config, &terminate, inherited.as_mut())?;
    let admin = match inherited
        .as_mut()
        .and_then(|i| i.take(config.admin.address))
    {
        Some(admin) => admin,
        None => crate::net::bind_admin(config.admin.address)
            .map_err(|e| anyhow::anyhow!("admin.address {}: {e}", config.admin.address))?,
    };
    admin.set_nonblocking(true)?;
    // Duplicates of every listening socket, for a successor to take over.
    let mut sockets = upgrade::Sockets::default();
    if config.upgrade.is_some() {
        for (l, _) in &listeners {
            sockets.keep(l)?;
        }
        sockets.keep(&admin)?;
    }
    let admin_tls = match &config.admin.tls {
        Some(tls) => Some(Arc::new(
            AdminTls::new(tls).map_err(|e| anyhow::anyhow!("admin.tls: {e}"))?,
        )),
        None => None,
    };
    tracing::info!(
        listeners = ?config.listeners.iter().map(|l| l.address).collect::<Vec<_>>(),
        admin = %config.admin.address,
        clusters = config.clusters().len(),
        backends = config.clusters().iter().map(|c| c.backends.len()).sum::<usize>(),
        version = crate::telemetry::build::VERSION,
        commit = crate::telemetry::build::COMMIT,
        "kubegate starting"
    );
    let upgrade = config.upgrade.as_ref().map(|u| UpgradeState {
        path: u.socket.clone(),
        socket: upgrade_socket,
        sockets,
        predecessor: inherited.map(upgrade::Inherited::into_stream),
    });
    let threads = config.threads;
    Ok(Prepared {
        gateway,
        listeners,
        control: ControlParts {
            admin,
            admin_tls,
            terminate,
            serving,
            upgrade,
            first,
        },
        threads,
    })
}

/// Binds every listener (or takes it from `inherited`), each with its plane; and the serving
/// certificates of the terminate listeners that have their own.
#[allow(clippy::type_complexity)]
fn bind_listeners(
    config: &Config,
    terminate: &Arc<TerminatePlane>,
    mut inherited: Option<&mut upgrade::Inherited>,
) -> anyhow::Result<(
    Vec<(TcpListener, Arc<dyn Serve>)>,
    Vec<Arc<kubegate_net::tls::ServingCert>>,
)> {
    let mut listeners = Vec::new();
    let mut serving = Vec::new();
    for l in &config.listeners {
        let at = |e: String| anyhow::anyhow!("listeners: {}: {e}", l.address);
        let plane: Arc<dyn Serve> = match l.mode {
            ListenerMode::Passthrough => Arc::new(Passthrough::new(l.clone())),
            ListenerMode::Terminate => {
                let listener = TerminateListener::new(l, terminate.clone()).map_err(at)?;
                serving.extend(listener.serving().cloned());
                Arc::new(Arc::new(listener))
            }
        };
        let socket = match inherited.as_deref_mut().and_then(|i| i.take(l.address)) {
            Some(s) => {
                s.set_nonblocking(true)?;
                s
            }
            None => net::bind(l.address, &config.client_keepalive)
                .map_err(|e| anyhow::anyhow!("listeners: {}: {e}", l.address))?,
        };
        listeners.push((socket, plane));
    }
    Ok((listeners, serving))
}
