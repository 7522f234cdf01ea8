//! kubegate for a test: its configuration (the test bed's, from the config crate's types,
//! with settings tuned for tests), and the running process with what a test asks of it.

use crate::client::{Conn, Response};
use crate::proc::Proc;
use crate::sim::Sim;
use kubegate_config::{BackendSpec, BalancePolicy, Config};
use kubegate_testbed::kubegate::{self, TerminateFiles};
use kubegate_testbed::{free_addr, free_port, plain_http, FrontProxyPki, Pki};
use std::net::{SocketAddr, TcpStream};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Path of a workspace binary (`kubegate`, `kubegate-sim`), built by `cargo build --bins`.
pub fn bin(name: &str) -> PathBuf {
    kubegate_testbed::binary(name)
}

/// kubectl as `scripts/install-deps` installs it (`.tools/bin/kubectl`); panics if missing.
pub fn kubectl_bin() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/kubectl");
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-deps",
        path.display()
    );
    path
}

/// Polls `f` until it returns `Some`, or panics naming `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
    kubegate_testbed::wait_until(what, limit, f).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until new TCP connections to `addr` are refused (a process past its shutdown delay),
/// and asserts that came `delay` after `since` at the earliest.
pub fn wait_refused_after(addr: SocketAddr, since: std::time::Instant, delay: Duration) {
    wait_for(
        "new connections to be refused",
        Duration::from_secs(30),
        || std::net::TcpStream::connect(addr).is_err().then_some(()),
    );
    let took = since.elapsed();
    assert!(took >= delay, "refused after {took:?}, before {delay:?}");
}

/// Milliseconds, for the configuration's durations.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Seconds, for the configuration's durations.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A kubegate configuration for a test: the config crate's own [`Config`] (reached through
/// `Deref`), with listener, admin address and CA filled in when kubegate starts.
#[derive(Clone)]
pub struct KubegateConfig(pub Config);

impl Deref for KubegateConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl DerefMut for KubegateConfig {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.0
    }
}

impl KubegateConfig {
    /// kubegate in front of `sims`, with defaults tuned for tests: fast probes (300 ms, 100 ms
    /// once one failed, 500 ms timeout), short drains (3 s), a quick shutdown (1 s delay, 2 s
    /// grace).
    pub fn new(sims: &[&Sim]) -> KubegateConfig {
        let backends: Vec<(String, SocketAddr)> =
            sims.iter().map(|s| (s.name.clone(), s.addr)).collect();
        // Addresses and CA are the running test's, set by `Kubegate::start`.
        let unset = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut c = kubegate::config(unset, unset, &backends, Path::new(""));
        c.health.interval = ms(300);
        c.health.timeout = ms(500);
        c.health.fast_interval = ms(100);
        c.balance = BalancePolicy::LeastConnections;
        c.drain.timeout = secs(3);
        c.drain.failing_timeout = secs(3);
        c.shutdown.delay = secs(1);
        c.shutdown.grace = secs(2);
        KubegateConfig(c)
    }

    /// Terminating TLS in front of `sims` with `pki`'s serving certificate and client CA,
    /// vouching for clients with `fp`'s front-proxy certificate.
    pub fn terminating(pki: &Pki, fp: &FrontProxyPki, sims: &[&Sim]) -> KubegateConfig {
        let mut cfg = KubegateConfig::new(sims);
        kubegate::terminate(&mut cfg, &terminate_files(pki, fp));
        cfg
    }

    /// Backends instead of the replicas: (name, address) pairs.
    pub fn set_backends(&mut self, backends: &[(&str, SocketAddr)]) {
        self.backends = backends
            .iter()
            .map(|(name, addr)| BackendSpec::named(name, *addr))
            .collect();
    }

    /// The YAML text, with listener and admin addresses and the CA.
    pub fn render(&self, listen: SocketAddr, admin: SocketAddr, ca: &Path) -> String {
        let mut c = self.0.clone();
        c.listeners[0].address = listen;
        c.admin.address = admin;
        c.health.tls.ca_file = Some(ca.to_path_buf());
        c.to_yaml()
    }
}

/// kubegate serving `pki`'s names, verifying clients of `pki`'s CA, vouching with `fp`.
pub fn terminate_files(pki: &Pki, fp: &FrontProxyPki) -> TerminateFiles {
    TerminateFiles {
        serving: pki.serving("kubegate"),
        client_ca: Some(pki.ca_file()),
        front_proxy: Some((fp.cert.clone(), fp.key.clone())),
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
        Kubegate::start_under(pki, config, env, &[])
    }

    /// Like [`Kubegate::start_with_env`], run by `wrapper` (a command and its arguments that
    /// runs the rest, e.g. `prlimit --nofile=1024:`).
    pub fn start_under(
        pki: &Pki,
        config: &KubegateConfig,
        env: &[(&str, &Path)],
        wrapper: &[&str],
    ) -> Kubegate {
        // On the configured listener's address (`::1` for a test over IPv6), at a free port.
        let listen = std::net::SocketAddr::new(config.listeners[0].address.ip(), free_port());
        let admin = free_addr();
        let config_path = pki.dir().join(format!("kubegate-{}.yaml", listen.port()));
        kubegate::write_text(&config.render(listen, admin, &pki.ca_file()), &config_path).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("kubegate"));
                c
            }
            None => Command::new(bin("kubegate")),
        };
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
        kubegate::write_text(&text, &self.config_path).unwrap();
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

    /// Connections kubegate refused for `reason` (`kubegate_connections_refused_total`).
    pub fn refused(&self, reason: &str) -> f64 {
        self.metric(&format!(
            "kubegate_connections_refused_total{{reason=\"{reason}\"}}"
        ))
    }

    /// The sum of every sample of metric `name` (all its label sets), 0 if absent.
    pub fn metric_sum(&self, name: &str) -> f64 {
        self.admin_body("/metrics")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| {
                series
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'))
            })
            .map(|(_, v)| v.trim().parse::<f64>().unwrap())
            .sum()
    }

    /// kubegate's log so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// The JSON access log's lines so far of requests sent by `agent`.
    pub fn access_lines(&self, agent: &str) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["user_agent"] == agent)
            .collect()
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

/// Writes `text` to `path` and runs `kubegate check --config` on it: its exit code and what
/// it printed on standard error.
pub fn check_config(path: &Path, text: &str) -> (Option<i32>, String) {
    std::fs::write(path, text).unwrap();
    let out = Command::new(bin("kubegate"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A terminate-mode configuration as a file holds it: a listener on 127.0.0.1:6443 serving
/// `serving` (certificate, key), the front-proxy pair `front_proxy`, `backends` (YAML list
/// items), probes trusting `pki`'s CA, then `rest`. Lines 1–10 are the listener and upstream;
/// `backends:` is line 11.
pub fn terminate_yaml(
    pki: &Pki,
    serving: (&Path, &Path),
    front_proxy: (&Path, &Path),
    backends: &str,
    rest: &str,
) -> String {
    format!(
        "listeners:\n  - address: 127.0.0.1:6443\n    mode: terminate\n    tls:\n      cert_file: {}\n      key_file: {}\nupstream:\n  front_proxy:\n    cert_file: {}\n    key_file: {}\nbackends:\n{backends}health:\n  tls:\n    ca_file: {}\n{rest}",
        serving.0.display(),
        serving.1.display(),
        front_proxy.0.display(),
        front_proxy.1.display(),
        pki.ca_file().display()
    )
}

/// Asserts that `kubegate check` refused `path` (exit 2) with exactly the problems `expected`,
/// in order: each a `LINE:COLUMN` and words its line holds after `PATH:LINE:COLUMN: `.
pub fn assert_problems(path: &Path, (code, err): (Option<i32>, String), expected: &[(&str, &str)]) {
    assert_eq!(code, Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{err}");
    for (line, (at, says)) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("{}:{at}: ", path.display())) && line.contains(says),
            "{at} {says:?}: {err}"
        );
    }
}

/// Writes the configuration `text` makes with a fresh PKI to a file and asserts that
/// `kubegate check` refuses it with exactly the problems `expected` ([`assert_problems`]).
pub fn assert_check_refuses(text: impl FnOnce(&Pki) -> String, expected: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let path = dir.path().join("kubegate.yaml");
    assert_problems(&path, check_config(&path, &text(&pki)), expected);
}

/// `dispatch:` rules written as YAML (a list), as the configuration holds them.
pub fn dispatch_rules(yaml: &str) -> Vec<kubegate_config::DispatchRule> {
    serde_yaml_ng::from_str(yaml).unwrap()
}

/// Cluster `name` answering `server_names`, its replicas `sims` probed with `pki`'s CA and
/// otherwise the health settings `base`.
pub fn cluster_spec(
    name: &str,
    server_names: &[&str],
    pki: &Pki,
    sims: &[&Sim],
    base: &kubegate_config::HealthConfig,
) -> kubegate_config::ClusterSpec {
    let mut health = base.clone();
    health.tls.ca_file = Some(pki.ca_file());
    kubegate_config::ClusterSpec {
        name: name.into(),
        server_names: server_names.iter().map(|s| s.to_string()).collect(),
        backends: sims
            .iter()
            .map(|s| BackendSpec::named(&s.name, s.addr))
            .collect(),
        discovery: None,
        health: Some(health),
        upstream: None,
        dispatch: Vec::new(),
        tls: None,
    }
}
