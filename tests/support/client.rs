//! A real TLS client (HTTP/1.1 or HTTP/2 by ALPN) with the admin client certificate.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubegate_testbed::Pki;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A response, fully read.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Response {
    /// Body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// One header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The simulated replica that answered (its `X-Kubegate-Sim-Replica`), or `<none>`: the
    /// answer is kubegate's own.
    pub fn replica(&self) -> String {
        self.header("x-kubegate-sim-replica")
            .unwrap_or("<none>")
            .to_string()
    }

    /// The body read as JSON (a test fails, with the body, when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `metadata.resourceVersion` of a JSON answer (a list's: where a watch starts).
    pub fn resource_version(&self) -> String {
        self.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_else(|| panic!("no metadata.resourceVersion: {}", self.text()))
            .to_string()
    }
}

fn alpn(h2: bool) -> &'static [&'static [u8]] {
    if h2 {
        &[b"h2"]
    } else {
        &[b"http/1.1"]
    }
}

fn roots(pki: &Pki) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca_file()).unwrap())
        .unwrap();
    roots
}

/// TLS client settings trusting `pki`'s CA, with no client certificate.
pub fn anonymous_client_config(pki: &Pki, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(pki))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// TLS client settings trusting `pki`'s CA and presenting its admin certificate.
pub fn tls_client_config(pki: &Pki, alpn: &[&[u8]]) -> rustls::ClientConfig {
    tls_client_config_offering(pki, alpn, rustls::DEFAULT_VERSIONS)
}

/// [`tls_client_config`] offering only `versions`.
fn tls_client_config_offering(
    pki: &Pki,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let admin = |ext: &str| pki.dir().join(format!("admin.{ext}"));
    client_config_offering(pki, alpn, &admin("crt"), &admin("key"), versions)
}

/// TLS client settings trusting `pki`'s CA and presenting the certificate in `crt`/`key`.
pub fn client_config_as(
    pki: &Pki,
    alpn: &[&[u8]],
    crt: &std::path::Path,
    key: &std::path::Path,
) -> rustls::ClientConfig {
    client_config_offering(pki, alpn, crt, key, rustls::DEFAULT_VERSIONS)
}

/// [`tls_client_config`] offering TLS 1.2 alone, as an older client does.
pub fn tls12_client_config(pki: &Pki, alpn: &[&[u8]]) -> rustls::ClientConfig {
    tls_client_config_offering(pki, alpn, &[&rustls::version::TLS12])
}

fn client_config_offering(
    pki: &Pki,
    alpn: &[&[u8]],
    crt: &std::path::Path,
    key: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = vec![CertificateDer::from_pem_file(crt).unwrap()];
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots(pki))
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A TLS connection to `addr` (SNI `kubernetes`), handshake complete.
pub async fn tls_connect(
    addr: SocketAddr,
    config: rustls::ClientConfig,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    tls_connect_to(addr, config, ServerName::try_from("kubernetes").unwrap()).await
}

/// A TLS connection to `addr` asking for `name` (an IP address sends no SNI), handshake
/// complete.
pub async fn tls_connect_to(
    addr: SocketAddr,
    config: rustls::ClientConfig,
    name: ServerName<'static>,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    tls_connect_from(None, addr, config, name).await
}

/// As [`tls_connect_to`], from local address `from` (another loopback address: another
/// client host, as kubegate sees it) when given.
pub async fn tls_connect_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    config: rustls::ClientConfig,
    name: ServerName<'static>,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let connect = async {
        match from {
            Some(ip) => {
                let socket = match ip {
                    std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                    std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                };
                socket.bind(SocketAddr::new(ip, 0))?;
                socket.connect(addr).await
            }
            None => TcpStream::connect(addr).await,
        }
    };
    let tcp = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timeout"))??;
    tcp.set_nodelay(true)?;
    tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timeout"))?
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One client connection.
pub struct Conn {
    sender: Sender,
    task: JoinHandle<()>,
    peer: Vec<u8>,
    /// How long a request may take (10 s unless a test waits on a slow answer on purpose).
    request_timeout: Duration,
    /// The authority requests name (`:authority`, `Host`): the server name the handshake
    /// asked for, as a real client sends it.
    authority: String,
}

impl Conn {
    /// Connects to `addr` (SNI `kubernetes`) and completes the TLS handshake.
    pub async fn open(addr: SocketAddr, pki: &Pki, h2: bool) -> io::Result<Conn> {
        Conn::open_with(addr, tls_client_config(pki, alpn(h2)), h2).await
    }

    /// Connects presenting the client certificate in `crt`/`key`.
    pub async fn open_as(
        addr: SocketAddr,
        pki: &Pki,
        h2: bool,
        crt: &std::path::Path,
        key: &std::path::Path,
    ) -> io::Result<Conn> {
        Conn::open_with(addr, client_config_as(pki, alpn(h2), crt, key), h2).await
    }

    /// Connects over HTTP/2 as `user` in `groups`: a client certificate of `pki` issued now
    /// (its files named `file`).
    pub async fn open_as_user(
        addr: SocketAddr,
        pki: &Pki,
        file: &str,
        user: &str,
        groups: &[&str],
    ) -> Conn {
        let (crt, key) = pki.client_in(file, user, groups);
        Conn::open_as(addr, pki, true, &crt, &key).await.unwrap()
    }

    /// Connects without a client certificate.
    pub async fn open_anonymous(addr: SocketAddr, pki: &Pki, h2: bool) -> io::Result<Conn> {
        Conn::open_with(addr, anonymous_client_config(pki, alpn(h2)), h2).await
    }

    /// Connects over HTTP/2 without a client certificate from local address `from` (another
    /// loopback address: another client host, as kubegate sees it).
    pub async fn open_anonymous_from(
        from: std::net::IpAddr,
        addr: SocketAddr,
        pki: &Pki,
    ) -> io::Result<Conn> {
        let config = anonymous_client_config(pki, alpn(true));
        let name = ServerName::try_from("kubernetes").unwrap();
        Conn::over(
            tls_connect_from(Some(from), addr, config, name).await?,
            true,
        )
        .await
    }

    /// Connects asking for server `name` (the SNI; an IP address sends none), trusting
    /// `config`'s roots and presenting its certificate.
    pub async fn open_named(
        addr: SocketAddr,
        config: rustls::ClientConfig,
        name: &str,
        h2: bool,
    ) -> io::Result<Conn> {
        let server_name = ServerName::try_from(name.to_string()).map_err(io::Error::other)?;
        let mut conn = Conn::over(tls_connect_to(addr, config, server_name).await?, h2).await?;
        conn.authority = match name.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]:{}", addr.port()),
            Ok(ip) => format!("{ip}:{}", addr.port()),
            Err(_) => name.to_string(),
        };
        Ok(conn)
    }

    /// Requests from now on name `authority` (a client reusing its connection for another
    /// name, as browsers and OkHttp do under a certificate that covers both).
    pub fn naming(&mut self, authority: &str) {
        self.authority = authority.to_string();
    }

    async fn open_with(
        addr: SocketAddr,
        config: rustls::ClientConfig,
        h2: bool,
    ) -> io::Result<Conn> {
        Conn::over(tls_connect(addr, config).await?, h2).await
    }

    /// HTTP/2 (`h2`) or HTTP/1.1 over a TLS connection the caller made.
    pub async fn over(
        tls: tokio_rustls::client::TlsStream<TcpStream>,
        h2: bool,
    ) -> io::Result<Conn> {
        let peer = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let io = TokioIo::new(tls);
        let (sender, task) = if h2 {
            let (s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(io::Error::other)?;
            (
                Sender::H2(s),
                tokio::spawn(async move {
                    let _ = c.await;
                }),
            )
        } else {
            let (s, c) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(io::Error::other)?;
            (
                Sender::H1(s),
                tokio::spawn(async move {
                    let _ = c.await;
                }),
            )
        };
        Ok(Conn {
            sender,
            task,
            peer,
            request_timeout: Duration::from_secs(10),
            authority: "kubernetes".to_string(),
        })
    }

    /// DER of the certificate the server presented (tells which replica answered).
    pub fn peer(&self) -> &[u8] {
        &self.peer
    }

    /// The connection has ended (closed by the other side or by an error).
    pub fn is_closed(&self) -> bool {
        self.task.is_finished()
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> io::Result<Response> {
        self.request("GET", path, None).await
    }

    /// LISTs `path` and gives the watch of it from the list's resourceVersion, as an
    /// informer goes on after its list.
    pub async fn watch_after_list(&mut self, path: &str) -> String {
        let r = self.get(path).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        format!("{path}?watch=1&resourceVersion={}", r.resource_version())
    }

    /// `POST path` with the JSON `body`.
    pub async fn post(&mut self, path: &str, body: &str) -> io::Result<Response> {
        self.request("POST", path, Some(body)).await
    }

    /// A GET carrying the bearer `token`, sent by `user_agent`.
    pub async fn get_with_token(
        &mut self,
        path: &str,
        token: &str,
        user_agent: &str,
    ) -> io::Result<Response> {
        let bearer = format!("Bearer {token}");
        let headers = [
            ("Authorization", bearer.as_str()),
            ("User-Agent", user_agent),
        ];
        self.send("GET", path, &headers, None).await
    }

    /// Another handle on this HTTP/2 connection, for requests sent on it at once (its streams);
    /// dropping it leaves the connection open.
    pub fn share(&self) -> Conn {
        let Sender::H2(sender) = &self.sender else {
            panic!("only an HTTP/2 connection carries requests at once");
        };
        Conn {
            sender: Sender::H2(sender.clone()),
            task: tokio::spawn(async {}),
            peer: self.peer.clone(),
            request_timeout: self.request_timeout,
            authority: self.authority.clone(),
        }
    }

    /// Lets each request take up to `limit`, for an answer slow on purpose.
    pub fn set_request_timeout(&mut self, limit: Duration) {
        self.request_timeout = limit;
    }

    /// Any request, with an optional JSON body; fails after the request timeout (10 s).
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> io::Result<Response> {
        self.send(method, path, &[], body).await
    }

    /// `kubectl auth whoami`'s request (a `SelfSubjectReview`) with extra `headers`: who the
    /// apiserver found the client to be, in its answer's `status.userInfo` (201).
    pub async fn self_subject_review(&mut self, headers: &[(&str, &str)]) -> io::Result<Response> {
        self.send(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            headers,
            Some(
                r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","spec":{}}"#,
            ),
        )
        .await
    }

    /// Any request with extra headers.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> io::Result<Response> {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        self.send_bytes(method, path, &headers, body).await
    }

    /// Any request with extra headers whose values are bytes (a header value may carry any
    /// byte but a control character).
    pub async fn send_bytes(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
        body: Option<&str>,
    ) -> io::Result<Response> {
        let mut req = http::Request::builder().method(method).uri(self.uri(path));
        if matches!(self.sender, Sender::H1(_)) {
            req = req.header(http::header::HOST, self.host());
        }
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (k, v) in headers {
            req = req.header(
                *k,
                http::HeaderValue::from_bytes(v).map_err(io::Error::other)?,
            );
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
            .unwrap();
        let limit = self.request_timeout;
        let fut = async {
            let resp = self.send_raw(req).await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(io::Error::other)?
                .to_bytes();
            Ok(Response {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "request timeout"))?
    }
}

/// A streaming response read line by line (watch).
pub struct Lines {
    /// Status code.
    pub status: u16,
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

/// Reads the next frame of `body` into `buf`: `false` once the body has ended.
pub(crate) async fn read_more(
    body: &mut hyper::body::Incoming,
    buf: &mut impl bytes::BufMut,
) -> io::Result<bool> {
    match body.frame().await {
        None => Ok(false),
        Some(Err(e)) => Err(io::Error::other(e)),
        Some(Ok(frame)) => {
            if let Ok(data) = frame.into_data() {
                buf.put_slice(&data);
            }
            Ok(true)
        }
    }
}

impl Lines {
    /// The next line, `None` when the stream ended, or an error after `limit`.
    pub async fn next(&mut self, limit: Duration) -> io::Result<Option<String>> {
        tokio::time::timeout(limit, async {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=pos).collect();
                    return Ok(Some(String::from_utf8_lossy(&line).trim_end().to_string()));
                }
                if !read_more(&mut self.body, &mut self.buf).await? {
                    return Ok(None);
                }
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no line in time"))?
    }

    /// The next line parsed as JSON; panics on end of stream.
    pub async fn next_json(&mut self, limit: Duration) -> serde_json::Value {
        let line = self
            .next(limit)
            .await
            .expect("a line")
            .expect("stream still open");
        serde_json::from_str(&line).expect("JSON line")
    }
}

impl Conn {
    /// The request target for `path` on this connection's protocol.
    pub(crate) fn uri(&self, path: &str) -> String {
        match self.sender {
            Sender::H1(_) => path.to_string(),
            Sender::H2(_) => format!("https://{}{path}", self.authority),
        }
    }

    /// The authority requests on this connection name (HTTP/1.1 sends it as `Host`).
    pub(crate) fn host(&self) -> &str {
        &self.authority
    }

    /// Sends on whichever protocol the connection speaks, once it is ready: the previous
    /// response may still be settling.
    pub(crate) async fn send_raw(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> io::Result<http::Response<hyper::body::Incoming>> {
        match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await.map_err(io::Error::other)?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                s.ready().await.map_err(io::Error::other)?;
                s.send_request(req).await
            }
        }
        .map_err(io::Error::other)
    }

    /// `GET path` whose body is read as it arrives.
    pub async fn stream(&mut self, path: &str) -> io::Result<Lines> {
        self.stream_with(path, &[]).await
    }

    /// `GET path` with extra `headers`, whose body is read as it arrives.
    pub async fn stream_with(&mut self, path: &str, headers: &[(&str, &str)]) -> io::Result<Lines> {
        let mut req = http::Request::get(self.uri(path)).header(http::header::HOST, self.host());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let resp = self.send_raw(req).await?;
        Ok(Lines {
            status: resp.status().as_u16(),
            body: resp.into_body(),
            buf: Vec::new(),
        })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}
