//! A Kubernetes API client over real TLS (HTTP/2 or HTTP/1.1), with the connection settings of
//! client-go: HTTP/2 pings after 30 s without reads, 15 s ping timeout.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// Client TLS settings: the cluster CA and a client certificate — or no certificate and a
/// bearer token every request carries — and the server name the handshake sends; and the
/// loopback address connections are made from, when a client stands for a host of its own.
#[derive(Clone)]
pub struct ClientTls {
    h2: Arc<rustls::ClientConfig>,
    h1: Arc<rustls::ClientConfig>,
    bearer: Option<http::HeaderValue>,
    server_name: ServerName<'static>,
    source: Option<IpAddr>,
}

impl ClientTls {
    /// Loads `ca.crt`, `admin.crt`, `admin.key` from a `kubegate-sim certs` directory.
    pub fn load(pki: &Path) -> anyhow::Result<ClientTls> {
        ClientTls::load_as(pki, "admin")
    }

    /// Loads `ca.crt` and the client pair `NAME.crt`, `NAME.key` (`node`: a kubelet's).
    pub fn load_as(pki: &Path, name: &str) -> anyhow::Result<ClientTls> {
        ClientTls::build(pki, Some(name), None)
    }

    /// Loads `ca.crt`; no client certificate, every request carrying `token` (a service
    /// account's, say).
    pub fn with_token(pki: &Path, token: &str) -> anyhow::Result<ClientTls> {
        ClientTls::build(pki, None, Some(token))
    }

    fn build(pki: &Path, name: Option<&str>, token: Option<&str>) -> anyhow::Result<ClientTls> {
        let build = |alpn: &[u8]| -> anyhow::Result<Arc<rustls::ClientConfig>> {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from_pem_file(pki.join("ca.crt"))?)?;
            let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
            let mut c = match name {
                Some(name) => {
                    let chain = vec![CertificateDer::from_pem_file(
                        pki.join(format!("{name}.crt")),
                    )?];
                    let key = PrivateKeyDer::from_pem_file(pki.join(format!("{name}.key")))?;
                    builder.with_client_auth_cert(chain, key)?
                }
                None => builder.with_no_client_auth(),
            };
            c.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(c))
        };
        Ok(ClientTls {
            h2: build(b"h2")?,
            h1: build(b"http/1.1")?,
            bearer: token
                .map(|t| http::HeaderValue::from_str(&format!("Bearer {t}")))
                .transpose()?,
            server_name: ServerName::try_from("kubernetes")?,
            source: None,
        })
    }

    /// The same settings, connections made from `source` (a loopback address: a client that
    /// stands for a host of its own, as each of a cluster's nodes is).
    pub fn dialing_from(mut self, source: IpAddr) -> ClientTls {
        self.source = Some(source);
        self
    }

    /// The same settings, every request carrying bearer `token` instead.
    pub fn bearing(&self, token: &str) -> anyhow::Result<ClientTls> {
        let mut c = self.clone();
        c.bearer = Some(http::HeaderValue::from_str(&format!("Bearer {token}"))?);
        Ok(c)
    }

    /// The same settings, the handshake naming `name` (`kubernetes` unless set): a gateway
    /// in front of several clusters picks the cluster by it.
    pub fn naming(mut self, name: &str) -> anyhow::Result<ClientTls> {
        self.server_name = ServerName::try_from(name.to_string())?;
        Ok(self)
    }
}

/// Why a request failed, as the report counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// TCP connect refused.
    Refused,
    /// The connection broke: reset, EOF, GOAWAY, TLS handshake cut.
    Reset,
    /// No answer within the request's deadline.
    Timeout,
    /// 429 Too Many Requests.
    Http429,
    /// 5xx.
    Http5xx,
    /// Another unexpected status (403 when a gateway lost the client's identity, 409 when a
    /// create was replayed).
    Http(u16),
    /// A kubectl failure its message does not tell more about.
    Other,
}

impl ErrorClass {
    /// Label in the report.
    pub fn label(self) -> String {
        match self {
            ErrorClass::Refused => "refused".into(),
            ErrorClass::Reset => "reset".into(),
            ErrorClass::Timeout => "timeout".into(),
            ErrorClass::Http429 => "http_429".into(),
            ErrorClass::Http5xx => "http_5xx".into(),
            ErrorClass::Http(code) => format!("http_{code}"),
            ErrorClass::Other => "other".into(),
        }
    }
}

/// A response, read whole.
pub struct Resp {
    /// Status.
    pub status: u16,
    /// `Retry-After` in seconds, if any.
    pub retry_after: Option<u64>,
    /// The replica that answered (the simulator's `X-Kubegate-Sim-Replica`), if it was one.
    pub replica: Option<usize>,
    /// Body.
    pub body: Bytes,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One connection (for HTTP/2, one handle on it: [`Client::another_handle`] makes more, whose
/// requests are streams of the same connection, as client-go's share one).
pub struct Client {
    sender: Sender,
    task: Arc<ConnectionTask>,
    /// `Authorization` every request carries, if any.
    bearer: Option<http::HeaderValue>,
    /// The authority every request names: the server name of the handshake, as a client
    /// dialing that name sends it (a gateway serving several clusters answers another
    /// cluster's name on this connection with 421).
    authority: Arc<str>,
}

/// Drives the connection; ends it when the last handle goes.
struct ConnectionTask(tokio::task::JoinHandle<()>);

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn classify_io(e: &io::Error) -> ErrorClass {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorClass::Refused,
        io::ErrorKind::TimedOut => ErrorClass::Timeout,
        _ => ErrorClass::Reset,
    }
}

impl Client {
    /// Connects and handshakes (5 s limit each, as client-go's dialer and TLS timeouts).
    pub async fn connect(
        addr: SocketAddr,
        tls: &ClientTls,
        h2: bool,
    ) -> Result<Client, ErrorClass> {
        let config = if h2 { tls.h2.clone() } else { tls.h1.clone() };
        let dial = async {
            match tls.source {
                Some(source) => {
                    let socket = match source {
                        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                    };
                    socket.bind(SocketAddr::new(source, 0))?;
                    socket.connect(addr).await
                }
                None => TcpStream::connect(addr).await,
            }
        };
        let tcp = tokio::time::timeout(Duration::from_secs(5), dial)
            .await
            .map_err(|_| ErrorClass::Timeout)?
            .map_err(|e| classify_io(&e))?;
        let _ = tcp.set_nodelay(true);
        let stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_rustls::TlsConnector::from(config).connect(tls.server_name.clone(), tcp),
        )
        .await
        .map_err(|_| ErrorClass::Timeout)?
        .map_err(|e| classify_io(&e))?;
        let io = TokioIo::new(stream);
        // The connection is driven by a task of its own, which ends with it.
        let (sender, task) = if h2 {
            let (s, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(15))
                .keep_alive_while_idle(true)
                .handshake(io)
                .await
                .map_err(|_| ErrorClass::Reset)?;
            (Sender::H2(s), tokio::spawn(async move { drop(conn.await) }))
        } else {
            let (s, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|_| ErrorClass::Reset)?;
            (Sender::H1(s), tokio::spawn(async move { drop(conn.await) }))
        };
        Ok(Client {
            sender,
            task: Arc::new(ConnectionTask(task)),
            bearer: tls.bearer.clone(),
            authority: tls.server_name.to_str().into(),
        })
    }

    /// The connection has ended.
    pub fn closed(&self) -> bool {
        self.task.0.is_finished()
    }

    /// Another handle on the same HTTP/2 connection; `None` for HTTP/1.1, which carries one
    /// request at a time.
    pub fn another_handle(&self) -> Option<Client> {
        match &self.sender {
            Sender::H2(s) => Some(Client {
                sender: Sender::H2(s.clone()),
                task: self.task.clone(),
                bearer: self.bearer.clone(),
                authority: self.authority.clone(),
            }),
            Sender::H1(_) => None,
        }
    }

    async fn start(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<http::Response<Incoming>, ErrorClass> {
        let h2 = matches!(self.sender, Sender::H2(_));
        let uri = if h2 {
            format!("https://{}{path}", self.authority)
        } else {
            path.to_string()
        };
        let mut req = http::Request::builder().method(method).uri(uri);
        if !h2 {
            req = req.header(http::header::HOST, &*self.authority);
        }
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        req = req.header(http::header::ACCEPT, "application/json");
        if let Some(bearer) = &self.bearer {
            req = req.header(http::header::AUTHORIZATION, bearer.clone());
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
            .expect("valid request");
        match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await.map_err(|_| ErrorClass::Reset)?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                s.ready().await.map_err(|_| ErrorClass::Reset)?;
                s.send_request(req).await
            }
        }
        .map_err(|_| ErrorClass::Reset)
    }

    /// One request, read whole. No deadline of its own: callers add one where client-go has one.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<Resp, ErrorClass> {
        let resp = self.start(method, path, body).await?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let replica = replica_of(&resp);
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|_| ErrorClass::Reset)?
            .to_bytes();
        Ok(Resp {
            status,
            retry_after,
            replica,
            body,
        })
    }

    /// One request of the run's own set-up or checks (not of the measured traffic), read
    /// whole; its status must be one of `expected` (`what` names it in the error otherwise).
    pub async fn expect(
        &mut self,
        (method, path, body): (&str, &str, Option<&str>),
        expected: &[u16],
        what: &str,
    ) -> anyhow::Result<Resp> {
        let r = self
            .send(method, path, body)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e:?}"))?;
        anyhow::ensure!(expected.contains(&r.status), "{what}: status {}", r.status);
        Ok(r)
    }

    /// Opens a watch; returns its status and body stream.
    pub async fn watch(&mut self, path: &str) -> Result<(u16, Incoming), ErrorClass> {
        let resp = self.start("GET", path, None).await?;
        Ok((resp.status().as_u16(), resp.into_body()))
    }
}

/// A watch body's events, one JSON object a line, as its frames complete them.
#[derive(Default)]
pub struct WatchEvents {
    partial: Vec<u8>,
}

impl WatchEvents {
    /// Takes a frame of the body: the events it completed (a line that is not JSON is skipped).
    pub fn take(&mut self, frame: hyper::body::Frame<Bytes>) -> Vec<serde_json::Value> {
        if let Ok(data) = frame.into_data() {
            self.partial.extend_from_slice(&data);
        }
        let mut events = Vec::new();
        while let Some(pos) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=pos).collect();
            events.extend(serde_json::from_slice(&line).ok());
        }
        events
    }
}

/// `replica-N` in the simulator's replica header, as the index N - 1.
fn replica_of<B>(resp: &http::Response<B>) -> Option<usize> {
    resp.headers()
        .get("x-kubegate-sim-replica")?
        .to_str()
        .ok()?
        .strip_prefix("replica-")?
        .parse::<usize>()
        .ok()?
        .checked_sub(1)
}
