//! One terminate-mode request, from the client's headers to the backend's response:
//!
//! 1. Identity: every identity header the client sent is removed; a verified client
//!    certificate becomes `X-Remote-User`/`X-Remote-Group` (sent over the front-proxy
//!    certificate); tokens and `Impersonate-*` pass untouched.
//! 2. The body is read whole (bounded): a retry must be able to send it again.
//! 3. A backend is picked per request, by requests in flight weighted by latency; a stream is
//!    taken on one of its HTTP/2 connections, or a connection is opened.
//! 4. Failures the apiserver provably did not process go to another backend (any verb), as do
//!    idempotent reads that broke before response headers; a shutting-down apiserver's 429/503
//!    counts as unprocessed. Nothing is retried once its response headers were forwarded.

use crate::dial::dial;
use crate::gateway::Gateway;
use crate::labels::{ConnectError, RequestFailure};
use crate::planes::Backend;
use crate::proxy::PASSIVE_EJECTION;
use crate::terminate::body::{Relayed, ResponseBody};
use crate::terminate::h2client::{self, ResponseStream};
use crate::terminate::retry::{may_retry, Failure};
use crate::terminate::status::{broken, status, unavailable};
use crate::terminate::upstream::{H2Conn, InFlight, Killer, Kind, Stream, Upstream};
use crate::terminate::watch::{self, resumed_query, Framing};
use crate::terminate::Upstreams;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use kubegate_config::BalancePolicy;
use kubegate_pool::{pick, Candidates};
use kubegate_wire::classify::{classify, RequestClass, Verb};
use kubegate_wire::identity::CertIdentity;
use rustls::pki_types::ServerName;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest 429/503 body read to tell a shutting-down apiserver from a busy one.
const STATUS_BODY_LIMIT: usize = 16 * 1024;

/// How much of one response a backend may send before kubegate's client has read it: what a
/// response whose client stops reading holds in kubegate's memory (a client's stream window
/// stops the relay, then this one stops the backend). 256 KiB moved eight concurrent 1 MiB
/// LISTs 20-48% faster than 1 MiB did, with half the spread in their times (bench/README.md,
/// "Bulk").
const UPSTREAM_STREAM_WINDOW: u32 = 256 << 10;

/// The connection window toward a backend covers the windows of all its streams (the largest
/// HTTP/2 allows), so that a client that stops reading stalls only its own response, never the
/// others sharing kubegate's connection. (The two windows grew alike with hyper's adaptive
/// window: one stalled LIST stopped every response on the connection.)
const UPSTREAM_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// A client connection, as its requests need it.
pub struct Client {
    /// The verified client certificate's identity, if any.
    pub identity: Option<CertIdentity>,
    /// The client's IP as an `X-Forwarded-For` value (the apiserver's audit log reads it),
    /// made once per connection.
    forwarded_for: Option<HeaderValue>,
}

impl Client {
    /// A client connecting from `addr`, with the identity of its verified certificate.
    pub fn new(addr: SocketAddr, identity: Option<CertIdentity>) -> Client {
        let forwarded_for = HeaderValue::from_str(&client_ip(addr).to_string()).ok();
        Client {
            identity,
            forwarded_for,
        }
    }
}

/// Serves one request.
pub async fn handle(
    gw: Arc<Gateway>,
    client: Arc<Client>,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let Some(terminate) = gw.terminate() else {
        return unavailable("terminate mode is not configured");
    };
    let upstreams = terminate.upstreams();
    let class = classify(req.method(), req.uri());
    if crate::terminate::upgrade::requested(&req) {
        // Boxed, as every rarely taken path that awaits a large future: a future is as large
        // as its largest await, and each request's is allocated and moved whole.
        return Box::pin(crate::terminate::upgrade::proxy(
            &gw, &upstreams, &client, req, class,
        ))
        .await;
    }
    let (mut parts, body) = req.into_parts();
    let kind = prepare_headers(&gw, &upstreams, &client, &mut parts.headers);
    let client_query = parts.uri.query().map(str::to_string);
    // Before the hop-by-hop headers go: an HTTP/1.1 client's Host is one of them.
    let uri = upstream_uri(parts.uri, &parts.headers, &upstreams.tls.server_name);
    remove_hop_by_hop(parts.version, &mut parts.headers);
    let body = if body.is_end_stream() {
        // Most requests (GET, watch, DELETE without options) carry none.
        Bytes::new()
    } else {
        match read_body(&gw, body).await {
            Ok(body) => body,
            Err(answer) => return answer,
        }
    };
    set_content_length(&parts.method, &mut parts.headers, body.len());
    let mut outgoing = Outgoing {
        method: parts.method,
        uri,
        headers: parts.headers,
        body,
        kind,
        client_query,
    };
    if class.verb == Verb::Watch {
        // Bookmarks carry positions: asked for upstream whatever the client asked (those it
        // did not ask for are kept from it).
        outgoing = outgoing.with_query(&resumed_query(outgoing.client_query(), None, None));
    }
    send(gw, upstreams, outgoing, class).await
}

/// Reads a request body whole (a retry must be able to send it again), up to
/// `terminate.max_request_body_bytes`; `Err` is the answer for the client. The read is
/// boxed: only requests with a body pay for its future.
async fn read_body(gw: &Gateway, body: Incoming) -> Result<Bytes, Response<ResponseBody>> {
    let limit = gw.config().load().terminate.max_request_body_bytes;
    let read = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX)).collect();
    match Box::pin(read).await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            gw.metrics().request_failed(RequestFailure::BodyTooLarge);
            Err(status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                &format!("the request body is larger than {limit} bytes"),
                None,
            ))
        }
        Err(e) => {
            gw.metrics().request_failed(RequestFailure::BadRequest);
            Err(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("reading the request body: {e}"),
                None,
            ))
        }
    }
}

/// Removes the client's identity headers and sets the ones kubegate vouches for; adds
/// `X-Forwarded-For`. Returns which kind of upstream connection the request needs.
pub fn prepare_headers(
    gw: &Gateway,
    upstreams: &Upstreams,
    client: &Client,
    headers: &mut HeaderMap,
) -> Kind {
    let m = gw.metrics();
    let stripped = upstreams.identity.strip(headers);
    if stripped > 0 {
        m.identity_headers_stripped.inc_by(stripped as u64);
    }
    let vouched = match (&client.identity, upstreams.tls.with_identity.is_some()) {
        (Some(id), true) => upstreams.identity.apply(id, headers),
        _ => false,
    };
    let identity = if vouched {
        crate::labels::Identity::ClientCertificate
    } else if headers.contains_key(header::AUTHORIZATION) {
        crate::labels::Identity::BearerToken
    } else {
        crate::labels::Identity::Anonymous
    };
    m.count_identity(identity);
    let kind = match identity {
        crate::labels::Identity::ClientCertificate => Kind::WithIdentity,
        crate::labels::Identity::BearerToken => Kind::BearerToken,
        crate::labels::Identity::Anonymous => Kind::Anonymous,
    };
    let forwarded_for = HeaderName::from_static("x-forwarded-for");
    let forwarded = match headers.get(&forwarded_for).and_then(|v| v.to_str().ok()) {
        Some(before) => client
            .forwarded_for
            .as_ref()
            .and_then(|ip| ip.to_str().ok())
            .and_then(|ip| HeaderValue::from_str(&format!("{before}, {ip}")).ok()),
        None => client.forwarded_for.clone(),
    };
    if let Some(v) = forwarded {
        headers.insert(forwarded_for, v);
    }
    kind
}

fn client_ip(addr: SocketAddr) -> IpAddr {
    addr.ip().to_canonical()
}

/// Gives a request whose body kubegate holds whole a `Content-Length` if the client sent none
/// (HTTP/1.1 chunked; HTTP/2 may omit it), as hyper's client did: the apiserver's body limit
/// reads it before the body.
fn set_content_length(method: &Method, headers: &mut HeaderMap, len: usize) {
    let payload_defined = !matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
    );
    if len > 0 || payload_defined {
        headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
}

/// Headers that describe one connection, not the request: they never cross a proxy (and
/// HTTP/2 forbids them), from a request of `version`.
pub fn remove_hop_by_hop(version: Version, headers: &mut HeaderMap) {
    if version == Version::HTTP_2 {
        // h2 refuses a request carrying any other connection-specific header (a malformed
        // stream), so only these two can be there; the scan below runs for every request.
        headers.remove(header::HOST);
        headers.remove(header::TE);
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().to_ascii_lowercase().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
        header::HOST,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
}

/// The request's URI toward a backend, absolute as HTTP/2 wants it: the client's path and
/// query, kept as they are (not parsed again), and the authority it addressed (HTTP/2
/// `:authority`, HTTP/1.1 `Host`), else the upstream server name.
pub fn upstream_uri(uri: Uri, headers: &HeaderMap, server_name: &ServerName<'_>) -> Uri {
    let mut parts = uri.into_parts();
    if parts.authority.is_none() {
        parts.authority = headers
            .get(header::HOST)
            .and_then(|h| Authority::try_from(h.as_bytes()).ok())
            .or_else(|| server_authority(server_name));
    }
    parts.scheme = Some(Scheme::HTTPS);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"))
}

/// The upstream server name as an authority (an IPv6 address in brackets).
fn server_authority(name: &ServerName<'_>) -> Option<Authority> {
    match name {
        ServerName::IpAddress(rustls::pki_types::IpAddr::V6(_)) => {
            Authority::try_from(format!("[{}]", name.to_str())).ok()
        }
        _ => Authority::try_from(name.to_str().as_ref()).ok(),
    }
}

/// A request ready to send to any backend, as often as retries need.
pub struct Outgoing {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    kind: Kind,
    /// The query the client sent (a watch's upstream query may differ).
    client_query: Option<String>,
}

impl Outgoing {
    /// The query the client sent.
    pub fn client_query(&self) -> Option<&str> {
        self.client_query.as_deref()
    }

    /// The same request with another query.
    pub fn with_query(&self, query: &str) -> Outgoing {
        let path = self.uri.path();
        let pq = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let mut parts = self.uri.clone().into_parts();
        parts.path_and_query = pq.parse().ok();
        Outgoing {
            method: self.method.clone(),
            uri: Uri::from_parts(parts).unwrap_or_else(|_| self.uri.clone()),
            headers: self.headers.clone(),
            body: self.body.clone(),
            kind: self.kind,
            client_query: self.client_query.clone(),
        }
    }

    /// The request's head for one attempt (its body is [`Outgoing::body`]).
    fn head(&self) -> Request<()> {
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = Version::HTTP_2;
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// What an attempt that reached a backend brought back.
pub enum Answer {
    /// Response headers, the body still to come, and what the request holds meanwhile.
    Streaming {
        /// The backend's response.
        resp: Response<ResponseStream>,
        /// The request's registration on the backend.
        in_flight: InFlight,
        /// Its stream slot.
        stream: Stream,
    },
    /// A whole response (a 429/503 read to tell a shutting-down apiserver from a busy one).
    Whole(Response<ResponseBody>),
}

/// Sends `outgoing` to backends not in `tried` until one answers or the rules forbid another
/// try. `Err(None)`: no backend could be picked; `Err(Some(failure))`: the last attempt's.
pub async fn dispatch(
    gw: &Gateway,
    upstreams: &Upstreams,
    outgoing: &Outgoing,
    class: RequestClass,
    tried: &mut Vec<SocketAddr>,
) -> Result<Answer, Option<Failure>> {
    let (policy, attempts, no_ready) = {
        let c = gw.config().load();
        (c.balance, c.connect.attempts, c.no_ready_backend)
    };
    let pool = gw.pool();
    let metrics = gw.metrics();
    let mut last: Option<Failure> = None;
    for _ in 0..attempts {
        let table = pool.routing();
        let candidates = match table.candidates(no_ready) {
            Candidates::Ready(c) => c,
            Candidates::Fallback(c) => {
                metrics.fallback.inc();
                c
            }
            Candidates::None => break,
        };
        let load = load_for(policy);
        let Some(backend) = pick(policy, candidates, tried, pool.cursor(), &load) else {
            break;
        };
        tried.push(backend.address);
        if let Some(failure) = last {
            metrics.request_retry(failure);
        }
        match attempt(gw, upstreams, &backend, outgoing, class).await {
            Ok(answer) => return Ok(answer),
            Err(failure) => {
                tracing::debug!(backend = %backend.info().name, failure = failure.as_str(), verb = class.verb.as_str(), "request attempt failed");
                last = Some(failure);
                if !may_retry(failure, &class) {
                    break;
                }
            }
        }
    }
    Err(last)
}

/// Sends `outgoing` and answers the client.
async fn send(
    gw: Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    outgoing: Outgoing,
    class: RequestClass,
) -> Response<ResponseBody> {
    let metrics = gw.metrics();
    match dispatch(&gw, &upstreams, &outgoing, class, &mut Vec::new()).await {
        Ok(Answer::Whole(resp)) => resp,
        Ok(Answer::Streaming {
            resp,
            in_flight,
            stream,
        }) => {
            let watch = class.verb == Verb::Watch;
            let framing = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(Framing::of);
            match framing {
                Some(framing) if watch && resp.status() == StatusCode::OK => watch::follow(
                    gw.clone(),
                    upstreams.clone(),
                    outgoing,
                    class,
                    resp,
                    (in_flight, stream),
                    framing,
                ),
                _ => resp.map(|body| {
                    ResponseBody::Relayed(Relayed::new(body, watch, in_flight, stream))
                }),
            }
        }
        Err(None) => {
            metrics.request_failed(RequestFailure::NoReadyBackend);
            unavailable("no apiserver is ready")
        }
        Err(Some(failure)) if !may_retry(failure, &class) => {
            metrics.request_failed(RequestFailure::Broken);
            broken("the connection to the apiserver broke after the request was sent: it may have been applied")
        }
        Err(Some(_)) => {
            metrics.request_failed(RequestFailure::Unavailable);
            unavailable("no apiserver could take the request")
        }
    }
}

/// Terminate mode's load signal under `policy`: `least-connections` picks the fewest requests
/// in flight (ties rotate, so equal replicas share requests evenly); `power-of-two` compares two
/// replicas by requests in flight weighted by their latency, so a slow replica gets less.
pub fn load_for(policy: BalancePolicy) -> fn(&Backend) -> u64 {
    match policy {
        BalancePolicy::PowerOfTwo => |b| b.planes().terminate.load(),
        BalancePolicy::LeastConnections | BalancePolicy::RoundRobin => {
            |b| b.planes().terminate.busy() as u64
        }
    }
}

/// One attempt on `backend`.
async fn attempt(
    gw: &Gateway,
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    outgoing: &Outgoing,
    class: RequestClass,
) -> Result<Answer, Failure> {
    let mut stream = stream_to(gw, upstreams, backend, outgoing.kind).await?;
    let in_flight = Upstream::begin(backend, class.long_running.is_some());
    let mut sent = Instant::now();
    let mut refused = false;
    let resp = loop {
        let failure = match h2client::send(stream.sender(), outgoing.head(), &outgoing.body).await {
            Ok(resp) => break resp,
            Err(failure) => failure,
        };
        // The connection takes no more streams, and did not process this one: once more on
        // another connection to the same backend (an apiserver sends GOAWAY after every
        // anonymous request over HTTP/2), unless it is known to be shutting down; then
        // another backend.
        let connection_refused = matches!(failure, Failure::Unsent | Failure::GoAway);
        if connection_refused {
            stream.refused();
        }
        if !connection_refused || backend.shutting_down() || std::mem::replace(&mut refused, true) {
            return Err(failure);
        }
        stream = stream_to(gw, upstreams, backend, outgoing.kind).await?;
        sent = Instant::now();
    };
    let upstream = &backend.planes().terminate;
    if class.long_running.is_none() {
        let took = sent.elapsed();
        upstream.observe_latency(took);
        gw.metrics().observe_request_duration(class.verb, took);
    }
    let code = resp.status();
    let answer = if code == StatusCode::TOO_MANY_REQUESTS || code == StatusCode::SERVICE_UNAVAILABLE
    {
        let (parts, body) = resp.into_parts();
        let body = read_small(body).await.map_err(|_| Failure::Reset)?;
        if shutting_down(backend, &body) {
            return Err(Failure::ShuttingDown);
        }
        Answer::Whole(Response::from_parts(parts, ResponseBody::full(body)))
    } else {
        Answer::Streaming {
            resp,
            in_flight,
            stream,
        }
    };
    gw.metrics()
        .count_request(&backend.info().name, class.verb, code);
    Ok(answer)
}

/// Whether a 429/503 came from an apiserver that is shutting down (rejected before any
/// handler ran), rather than from priority and fairness or a failing dependency.
fn shutting_down(backend: &Backend, body: &[u8]) -> bool {
    backend.shutting_down() || contains(body, b"is shutting down")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Reads a small answer whole (at most 16 KiB, within 10 s).
pub async fn read_small<B>(body: B) -> Result<Bytes, ()>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let read = Limited::new(body, STATUS_BODY_LIMIT).collect();
    match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        _ => Err(()),
    }
}

/// A stream to `backend` on a connection of `kind`, opening a connection if every one is full.
async fn stream_to(
    gw: &Gateway,
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    kind: Kind,
) -> Result<Stream, Failure> {
    let upstream = &backend.planes().terminate;
    let max = gw.config().load().upstream.max_streams_per_connection;
    if let Some(s) = upstream.stream(kind, max) {
        return Ok(s);
    }
    let _turn = upstream.dial_turn(kind).await;
    // Another request may have opened one while this one waited.
    if let Some(s) = upstream.stream(kind, max) {
        return Ok(s);
    }
    let tls = match kind {
        Kind::WithIdentity => upstreams.tls.with_identity.clone(),
        Kind::BearerToken | Kind::Anonymous => Some(upstreams.tls.without_identity.clone()),
    }
    .expect("requests carry identity only when a front-proxy certificate is configured");
    let timeout = gw.config().load().connect.timeout;
    // Boxed: the TLS and HTTP/2 handshakes' future is ~6.5 KB, and every request's future
    // would otherwise be that large (and moved whole) for a path few requests take.
    match Box::pin(dial_h2(
        backend.address,
        tls,
        upstreams.tls.server_name.clone(),
        timeout,
    ))
    .await
    {
        Ok(conn) => Ok(upstream.add(kind, conn)),
        Err(e) => {
            let name = backend.info().name.clone();
            let reason = ConnectError::of(&e);
            gw.metrics().connect_error(&name, reason);
            tracing::warn!(backend = %name, reason = reason.as_str(), error = %e, "upstream connection failed");
            backend.connect_failed(PASSIVE_EJECTION);
            Err(Failure::Connect)
        }
    }
}

/// Opens an HTTP/2 connection to `addr` over TLS (`name` as SNI and verified name).
async fn dial_h2(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    timeout: Duration,
) -> io::Result<H2Conn> {
    let (tls, socket) = tls_connect(addr, tls, name, timeout).await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(io::Error::other("the backend did not agree to HTTP/2"));
    }
    let (sender, conn) =
        h2client::handshake(tls, UPSTREAM_STREAM_WINDOW, UPSTREAM_CONNECTION_WINDOW)
            .await
            .map_err(io::Error::other)?;
    let task = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    Ok(H2Conn::new(
        sender,
        Killer::new(socket, task.abort_handle()),
    ))
}

/// TCP and TLS to a backend, both within `timeout`; with a duplicate of the TCP socket, which
/// kubegate shuts down to end the connection whatever task drives it.
pub async fn tls_connect(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    timeout: Duration,
) -> io::Result<(
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    std::net::TcpStream,
)> {
    let tcp = dial(addr, timeout).await?;
    let _ = tcp.set_nodelay(true);
    let std = tcp.into_std()?;
    let socket = std.try_clone()?;
    let tcp = tokio::net::TcpStream::from_std(std)?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let tls = tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok((tls, socket))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_never_cross() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, X-Trace".parse().unwrap());
        h.insert("x-trace", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        h.insert(header::HOST, "api:6443".parse().unwrap());
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        let mut from_h2 = h.clone();
        from_h2.remove(header::CONNECTION);
        from_h2.remove("keep-alive");
        remove_hop_by_hop(Version::HTTP_11, &mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept"]);
        // What h2 lets through in a request: Host and `TE: trailers` go.
        remove_hop_by_hop(Version::HTTP_2, &mut from_h2);
        let mut left: Vec<_> = from_h2.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept", "x-trace"]);
    }

    #[test]
    fn the_authority_is_the_clients_then_the_upstream_name() {
        let name = ServerName::try_from("kubernetes").unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "10.0.0.1:6443".parse().unwrap());
        let h2: Uri = "https://api.example:443/api".parse().unwrap();
        let h1 = HeaderMap::new();
        assert_eq!(
            upstream_uri("/api/v1?watch=1".parse().unwrap(), &h1, &name).to_string(),
            "https://kubernetes/api/v1?watch=1"
        );
        assert_eq!(
            upstream_uri("/api/v1?watch=1".parse().unwrap(), &h, &name).to_string(),
            "https://10.0.0.1:6443/api/v1?watch=1"
        );
        assert_eq!(
            upstream_uri(h2, &h, &name).to_string(),
            "https://api.example:443/api"
        );
        let v6 = ServerName::try_from("::1").unwrap();
        assert_eq!(
            upstream_uri("/api".parse().unwrap(), &h1, &v6).to_string(),
            "https://[::1]/api"
        );
    }

    #[test]
    fn a_held_body_gets_a_content_length_unless_the_client_gave_one() {
        let mut h = HeaderMap::new();
        set_content_length(&Method::POST, &mut h, 12);
        assert_eq!(h[header::CONTENT_LENGTH], "12");
        let mut h = HeaderMap::new();
        set_content_length(&Method::POST, &mut h, 0);
        assert_eq!(h[header::CONTENT_LENGTH], "0");
        let mut h = HeaderMap::new();
        set_content_length(&Method::GET, &mut h, 0);
        assert!(h.get(header::CONTENT_LENGTH).is_none());
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        set_content_length(&Method::PATCH, &mut h, 12);
        assert_eq!(h.get_all(header::CONTENT_LENGTH).iter().count(), 1);
    }

    #[test]
    fn a_shutdown_answer_is_told_from_a_busy_one() {
        assert!(contains(
            b"The apiserver is shutting down, please try again later.",
            b"is shutting down"
        ));
        assert!(!contains(
            b"Too many requests, please try again later.",
            b"is shutting down"
        ));
    }
}
