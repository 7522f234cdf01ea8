//! `kubegate`: a readiness-aware, highly available gateway for Kubernetes API servers.
#![forbid(unsafe_code)]

mod accept;
mod admin;
mod admission;
mod certs;
mod connections;
mod control;
mod copy;
mod dial;
mod discovery;
mod events;
mod files;
mod gateway;
mod labels;
mod lifecycle;
mod memory;
mod metrics;
mod notify;
mod planes;
mod proxy;
mod reload;
mod running;
mod server_tls;
mod shutdown;
mod status;
mod terminate;
mod upgrade;

use accept::Plane;
use clap::{Parser, Subcommand, ValueEnum};
use files::check_files;
use gateway::{probe_settings, Gateway};
use kubegate_config::{load_file, load_file_with, Config, ListenerMode};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use terminate::{TerminateListener, TerminateMode};

#[derive(Parser)]
#[command(name = "kubegate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Log line format.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Take over from the kubegate running on `upgrade.socket`: its listening sockets
        /// pass to this process without closing, then it drains and exits.
        #[arg(long)]
        upgrade: bool,
    },
    /// Validate a configuration file: exit 0, or print FILE:LINE:COLUMN: problem and exit 2.
    Check {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the backends of a running gateway as a table.
    Status {
        /// Admin address of the running gateway.
        #[arg(long, conflicts_with = "config")]
        admin: Option<SocketAddr>,
        /// Read the admin address from this configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match load_file_with(&config, &check_files) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Status { admin, config } => {
            let admin = match (admin, config) {
                (Some(a), _) => a,
                (None, Some(path)) => match load_file(&path) {
                    Ok(c) if c.admin.tls.is_some() => {
                        eprintln!(
                            "kubegate status: admin.tls is set and status speaks plain HTTP; read https://{}/debug/backends with your client certificate or token",
                            c.admin.address
                        );
                        return ExitCode::from(2);
                    }
                    Ok(c) => c.admin.address,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => kubegate_config::AdminConfig::default().address,
            };
            match status::print(admin) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kubegate status: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run {
            config,
            log_format,
            upgrade,
        } => {
            init_logging(log_format);
            match run(&config, upgrade) {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("kubegate: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEGATE_LOG")
        .unwrap_or_else(|_| "info,pingora_core=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Loads, binds (or, with `upgrade`, takes the sockets over from the running process), and
/// runs until the shutdown sequence ends; returns the exit status.
fn run(config_path: &Path, upgrade: bool) -> anyhow::Result<u8> {
    let config = load_file_with(config_path, &check_files)?;
    let mut inherited = match (&config.upgrade, upgrade) {
        (Some(u), true) => Some(upgrade::take_over(&u.socket)?),
        (None, true) => anyhow::bail!("--upgrade needs upgrade.socket in the configuration"),
        (_, false) => None,
    };
    // Without --upgrade the socket is claimed now: a kubegate already running there is an
    // error. With it, it is claimed once the predecessor let go (control.rs).
    let upgrade_socket = match (&config.upgrade, &inherited) {
        (Some(u), None) => Some(upgrade::bind(&u.socket)?),
        _ => None,
    };
    if config.health.tls.insecure_skip_verify {
        tracing::warn!(
            "health.tls.insecure_skip_verify is set: backend certificates are not verified"
        );
    }
    let probes = probe_settings(&config)?;
    let listeners = bind_listeners(&config, inherited.as_mut())?;
    let terminating: Vec<Arc<TerminateListener>> = listeners
        .iter()
        .filter_map(|(_, plane)| match plane {
            Plane::Terminate(l) => Some(l.clone()),
            Plane::Passthrough => None,
        })
        .collect();
    let terminate = if terminating.is_empty() {
        None
    } else {
        Some(
            TerminateMode::new(&config.upstream, terminating)
                .map_err(|e| anyhow::anyhow!("upstream: {e}"))?,
        )
    };
    let admin = match inherited
        .as_mut()
        .and_then(|i| i.take(config.admin.address))
    {
        Some(admin) => admin,
        None => std::net::TcpListener::bind(config.admin.address)
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
            admin::AdminTls::new(tls).map_err(|e| anyhow::anyhow!("admin.tls: {e}"))?,
        )),
        None => None,
    };

    let threads = config.threads;
    tracing::info!(
        listeners = ?config.listeners.iter().map(|l| l.address).collect::<Vec<_>>(),
        admin = %config.admin.address,
        backends = config.backends.len(),
        version = env!("CARGO_PKG_VERSION"),
        "kubegate starting"
    );
    let discovery = match &config.discovery {
        Some(d) => Some((
            d.clone(),
            discovery::load_credentials(&d.kubeconfig, config.health.tls.ca_file.as_deref())
                .map_err(|e| anyhow::anyhow!("discovery.kubeconfig: {e}"))?,
        )),
        None => None,
    };
    let upgrade_path = config.upgrade.as_ref().map(|u| u.socket.clone());
    let gateway = Gateway::new(
        config,
        config_path.to_path_buf(),
        probes,
        terminate,
        inherited.is_none(),
    );

    let conf = ServerConf {
        threads,
        // kubegate's shutdown sequence drains and closes everything itself, then asks pingora
        // for a fast shutdown: pingora's grace period is never used.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(0),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    server.add_service(background_service(
        "listeners",
        accept::Acceptor {
            gateway: gateway.clone(),
            listeners: Mutex::new(listeners),
        },
    ));
    server.add_service(background_service(
        "control",
        control::Control {
            gateway: gateway.clone(),
            admin: Mutex::new(Some(admin)),
            admin_tls,
            upgrade: Mutex::new(upgrade_path.map(|path| control::UpgradeState {
                path,
                socket: upgrade_socket,
                sockets,
                predecessor: inherited.map(upgrade::Inherited::into_stream),
            })),
            discovery: Mutex::new(discovery),
        },
    ));
    // Exit status of the shutdown sequence; 2 if it never ran to an end.
    let exit_code = Arc::new(AtomicU8::new(2));
    server.run(RunArgs {
        shutdown_signal: Box::new(shutdown::ShutdownSequence::new(gateway, exit_code.clone())),
    });
    Ok(exit_code.load(Ordering::Acquire))
}

/// Binds every listener before pingora starts (or takes it from `inherited`), so that a taken
/// address or an unusable certificate fails the start and names the listener.
fn bind_listeners(
    config: &Config,
    mut inherited: Option<&mut upgrade::Inherited>,
) -> anyhow::Result<Vec<(std::net::TcpListener, Plane)>> {
    config
        .listeners
        .iter()
        .map(|l| {
            let plane = match (l.mode, &l.tls) {
                (ListenerMode::Terminate, Some(tls)) => Plane::Terminate(Arc::new(
                    TerminateListener::new(tls)
                        .map_err(|e| anyhow::anyhow!("listeners: {}: {e}", l.address))?,
                )),
                _ => Plane::Passthrough,
            };
            let socket = match inherited.as_deref_mut().and_then(|i| i.take(l.address)) {
                Some(s) => {
                    s.set_nonblocking(true)?;
                    s
                }
                None => accept::bind(l.address, &config.client_keepalive)
                    .map_err(|e| anyhow::anyhow!("listeners: {}: {e}", l.address))?,
            };
            Ok((socket, plane))
        })
        .collect()
}
