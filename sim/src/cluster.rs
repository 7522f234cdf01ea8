//! `kubegate-sim cluster`: etcd and N replica processes on loopback, plus a kubegate config and
//! a kubeconfig for them. Each replica is its own OS process, so SIGTERM, SIGKILL and SIGSTOP are
//! real. Ctrl-C (or SIGTERM) stops everything it started, by PID.

use anyhow::{bail, Context};
use clap::Args;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Runs the cluster until SIGINT/SIGTERM.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let dir = std::path::absolute(&args.dir)?;
    std::fs::create_dir_all(dir.join("logs"))?;
    let pki = dir.join("pki");
    crate::certs::write(&pki, &format!("https://{}", args.gateway_listen))?;
    std::fs::copy(pki.join("kubeconfig"), dir.join("kubeconfig"))?;

    let mut children: Vec<(String, Child)> = Vec::new();
    let result = start_all(&args, &dir, &mut children).and_then(|()| wait_for_signal());
    stop_all(&mut children);
    result
}

fn start_all(
    args: &ClusterArgs,
    dir: &Path,
    children: &mut Vec<(String, Child)>,
) -> anyhow::Result<()> {
    let mut etcd_url = None;
    if !args.no_etcd {
        let url = format!("http://127.0.0.1:{}", args.etcd_port);
        let peer = format!("http://127.0.0.1:{}", args.etcd_port + 1);
        let data = dir.join("etcd");
        let log = std::fs::File::create(dir.join("logs/etcd.log"))?;
        let child = Command::new("etcd")
            .args(["--name", "sim", "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("sim={peer}")])
            .args([
                "--auto-compaction-mode",
                "periodic",
                "--auto-compaction-retention",
                "5m",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start etcd (Debian package etcd-server)")?;
        children.push(("etcd".into(), child));
        wait_http_ok(args.etcd_port, "/health", Duration::from_secs(20))
            .context("etcd did not become healthy")?;
        eprintln!("etcd      {url}");
        etcd_url = Some(url);
    }
    let exe = std::env::current_exe()?;
    let pki = dir.join("pki");
    let mut backends = String::new();
    let mut replicas = Vec::new();
    for i in 0..args.replicas {
        let port = args.base_port + i;
        let fault = args.base_port + 100 + i;
        let name = format!("replica-{}", i + 1);
        let log = std::fs::File::create(dir.join(format!("logs/{name}.log")))?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--secure-port",
            &port.to_string(),
            "--fault-port",
            &fault.to_string(),
        ])
        .arg("--tls-cert-file")
        .arg(pki.join("apiserver.crt"))
        .arg("--tls-private-key-file")
        .arg(pki.join("apiserver.key"))
        .arg("--client-ca-file")
        .arg(pki.join("ca.crt"))
        .args(["--shutdown-delay-duration", &args.shutdown_delay_duration])
        .args(["--startup-duration", &args.startup_duration])
        .args(["--replica-name", &name])
        .stdout(Stdio::null())
        .stderr(log);
        if let Some(url) = &etcd_url {
            cmd.args(["--etcd-servers", url]);
        }
        let child = cmd.spawn().with_context(|| format!("start {name}"))?;
        eprintln!(
            "{name} https://127.0.0.1:{port}  (fault port {fault}, pid {})",
            child.id()
        );
        replicas.push(serde_json::json!({
            "name": name, "address": format!("127.0.0.1:{port}"),
            "fault_port": fault, "pid": child.id(),
        }));
        children.push((name.clone(), child));
        backends.push_str(&format!(
            "  - name: {name}\n    address: 127.0.0.1:{port}\n"
        ));
    }
    for i in 0..args.replicas {
        wait_port(args.base_port + i, Duration::from_secs(10))?;
    }
    let config = format!(
        "# Written by kubegate-sim cluster: kubegate in front of the simulated replicas.\nlisteners:\n  - address: {}\nbackends:\n{backends}health:\n  interval: 1s\n  timeout: 1s\n  rise: 2\n  fall: 2\n  tls:\n    ca_file: pki/ca.crt\n    server_name: kubernetes\nshutdown:\n  delay: 2s\n  grace: 10s\nadmin:\n  address: {}\n",
        args.gateway_listen, args.gateway_admin
    );
    std::fs::write(dir.join("kubegate.yaml"), config)?;
    let state = serde_json::json!({"etcd": etcd_url, "replicas": replicas});
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

/// SIGTERM to each child by PID, then SIGKILL to what is left after a few seconds.
fn stop_all(children: &mut [(String, Child)]) {
    for (_, child) in children.iter() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (name, child) in children.iter_mut().rev() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    eprintln!("{name} did not stop: killing");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
    }
}

fn wait_port(port: u16, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listens on 127.0.0.1:{port} after {limit:?}")
}

fn wait_http_ok(port: u16, path: &str, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("http://127.0.0.1:{port}{path} not healthy after {limit:?}")
}
