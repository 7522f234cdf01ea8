//! `kubegate`'s command line: `run`, `check`, `status`. Everything else is the library's
//! (`lib.rs`).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use kubegate::control::{check_files, status};
use kubegate_config::{load_file, load_file_with};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "kubegate", version = kubegate::telemetry::build::LONG_VERSION, about)]
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
        /// Also check that kubegate VERSION (an older release, before a rollback) accepts
        /// the file: every key it does not know is named, and the check fails.
        #[arg(long, value_name = "VERSION")]
        compat: Option<String>,
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
        Command::Check { config, compat } => check(&config, compat.as_deref()),
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
            match kubegate::app::run(&config, upgrade) {
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

/// `kubegate check`: the file loads and validates (its files too); with `compat`, release
/// `compat` knows every key it uses.
fn check(path: &std::path::Path, compat: Option<&str>) -> ExitCode {
    if let Err(e) = load_file_with(path, &check_files) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let Some(older) = compat else {
        println!("{}: ok", path.display());
        return ExitCode::SUCCESS;
    };
    let older = match kubegate_config::parse_version(older) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kubegate check --compat: {e}");
            return ExitCode::from(2);
        }
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let newer = kubegate_config::keys_newer_than(&text, older);
    if newer.is_empty() {
        println!(
            "{}: ok, also for kubegate {}",
            path.display(),
            kubegate_config::version_text(older)
        );
        return ExitCode::SUCCESS;
    }
    for p in newer {
        eprintln!("{}:{}:{}: {}", path.display(), p.line, p.column, p.message);
    }
    ExitCode::from(2)
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
