//! Shaping a client's request for the backends (terminate mode): what kubegate removes, adds
//! and vouches for, the URI HTTP/2 wants, and the request held whole so a retry can send it
//! again.
//!
//! 1. Identity: every identity header the client sent is removed; a verified client
//!    certificate becomes `X-Remote-User`/`X-Remote-Group` (sent over the front-proxy
//!    certificate); tokens and `Impersonate-*` pass untouched. `X-Forwarded-For` gets the
//!    client's address, and an untrusted client's `X-Real-Ip` goes (the apiserver's audit
//!    log reads it after `X-Forwarded-For`).
//! 2. Connection-specific headers never cross; the URI is made absolute.
//! 3. A held body gets a `Content-Length` when the client sent none.
//!
//! Pure functions of the request and the upstream settings (no I/O), reached by the fuzz
//! targets through [`Shaper`].

use crate::state::Kind;
use crate::telemetry::{Identity, TerminateMetrics};
use crate::terminate::upstream::outgoing::{set_content_length, upstream_uri, Outgoing};
use crate::terminate::upstream::upstreams::Upstreams;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::Version;
use kubegate_wire::identity::{IdentityHeaders, UserInfo};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::SystemTime;

/// Why a verified client certificate cannot be passed on: every request on its connection is
/// answered 401, as the apiserver would answer it (never sent on as anonymous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateRefusal {
    /// It has no common name (the apiserver's x509 authenticator: "common name of client
    /// certificate is empty").
    NoName,
    /// Its name or an organization holds a control character or leading or trailing blanks:
    /// as a header value it would not reach the apiserver as the certificate says it.
    Unsendable,
    /// Its subject has several UID attributes, or an empty one (1.33+'s x509 authenticator
    /// refuses it).
    BadUid,
    /// It expired after the connection's handshake: the apiserver verifies a client
    /// certificate with the current time at every request.
    Expired,
}

impl CertificateRefusal {
    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            CertificateRefusal::NoName => {
                "Unauthorized: the client certificate has no common name (CN), so it names no user"
            }
            CertificateRefusal::Unsendable => {
                "Unauthorized: the client certificate's name or organization holds characters that cannot be passed on unchanged"
            }
            CertificateRefusal::BadUid => {
                "Unauthorized: the client certificate's subject has several UID attributes (1.3.6.1.4.1.57683.2), or an empty one"
            }
            CertificateRefusal::Expired => {
                "Unauthorized: the client certificate has expired since the connection was made: reconnect with a current one"
            }
        }
    }
}

/// A client connection, as its requests need it.
pub struct Client {
    /// Where it connects from.
    pub addr: SocketAddr,
    /// It speaks HTTP/2 (else HTTP/1.1).
    pub h2: bool,
    /// The verified client certificate's identity, if any (shared with the access log).
    pub identity: Option<Arc<UserInfo>>,
    /// The client presented a verified certificate that cannot be passed on.
    pub refused_certificate: Option<CertificateRefusal>,
    /// When its verified certificate expires: from then on every request is refused, as the
    /// apiserver's x509 authenticator verifies a certificate at every request, not only at the
    /// handshake (a connection outlives its certificate).
    pub certificate_expires: Option<SystemTime>,
    /// Request body bytes held for this connection (`bodies`).
    pub body_bytes: Arc<AtomicU64>,
    /// Requests of this connection held while its cluster cannot serve (`net::hold`).
    pub holds: Arc<AtomicUsize>,
    /// Answer bytes held for others from reads this connection led (`join`).
    pub shared_bytes: Arc<AtomicU64>,
    /// The client's IP as an `X-Forwarded-For` value (the apiserver's audit log reads it),
    /// made once per connection.
    forwarded_for: Option<HeaderValue>,
    /// The client is a proxy kubegate trusts (`terminate.trusted_proxies`): its
    /// `X-Forwarded-For` is kept and extended; anyone else's is replaced.
    trusted_proxy: bool,
}

impl Client {
    /// A client connecting from `addr`, with the identity of its verified certificate.
    pub fn new(addr: SocketAddr, identity: Option<UserInfo>) -> Client {
        let forwarded_for = HeaderValue::from_str(&client_ip(addr).to_string()).ok();
        Client {
            addr,
            h2: false,
            identity: identity.map(Arc::new),
            refused_certificate: None,
            certificate_expires: None,
            body_bytes: Arc::default(),
            holds: Arc::default(),
            shared_bytes: Arc::default(),
            forwarded_for,
            trusted_proxy: false,
        }
    }

    /// The connection speaks HTTP/2.
    pub fn speaking_h2(mut self, h2: bool) -> Client {
        self.h2 = h2;
        self
    }

    /// The client presented a verified certificate that cannot be passed on.
    pub fn refusing(mut self, refusal: Option<CertificateRefusal>) -> Client {
        self.refused_certificate = refusal;
        self
    }

    /// Its verified certificate expires at `expires`.
    pub fn certificate_expiring(mut self, expires: Option<SystemTime>) -> Client {
        self.certificate_expires = expires;
        self
    }

    /// Why its certificate is refused for a request now, if it is: one that cannot be passed
    /// on, or one that has expired since the handshake.
    pub fn certificate_refused_now(&self) -> Option<CertificateRefusal> {
        self.refused_certificate.or_else(|| {
            self.certificate_expires
                .filter(|at| SystemTime::now() > *at)
                .map(|_| CertificateRefusal::Expired)
        })
    }

    /// The client's IP address (an IPv4 client on an IPv6 socket as IPv4).
    pub fn source(&self) -> IpAddr {
        client_ip(self.addr)
    }

    /// The client's IP address, as text.
    pub fn ip(&self) -> &str {
        self.forwarded_for
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Whether the client is one of `trusted` (proxies whose `X-Forwarded-For` is kept).
    pub fn trusting(mut self, addr: SocketAddr, trusted: &[kubegate_config::Cidr]) -> Client {
        let ip = client_ip(addr);
        self.trusted_proxy = trusted.iter().any(|c| c.contains(ip));
        self
    }
}

/// What shaping a request needs: terminate mode's identity headers, whether it vouches for
/// verified clients (a front-proxy certificate is configured), the upstream server name, and
/// where stripped headers and identities are counted.
pub struct Shaper<'a> {
    /// The front-proxy header names.
    pub identity: &'a IdentityHeaders,
    /// A front-proxy certificate is configured: verified client identities are passed on.
    pub vouches: bool,
    /// The upstream server name (the authority when the client named none).
    pub server_name: &'a ServerName<'static>,
    /// Where identities and stripped headers are counted.
    pub metrics: &'a TerminateMetrics,
}

impl<'a> Shaper<'a> {
    /// Shaping for `upstreams`, counted in `metrics`.
    pub fn new(upstreams: &'a Upstreams, metrics: &'a TerminateMetrics) -> Shaper<'a> {
        Shaper {
            identity: &upstreams.identity,
            vouches: upstreams.tls.vouches(),
            server_name: &upstreams.tls.server_name,
            metrics,
        }
    }

    /// The request of `client` with head `parts` and body `body` (read whole), as the
    /// backends get it.
    pub fn request(&self, client: &Client, mut parts: Parts, body: Bytes) -> Outgoing {
        let client_query = parts.uri.query().map(str::to_string);
        // Before the hop-by-hop headers go: an HTTP/1.1 client's Host is one of them.
        let uri = upstream_uri(parts.uri, &parts.headers, self.server_name);
        // Before kubegate sets its own headers: a client's `Connection` could name them.
        remove_hop_by_hop(parts.version, &mut parts.headers);
        let kind = self.headers(client, &mut parts.headers);
        set_content_length(&parts.method, &mut parts.headers, body.len());
        Outgoing::of_client(
            parts.method,
            uri,
            parts.headers,
            body,
            kind,
            client_query,
            client.holds.clone(),
        )
    }

    /// Shapes the head of an upgrade request (exec, attach, port-forward) in place: identity,
    /// and only the two headers that make it an upgrade cross as connection headers. Returns
    /// the kind of connection it needs.
    pub fn upgrade(&self, client: &Client, parts: &mut Parts) -> Kind {
        let upgrade = parts.headers.get(header::UPGRADE).cloned();
        // Before the hop-by-hop headers go: an HTTP/1.1 client's Host is one of them.
        let uri = upstream_uri(parts.uri.clone(), &parts.headers, self.server_name);
        // Before kubegate sets its own headers: a client's `Connection` could name them.
        remove_hop_by_hop(parts.version, &mut parts.headers);
        let kind = self.headers(client, &mut parts.headers);
        if let Some(host) = uri.authority() {
            if let Ok(h) = HeaderValue::from_str(host.as_str()) {
                parts.headers.insert(header::HOST, h);
            }
        }
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        if let Some(u) = upgrade {
            parts.headers.insert(header::UPGRADE, u);
        }
        kind
    }

    /// Removes the client's identity headers and sets the ones kubegate vouches for; adds
    /// `X-Forwarded-For`. Returns which kind of upstream connection the request needs.
    pub fn headers(&self, client: &Client, headers: &mut HeaderMap) -> Kind {
        let m = self.metrics;
        let stripped = self.identity.strip(headers);
        if stripped > 0 {
            m.identity_headers_stripped.inc_by(stripped as u64);
        }
        let vouched = match (&client.identity, self.vouches) {
            (Some(id), true) => self.identity.apply(id, headers),
            _ => false,
        };
        let identity = if vouched {
            Identity::ClientCertificate
        } else if headers.contains_key(header::AUTHORIZATION) {
            Identity::BearerToken
        } else {
            Identity::Anonymous
        };
        m.count_identity(identity);
        let kind = match identity {
            Identity::ClientCertificate => Kind::WithIdentity,
            Identity::BearerToken => Kind::BearerToken,
            Identity::Anonymous => Kind::Anonymous,
        };
        // A trusted proxy's list is kept and extended; anyone else's is replaced, so the first
        // address the apiserver logs is one kubegate saw.
        let forwarded_for = HeaderName::from_static("x-forwarded-for");
        let before = client
            .trusted_proxy
            .then(|| {
                let all: Vec<&str> = headers
                    .get_all(&forwarded_for)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                (!all.is_empty()).then(|| all.join(", "))
            })
            .flatten();
        let forwarded = match before {
            Some(before) => client
                .forwarded_for
                .as_ref()
                .and_then(|ip| ip.to_str().ok())
                .and_then(|ip| HeaderValue::from_str(&format!("{before}, {ip}")).ok()),
            None => client.forwarded_for.clone(),
        };
        headers.remove(&forwarded_for);
        if let Some(v) = forwarded {
            headers.insert(forwarded_for, v);
        }
        if !client.trusted_proxy {
            headers.remove(HeaderName::from_static("x-real-ip"));
        }
        kind
    }
}

fn client_ip(addr: SocketAddr) -> IpAddr {
    addr.ip().to_canonical()
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
    // Read as the credentials are (`hop`): what is removed here is what they read as absent.
    let listed: Vec<HeaderName> = kubegate_wire::hop::connection_options(headers)
        .filter_map(|n| HeaderName::from_bytes(&n.to_ascii_lowercase()).ok())
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Uri};

    /// What a test's shaper borrows: the identity headers, the upstream name, the metrics.
    struct Borrowed {
        identity: IdentityHeaders,
        name: ServerName<'static>,
        metrics: TerminateMetrics,
    }

    impl Borrowed {
        fn new(identity: IdentityHeaders) -> Borrowed {
            Borrowed {
                identity,
                name: ServerName::try_from("kubernetes").unwrap(),
                metrics: TerminateMetrics::new(&prometheus::Registry::new()),
            }
        }

        fn shaper(&self, vouches: bool) -> Shaper<'_> {
            Shaper {
                identity: &self.identity,
                vouches,
                server_name: &self.name,
                metrics: &self.metrics,
            }
        }
    }

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

    /// What `Connection` names is removed exactly when the credentials read it as absent
    /// (`hop`): a value with a byte beyond ASCII among its names still removes the others, so
    /// a token kubegate did not read never reaches the apiserver.
    #[test]
    fn a_header_named_beside_bytes_beyond_ascii_is_removed_as_the_credentials_read_it() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_bytes(b"authorization, \xff").unwrap(),
        );
        h.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        assert_eq!(
            kubegate_wire::credentials::bearer(&h, false),
            kubegate_wire::credentials::Bearer::Absent
        );
        remove_hop_by_hop(Version::HTTP_11, &mut h);
        assert!(h.get(header::AUTHORIZATION).is_none());
    }

    /// Found by the `request_shaping` fuzz target: a client's `Connection` header named
    /// `X-Forwarded-For`, and the header kubegate had just set went with the hop-by-hop ones.
    #[test]
    fn a_connection_header_cannot_remove_what_kubegate_sets() {
        let fp = kubegate_config::FrontProxy::new("a".into(), "b".into());
        let borrowed = Borrowed::new(IdentityHeaders::new(&fp).unwrap());
        let shaper = borrowed.shaper(true);
        let cert = UserInfo {
            user: "alice".into(),
            groups: vec!["dev".into()],
            uid: None,
            extra: Default::default(),
        };
        let client = Client::new("192.0.2.7:4000".parse().unwrap(), Some(cert));
        let req = Request::get("/api")
            .header(
                header::CONNECTION,
                "x-forwarded-for, X-Remote-User, x-remote-group",
            )
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let out = shaper.request(&client, parts, Bytes::new());
        let h = out.head().headers().clone();
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-remote-user"], "alice");
        assert_eq!(h["x-remote-group"], "dev");
    }

    #[test]
    fn forwarded_addresses_are_replaced_unless_the_client_is_a_trusted_proxy() {
        let borrowed = Borrowed::new(IdentityHeaders::default());
        let shaper = borrowed.shaper(false);
        let xff = |client: &Client| {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
            h.append("x-forwarded-for", "198.51.100.1".parse().unwrap());
            shaper.headers(client, &mut h);
            h.get_all("x-forwarded-for")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let addr: SocketAddr = "10.1.2.3:4000".parse().unwrap();
        let stranger = Client::new(addr, None);
        assert_eq!(xff(&stranger), ["10.1.2.3"]);
        let real_ip = |client: &Client| {
            let mut h = HeaderMap::new();
            h.insert("x-real-ip", "203.0.113.66".parse().unwrap());
            shaper.headers(client, &mut h);
            h.get("x-real-ip").cloned()
        };
        assert_eq!(real_ip(&stranger), None, "forged by the client");
        let trusted = ["10.0.0.0/8".parse().unwrap()];
        let proxy = Client::new(addr, None).trusting(addr, &trusted);
        assert_eq!(xff(&proxy), ["203.0.113.9, 198.51.100.1, 10.1.2.3"]);
        assert_eq!(
            real_ip(&proxy).unwrap(),
            "203.0.113.66",
            "a trusted proxy's is kept"
        );
        let elsewhere: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let not_listed = Client::new(elsewhere, None).trusting(elsewhere, &trusted);
        assert_eq!(xff(&not_listed), ["192.0.2.1"]);
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
}
