//! `kubegate`: a readiness-aware, highly available gateway for Kubernetes API servers.
#![forbid(unsafe_code)]

mod accept;
mod admin;
mod connections;
mod control;
mod copy;
mod dial;
mod events;
mod gateway;
mod labels;
mod lifecycle;
mod metrics;
mod notify;
mod planes;
mod proxy;
mod reload;
mod running;
mod shutdown;
mod status;
mod terminate;

use accept::Plane;
use clap::{Parser, Subcommand, ValueEnum};
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
use terminate::{check_files, TerminateListener, TerminateMode};

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
        Command::Run { config, log_format } => {
            init_logging(log_format);
            match run(&config) {
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

/// Loads, binds, and runs until the shutdown sequence ends; returns the exit status.
fn run(config_path: &Path) -> anyhow::Result<u8> {
    let config = load_file_with(config_path, &check_files)?;
    if config.health.tls.insecure_skip_verify {
        tracing::warn!(
            "health.tls.insecure_skip_verify is set: backend certificates are not verified"
        );
    }
    let probes = probe_settings(&config)?;
    let listeners = bind_listeners(&config)?;
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
    let admin = std::net::TcpListener::bind(config.admin.address)
        .map_err(|e| anyhow::anyhow!("admin.address {}: {e}", config.admin.address))?;
    admin.set_nonblocking(true)?;

    let threads = config.threads;
    tracing::info!(
        listeners = ?config.listeners.iter().map(|l| l.address).collect::<Vec<_>>(),
        admin = %config.admin.address,
        backends = config.backends.len(),
        version = env!("CARGO_PKG_VERSION"),
        "kubegate starting"
    );
    let gateway = Gateway::new(config, config_path.to_path_buf(), probes, terminate);

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
        },
    ));
    // Exit status of the shutdown sequence; 2 if it never ran to an end.
    let exit_code = Arc::new(AtomicU8::new(2));
    server.run(RunArgs {
        shutdown_signal: Box::new(shutdown::ShutdownSequence::new(gateway, exit_code.clone())),
    });
    Ok(exit_code.load(Ordering::Acquire))
}

/// Binds every listener before pingora starts, so that a taken address or an unusable
/// certificate fails the start and names the listener.
fn bind_listeners(config: &Config) -> anyhow::Result<Vec<(std::net::TcpListener, Plane)>> {
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
            let socket = accept::bind(l.address, &config.client_keepalive)
                .map_err(|e| anyhow::anyhow!("listeners: {}: {e}", l.address))?;
            Ok((socket, plane))
        })
        .collect()
}
