//! `kubegate-sim cluster`: etcd and N replica processes on loopback, plus a kubegate config and
//! a kubeconfig for them — the test bed's etcd, replicas and PKI, on fixed ports so that a
//! person can type them. Each replica is its own OS process, so SIGTERM, SIGKILL and SIGSTOP
//! are real. Ctrl-C (or SIGTERM) stops everything it started, by PID.

use clap::Args;
use kubegate_testbed::kubegate as config;
use kubegate_testbed::pki::write_kubeadm_layout;
use kubegate_testbed::{Etcd, Replica, ReplicaFlags};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `kubegate-sim cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// Number of apiserver replicas.
    #[arg(long, default_value_t = 3)]
    replicas: u16,
    /// Directory for certificates, etcd data, logs and the generated configs.
    #[arg(long)]
    dir: PathBuf,
    /// Replica i listens on base-port + i (from 0); its fault port is base-port + 100 + i.
    #[arg(long, default_value_t = 7001)]
    base_port: u16,
    /// etcd client port (the peer port is the next one).
    #[arg(long, default_value_t = 2379)]
    etcd_port: u16,
    /// Use an in-memory store per replica instead of etcd (replicas then do not share state).
    #[arg(long)]
    no_etcd: bool,
    /// Where the generated kubegate config listens.
    #[arg(long, default_value = "127.0.0.1:6443")]
    gateway_listen: SocketAddr,
    /// The generated kubegate config's admin address.
    #[arg(long, default_value = "127.0.0.1:9444")]
    gateway_admin: SocketAddr,
    /// Passed to every replica.
    #[arg(long, default_value = "5s")]
    shutdown_delay_duration: String,
    /// Passed to every replica.
    #[arg(long, default_value = "0s")]
    startup_duration: String,
}

/// How long each process may take to stop after SIGTERM before it is killed.
const STOP: Duration = Duration::from_secs(10);

/// What runs.
#[derive(Default)]
struct Running {
    etcd: Option<Etcd>,
    replicas: Vec<Replica>,
}

/// Runs the cluster until SIGINT/SIGTERM.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let dir = std::path::absolute(&args.dir)?;
    std::fs::create_dir_all(dir.join("logs"))?;
    let pki = dir.join("pki");
    write_kubeadm_layout(&pki, &format!("https://{}", args.gateway_listen))?;
    std::fs::copy(pki.join("kubeconfig"), dir.join("kubeconfig"))?;

    let mut running = Running::default();
    let result = start_all(&args, &dir, &mut running).and_then(|()| wait_for_signal());
    stop_all(running);
    result
}

fn start_all(
    args: &ClusterArgs,
    dir: &std::path::Path,
    running: &mut Running,
) -> anyhow::Result<()> {
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    if !args.no_etcd {
        let etcd = Etcd::new(dir)
            .ports(loopback(args.etcd_port), loopback(args.etcd_port + 1))
            .compaction("5m")
            .start()?;
        eprintln!("etcd      {}", etcd.url());
        running.etcd = Some(etcd);
    }
    let pki = dir.join("pki");
    let mut backends = Vec::new();
    let mut replicas = Vec::new();
    for i in 0..args.replicas {
        let name = format!("replica-{}", i + 1);
        let mut flags = ReplicaFlags::new(
            &name,
            (pki.join("apiserver.crt"), pki.join("apiserver.key")),
            &pki.join("ca.crt"),
        );
        flags.address = loopback(args.base_port + i);
        flags.fault_port = args.base_port + 100 + i;
        flags.etcd = running.etcd.as_ref().map(Etcd::url);
        flags.shutdown_delay = Some(args.shutdown_delay_duration.clone());
        flags.startup = Some(args.startup_duration.clone());
        let replica = Replica::start(flags, &dir.join(format!("logs/{name}.log")))?;
        eprintln!(
            "{name} https://{}  (fault port {}, pid {})",
            replica.addr(),
            replica.flags.fault_port,
            replica.pid().unwrap_or(0)
        );
        replicas.push(serde_json::json!({
            "name": name, "address": replica.addr().to_string(),
            "fault_port": replica.flags.fault_port, "pid": replica.pid(),
        }));
        backends.push((name, replica.addr()));
        running.replicas.push(replica);
    }
    let mut gateway = config::config(
        args.gateway_listen,
        args.gateway_admin,
        &backends,
        &pki.join("ca.crt"),
    );
    gateway.shutdown.delay = Duration::from_secs(2);
    gateway.shutdown.grace = Duration::from_secs(10);
    config::write(&gateway, &dir.join("kubegate.yaml"))?;
    let state = serde_json::json!({
        "etcd": running.etcd.as_ref().map(Etcd::url),
        "replicas": replicas,
    });
    std::fs::write(
        dir.join("cluster.json"),
        serde_json::to_string_pretty(&state)?,
    )?;
    eprintln!(
        "\nready. In another terminal:\n  kubegate run --config {}\n  KUBECONFIG={} kubectl get --raw '/readyz?verbose'\nCtrl-C stops the cluster.",
        dir.join("kubegate.yaml").display(),
        dir.join("kubeconfig").display()
    );
    Ok(())
}

fn wait_for_signal() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        anyhow::Ok(())
    })
}

/// SIGTERM to each replica by PID, then etcd; whatever does not stop within [`STOP`] is
/// killed.
fn stop_all(running: Running) {
    let Running { etcd, mut replicas } = running;
    for r in &replicas {
        let _ = r.signal(libc::SIGTERM);
    }
    for r in &mut replicas {
        if r.running() && r.wait_exit(STOP).is_none() {
            eprintln!("{} did not stop: killing", r.name());
        }
        r.kill();
    }
    if let Some(mut etcd) = etcd {
        if !etcd.stop(STOP) {
            eprintln!("etcd did not stop: killing");
        }
    }
}
