//! One `/readyz?verbose` probe over a fresh TCP + TLS connection.
//!
//! A fresh connection per probe is deliberate: it proves the listener still accepts and the
//! process still answers the TLS handshake, which a reused connection would not (a frozen
//! apiserver keeps its established sockets open).

use crate::outcome::{ProbeOutcome, ProbeRecord, UnreachableReason};
use crate::tls::{classify, client_config};
use crate::verbose::parse_verbose;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use kubegate_net::out_of_resources;
use rustls::pki_types::ServerName;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A readyz body larger than this is cut: a real one is a few KiB.
const MAX_BODY: usize = 64 * 1024;

/// Why a prober could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    /// A TLS file is unusable.
    #[error("health.tls: {0}")]
    Tls(String),
    /// `server_name` is not a valid name.
    #[error("health.tls.server_name: {0}")]
    ServerName(String),
    /// The bearer token file cannot be read.
    #[error("health.bearer_token_file: {0}")]
    Token(String),
}

/// Probes backends with one health configuration. Cheap to share (`Arc`).
pub struct Prober {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    request_target: String,
    authorization: Option<String>,
    timeout: Duration,
}

impl Prober {
    /// Builds a prober, reading the CA, client certificate and token files now.
    pub fn new(health: &kubegate_config::HealthConfig) -> Result<Prober, ProberError> {
        let config = client_config(&health.tls).map_err(ProberError::Tls)?;
        let server_name = ServerName::try_from(health.tls.server_name.clone())
            .map_err(|e| ProberError::ServerName(e.to_string()))?;
        let authorization = match &health.bearer_token_file {
            Some(path) => {
                let token = std::fs::read_to_string(path)
                    .map_err(|e| ProberError::Token(format!("{}: {e}", path.display())))?;
                Some(format!("Bearer {}", token.trim()))
            }
            None => None,
        };
        Ok(Prober {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            request_target: format!("{}?verbose", health.path),
            authorization,
            timeout: health.timeout,
        })
    }

    /// Probes `addr` once; never takes longer than the configured timeout.
    pub async fn probe(&self, addr: SocketAddr) -> ProbeRecord {
        let at = SystemTime::now();
        let started = Instant::now();
        let outcome = match tokio::time::timeout(self.timeout, self.exchange(addr)).await {
            Ok(outcome) => outcome,
            Err(_) => ProbeOutcome::Unreachable(
                UnreachableReason::Timeout,
                format!("no answer within {:?}", self.timeout),
            ),
        };
        ProbeRecord {
            at,
            latency: started.elapsed(),
            outcome,
        }
    }

    async fn exchange(&self, addr: SocketAddr) -> ProbeOutcome {
        let tcp = match TcpStream::connect(addr).await {
            Ok(tcp) => tcp,
            Err(e) => return unreachable(&e),
        };
        let _ = tcp.set_nodelay(true);
        let tls = match self.connector.connect(self.server_name.clone(), tcp).await {
            Ok(tls) => tls,
            Err(e) => {
                return match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(tls_error) => {
                        ProbeOutcome::TlsRejected(classify(tls_error), tls_error.to_string())
                    }
                    None => unreachable(&e),
                }
            }
        };
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
        {
            Ok(pair) => pair,
            Err(e) => return ProbeOutcome::Unreachable(UnreachableReason::Error, e.to_string()),
        };
        let conn = tokio::spawn(conn);
        let outcome = self.request(&mut sender).await;
        conn.abort();
        outcome
    }

    async fn request(
        &self,
        sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    ) -> ProbeOutcome {
        let mut req = http::Request::get(self.request_target.as_str())
            .header(http::header::HOST, host_header(&self.server_name))
            .header(http::header::USER_AGENT, "kubegate-health")
            .header(http::header::ACCEPT, "text/plain");
        if let Some(auth) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, auth);
        }
        let req = req.body(Empty::new()).expect("static request is valid");
        let resp = match sender.send_request(req).await {
            Ok(resp) => resp,
            Err(e) => return broken(e),
        };
        let status = resp.status().as_u16();
        let body = match Limited::new(resp.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return ProbeOutcome::Unreachable(UnreachableReason::Reset, e.to_string()),
        };
        if status == 200 {
            return ProbeOutcome::Passed;
        }
        let report = parse_verbose(&String::from_utf8_lossy(&body));
        ProbeOutcome::Failed {
            status,
            failing_checks: report.failing,
            shutting_down: report.shutting_down,
        }
    }
}

fn host_header(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => "kubernetes".into(),
    }
}

fn unreachable(e: &io::Error) -> ProbeOutcome {
    if out_of_resources(e) {
        return ProbeOutcome::NotRun(format!("cannot open a socket: {e}"));
    }
    let reason = match e.kind() {
        io::ErrorKind::ConnectionRefused => UnreachableReason::Refused,
        io::ErrorKind::TimedOut => UnreachableReason::Timeout,
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => UnreachableReason::Reset,
        _ => UnreachableReason::Error,
    };
    ProbeOutcome::Unreachable(reason, e.to_string())
}

fn broken(e: hyper::Error) -> ProbeOutcome {
    let reason = if e.is_incomplete_message() || e.is_canceled() {
        UnreachableReason::Reset
    } else {
        UnreachableReason::Error
    };
    ProbeOutcome::Unreachable(reason, e.to_string())
}
