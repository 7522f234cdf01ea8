//! Starting, signalling and stopping the real binaries.

use crate::client::{Conn, Response};
use crate::pki::Pki;
use kubegate_process::ChildProcess;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// Path of a workspace binary (`kubegate`, `kubegate-sim`), built by `cargo build --bins`.
pub fn bin(name: &str) -> PathBuf {
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first (scripts/test does)",
        path.display()
    );
    path
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` until it returns `Some`, or panics naming `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process with a name, killed by PID when dropped; its log is printed when a test
/// fails while it runs.
pub struct Proc {
    name: String,
    child: ChildProcess,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd`, logging stderr and stdout to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let child =
            ChildProcess::spawn(&mut cmd, &log).unwrap_or_else(|e| panic!("start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.pid().expect("running") as i32
    }

    /// Sends `sig` (libc::SIGTERM, SIGSTOP, ...) to the process.
    pub fn signal(&self, sig: i32) {
        self.child
            .signal(sig)
            .unwrap_or_else(|e| panic!("signal {sig} to {}: {e}", self.name));
    }

    /// Waits for the process to exit by itself within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.child.wait_exit(limit).unwrap_or_else(|| {
            panic!(
                "timed out after {limit:?} waiting for {} to exit",
                self.name
            )
        })
    }

    /// Still running.
    pub fn running(&mut self) -> bool {
        self.child.running()
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills now (SIGKILL) and reaps.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.running() && std::thread::panicking() {
            eprintln!("---- log of {} ----\n{}", self.name, self.log());
        }
    }
}

/// How a simulated replica is started.
#[derive(Clone, Default)]
pub struct SimOptions {
    /// Extra flags, e.g. `["--shutdown-delay-duration", "2s"]`.
    pub args: Vec<String>,
    /// Serving pair to use instead of the replica's own valid one.
    pub serving: Option<(PathBuf, PathBuf)>,
    /// Trust this front-proxy CA for requestheader authentication (CN `front-proxy-client`).
    pub front_proxy_ca: Option<PathBuf>,
    /// Listen (and advertise) on this address instead of a free port on 127.0.0.1: replicas
    /// of one cluster share a port on distinct loopback addresses.
    pub address: Option<SocketAddr>,
}

/// One `kubegate-sim` replica.
pub struct Sim {
    /// Replica name (also its serving certificate's common name).
    pub name: String,
    /// TLS address.
    pub addr: SocketAddr,
    /// Fault port.
    pub fault_port: u16,
    /// The process.
    pub proc: Proc,
    /// DER of its serving certificate, to recognise it from the client side.
    pub cert_der: Vec<u8>,
    /// How it was started, to start it again on the same address.
    args: Vec<std::ffi::OsString>,
    log: PathBuf,
}

impl Sim {
    /// Starts replica `name` trusting `fp`'s front-proxy CA (requestheader authentication, as
    /// behind kubegate's terminate mode), with extra flags `args`.
    pub fn behind_front_proxy(
        pki: &Pki,
        fp: &crate::pki::FrontProxyPki,
        name: &str,
        args: Vec<String>,
    ) -> Sim {
        Sim::start(
            pki,
            name,
            SimOptions {
                args,
                front_proxy_ca: Some(fp.ca.clone()),
                ..Default::default()
            },
        )
    }

    /// Starts replica `name` with certificates from `pki` and waits until it accepts TCP.
    pub fn start(pki: &Pki, name: &str, opts: SimOptions) -> Sim {
        let addr = opts
            .address
            .unwrap_or_else(|| format!("127.0.0.1:{}", free_port()).parse().unwrap());
        let fault_port = free_port();
        let (crt, key) = opts.serving.clone().unwrap_or_else(|| pki.serving(name));
        let mut args: Vec<std::ffi::OsString> = vec![
            "--bind-address".into(),
            addr.ip().to_string().into(),
            "--secure-port".into(),
            addr.port().to_string().into(),
            "--fault-port".into(),
            fault_port.to_string().into(),
            "--tls-cert-file".into(),
            crt.clone().into(),
            "--tls-private-key-file".into(),
            key.clone().into(),
            "--client-ca-file".into(),
            pki.ca_file().into(),
            "--replica-name".into(),
            name.into(),
        ];
        args.extend(opts.args.iter().map(Into::into));
        if let Some(ca) = &opts.front_proxy_ca {
            args.extend([
                "--requestheader-client-ca-file".into(),
                ca.clone().into(),
                "--requestheader-allowed-names".into(),
                "front-proxy-client".into(),
            ]);
        }
        let log = pki.dir().join(format!("{name}.log"));
        let proc = Sim::spawn(name, &args, &log, addr);
        let pem = std::fs::read(&crt).unwrap();
        let cert_der = rustls_pki_types::pem::PemObject::from_pem_slice(&pem)
            .map(|c: rustls_pki_types::CertificateDer<'static>| c.to_vec())
            .unwrap();
        Sim {
            name: name.to_string(),
            addr,
            fault_port,
            proc,
            cert_der,
            args,
            log,
        }
    }

    fn spawn(name: &str, args: &[std::ffi::OsString], log: &Path, addr: SocketAddr) -> Proc {
        let mut cmd = Command::new(bin("kubegate-sim"));
        cmd.args(args);
        let proc = Proc::spawn(name, cmd, log.to_path_buf());
        wait_for(
            &format!("{name} to listen"),
            Duration::from_secs(30),
            || TcpStream::connect(addr).ok(),
        );
        proc
    }

    /// Starts the replica again on the same address (after it exited, or kills it first).
    pub fn restart(&mut self) {
        self.proc.kill();
        self.proc = Sim::spawn(&self.name, &self.args, &self.log, self.addr);
    }

    /// Forces `check` to fail (true) or pass again (false), through the fault port.
    pub fn force_check(&self, check: &str, failing: bool) {
        let path = if failing { "/fail" } else { "/pass" };
        let resp = plain_http(
            ("127.0.0.1", self.fault_port),
            "POST",
            &format!("{path}?check={check}"),
        );
        assert!(resp.starts_with("HTTP/1.1 200"), "fault port: {resp}");
    }

    /// A TLS connection straight to this replica.
    pub async fn connect(&self, pki: &Pki, h2: bool) -> std::io::Result<Conn> {
        Conn::open(self.addr, pki, h2).await
    }

    /// Adds latency to every request.
    pub fn set_latency_ms(&self, ms: u64) {
        let resp = plain_http(
            ("127.0.0.1", self.fault_port),
            "POST",
            &format!("/latency?ms={ms}"),
        );
        assert!(resp.starts_with("HTTP/1.1 200"), "fault port: {resp}");
    }
}

/// One plain HTTP/1.1 exchange (fault port, admin endpoint), returning the raw response:
/// empty when the server closed the connection without one (a TLS endpoint may close before
/// the request is even written).
pub fn plain_http(addr: impl std::net::ToSocketAddrs, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A kubegate configuration for a test, rendered to YAML.
#[derive(Clone)]
pub struct KubegateConfig {
    /// Backends (name, address).
    pub backends: Vec<(String, SocketAddr)>,
    /// `health_address` of backends that have one, by name.
    pub health_addresses: std::collections::HashMap<String, SocketAddr>,
    /// `health.interval`.
    pub interval: &'static str,
    /// `health.timeout`.
    pub timeout: &'static str,
    /// `health.rise`.
    pub rise: u32,
    /// `health.fall`.
    pub fall: u32,
    /// `health.fast_interval`.
    pub fast_interval: &'static str,
    /// Extra YAML inside `health:`, indented by two spaces.
    pub health_extra: String,
    /// `balance`.
    pub balance: &'static str,
    /// `drain.timeout`.
    pub drain: &'static str,
    /// `drain.failing_timeout`.
    pub drain_failing: &'static str,
    /// `shutdown.delay`.
    pub shutdown_delay: &'static str,
    /// `shutdown.grace`.
    pub shutdown_grace: &'static str,
    /// Extra YAML appended as is.
    pub extra: String,
    /// The listener terminates TLS (L7) with these files.
    pub terminate: Option<TerminateFiles>,
}

/// Files of a terminate-mode listener.
#[derive(Clone)]
pub struct TerminateFiles {
    /// Serving certificate and key clients see.
    pub serving: (PathBuf, PathBuf),
    /// CA that verifies client certificates.
    pub client_ca: Option<PathBuf>,
    /// kubegate's front-proxy certificate and key.
    pub front_proxy: Option<(PathBuf, PathBuf)>,
}

impl TerminateFiles {
    /// kubegate serving `pki`'s names, verifying clients of `pki`'s CA, vouching with `fp`.
    pub fn new(pki: &Pki, fp: &crate::pki::FrontProxyPki) -> TerminateFiles {
        TerminateFiles {
            serving: pki.serving("kubegate"),
            client_ca: Some(pki.ca_file()),
            front_proxy: Some((fp.cert.clone(), fp.key.clone())),
        }
    }
}

impl KubegateConfig {
    /// Defaults tuned for tests: fast probes, short drains.
    pub fn new(sims: &[&Sim]) -> KubegateConfig {
        KubegateConfig {
            backends: sims.iter().map(|s| (s.name.clone(), s.addr)).collect(),
            health_addresses: Default::default(),
            interval: "300ms",
            timeout: "500ms",
            rise: 2,
            fall: 2,
            fast_interval: "100ms",
            health_extra: String::new(),
            balance: "least-connections",
            drain: "3s",
            drain_failing: "3s",
            shutdown_delay: "1s",
            shutdown_grace: "2s",
            extra: String::new(),
            terminate: None,
        }
    }

    /// Terminating TLS in front of `sims` with `pki`'s serving certificate and client CA,
    /// vouching for clients with `fp`'s front-proxy certificate.
    pub fn terminating(pki: &Pki, fp: &crate::pki::FrontProxyPki, sims: &[&Sim]) -> KubegateConfig {
        let mut cfg = KubegateConfig::new(sims);
        cfg.terminate = Some(TerminateFiles::new(pki, fp));
        cfg
    }

    /// The YAML text, with listener and admin addresses.
    pub fn render(&self, listen: SocketAddr, admin: SocketAddr, ca: &Path) -> String {
        let mut backends = String::new();
        for (name, addr) in &self.backends {
            backends.push_str(&format!("  - name: {name}\n    address: {addr}\n"));
            if let Some(h) = self.health_addresses.get(name) {
                backends.push_str(&format!("    health_address: {h}\n"));
            }
        }
        let listener = match &self.terminate {
            None => format!("  - address: {listen}\n"),
            Some(t) => {
                let mut l = format!(
                    "  - address: {listen}\n    mode: terminate\n    tls:\n      cert_file: {}\n      key_file: {}\n",
                    t.serving.0.display(),
                    t.serving.1.display()
                );
                if let Some(ca) = &t.client_ca {
                    l.push_str(&format!("      client_ca_file: {}\n", ca.display()));
                }
                l
            }
        };
        let upstream = match self.terminate.as_ref().and_then(|t| t.front_proxy.as_ref()) {
            Some((cert, key)) => format!(
                "upstream:\n  front_proxy:\n    cert_file: {}\n    key_file: {}\n",
                cert.display(),
                key.display()
            ),
            None => String::new(),
        };
        format!(
            "listeners:\n{listener}{upstream}backends:\n{backends}health:\n  interval: {}\n  timeout: {}\n  rise: {}\n  fall: {}\n  fast_interval: {}\n{}  tls:\n    ca_file: {}\n    server_name: kubernetes\nbalance: {}\ndrain:\n  timeout: {}\n  failing_timeout: {}\nshutdown:\n  delay: {}\n  grace: {}\nadmin:\n  address: {admin}\n{}",
            self.interval,
            self.timeout,
            self.rise,
            self.fall,
            self.fast_interval,
            self.health_extra,
            ca.display(),
            self.balance,
            self.drain,
            self.drain_failing,
            self.shutdown_delay,
            self.shutdown_grace,
            self.extra
        )
    }
}

/// A running kubegate.
pub struct Kubegate {
    /// Client listener.
    pub listen: SocketAddr,
    /// Admin endpoint.
    pub admin: SocketAddr,
    /// The config file (rewrite it to reload).
    pub config_path: PathBuf,
    /// The process.
    pub proc: Proc,
    ca: PathBuf,
}

impl Kubegate {
    /// Starts kubegate with `config` and waits for its admin endpoint.
    pub fn start(pki: &Pki, config: &KubegateConfig) -> Kubegate {
        Kubegate::start_with_env(pki, config, &[])
    }

    /// Like [`Kubegate::start`], with extra environment variables.
    pub fn start_with_env(pki: &Pki, config: &KubegateConfig, env: &[(&str, &Path)]) -> Kubegate {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config_path = pki.dir().join(format!("kubegate-{}.yaml", listen.port()));
        std::fs::write(&config_path, config.render(listen, admin, &pki.ca_file())).unwrap();
        let mut cmd = Command::new(bin("kubegate"));
        cmd.arg("run").arg("--config").arg(&config_path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = Proc::spawn(
            "kubegate",
            cmd,
            pki.dir().join(format!("kubegate-{}.log", listen.port())),
        );
        let kg = Kubegate {
            listen,
            admin,
            config_path,
            proc,
            ca: pki.ca_file(),
        };
        wait_for("kubegate admin /livez", Duration::from_secs(10), || {
            kg.admin_get("/livez")
                .filter(|r| r.starts_with("HTTP/1.1 200"))
        });
        kg
    }

    /// Rewrites the config file (the file watcher reloads it).
    pub fn rewrite(&self, config: &KubegateConfig) {
        let text = config.render(self.listen, self.admin, &self.ca);
        std::fs::write(&self.config_path, text).unwrap();
    }

    /// Raw admin response, or `None` if the endpoint does not answer.
    pub fn admin_get(&self, path: &str) -> Option<String> {
        TcpStream::connect(self.admin).ok()?;
        Some(plain_http(self.admin, "GET", path))
    }

    /// The body of an admin path.
    pub fn admin_body(&self, path: &str) -> String {
        let raw = self.admin_get(path).expect("admin endpoint answers");
        raw.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }

    /// `/debug/backends` as JSON.
    pub fn backends(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.admin_body("/debug/backends")).expect("backends JSON")
    }

    /// State of backend `name`.
    pub fn state(&self, name: &str) -> Option<String> {
        self.backends()
            .into_iter()
            .find(|b| b["name"] == name)
            .and_then(|b| b["state"].as_str().map(str::to_string))
    }

    /// Waits until backend `name` is in `state`.
    pub fn wait_state(&self, name: &str, state: &str, limit: Duration) {
        wait_for(&format!("{name} to be {state}"), limit, || {
            (self.state(name).as_deref() == Some(state)).then_some(())
        });
    }

    /// The value of one metric sample (`name{labels}` exactly as exported), 0 if absent.
    pub fn metric(&self, series: &str) -> f64 {
        self.admin_body("/metrics")
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }

    /// kubegate's log so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// A TLS connection through kubegate (HTTP/1.1 unless `h2`).
    pub async fn connect(&self, pki: &Pki, h2: bool) -> std::io::Result<Conn> {
        Conn::open(self.listen, pki, h2).await
    }

    /// One `GET path` on a fresh connection through kubegate.
    pub async fn get(&self, pki: &Pki, path: &str) -> std::io::Result<Response> {
        self.connect(pki, false).await?.get(path).await
    }
}

/// A single-member etcd on loopback.
pub struct Etcd {
    /// Client URL.
    pub url: String,
    /// The process.
    pub proc: Proc,
}

impl Etcd {
    /// Starts etcd with its data in `dir`.
    pub fn start(dir: &Path) -> Etcd {
        let client = free_port();
        let peer = free_port();
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "test", "--data-dir"])
            .arg(dir.join("etcd-data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("test={peer_url}")]);
        let proc = Proc::spawn("etcd", cmd, dir.join("etcd.log"));
        wait_for("etcd /health", Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", client)).ok()?;
            let r = plain_http(("127.0.0.1", client), "GET", "/health");
            r.contains("\"health\":\"true\"").then_some(())
        });
        Etcd { url, proc }
    }
}
