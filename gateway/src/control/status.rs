//! `kubegate status`: the admin endpoint's `/debug/backends` as a table, over plain HTTP or
//! TLS (verifying the endpoint's certificate), authenticated by a client certificate or a
//! bearer token when the endpoint asks for one.

use crate::control::admin::BackendView;
use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kubegate_net::tls::{load_certs, load_key, load_roots, provider};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::TlsConnector;

/// How long the admin endpoint has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where the admin endpoint is and how to reach it.
#[derive(Debug, Clone)]
pub struct AdminTarget {
    /// Its address.
    pub address: SocketAddr,
    /// TLS toward it, when it serves TLS.
    pub tls: Option<AdminTargetTls>,
    /// A file whose first line is a bearer token the endpoint accepts.
    pub token_file: Option<PathBuf>,
}

/// TLS toward the admin endpoint.
#[derive(Debug, Clone)]
pub struct AdminTargetTls {
    /// CAs (PEM), one of which signs the endpoint's serving certificate.
    pub ca_files: Vec<PathBuf>,
    /// Name verified in its certificate; default: the address's IP.
    pub server_name: Option<String>,
    /// A client certificate and key (PEM) the endpoint's `admin.tls.client_ca_file` verifies.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// What `kubegate status` was told on its command line.
#[derive(Debug, Default)]
pub struct StatusOptions {
    /// `--admin`: `HOST:PORT` or `https://HOST:PORT`.
    pub admin: Option<String>,
    /// `--config`: the address, TLS and token file from kubegate's configuration.
    pub config: Option<PathBuf>,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--server-name`.
    pub server_name: Option<String>,
    /// `--cert-file` and `--key-file`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
}

impl AdminTarget {
    /// The endpoint `options` point at: `--admin`, else the configuration's `admin` (its
    /// address, loopback when it listens on every address; TLS when `admin.tls` is set,
    /// verified by `--ca-file`, or else by `admin.tls.client_ca_file` and the cluster CA
    /// (`health.tls.ca_file`, which signs the admin certificate `kubegate init` writes); its
    /// `bearer_token_file` unless `--token-file` or a client certificate is given), else the
    /// default admin address.
    pub fn from_options(options: StatusOptions) -> anyhow::Result<AdminTarget> {
        let tls = |ca_files: Vec<PathBuf>| -> anyhow::Result<AdminTargetTls> {
            if ca_files.is_empty() {
                bail!("the admin endpoint serves TLS: pass --ca-file, the CA that signs its certificate");
            }
            Ok(AdminTargetTls {
                ca_files,
                server_name: options.server_name.clone(),
                client_cert: options.client_cert.clone(),
            })
        };
        if let Some(admin) = &options.admin {
            let (address, https) = AdminTarget::parse_address(admin)?;
            return Ok(AdminTarget {
                address,
                tls: if https {
                    Some(tls(options.ca_file.clone().into_iter().collect())?)
                } else {
                    None
                },
                token_file: options.token_file,
            });
        }
        let Some(path) = &options.config else {
            return Ok(AdminTarget {
                address: kubegate_config::AdminConfig::default().address,
                tls: None,
                token_file: options.token_file,
            });
        };
        let config = kubegate_config::load_file(path).map_err(anyhow::Error::msg)?;
        let admin = config.admin;
        let tls = match &admin.tls {
            Some(t) => Some(tls(match options.ca_file.clone() {
                Some(ca) => vec![ca],
                None => t
                    .client_ca_file
                    .iter()
                    .chain(config.health.tls.ca_file.iter())
                    .cloned()
                    .collect(),
            })?),
            None => None,
        };
        // An admin endpoint on every address is reached on loopback.
        let mut address = admin.address;
        if address.ip().is_unspecified() {
            address.set_ip(match address {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let token_file = match (&options.token_file, &options.client_cert) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(_)) => None,
            (None, None) => admin.bearer_token_file,
        };
        Ok(AdminTarget {
            address,
            tls,
            token_file,
        })
    }

    /// Reads `address`: `HOST:PORT` (plain HTTP) or `https://HOST:PORT`.
    pub fn parse_address(address: &str) -> anyhow::Result<(SocketAddr, bool)> {
        let (https, rest) = match address.strip_prefix("https://") {
            Some(rest) => (true, rest),
            None => (false, address.strip_prefix("http://").unwrap_or(address)),
        };
        let addr = rest.trim_end_matches('/').parse().with_context(|| {
            format!(
                "--admin {address:?}: expected HOST:PORT or https://HOST:PORT with an IP address"
            )
        })?;
        Ok((addr, https))
    }
}

/// Fetches `/debug/backends` from `target` and prints it.
pub fn print(target: &AdminTarget) -> anyhow::Result<()> {
    let rows: Vec<BackendView> = get_json(target, "/debug/backends")?;
    print!("{}", table(&rows));
    Ok(())
}

/// `GET path` from the admin endpoint at `target` within [`TIMEOUT`], read as JSON.
fn get_json<T: serde::de::DeserializeOwned>(target: &AdminTarget, path: &str) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let body = rt.block_on(async {
        tokio::time::timeout(TIMEOUT, call(target, http::Method::GET, path))
            .await
            .with_context(|| format!("admin endpoint did not answer within {TIMEOUT:?}"))?
    })?;
    let path = path.split('?').next().unwrap_or(path);
    serde_json::from_slice(&body).with_context(|| format!("unexpected {path} answer"))
}

/// Sends `method path` to the admin endpoint at `target`; the body of a 2xx answer.
pub async fn call(
    target: &AdminTarget,
    method: http::Method,
    path: &str,
) -> anyhow::Result<bytes::Bytes> {
    call_with(target, method, path, bytes::Bytes::new()).await
}

/// Sends `method path` with `body` (JSON, if any) to the admin endpoint at `target`; the body
/// of a 2xx answer.
pub async fn call_with(
    target: &AdminTarget,
    method: http::Method,
    path: &str,
    body: bytes::Bytes,
) -> anyhow::Result<bytes::Bytes> {
    let addr = target.address;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot reach the admin endpoint at {addr}"))?;
    let token = match &target.token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("token file {}", file.display()))?
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .with_context(|| format!("token file {} holds no token", file.display()))?
                .to_string(),
        ),
        None => None,
    };
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string());
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if !body.is_empty() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(Full::new(body))?;
    let resp = match &target.tls {
        None => {
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            sender.send_request(req).await?
        }
        Some(tls) => {
            let name = match &tls.server_name {
                Some(n) => ServerName::try_from(n.clone())
                    .with_context(|| format!("--server-name {n:?}"))?,
                None => ServerName::IpAddress(addr.ip().into()),
            };
            let stream = TlsConnector::from(Arc::new(client_config(tls)?))
                .connect(name, tcp)
                .await
                .with_context(|| format!("TLS with the admin endpoint at {addr}"))?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            sender.send_request(req).await?
        }
    };
    match resp.status() {
        s if s.is_success() => Ok(resp.into_body().collect().await?.to_bytes()),
        http::StatusCode::UNAUTHORIZED => bail!(
            "{path}: HTTP 401: the admin endpoint wants a client certificate (--cert-file, --key-file) or a token (--token-file)"
        ),
        s => {
            // The endpoint says why in its body (a drain refused, a backend not found).
            let body = resp.into_body().collect().await?.to_bytes();
            bail!("{path}: HTTP {s}: {}", String::from_utf8_lossy(&body).trim())
        }
    }
}

fn client_config(tls: &AdminTargetTls) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in &tls.ca_files {
        for cert in load_roots(ca).map_err(anyhow::Error::msg)?.roots {
            roots.roots.push(cert);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match &tls.client_cert {
        Some((cert, key)) => builder.with_client_auth_cert(
            load_certs(cert).map_err(anyhow::Error::msg)?,
            load_key(key).map_err(anyhow::Error::msg)?,
        )?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Renders rows as an aligned text table.
pub fn table(rows: &[BackendView]) -> String {
    // A CLUSTER column only when the file names clusters: a one-cluster table stays as it was.
    let clusters = rows
        .iter()
        .any(|r| !r.cluster.is_empty() && r.cluster != kubegate_config::IMPLICIT);
    let mut header = vec![
        "NAME", "ADDRESS", "SOURCE", "STATE", "SINCE", "CONNS", "REQUESTS", "VERSION", "PROBE",
        "LATENCY", "DETAIL",
    ];
    if clusters {
        header.insert(0, "CLUSTER");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.name.clone(),
                r.address.clone(),
                r.source.clone(),
                if r.drained_by_operator {
                    format!("{},drained", r.state)
                } else {
                    r.state.clone()
                },
                r.since.clone(),
                r.active_connections.to_string(),
                r.requests_in_flight.to_string(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                r.last_probe_result.clone().unwrap_or_else(|| "-".into()),
                r.last_probe_latency_ms
                    .map(|ms| format!("{ms:.1}ms"))
                    .unwrap_or_else(|| "-".into()),
                r.last_probe_detail.clone().unwrap_or_default(),
            ];
            if clusters {
                row.insert(0, r.cluster.clone());
            }
            row
        })
        .collect();
    aligned(&header, &cells)
}

/// `header` and `cells` as columns aligned by spaces.
fn aligned(header: &[&str], cells: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |row: &[&str]| {
        let parts: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header);
    for row in cells {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

/// One row of `/debug/senders` (`telemetry::costs::Row`), as `kubegate status --top` reads it.
#[derive(Debug, serde::Deserialize)]
pub struct CostRow {
    /// The sender, user agent or kubectl command.
    pub name: String,
    /// For senders: how it authenticated.
    #[serde(default)]
    pub identity: Option<String>,
    /// Requests.
    pub requests: u64,
    /// LISTs.
    pub lists: u64,
    /// Microseconds its requests held a replica.
    pub apiserver_micros: u64,
    /// Bytes the replicas sent.
    pub bytes: u64,
    /// Flow-control rejections met.
    pub rejections: u64,
    /// Upstream watches open now.
    pub open_watches: u64,
}

/// `/debug/senders`, as `kubegate status --top` reads it.
#[derive(Debug, serde::Deserialize)]
pub struct CostReport {
    /// `1m` or `10m`.
    pub window: String,
    /// The order.
    pub sort: String,
    /// By sender.
    pub senders: Vec<CostRow>,
    /// By user agent.
    pub user_agents: Vec<CostRow>,
}

/// Fetches `/debug/senders` (over `window`, ordered by `sort`) from `target` and prints its
/// senders and user agents.
pub fn print_top(target: &AdminTarget, window: &str, sort: &str) -> anyhow::Result<()> {
    let path = format!("/debug/senders?window={window}&sort={sort}&n=20");
    let report: CostReport = get_json(target, &path)?;
    print!("{}", top_table(&report));
    Ok(())
}

/// Renders a cost report as two aligned text tables: senders, then user agents.
pub fn top_table(report: &CostReport) -> String {
    let header = [
        "REQUESTS",
        "LISTS",
        "APISERVER_S",
        "MIB",
        "WATCHES",
        "REJECTED",
    ];
    let cells = |rows: &[CostRow], sender: bool| -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| {
                // A certificate's or a token's name may hold control characters: never written
                // to the operator's terminal as they are.
                let name: String = match r.name.is_empty() {
                    true => "(none)".into(),
                    false => r
                        .name
                        .chars()
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect(),
                };
                let mut row = vec![name];
                if sender {
                    row.push(r.identity.clone().unwrap_or_else(|| "-".into()));
                }
                row.extend([
                    r.requests.to_string(),
                    r.lists.to_string(),
                    format!("{:.3}", r.apiserver_micros as f64 / 1e6),
                    format!("{:.2}", r.bytes as f64 / (1024.0 * 1024.0)),
                    r.open_watches.to_string(),
                    r.rejections.to_string(),
                ]);
                row
            })
            .collect()
    };
    let mut out = format!(
        "Who costs what over the last {}, by {}:\n\n",
        report.window, report.sort
    );
    let senders: Vec<&str> = ["SENDER", "IDENTITY"].into_iter().chain(header).collect();
    out.push_str(&aligned(&senders, &cells(&report.senders, true)));
    out.push('\n');
    let agents: Vec<&str> = ["USER_AGENT"].into_iter().chain(header).collect();
    out.push_str(&aligned(&agents, &cells(&report.user_agents, false)));
    out
}
