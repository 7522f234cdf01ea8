//! `kubegate-sim`: a kube-apiserver simulator that behaves, as seen from the network, like the
//! real one — health endpoints, startup, the SIGTERM sequence, HTTP/2 GOAWAY, watches — so a load
//! balancer in front of it sees what it would see in front of real apiservers.
#![forbid(unsafe_code)]

mod admission;
mod aggregator;
mod api;
mod auth;
mod bearer;
mod budget;
mod checks;
mod clientcert;
mod cluster;
mod discovery;
mod eviction;
mod extension;
mod fault;
mod flowcontrol;
mod gojson;
mod health;
mod objects;
mod openapi;
mod paging;
mod patch;
mod pod_answer;
mod pods;
mod protobuf;
mod proxy;
mod query;
mod reconciler;
mod requestinfo;
mod resources;
mod respond;
mod selectors;
mod server;
mod setting;
mod spdy;
mod state;
mod store;
mod store_errors;
#[cfg(test)]
mod testserver;
mod versions;
mod watch;

use clap::{ArgAction, Args, Parser, Subcommand};
use state::{Behaviour, Sim};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "kubegate-sim",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Write a CA, serving and client certificates, and a kubeconfig into DIR.
    Certs {
        /// Output directory.
        dir: PathBuf,
        /// The server URL written into the kubeconfig.
        #[arg(long, default_value = "https://127.0.0.1:6443")]
        server: String,
    },
    /// Start etcd and N replicas on loopback, write a kubegate config for them, run until Ctrl-C.
    Cluster(cluster::ClusterArgs),
}

/// One replica. Flag names are kube-apiserver's where one exists.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Port of the TLS listener.
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Address of the TLS listener (loopback by default: this is a test tool).
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// The address this replica puts in the `kubernetes` service's endpoints (default: the
    /// bind address, or 127.0.0.1 when that is unspecified).
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// `lease`: keep the `kubernetes` EndpointSlice as kube-apiserver's lease reconciler does;
    /// `none`: leave it alone.
    #[arg(long, default_value = "lease", value_parser = ["lease", "none"])]
    endpoint_reconciler_type: String,
    /// Serving certificate (PEM).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// CA that signs client certificates (CN = user, O = groups).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Static bearer tokens: `token,user,uid,"group1,group2"` per line.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Users allowed to create TokenReviews (a stand-in for binding the
    /// `system:auth-delegator` ClusterRole); empty: every authenticated user, as the default
    /// RBAC in miniature allows everything else. Not a kube-apiserver flag.
    #[arg(long, value_delimiter = ',')]
    authorization_token_reviewers: Vec<String>,
    /// `USER:RESOURCE` (repeatable, or comma-separated): USER may do nothing with RESOURCE
    /// (plural), and SubjectAccessReviews say so — a stand-in for RBAC that binds it no role
    /// there. Not a kube-apiserver flag.
    #[arg(long, value_delimiter = ',', value_parser = forbid_pair)]
    authorization_forbid: Vec<(String, String)>,
    /// CA that signs front-proxy client certificates (requestheader authentication).
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,
    /// Common names a front-proxy certificate may have (empty: any from the CA).
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Vec<String>,
    /// Headers a front proxy names the user in; the first non-empty one wins.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-user")]
    requestheader_username_headers: Vec<String>,
    /// Headers a front proxy names groups in.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-group")]
    requestheader_group_headers: Vec<String>,
    /// Header prefixes a front proxy passes extra attributes in.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-extra-")]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Headers a front proxy names the user's UID in (`RemoteRequestHeaderUID`, on in 1.33).
    #[arg(long, value_delimiter = ',', default_value = "x-remote-uid")]
    requestheader_uid_headers: Vec<String>,
    /// Seats for requests that only read, part of the seats priority and fairness shares
    /// among its levels (with `--max-mutating-requests-inflight`).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Seats for writes, added to `--max-requests-inflight`'s.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// A request's time limit; priority and fairness queues one for a quarter of it at most.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Concurrent streams one HTTP/2 client connection may have.
    #[arg(long, default_value_t = 100)]
    http2_max_streams_per_connection: u32,
    /// Allow anonymous requests (then only health paths and /version are authorized).
    #[arg(long, action = ArgAction::Set, default_value_t = true)]
    anonymous_auth: bool,
    /// After SIGTERM, keep serving (with /readyz failing) this long.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    shutdown_delay_duration: Duration,
    /// After the delay, answer new requests with 429 Retry-After: 5 instead of closing the listener.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    shutdown_send_retry_after: bool,
    /// End watches cleanly at shutdown within this period (0: watches die with the process).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    shutdown_watch_termination_grace_period: Duration,
    /// Probability (0 to 0.02) that an HTTP/2 request gets its connection closed with GOAWAY.
    #[arg(long, default_value_t = 0.0)]
    goaway_chance: f64,
    /// etcd client URLs (http://127.0.0.1:2379,...); empty: an in-memory store.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Simulator: how long post-start hooks take (listener open, /readyz failing meanwhile).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    startup_duration: Duration,
    /// Simulator: loopback port of the fault-injection endpoint (none if unset).
    #[arg(long)]
    fault_port: Option<u16>,
    /// Simulator: how long after the built-in resources' watch caches (when /readyz passes)
    /// the custom resources' caches (kubegate.example.com/v1 widgets) initialize; LISTs and
    /// watches of them get 429 "storage is (re)initializing" meanwhile (KEP-4568).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    custom_resource_cache_init: Duration,
    /// Simulator: interval of watch BOOKMARK events (the cacher's, KEP-1904: 1 min).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    bookmark_interval: Duration,
    /// Simulator: latency added to every API request (health endpoints answer at once); the
    /// fault port's `/latency` changes it at run time.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Serve watches from one cache per resource (the apiserver's `--watch-cache`, on there by
    /// default): a few thousand watches cost the replica, not etcd, and a watch from before the
    /// cache's window (before the replica started) gets 410 and relists. Off, each watch
    /// watches the store itself and resumes from any revision it still has.
    #[arg(long)]
    watch_cache: bool,
    /// Simulator: the Kubernetes version of the binary, `MAJOR.MINOR.PATCH` (`/version`'s
    /// `gitVersion`); the group-versions served are that version's.
    #[arg(long, default_value = versions::DEFAULT_BINARY_VERSION)]
    binary_version: String,
    /// The version whose APIs are served, `MAJOR.MINOR`, up to 3 minor versions below the
    /// binary's (compatibility versions, as kube-apiserver's flag).
    #[arg(long)]
    emulated_version: Option<String>,
    /// Group-versions turned on or off: `GROUP/VERSION=true|false`, comma-separated, as
    /// kube-apiserver's flag (`resource.k8s.io/v1beta1=true`).
    #[arg(long, value_delimiter = ',')]
    runtime_config: Vec<String>,
    /// Simulator: group-versions an extension server serves through the aggregator
    /// (`metrics.k8s.io/v1beta1`; repeatable or comma-separated): each gets an APIService
    /// naming a service, appears in `/apis`, and every request under it is answered with what
    /// the fault port's `/aggregated-answer` sets, as kube-aggregator's proxy passes an
    /// extension server's answer on.
    #[arg(long, value_delimiter = ',')]
    aggregated_api: Vec<String>,
    /// Simulator: the replica's name in logs and /debug.
    #[arg(long)]
    replica_name: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBEGATE_SIM_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Some(Command::Certs { dir, server }) => {
            kubegate_testbed::pki::write_kubeadm_layout(&dir, &server)?;
            println!("wrote certificates and kubeconfig to {}", dir.display());
            Ok(())
        }
        Some(Command::Cluster(args)) => cluster::run(args),
        None => serve(cli.serve),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) else {
        anyhow::bail!("--tls-cert-file and --tls-private-key-file are required (kubegate-sim certs DIR writes a pair)");
    };
    if !(0.0..=0.02).contains(&args.goaway_chance) {
        anyhow::bail!(
            "--goaway-chance must be within [0, 0.02], not {}",
            args.goaway_chance
        );
    }
    let client_cas: Vec<&std::path::Path> = args
        .client_ca_file
        .iter()
        .chain(&args.requestheader_client_ca_file)
        .map(PathBuf::as_path)
        .collect();
    let tls = server::tls_config(cert, key, &client_cas)?;
    let authenticator = authenticator(&args)?;
    let apis = versions::Apis::new(
        &args.binary_version,
        args.emulated_version.as_deref(),
        &args.runtime_config,
    )
    .and_then(|apis| apis.with_aggregated(&args.aggregated_api))
    .map_err(|e| anyhow::anyhow!(e))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let signals = server::StopSignals::install()?;
        // The fault port first: whoever finds the secure port open may ask it at once.
        let fault = match args.fault_port {
            Some(port) => Some(
                tokio::net::TcpListener::bind(("127.0.0.1", port))
                    .await
                    .map_err(|e| anyhow::anyhow!("--fault-port {port}: {e}"))?,
            ),
            None => None,
        };
        let addr = SocketAddr::new(args.bind_address, args.secure_port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--secure-port {addr}: {e}"))?;
        let replica = args
            .replica_name
            .clone()
            .unwrap_or_else(|| format!("sim-{}", args.secure_port));
        let mut store: Arc<dyn store::Store> = if args.etcd_servers.is_empty() {
            Arc::new(store::MemoryStore::default())
        } else {
            Arc::new(store::EtcdStore::new(args.etcd_servers.clone()))
        };
        if args.watch_cache {
            store = Arc::new(store::WatchCache::new(store));
        }
        let sim = Sim::new(
            Behaviour {
                shutdown_delay: args.shutdown_delay_duration,
                send_retry_after: args.shutdown_send_retry_after,
                watch_termination_grace: args.shutdown_watch_termination_grace_period,
                goaway_chance: args.goaway_chance,
                max_streams: args.http2_max_streams_per_connection,
                bookmark_interval: args.bookmark_interval,
                replica: replica.clone(),
                advertise: (args.endpoint_reconciler_type == "lease").then(|| {
                    let ip =
                        args.advertise_address
                            .unwrap_or(if args.bind_address.is_unspecified() {
                                IpAddr::from([127, 0, 0, 1])
                            } else {
                                args.bind_address
                            });
                    SocketAddr::new(ip, args.secure_port)
                }),
            },
            checks::Checks::default(),
            store,
            authenticator,
            apis,
            flowcontrol::FlowControl::new(
                args.max_requests_inflight + args.max_mutating_requests_inflight,
                args.request_timeout / 4,
            ),
        );
        sim.latency_ms
            .store(args.latency.as_millis() as u64, Ordering::Relaxed);
        let sim = Arc::new(sim);
        if let Some(fault) = fault {
            tokio::spawn(fault::serve(fault, sim.clone()));
        }
        // Post-start hooks finish after the startup duration; the listener is open before.
        // Without one they are finished before the listener opens: a task spawned to finish
        // them could run after the first /readyz on a busy machine.
        let startup = args.startup_duration;
        let custom = args.custom_resource_cache_init;
        if startup.is_zero() {
            sim.checks.finish_startup();
        }
        if startup.is_zero() && custom.is_zero() {
            sim.checks.finish_custom_caches();
        } else {
            let starting = sim.clone();
            tokio::spawn(async move {
                if !startup.is_zero() {
                    tokio::time::sleep(startup).await;
                    starting.checks.finish_startup();
                    tracing::info!("post-start hooks finished");
                }
                tokio::time::sleep(custom).await;
                starting.checks.finish_custom_caches();
                tracing::info!("custom resources' watch caches initialized");
            });
        }
        if !args.etcd_servers.is_empty() {
            tokio::spawn(watch_storage(sim.clone()));
        }
        if let Some(advertise) = sim.behaviour.advertise {
            tokio::spawn(reconciler::run(sim.clone(), advertise));
        }
        let stop_accepting = CancellationToken::new();
        tokio::spawn(server::accept_loop(
            listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            sim.clone(),
            stop_accepting.clone(),
        ));
        tracing::info!(%addr, replica, etcd = ?args.etcd_servers, "serving");
        server::shutdown_sequence(sim, stop_accepting, signals).await;
        anyhow::Ok(())
    })?;
    // Open watches die with the process, as a real apiserver's do without a grace period.
    std::process::exit(0);
}

/// The authenticators the flags configure.
fn authenticator(args: &ServeArgs) -> anyhow::Result<auth::Authenticator> {
    let read = |flag: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))
    };
    let header = |name: &String| {
        http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|e| anyhow::anyhow!("header name {name:?}: {e}"))
    };
    let request_header = match &args.requestheader_client_ca_file {
        Some(ca) => Some(auth::RequestHeader {
            ca_subjects: auth::ca_subjects(&read("--requestheader-client-ca-file", ca)?)?,
            allowed_names: args
                .requestheader_allowed_names
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            username_headers: args
                .requestheader_username_headers
                .iter()
                .map(header)
                .collect::<Result<_, _>>()?,
            group_headers: args
                .requestheader_group_headers
                .iter()
                .map(header)
                .collect::<Result<_, _>>()?,
            extra_prefixes: args
                .requestheader_extra_headers_prefix
                .iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
            uid_headers: args
                .requestheader_uid_headers
                .iter()
                .map(header)
                .collect::<Result<_, _>>()?,
        }),
        None => None,
    };
    let client_ca_subjects = match &args.client_ca_file {
        Some(ca) => Some(auth::ca_subjects(&read("--client-ca-file", ca)?)?),
        None => None,
    };
    let tokens = match &args.token_auth_file {
        Some(f) => auth::Tokens::parse(&read("--token-auth-file", f)?),
        None => auth::Tokens::default(),
    };
    Ok(auth::Authenticator {
        request_header,
        client_ca_subjects,
        tokens,
        anonymous: args.anonymous_auth,
        token_reviewers: args.authorization_token_reviewers.clone(),
        forbidden: args.authorization_forbid.clone(),
    })
}

/// Reads `--authorization-forbid`'s `USER:RESOURCE` (the user name may hold colons:
/// `system:serviceaccount:ns:name:services`).
fn forbid_pair(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once(':') {
        Some((user, resource)) if !user.is_empty() && !resource.is_empty() => {
            Ok((user.to_string(), resource.to_string()))
        }
        _ => Err(format!("{text:?}: expected USER:RESOURCE")),
    }
}

/// Keeps the `etcd` checks in line with whether etcd answers.
async fn watch_storage(sim: Arc<Sim>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let down = tokio::time::timeout(Duration::from_secs(2), sim.store.revision())
            .await
            .map(|r| r.is_err())
            .unwrap_or(true);
        sim.checks.set_storage_down(down);
    }
}
