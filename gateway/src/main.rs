//! `kubegate`'s command line: `run`, `check`, `init`, `status`, `drain`, `undrain`, `shed`,
//! `unshed`. Everything else is the library's (`lib.rs`).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use kubegate::control::{check_files_and_tls, status};
use kubegate::init::{self, InitArgs, Mode, Shape};
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
        /// Also ask the running gateway (its admin endpoint, as this file configures it) whom
        /// terminate.auto_shed, as written here, would hold back with its cost table now.
        #[arg(long)]
        auto_shed: bool,
    },
    /// Write what this node needs to run kubegate: its configuration, certificates signed by
    /// the node's CAs (kubeadm's layout), the metrics token, the pod manifest, keepalived's and
    /// Prometheus' configuration, the kubeadm fragment; then print the next commands. Files
    /// already as they would be written are left alone; `--dry-run` writes nothing.
    Init {
        /// Where kubegate runs: static-pod (control-plane nodes, behind a VIP), node-local
        /// (every node, clients on 127.0.0.1), systemd (the package's service).
        #[arg(long, value_enum)]
        shape: ShapeArg,
        /// passthrough (TLS passed to the apiservers) or terminate (ended at kubegate).
        #[arg(long, value_enum, default_value = "passthrough")]
        mode: ModeArg,
        /// This node's address: the admin endpoint's, keepalived's source, in the certificates.
        /// Twice on a dual-stack node (an IPv4 and an IPv6 address, the first the family
        /// backends and peers are in): kubegate listens on both and the certificates name both.
        #[arg(long, required = true, num_args = 1)]
        address: Vec<std::net::IpAddr>,
        /// An apiserver, NAME=HOST:PORT (repeated); none: this node and its peers on 6443.
        #[arg(long, value_parser = parse_backend)]
        backend: Vec<(String, std::net::SocketAddr)>,
        /// The other kubegate nodes (comma-separated, or repeated): keepalived's unicast
        /// peers, scrape targets, and (without --backend) apiservers.
        #[arg(long, value_delimiter = ',')]
        peer: Vec<std::net::IpAddr>,
        /// The VIP keepalived holds, with its prefix (10.0.0.10/24); none: no keepalived file.
        #[arg(long)]
        vip: Option<String>,
        /// keepalived's interface.
        #[arg(long, default_value = "eth0")]
        interface: String,
        /// Where kubegate listens (default: 0.0.0.0:8443 static-pod, 127.0.0.1:7443
        /// node-local, 0.0.0.0:6443 systemd).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Another name the serving certificate holds (terminate mode; repeated).
        #[arg(long)]
        san: Vec<String>,
        /// The image the manifest names (default: this release's, kubegate:VERSION).
        #[arg(long)]
        image: Option<String>,
        /// Write under this folder instead of / (another node's files, or a try-out).
        #[arg(long, default_value = "/")]
        root: PathBuf,
        /// Print what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Rewrite files that differ from what init writes (an operator's edits are otherwise
        /// kept).
        #[arg(long)]
        force: bool,
    },
    /// Print the backends of a running gateway as a table; with --top, who costs the
    /// apiservers what instead (terminate mode's senders and user agents).
    Status {
        #[command(flatten)]
        admin: AdminArgs,
        /// Print the costliest senders and user agents.
        #[arg(long)]
        top: bool,
        /// With --top: over the last minute (1m) or ten (10m).
        #[arg(long, default_value = "1m", value_parser = ["1m", "10m"], requires = "top")]
        window: String,
        /// With --top: ordered by time (held a replica), requests, lists, bytes, watches or
        /// rejections.
        #[arg(long, default_value = "time", value_parser = ["time", "requests", "lists", "bytes", "watches", "rejections"], requires = "top")]
        sort: String,
    },
    /// Move a backend's work elsewhere ahead of a planned restart: new requests and
    /// connections go to the other ready backends, and terminate mode moves its watches live
    /// (at terminate.watch_moves_per_second). Held until `kubegate undrain` (a reload keeps
    /// it; a restart of kubegate forgets it).
    Drain {
        /// The backend, by the name `kubegate status` shows.
        backend: String,
        /// Wait until it holds no long-running request (exit 1 if it still does after this
        /// long), e.g. --wait 5m.
        #[arg(long, value_parser = humantime::parse_duration)]
        wait: Option<std::time::Duration>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Give a drained backend its share of new work again.
    Undrain {
        /// The backend, by the name `kubegate status` shows.
        backend: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Turn a client away at the gateways (terminate mode), for a while: a rule that answers
    /// what it takes 429 with Retry-After, ahead of the file's rules, until it expires or
    /// `kubegate unshed` removes it. Written to the cluster's shed object with your kubeconfig
    /// (every kubegate with terminate.shed_object watches it), or with --admin/--config put in
    /// force at one gateway only (no apiserver needed). system:masters, the control plane's
    /// controllers, nodes and leases are never taken unless the rule names them.
    Shed {
        /// The rule's name (to remove it by).
        name: String,
        #[command(flatten)]
        takes: ShedTakes,
        /// What its 429s' Retry-After says.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        retry_after: std::time::Duration,
        /// How long it lasts (at most 7 days).
        #[arg(long = "for", default_value = "1h", value_parser = parse_lasts)]
        lasts: std::time::Duration,
        #[command(flatten)]
        cluster: ObjectArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove a rule `kubegate shed` put in force (from the cluster's shed object, or with
    /// --admin/--config from one gateway).
    Unshed {
        /// The rule's name.
        name: String,
        #[command(flatten)]
        cluster: ObjectArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// What `kubegate shed`'s rule takes: each flag a `dispatch` match list.
#[derive(clap::Args)]
struct ShedTakes {
    /// Users it takes (repeated).
    #[arg(long = "user")]
    users: Vec<String>,
    /// Groups it takes (repeated).
    #[arg(long = "group")]
    groups: Vec<String>,
    /// Service accounts it takes, NAMESPACE:NAME or NAMESPACE:* (repeated).
    #[arg(long = "service-account")]
    service_accounts: Vec<String>,
    /// Verbs it takes (list, watch, get, create, ...; repeated); none: every verb.
    #[arg(long = "verb")]
    verbs: Vec<String>,
    /// Resources it takes (pods, configmaps, ...; repeated); none: every resource.
    #[arg(long = "resource")]
    resources: Vec<String>,
    /// Namespaces it takes (repeated); none: every namespace.
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
}

impl From<ShedTakes> for kubegate_config::RuleMatch {
    fn from(t: ShedTakes) -> Self {
        kubegate_config::RuleMatch {
            users: t.users,
            groups: t.groups,
            service_accounts: t.service_accounts,
            verbs: t.verbs,
            resources: t.resources,
            namespaces: t.namespaces,
            ..Default::default()
        }
    }
}

/// Where `kubegate shed` and `unshed` write the cluster's shed object.
#[derive(clap::Args)]
struct ObjectArgs {
    /// Credentials and server to write the cluster's shed object with (default: $KUBECONFIG,
    /// else ~/.kube/config).
    #[arg(long, conflicts_with_all = ["admin", "config"])]
    kubeconfig: Option<PathBuf>,
    /// The shed object, NAMESPACE/NAME: the ConfigMap of the gateways' terminate.shed_object.
    #[arg(long, default_value = kubegate::control::shed_call::DEFAULT_OBJECT, value_parser = kubegate_config::ObjectName::parse, conflicts_with_all = ["admin", "config"])]
    object: kubegate_config::ObjectName,
}

/// How to reach a running gateway's admin endpoint (`status`, `drain`, `undrain`, `shed`,
/// `unshed`).
#[derive(clap::Args)]
struct AdminArgs {
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
}

impl AdminArgs {
    /// The admin endpoint these point at; exit code 2 (after saying why) if they do not.
    fn target(self, command: &str) -> Result<status::AdminTarget, ExitCode> {
        let options = status::StatusOptions {
            admin: self.admin,
            config: self.config,
            ca_file: self.ca_file,
            server_name: self.server_name,
            client_cert: self.cert_file.zip(self.key_file),
            token_file: self.token_file,
        };
        status::AdminTarget::from_options(options).map_err(|e| {
            eprintln!("kubegate {command}: {e:#}");
            ExitCode::from(2)
        })
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ShapeArg {
    StaticPod,
    NodeLocal,
    Systemd,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Passthrough,
    Terminate,
}

fn drain_command(
    command: &str,
    backend: String,
    drain: bool,
    wait: Option<std::time::Duration>,
    admin: AdminArgs,
) -> ExitCode {
    let target = match admin.target(command) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let request = kubegate::control::drain::DrainRequest {
        backend,
        drain,
        wait,
    };
    match kubegate::control::drain::run(&target, &request) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubegate {command}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `kubegate check --auto-shed`: the running gateway's answer for the file's settings.
fn auto_shed_preview(config: PathBuf) -> ExitCode {
    let settings = match load_file_with(&config, &check_files_and_tls) {
        Ok(c) => c.terminate.auto_shed,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let admin = AdminArgs {
        admin: None,
        config: Some(config),
        ca_file: None,
        server_name: None,
        cert_file: None,
        key_file: None,
        token_file: None,
    };
    let target = match admin.target("check") {
        Ok(t) => t,
        Err(code) => return code,
    };
    match kubegate::control::shed_call::preview(&target, &settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubegate check --auto-shed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `kubegate shed --for`: a duration from 1s to 7 days.
fn parse_lasts(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    let longest = kubegate::control::shed_call::LONGEST;
    if d < std::time::Duration::from_secs(1) || d > longest {
        return Err(format!(
            "from 1s to {}",
            humantime::format_duration(longest)
        ));
    }
    Ok(d)
}

/// `kubegate shed` (with `request`) or `kubegate unshed` (without) of rule `name`: at one
/// gateway when `admin` names one, else in the cluster's shed object.
fn shed_command(
    command: &str,
    request: Option<&kubegate::control::shed_call::ShedRequest>,
    name: &str,
    cluster: ObjectArgs,
    admin: AdminArgs,
) -> ExitCode {
    use kubegate::control::shed_call::ShedTarget;
    let target = if admin.admin.is_some() || admin.config.is_some() {
        match admin.target(command) {
            Ok(t) => ShedTarget::Gateway(t),
            Err(code) => return code,
        }
    } else {
        let kubeconfig = cluster.kubeconfig.or_else(|| {
            let from_env = std::env::var_os("KUBECONFIG")?;
            std::env::split_paths(&from_env).find(|p| !p.as_os_str().is_empty())
        });
        let kubeconfig = kubeconfig
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config")));
        let Some(kubeconfig) = kubeconfig else {
            eprintln!("kubegate {command}: say --kubeconfig (every gateway, through the cluster) or --admin/--config (one gateway)");
            return ExitCode::from(2);
        };
        ShedTarget::Cluster {
            kubeconfig,
            object: cluster.object,
        }
    };
    match kubegate::control::shed_call::run(&target, request, name) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubegate {command}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse_backend(s: &str) -> Result<(String, std::net::SocketAddr), String> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: write NAME=HOST:PORT"))?;
    let addr = addr
        .parse()
        .map_err(|e| format!("{s:?}: {e} (write NAME=HOST:PORT)"))?;
    Ok((name.to_string(), addr))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            config,
            compat,
            auto_shed,
        } => {
            let checked = check(&config, compat.as_deref());
            if !auto_shed || checked != ExitCode::SUCCESS {
                return checked;
            }
            auto_shed_preview(config)
        }
        Command::Init {
            shape,
            mode,
            address,
            backend,
            peer,
            vip,
            interface,
            listen,
            san,
            image,
            root,
            dry_run,
            force,
        } => {
            let (address, other_address) = match address[..] {
                [one] => (one, None),
                [one, other] => (one, Some(other)),
                _ => {
                    eprintln!("kubegate init: --address: once, or twice on a dual-stack node (an IPv4 and an IPv6 address)");
                    return ExitCode::from(2);
                }
            };
            let args = InitArgs {
                shape: match shape {
                    ShapeArg::StaticPod => Shape::StaticPod,
                    ShapeArg::NodeLocal => Shape::NodeLocal,
                    ShapeArg::Systemd => Shape::Systemd,
                },
                mode: match mode {
                    ModeArg::Passthrough => Mode::Passthrough,
                    ModeArg::Terminate => Mode::Terminate,
                },
                address,
                other_address,
                backends: backend,
                peers: peer,
                vip,
                interface,
                listen,
                sans: san,
                image,
                root,
                dry_run,
                force,
            };
            match init::run(args) {
                Ok(report) => {
                    print!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("kubegate init: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Status {
            admin,
            top,
            window,
            sort,
        } => {
            let target = match admin.target("status") {
                Ok(t) => t,
                Err(code) => return code,
            };
            let printed = match top {
                true => status::print_top(&target, &window, &sort),
                false => status::print(&target),
            };
            match printed {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kubegate status: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Drain {
            backend,
            wait,
            admin,
        } => drain_command("drain", backend, true, wait, admin),
        Command::Undrain { backend, admin } => {
            drain_command("undrain", backend, false, None, admin)
        }
        Command::Shed {
            name,
            takes,
            retry_after,
            lasts,
            cluster,
            admin,
        } => {
            let request = kubegate::control::shed_call::ShedRequest {
                name: name.clone(),
                matches: takes.into(),
                retry_after,
                lasts,
            };
            shed_command("shed", Some(&request), &name, cluster, admin)
        }
        Command::Unshed {
            name,
            cluster,
            admin,
        } => shed_command("unshed", None, &name, cluster, admin),
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
