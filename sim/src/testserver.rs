//! Tests' replica: a whole [`Sim`] behind its real TLS listener on a loopback port, with a
//! client CA, a front-proxy CA and a token file, and clients that read answers byte for byte
//! (HTTP/1.1 over TLS, parsed by hand) or speak HTTP/2 (hyper's client).

use crate::auth::{self, Authenticator, RequestHeader};
use crate::state::{Behaviour, Sim};
use bytes::Bytes;
use http::HeaderName;
use kubegate_testbed::pki::{Authority, Leaf, Usage};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

/// The static tokens every test replica accepts: `tok` is alice, `t\xffx` is bytes.
const TOKENS: &[u8] = b"tok,alice,u1,\"dev\"\nt\xffx,bytes,u2\n";

/// A replica serving on a loopback port, and its PKI.
pub struct TestServer {
    /// The replica's state (counters, faults).
    pub sim: Arc<Sim>,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    dir: PathBuf,
    client_ca: Authority,
    front_proxy_ca: Authority,
    stop: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.sim.close_connections.cancel();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One answer, as it came off the wire.
#[derive(Debug)]
pub struct Raw {
    /// Status code.
    pub status: u16,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
}

impl Raw {
    /// The first value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| std::str::from_utf8(v).expect("text header"))
    }

    /// The body as text.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("text body")
    }

    /// Header names and values but the ones that change from answer to answer (`date`,
    /// `audit-id`, the negotiated cipher in `x-kubegate-sim-tls`), sorted: to compare a whole
    /// answer's headers.
    pub fn stable_headers(&self) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "date" | "audit-id" | "x-kubegate-sim-tls"))
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        h.sort();
        h
    }
}

/// Expected headers, for comparison with [`Raw::stable_headers`].
pub fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    h.sort();
    h
}

/// The headers of an answer of `content_type` and `len` bytes from the test replica, and
/// `extra`, for comparison with [`Raw::stable_headers`].
pub fn answer_headers(
    content_type: &str,
    len: usize,
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    let len = len.to_string();
    let mut h = vec![
        ("cache-control", "no-cache, private"),
        ("content-length", len.as_str()),
        ("content-type", content_type),
        ("x-kubegate-sim-replica", "test"),
    ];
    h.extend_from_slice(extra);
    headers(&h)
}

/// [`answer_headers`] of an answer to the test's admin, whose request priority and fairness
/// admitted (`system:masters`: the `exempt` flow schema).
pub fn admin_headers(
    content_type: &str,
    len: usize,
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    use crate::flowcontrol::{uid_of, FLOW_SCHEMA_UID, PRIORITY_LEVEL_UID};
    let exempt = uid_of("exempt");
    let mut h = vec![
        (FLOW_SCHEMA_UID, exempt.as_str()),
        (PRIORITY_LEVEL_UID, exempt.as_str()),
        ("x-kubegate-sim-user", "admin"),
    ];
    h.extend_from_slice(extra);
    answer_headers(content_type, len, &h)
}

/// [`admin_headers`] of a JSON answer of `content_length` bytes.
pub fn admitted_json(content_length: usize) -> Vec<(String, String)> {
    admin_headers("application/json", content_length, &[])
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

impl TestServer {
    /// A replica with a client CA, a front-proxy CA (CN `front-proxy-client` allowed) and the
    /// static [`TOKENS`].
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// As [`TestServer::start`], with the replica's state changed by `configure` first (its
    /// group-versions, its authorization).
    pub async fn start_with(configure: impl FnOnce(&mut Sim)) -> TestServer {
        let dir = std::env::temp_dir().join(format!(
            "kubegate-sim-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let client_ca = Authority::create(&dir, "client-ca", "ca").expect("client CA");
        let front_proxy_ca =
            Authority::create(&dir.join("front-proxy"), "front-proxy-ca", "ca").expect("fp CA");
        let (cert, key) = client_ca
            .issue(
                "serving",
                &Leaf {
                    names: &["127.0.0.1"],
                    ..Leaf::new("sim", Usage::Server)
                },
            )
            .expect("serving certificate");
        let tls = crate::server::tls_config(
            &cert,
            &key,
            &[&client_ca.cert_file(), &front_proxy_ca.cert_file()],
        )
        .expect("TLS config");
        let subjects =
            |ca: &Authority| auth::ca_subjects(ca.cert_pem().as_bytes()).expect("CA subjects");
        let authenticator = Authenticator {
            request_header: Some(RequestHeader {
                ca_subjects: subjects(&front_proxy_ca),
                allowed_names: vec!["front-proxy-client".into()],
                username_headers: vec![HeaderName::from_static("x-remote-user")],
                group_headers: vec![HeaderName::from_static("x-remote-group")],
                extra_prefixes: vec!["x-remote-extra-".into()],
                uid_headers: vec![HeaderName::from_static("x-remote-uid")],
            }),
            client_ca_subjects: Some(subjects(&client_ca)),
            tokens: auth::Tokens::parse(TOKENS),
            anonymous: true,
            token_reviewers: Vec::new(),
            forbidden: Vec::new(),
        };
        let mut sim = new_sim(authenticator);
        configure(&mut sim);
        let sim = Arc::new(sim);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let stop = CancellationToken::new();
        tokio::spawn(crate::server::accept_loop(
            listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            sim.clone(),
            stop.clone(),
        ));
        TestServer {
            sim,
            addr,
            dir,
            client_ca,
            front_proxy_ca,
            stop,
        }
    }

    /// A client certificate from the client CA (`front_proxy`: from the front-proxy CA) for
    /// `cn` in `system:masters`, valid from `not_before` to `not_after` from now.
    pub fn client_cert(
        &self,
        file: &str,
        cn: &str,
        front_proxy: bool,
        not_before: time::Duration,
        not_after: time::Duration,
    ) -> (PathBuf, PathBuf) {
        let ca = if front_proxy {
            &self.front_proxy_ca
        } else {
            &self.client_ca
        };
        ca.issue(
            file,
            &Leaf {
                orgs: &["system:masters"],
                not_before,
                not_after,
                ..Leaf::new(cn, Usage::Client)
            },
        )
        .expect("client certificate")
    }

    /// [`TestServer::start`], and its admin's certificate ([`TestServer::admin`]).
    pub async fn with_admin() -> (TestServer, (PathBuf, PathBuf)) {
        let s = TestServer::start().await;
        let admin = s.admin();
        (s, admin)
    }

    /// The admin's certificate (`system:masters`, valid for a day).
    pub fn admin(&self) -> (PathBuf, PathBuf) {
        self.client_cert(
            "admin",
            "admin",
            false,
            time::Duration::hours(-1),
            time::Duration::days(1),
        )
    }

    /// A TLS connection offering `alpn`, presenting `cert` if given.
    pub async fn tls(
        &self,
        cert: Option<&(PathBuf, PathBuf)>,
        alpn: &[u8],
    ) -> TlsStream<TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.client_ca.cert_pem().as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match cert {
            Some((crt, key)) => builder
                .with_client_auth_cert(chain(crt), PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .expect("TLS handshake")
    }

    /// An HTTP/1.1 connection presenting `cert`.
    pub async fn http1(&self, cert: Option<&(PathBuf, PathBuf)>) -> Http1 {
        Http1 {
            tls: self.tls(cert, b"http/1.1").await,
            buf: Vec::new(),
        }
    }

    /// One request on a new HTTP/1.1 connection as `cert`: `head` is the request line and
    /// headers without the final blank line (`Host` and `Content-Length` are added).
    pub async fn request(
        &self,
        cert: Option<&(PathBuf, PathBuf)>,
        head: &[u8],
        body: &[u8],
    ) -> Raw {
        self.http1(cert).await.send(head, body).await
    }

    /// `METHOD path` with a JSON `body` (none if empty), as `cert`.
    pub async fn json(
        &self,
        cert: &(PathBuf, PathBuf),
        method: &str,
        path: &str,
        body: &str,
    ) -> Raw {
        let head = format!("{method} {path} HTTP/1.1\r\nContent-Type: application/json");
        self.request(Some(cert), head.as_bytes(), body.as_bytes())
            .await
    }

    /// Evicts pod `pod` of `default` as `cert` (`kubectl drain`'s request).
    pub async fn evict(&self, cert: &(PathBuf, PathBuf), pod: &str) -> Raw {
        let body = format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"default"}}}}"#
        );
        let path = format!("/api/v1/namespaces/default/pods/{pod}/eviction");
        self.json(cert, "POST", &path, &body).await
    }

    /// The status of a GET of pod `name` in `default` as `cert`: whether it is there (200)
    /// or not (404).
    pub async fn pod_status(&self, cert: &(PathBuf, PathBuf), name: &str) -> u16 {
        let path = format!("/api/v1/namespaces/default/pods/{name}");
        self.json(cert, "GET", &path, "").await.status
    }

    /// POSTs ConfigMap `name` to `default` as `cert`: the answer, whatever it is.
    pub async fn create_configmap(&self, cert: &(PathBuf, PathBuf), name: &str) -> Raw {
        let body = format!(r#"{{"metadata":{{"name":"{name}"}}}}"#);
        let configmaps = "/api/v1/namespaces/default/configmaps";
        self.json(cert, "POST", configmaps, &body).await
    }

    /// Creates pod `name` in `default` with `labels` (a JSON object) as `cert`.
    pub async fn pod(&self, cert: &(PathBuf, PathBuf), name: &str, labels: &str) {
        let body = format!(
            r#"{{"metadata":{{"name":"{name}","labels":{labels}}},"spec":{{"containers":[{{"name":"c","image":"i"}}]}}}}"#
        );
        let r = self
            .json(cert, "POST", "/api/v1/namespaces/default/pods", &body)
            .await;
        assert_eq!(r.status, 201, "{}", r.text());
    }
}

fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A replica's state for tests: an in-memory store, started, 600 seats.
fn new_sim(authenticator: Authenticator) -> Sim {
    let checks = crate::checks::Checks::default();
    checks.finish_startup();
    checks.finish_custom_caches();
    Sim::new(
        Behaviour {
            shutdown_delay: Duration::ZERO,
            send_retry_after: false,
            watch_termination_grace: Duration::ZERO,
            goaway_chance: 0.0,
            max_streams: 100,
            bookmark_interval: Duration::from_secs(60),
            replica: "test".into(),
            advertise: None,
        },
        checks,
        Arc::new(crate::store::MemoryStore::default()),
        authenticator,
        Default::default(),
        crate::flowcontrol::FlowControl::new(600, Duration::from_secs(15)),
    )
}

/// An HTTP/1.1 connection whose answers are read off the wire.
pub struct Http1 {
    tls: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl Http1 {
    /// Sends `head` (request line and headers, no blank line) with `body`; reads the answer.
    pub async fn send(&mut self, head: &[u8], body: &[u8]) -> Raw {
        let mut req = head.to_vec();
        req.extend_from_slice(b"\r\nHost: 127.0.0.1\r\n");
        if !body.is_empty() {
            req.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        req.extend_from_slice(body);
        self.tls.write_all(&req).await.unwrap();
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            self.fill().await;
        };
        let head: Vec<u8> = self.buf.drain(..head_end + 4).collect();
        let text = String::from_utf8_lossy(&head[..head_end]).into_owned();
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers: Vec<(String, Vec<u8>)> = head[..head_end]
            .split(|&b| b == b'\n')
            .skip(1)
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .map(|l| {
                let colon = l.iter().position(|&b| b == b':').unwrap();
                (
                    String::from_utf8_lossy(&l[..colon]).to_ascii_lowercase(),
                    l[colon + 1..].trim_ascii().to_vec(),
                )
            })
            .collect();
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        let body = if let Some(len) = get("content-length") {
            let len: usize = len.parse().unwrap();
            while self.buf.len() < len {
                self.fill().await;
            }
            self.buf.drain(..len).collect()
        } else if get("transfer-encoding").as_deref() == Some("chunked") {
            self.chunked().await
        } else {
            Vec::new()
        };
        Raw {
            status,
            headers,
            body,
        }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 16384];
        let n = self.tls.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection ended mid-answer");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    async fn chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                self.fill().await;
            };
            let size = usize::from_str_radix(
                std::str::from_utf8(&self.buf[..line_end]).unwrap().trim(),
                16,
            )
            .unwrap();
            self.buf.drain(..line_end + 2);
            while self.buf.len() < size + 2 {
                self.fill().await;
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
            if size == 0 {
                return body;
            }
        }
    }
}

/// Sends one HTTP/2 request on a new connection presenting `cert`; the status, headers and
/// body.
pub async fn http2(
    server: &TestServer,
    cert: Option<&(PathBuf, PathBuf)>,
    req: http::Request<http_body_util::Full<Bytes>>,
) -> (http::StatusCode, http::HeaderMap, Bytes) {
    use http_body_util::BodyExt;
    let tls = server.tls(cert, b"h2").await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    let resp = sender.send_request(req).await.expect("an HTTP/2 answer");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("the body").to_bytes();
    (parts.status, parts.headers, body)
}
