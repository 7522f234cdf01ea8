//! `kubegate`'s command line: `run`, `check`, `status`. Everything else is the library's
//! (`lib.rs`).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use kubegate::control::{check_files_and_tls, status};
use kubegate_config::load_file_with;
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
        /// Admin endpoint of the running gateway: HOST:PORT, or https://HOST:PORT when it
        /// serves TLS.
        #[arg(long, conflicts_with = "config")]
        admin: Option<String>,
        /// Read the admin endpoint from this configuration file: its address, TLS (verified
        /// by --ca-file, else admin.tls.client_ca_file) and bearer_token_file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// CA (PEM) that signs the admin endpoint's serving certificate.
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// Name to verify in the admin endpoint's certificate (default: its IP address).
        #[arg(long)]
        server_name: Option<String>,
        /// Client certificate (PEM) the admin endpoint's client CA verifies.
        #[arg(long, requires = "key_file")]
        cert_file: Option<PathBuf>,
        /// Key (PEM) of --cert-file.
        #[arg(long, requires = "cert_file")]
        key_file: Option<PathBuf>,
        /// File whose first line is a bearer token the admin endpoint accepts.
        #[arg(long)]
        token_file: Option<PathBuf>,
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
        Command::Status {
            admin,
            config,
            ca_file,
            server_name,
            cert_file,
            key_file,
            token_file,
        } => {
            let options = status::StatusOptions {
                admin,
                config,
                ca_file,
                server_name,
                client_cert: cert_file.zip(key_file),
                token_file,
            };
            let target = match status::AdminTarget::from_options(options) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("kubegate status: {e:#}");
                    return ExitCode::from(2);
                }
            };
            match status::print(&target) {
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
/// `compat` knows every key it uses. What is valid but cannot be meant (a rule that never
/// matches) is printed as a warning and does not fail the check.
fn check(path: &std::path::Path, compat: Option<&str>) -> ExitCode {
    let config = match load_file_with(path, &check_files_and_tls) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for w in kubegate_config::warnings(&text, &config) {
        eprintln!(
            "{}:{}:{}: warning: {}",
            path.display(),
            w.line,
            w.column,
            w.message
        );
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
