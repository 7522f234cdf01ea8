//! A request as it goes to the backends: shaped, its body held whole so a retry can send it
//! again, with what decides where and how it goes (its flow, who writes its answer, its
//! connection's holds); and kubegate's own requests (token and access reviews, discovery
//! reads), sent as [`SELF_USER`].

use crate::state::Kind;
use crate::telemetry::costs::Payer;
use crate::terminate::exchange::bodies::Held;
use crate::terminate::upstream::flow::FlowKey;
use crate::terminate::upstream::signals::Origin;
use crate::terminate::upstream::upstreams::Upstreams;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Uri, Version};
use kubegate_wire::identity::UserInfo;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// The user kubegate's own requests (discovery reads, token reviews) are sent as, by its
/// front-proxy certificate.
pub const SELF_USER: &str = "kubegate";

/// Gives a request whose body kubegate holds whole a `Content-Length` if the client sent none
/// (HTTP/1.1 chunked; HTTP/2 may omit it), as hyper's client did: the apiserver's body limit
/// reads it before the body.
pub fn set_content_length(method: &Method, headers: &mut HeaderMap, len: usize) {
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
/// The `User-Agent` in `headers`, or `""`.
pub fn user_agent(headers: &HeaderMap) -> &str {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// A request ready to send to any backend, as often as retries need.
pub struct Outgoing {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// The body's charge against the bounds on held bodies, given back with the last copy.
    held: Option<Arc<Held>>,
    kind: Kind,
    /// The query the client sent (a watch's upstream query may differ).
    client_query: Option<String>,
    /// Its flow, which decides its priority level upstream.
    flow: FlowKey,
    /// Who writes its answer: whether what comes back can be the apiserver's own.
    origin: Origin,
    /// Its client connection's count of held requests (`net::hold`); none for kubegate's own.
    connection_holds: Option<Arc<AtomicUsize>>,
    /// The replica its first attempt goes to while it can (a continue page's first-page
    /// replica: `request::pages`).
    preferred: Option<SocketAddr>,
    /// Whom its cost is charged to (`telemetry::costs`); none for kubegate's own.
    payer: Option<Arc<Payer>>,
}

impl Outgoing {
    /// A client's request, shaped (`request::shape`): sent as `kind`, its client's query
    /// `client_query`, counted in its connection's `holds`.
    pub fn of_client(
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
        kind: Kind,
        client_query: Option<String>,
        holds: Arc<AtomicUsize>,
    ) -> Outgoing {
        Outgoing {
            method,
            uri,
            headers,
            body,
            held: None,
            kind,
            client_query,
            flow: FlowKey::default(),
            origin: Origin::Apiserver,
            connection_holds: Some(holds),
            preferred: None,
            payer: None,
        }
    }

    /// A request of kubegate's own to `path` (JSON both ways; a patch's body is a JSON merge
    /// patch), sent as user [`SELF_USER`] over the front-proxy certificate; `None` without one.
    pub fn as_kubegate(
        upstreams: &Upstreams,
        method: Method,
        path: Uri,
        body: Bytes,
    ) -> Option<Outgoing> {
        upstreams.tls.presented()?;
        let mut headers = HeaderMap::new();
        let json = HeaderValue::from_static("application/json");
        headers.insert(header::ACCEPT, json.clone());
        if !body.is_empty() {
            headers.insert(header::CONTENT_TYPE, json);
        }
        let me = UserInfo {
            user: SELF_USER.to_string(),
            groups: Vec::new(),
            uid: None,
            extra: Default::default(),
        };
        upstreams.identity.apply(&me, &mut headers);
        set_content_length(&method, &mut headers, body.len());
        Some(Outgoing {
            uri: upstream_uri(path, &HeaderMap::new(), &upstreams.tls.server_name),
            method,
            headers,
            body,
            held: None,
            kind: Kind::WithIdentity,
            client_query: None,
            flow: FlowKey::default(),
            origin: Origin::Apiserver,
            connection_holds: None,
            preferred: None,
            payer: None,
        })
    }

    /// The body's charge is held as long as this request (and any copy of it) lives.
    pub fn holding(mut self, held: Held) -> Outgoing {
        self.held = Some(Arc::new(held));
        self
    }

    /// The request is of `flow`.
    pub fn in_flow(mut self, flow: FlowKey) -> Outgoing {
        self.flow = flow;
        self
    }

    /// Its flow.
    pub fn flow(&self) -> FlowKey {
        self.flow
    }

    /// Its answer is written by `origin`.
    pub fn answered_by(mut self, origin: Origin) -> Outgoing {
        self.origin = origin;
        self
    }

    /// Who writes its answer.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Its first attempt goes to `replica` while it can.
    pub fn prefer(&mut self, replica: SocketAddr) {
        self.preferred = Some(replica);
    }

    /// The replica its first attempt goes to while it can.
    pub fn preferred(&self) -> Option<SocketAddr> {
        self.preferred
    }

    /// Its cost is charged to `payer`.
    pub fn bill_to(&mut self, payer: Arc<Payer>) {
        self.payer = Some(payer);
    }

    /// Whom its cost is charged to.
    pub fn payer(&self) -> Option<&Arc<Payer>> {
        self.payer.as_ref()
    }

    /// Its client connection's count of held requests, whose share it takes.
    pub fn connection_holds(&self) -> Option<&AtomicUsize> {
        self.connection_holds.as_deref()
    }

    /// The method sent upstream.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The headers sent upstream (the head's, before its `Host`).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The URI sent upstream.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The body, held whole.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Which kind of upstream connection it needs.
    pub fn kind(&self) -> Kind {
        self.kind
    }

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
            held: self.held.clone(),
            kind: self.kind,
            client_query: self.client_query.clone(),
            flow: self.flow,
            origin: self.origin.clone(),
            connection_holds: self.connection_holds.clone(),
            preferred: self.preferred,
            payer: self.payer.clone(),
        }
    }

    /// The request's head for one attempt (its body is [`Outgoing::body`]).
    pub fn head(&self) -> Request<()> {
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = Version::HTTP_2;
        *req.headers_mut() = self.headers.clone();
        req
    }
}
