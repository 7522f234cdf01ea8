//! Who is asking, decided as kube-apiserver decides it (`pkg/kubeapiserver/authenticator`):
//! requestheader (a front proxy's certificate plus `X-Remote-*` headers), then client
//! certificates, then bearer tokens (`--token-auth-file`); the first that succeeds wins. If none
//! does and any of them failed with an error (a certificate the client CA does not sign, an
//! unknown token, a front-proxy CN not in `--requestheader-allowed-names`), the request gets
//! 401 — never anonymous (`union.NewFailOnError`). Otherwise it is anonymous, if allowed.
//! Authorization is the default RBAC in miniature: authenticated users may do anything but
//! what `--authorization-forbid` takes from them; anonymous users may read health and
//! `/version` ([`Authenticator::allows`], which SubjectAccessReviews ask too).
//!
//! A client certificate is checked at every request, not only at the TLS handshake: the
//! apiserver's TLS listener asks for a certificate without verifying it
//! (`secure_serving.go`: `tls.RequestClientCert`), and its x509 authenticators verify the
//! chain at each request with the current time (`pkg/authentication/request/x509/x509.go`,
//! `Authenticator.AuthenticateRequest` and `Verifier.AuthenticateRequest` for front proxies:
//! `PeerCertificates[0].Verify(opts)` with `CurrentTime` unset, so `time.Now()`). A
//! certificate that expires on a long-lived connection turns every later request on it into
//! 401 (unless a bearer token authenticates it). The handshake here leaves the time to this
//! check ([`crate::clientcert`]).

use crate::bearer::Bearer;
use http::header::{HeaderMap, HeaderName};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use x509_parser::prelude::{FromDer, X509Certificate};

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups, including `system:authenticated` or `system:unauthenticated`.
    pub groups: Vec<String>,
    /// Extra attributes (from `X-Remote-Extra-*`), keys lower case.
    pub extra: BTreeMap<String, Vec<String>>,
    /// Its UID, when the authenticator gave one (`X-Remote-Uid`, a certificate's UID
    /// attribute, the token file's column); empty otherwise, as `user.Info`.
    pub uid: String,
}

impl User {
    /// `system:anonymous`.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
            uid: String::new(),
        }
    }

    fn authenticated_user(name: String, mut groups: Vec<String>) -> User {
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        User {
            name,
            groups,
            extra: BTreeMap::new(),
            uid: String::new(),
        }
    }

    /// Not anonymous.
    pub fn authenticated(&self) -> bool {
        self.name != "system:anonymous"
    }
}

/// The certificate a client presented (verified by TLS against one of the trusted CAs).
#[derive(Debug, Clone)]
pub struct PeerCert {
    /// Common name.
    pub common_name: String,
    /// Organizations.
    pub organizations: Vec<String>,
    /// The subject's UID attribute (1.3.6.1.4.1.57683.2, `AllowParsingUserUIDFromCertAuth`,
    /// on in 1.33); empty without one.
    pub uid: String,
    /// The issuer's distinguished name, DER: tells which CA signed it.
    pub issuer: Vec<u8>,
    /// The latest `NotBefore` of the certificates the client presented (the leaf and any
    /// intermediates): Go's `Verify` checks each certificate of the chain it builds.
    pub not_before: SystemTime,
    /// The earliest `NotAfter` of them.
    pub not_after: SystemTime,
}

impl PeerCert {
    /// Reads the certificates a client presented, its own first.
    pub fn from_chain<C: AsRef<[u8]>>(chain: &[C]) -> Option<PeerCert> {
        let mut peer = PeerCert::from_der(chain.first()?.as_ref())?;
        for der in &chain[1..] {
            if let Some((not_before, not_after)) = validity(der.as_ref()) {
                peer.not_before = peer.not_before.max(not_before);
                peer.not_after = peer.not_after.min(not_after);
            }
        }
        Some(peer)
    }

    /// Go's time check in `Certificate.isValid` (`crypto/x509/verify.go`), as `Verify` runs
    /// it at `now`: valid from `NotBefore` through `NotAfter`, both included.
    pub fn check_time(&self, now: SystemTime) -> Result<(), String> {
        let rfc3339 = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let detail = if now < self.not_before {
            format!(
                "current time {} is before {}",
                rfc3339(now),
                rfc3339(self.not_before)
            )
        } else if now > self.not_after {
            format!(
                "current time {} is after {}",
                rfc3339(now),
                rfc3339(self.not_after)
            )
        } else {
            return Ok(());
        };
        Err(format!(
            "x509: certificate has expired or is not yet valid: {detail}"
        ))
    }

    /// Reads a DER certificate.
    pub fn from_der(der: &[u8]) -> Option<PeerCert> {
        let (not_before, not_after) = validity(der)?;
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let subject = cert.subject();
        // Go's pkix.Name keeps the last CN of several.
        let common_name = subject
            .iter_common_name()
            .last()
            .and_then(|c| c.as_str().ok())
            .unwrap_or_default()
            .to_string();
        let organizations = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        let issuer = cert.issuer().as_raw().to_vec();
        let uid_oid = x509_parser::der_parser::oid::Oid::from(&[1, 3, 6, 1, 4, 1, 57683, 2])
            .expect("a valid OID");
        let uid = subject
            .iter_by_oid(&uid_oid)
            .next()
            .and_then(|u| u.as_str().ok())
            .unwrap_or_default()
            .to_string();
        Some(PeerCert {
            common_name,
            organizations,
            issuer,
            uid,
            not_before,
            not_after,
        })
    }
}

/// A DER certificate's `NotBefore` and `NotAfter`.
pub fn validity(der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let at = |seconds: i64| {
        if seconds >= 0 {
            UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
        }
    };
    let v = cert.validity();
    Some((at(v.not_before.timestamp()), at(v.not_after.timestamp())))
}

/// The subject DNs (DER) of the certificates in a CA file.
pub fn ca_subjects(pem: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    use rustls_pki_types::pem::PemObject;
    let mut out = Vec::new();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem) {
        let cert = cert?;
        let (_, parsed) =
            X509Certificate::from_der(&cert).map_err(|e| anyhow::anyhow!("CA certificate: {e}"))?;
        out.push(parsed.subject().as_raw().to_vec());
    }
    Ok(out)
}

/// `--requestheader-*`: which front proxies are trusted, and the headers they set.
#[derive(Debug, Clone, Default)]
pub struct RequestHeader {
    /// Subjects of `--requestheader-client-ca-file`.
    pub ca_subjects: Vec<Vec<u8>>,
    /// `--requestheader-allowed-names` (empty: any certificate from the CA).
    pub allowed_names: Vec<String>,
    /// `--requestheader-username-headers`.
    pub username_headers: Vec<HeaderName>,
    /// `--requestheader-group-headers`.
    pub group_headers: Vec<HeaderName>,
    /// `--requestheader-extra-headers-prefix`, lower case.
    pub extra_prefixes: Vec<String>,
    /// `--requestheader-uid-headers`.
    pub uid_headers: Vec<HeaderName>,
}

impl RequestHeader {
    /// `Ok(None)`: not a front-proxy request (not its CA, or no user header). In
    /// `Verifier.AuthenticateRequest`'s order: the certificate's chain and validity at `now`,
    /// then its subject (`--requestheader-allowed-names`), then the headers.
    fn authenticate(
        &self,
        peer: &PeerCert,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Result<Option<User>, String> {
        if !self.ca_subjects.contains(&peer.issuer) {
            return Ok(None);
        }
        peer.check_time(now)?;
        if !self.allowed_names.is_empty() && !self.allowed_names.contains(&peer.common_name) {
            return Err(format!(
                "requestheader: client certificate CN {:?} is not in --requestheader-allowed-names",
                peer.common_name
            ));
        }
        // The first non-empty username header wins.
        let Some(name) = self.username_headers.iter().find_map(|h| {
            headers
                .get_all(h)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find(|v| !v.is_empty())
                .map(str::to_string)
        }) else {
            return Ok(None);
        };
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h).iter())
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        let mut user = User::authenticated_user(name, groups);
        // The first non-empty UID header, as the username.
        user.uid = self
            .uid_headers
            .iter()
            .find_map(|h| {
                headers
                    .get_all(h)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| !v.is_empty())
            })
            .unwrap_or_default()
            .to_string();
        for (k, v) in headers {
            let key = k.as_str();
            if let Some(suffix) = self
                .extra_prefixes
                .iter()
                .find_map(|p| key.strip_prefix(p.as_str()))
            {
                if let Ok(v) = v.to_str() {
                    user.extra
                        .entry(percent_decode(suffix).to_lowercase())
                        .or_default()
                        .push(v.to_string());
                }
            }
        }
        Ok(Some(user))
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                match u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The authenticators of one replica, in the apiserver's order.
#[derive(Default)]
pub struct Authenticator {
    /// `--requestheader-client-ca-file` and friends.
    pub request_header: Option<RequestHeader>,
    /// Subjects of `--client-ca-file`; `None` without one (no x509 authenticator).
    pub client_ca_subjects: Option<Vec<Vec<u8>>>,
    /// `--token-auth-file`.
    pub tokens: Tokens,
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// `--authorization-token-reviewers`: who may create TokenReviews and
    /// SubjectAccessReviews (empty: anyone authenticated).
    pub token_reviewers: Vec<String>,
    /// `--authorization-forbid`: (user, resource) pairs — the user may do nothing with the
    /// resource (a stand-in for RBAC that binds it no role there).
    pub forbidden: Vec<(String, String)>,
}

impl Authenticator {
    /// Whether `user` (by name, and whether anonymous: `system:anonymous` or in
    /// `system:unauthenticated`) may act on `resource` (`None`: the non-resource `path`).
    pub fn allows(
        &self,
        user: &str,
        groups: &[String],
        resource: Option<&str>,
        path: &str,
    ) -> bool {
        let anonymous =
            user == "system:anonymous" || groups.iter().any(|g| g == "system:unauthenticated");
        if anonymous {
            return resource.is_none() && public_path(path);
        }
        !self
            .forbidden
            .iter()
            .any(|(u, r)| u == user && Some(r.as_str()) == resource)
    }

    /// Who sent a request with `headers` over a connection that presented `peer`, at `now`
    /// (the time client certificates are verified at).
    pub fn authenticate_at(
        &self,
        peer: Option<&PeerCert>,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Outcome {
        let mut outcome = Outcome {
            user: Err(String::new()),
            warning: None,
            expired_certificate: false,
        };
        let mut errors = Vec::new();
        let mut expired = false;
        if let (Some(rh), Some(peer)) = (&self.request_header, peer) {
            expired |= rh.ca_subjects.contains(&peer.issuer) && peer.check_time(now).is_err();
            match rh.authenticate(peer, headers, now) {
                Ok(Some(user)) => return outcome.with(Ok(user)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if let (Some(subjects), Some(peer)) = (&self.client_ca_subjects, peer) {
            if subjects.contains(&peer.issuer) {
                // `Verify` first; then `CommonNameUserConversion`, which gives no user (and
                // no error) for an empty CN.
                match peer.check_time(now) {
                    Err(e) => {
                        expired = true;
                        errors.push(format!(
                            "verifying certificate CN={} failed: {e}",
                            peer.common_name
                        ));
                    }
                    Ok(()) if peer.common_name.is_empty() => {}
                    Ok(()) => {
                        let mut user = User::authenticated_user(
                            peer.common_name.clone(),
                            peer.organizations.clone(),
                        );
                        user.uid = peer.uid.clone();
                        return outcome.with(Ok(user));
                    }
                }
            } else {
                errors.push(format!(
                    "verifying certificate CN={} failed: x509: certificate signed by unknown authority",
                    peer.common_name
                ));
            }
        }
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .map(http::HeaderValue::as_bytes);
        match crate::bearer::read(authorization) {
            Bearer::Token(token) => match self.tokens.user_bytes(token) {
                Some(user) => return outcome.with(Ok(user)),
                None => errors.push("invalid bearer token".into()),
            },
            Bearer::ExtraSpace => outcome.warning = Some(crate::bearer::EXTRA_SPACE_WARNING),
            Bearer::None => {}
        }
        if !errors.is_empty() {
            outcome.expired_certificate = expired;
            return outcome.with(Err(errors.join("; ")));
        }
        if self.anonymous {
            outcome.with(Ok(User::anonymous()))
        } else {
            outcome.with(Err("anonymous requests are not allowed".into()))
        }
    }
}

/// What authentication found: the user (`Err`: 401, with why), and what the response carries
/// whatever the result.
#[derive(Debug)]
pub struct Outcome {
    /// Who, or why nobody.
    pub user: Result<User, String>,
    /// A `Warning` header value the bearer-token authenticator added (the warning recorder
    /// wraps authentication, so even a 401 carries it).
    pub warning: Option<&'static str>,
    /// The request was refused, and a client certificate outside its validity was why an
    /// x509 authenticator failed (`expired_certificates_refused` in the fault port's `/state`).
    pub expired_certificate: bool,
}

impl Outcome {
    fn with(mut self, user: Result<User, String>) -> Outcome {
        self.user = user;
        self
    }
}

/// Static tokens read from a `--token-auth-file` (`token,user,uid,"group1,group2"`), less the
/// ones revoked since (the fault port's `/revoke`: a deleted service account's token, which
/// the apiserver then answers 401 for).
/// Tokens are bytes, as Go strings are: a token with bytes above ASCII is looked up as those
/// bytes (and matches only a token of the file with the same bytes).
#[derive(Default)]
pub struct Tokens {
    users: HashMap<Vec<u8>, User>,
    revoked: std::sync::RwLock<std::collections::HashSet<Vec<u8>>>,
}

impl Tokens {
    /// Parses the CSV file format of kube-apiserver's `--token-auth-file`.
    pub fn parse(text: &[u8]) -> Tokens {
        let mut map = HashMap::new();
        for line in text
            .split(|&b| b == b'\n')
            .map(<[u8]>::trim_ascii)
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        {
            let mut fields = line.splitn(4, |&b| b == b',');
            let (Some(token), Some(name)) = (fields.next(), fields.next()) else {
                continue;
            };
            let text = |f: &[u8]| String::from_utf8_lossy(f).into_owned();
            let uid = fields.next().map(text).unwrap_or_default();
            let groups: Vec<String> = fields
                .next()
                .map(|g| {
                    text(g)
                        .trim_matches('"')
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let mut user = User::authenticated_user(text(name), groups);
            user.uid = uid;
            map.insert(token.to_vec(), user);
        }
        Tokens {
            users: map,
            revoked: Default::default(),
        }
    }

    /// The user a bearer token names, unless it was revoked.
    pub fn user(&self, token: &str) -> Option<User> {
        self.user_bytes(token.as_bytes())
    }

    /// The user a bearer token's bytes name, unless it was revoked.
    pub fn user_bytes(&self, token: &[u8]) -> Option<User> {
        let revoked = self.revoked.read().unwrap_or_else(|e| e.into_inner());
        if revoked.contains(token) {
            return None;
        }
        self.users.get(token).cloned()
    }

    /// `token` is no longer accepted; whether it was one of the file's.
    pub fn revoke(&self, token: &str) -> bool {
        let known = self.users.contains_key(token.as_bytes());
        if known {
            self.revoked
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(token.as_bytes().to_vec());
        }
        known
    }
}

/// Paths `system:public-info-viewer` lets anyone read.
pub fn public_path(path: &str) -> bool {
    matches!(path, "/version" | "/version/")
        || ["/healthz", "/livez", "/readyz"]
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn cert(cn: &str, issuer: &[u8]) -> PeerCert {
        let now = SystemTime::now();
        PeerCert {
            common_name: cn.into(),
            organizations: vec!["system:masters".into()],
            issuer: issuer.to_vec(),
            uid: String::new(),
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(3600),
        }
    }

    impl Authenticator {
        /// Authentication now, the user only.
        fn authenticate(
            &self,
            peer: Option<&PeerCert>,
            headers: &HeaderMap,
        ) -> Result<User, String> {
            self.authenticate_at(peer, headers, SystemTime::now()).user
        }
    }

    fn authenticator() -> Authenticator {
        Authenticator {
            request_header: Some(RequestHeader {
                ca_subjects: vec![b"front-proxy-ca".to_vec()],
                allowed_names: vec!["front-proxy-client".into()],
                username_headers: vec![HeaderName::from_static("x-remote-user")],
                group_headers: vec![HeaderName::from_static("x-remote-group")],
                extra_prefixes: vec!["x-remote-extra-".into()],
                uid_headers: vec![HeaderName::from_static("x-remote-uid")],
            }),
            client_ca_subjects: Some(vec![b"client-ca".to_vec()]),
            tokens: Tokens::parse(
                b"abc,kubegate,uid1,\"system:monitoring,ops\"\nt\xffx,bytes,u2\n",
            ),
            anonymous: true,
            token_reviewers: Vec::new(),
            forbidden: vec![("mallory".into(), "services".into())],
        }
    }

    #[test]
    fn token_file_lines_become_users() {
        let t = Tokens::parse(b"abc,kubegate,uid1,\"system:monitoring,ops\"\n# c\nxyz,bob,2\n");
        let u = t.user("abc").unwrap();
        assert_eq!(u.name, "kubegate");
        assert_eq!(
            u.groups,
            ["system:monitoring", "ops", "system:authenticated"]
        );
        assert_eq!(u.uid, "uid1");
        assert_eq!(t.user("xyz").unwrap().name, "bob");
        assert!(t.user("nope").is_none());
    }

    #[test]
    fn a_front_proxy_passes_identity_in_headers() {
        let a = authenticator();
        let proxy = cert("front-proxy-client", b"front-proxy-ca");
        let h = headers(&[
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "dev"),
            ("X-Remote-Group", "ops"),
            ("X-Remote-Extra-Scopes%2Fa", "x"),
            ("X-Remote-Uid", "u-1"),
        ]);
        let u = a.authenticate(Some(&proxy), &h).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(u.extra["scopes/a"], ["x"]);
    }

    #[test]
    fn identity_headers_from_anyone_else_are_ignored() {
        let a = authenticator();
        let h = headers(&[
            ("X-Remote-User", "system:admin"),
            ("X-Remote-Group", "system:masters"),
        ]);
        // A client certificate from the client CA: its own identity.
        let client = cert("bob", b"client-ca");
        assert_eq!(a.authenticate(Some(&client), &h).unwrap().name, "bob");
        // No credentials at all: anonymous.
        assert_eq!(a.authenticate(None, &h).unwrap().name, "system:anonymous");
    }

    #[test]
    fn a_front_proxy_cn_not_allowed_is_refused() {
        let a = authenticator();
        let other = cert("somebody", b"front-proxy-ca");
        let err = a
            .authenticate(Some(&other), &headers(&[("X-Remote-User", "alice")]))
            .unwrap_err();
        assert!(
            err.contains("not in --requestheader-allowed-names"),
            "{err}"
        );
    }

    #[test]
    fn a_front_proxy_without_a_user_header_is_not_anonymous_but_401() {
        // Its certificate fails the x509 authenticator, and an error refuses anonymous access.
        let a = authenticator();
        let proxy = cert("front-proxy-client", b"front-proxy-ca");
        assert!(a.authenticate(Some(&proxy), &HeaderMap::new()).is_err());
        // With a valid token it is that token's user.
        let h = headers(&[("Authorization", "Bearer abc")]);
        assert_eq!(a.authenticate(Some(&proxy), &h).unwrap().name, "kubegate");
    }

    #[test]
    fn an_unknown_token_is_401_not_anonymous() {
        let a = authenticator();
        let h = headers(&[("Authorization", "Bearer nope")]);
        assert!(a.authenticate(None, &h).is_err());
    }

    #[test]
    fn only_health_and_version_are_public() {
        assert!(public_path("/readyz"));
        assert!(public_path("/livez/etcd"));
        assert!(public_path("/version"));
        assert!(!public_path("/api"));
        assert!(!public_path("/readyzx"));
    }

    #[test]
    fn forbidden_users_and_anonymous_ones_are_denied_what_they_may_not_do() {
        let a = authenticator();
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(a.allows(
            "alice",
            &g(&["system:authenticated"]),
            Some("services"),
            "/api/v1/services"
        ));
        assert!(!a.allows("mallory", &g(&[]), Some("services"), "/api/v1/services"));
        assert!(a.allows("mallory", &g(&[]), Some("pods"), "/api/v1/pods"));
        assert!(!a.allows("system:anonymous", &g(&[]), Some("pods"), "/api/v1/pods"));
        assert!(!a.allows(
            "x",
            &g(&["system:unauthenticated"]),
            Some("pods"),
            "/api/v1/pods"
        ));
        assert!(a.allows("system:anonymous", &g(&[]), None, "/version"));
        assert!(!a.allows("system:anonymous", &g(&[]), None, "/apis"));
    }

    #[test]
    fn a_certificate_past_its_not_after_is_refused_at_the_request_not_the_handshake() {
        let a = authenticator();
        let mut c = cert("bob", b"client-ca");
        let now = SystemTime::now();
        c.not_after = now - Duration::from_secs(1);
        let outcome = a.authenticate_at(Some(&c), &HeaderMap::new(), now);
        let err = outcome.user.unwrap_err();
        assert!(
            err.contains("x509: certificate has expired or is not yet valid: current time"),
            "{err}"
        );
        assert!(err.contains(" is after "), "{err}");
        assert!(outcome.expired_certificate);
        // Valid a moment earlier: the same certificate, checked at each request's time.
        let earlier = now - Duration::from_secs(2);
        assert_eq!(
            a.authenticate_at(Some(&c), &HeaderMap::new(), earlier)
                .user
                .unwrap()
                .name,
            "bob"
        );
        // Not yet valid either.
        c.not_before = now + Duration::from_secs(60);
        c.not_after = now + Duration::from_secs(3600);
        let err = a
            .authenticate_at(Some(&c), &HeaderMap::new(), now)
            .user
            .unwrap_err();
        assert!(err.contains(" is before "), "{err}");
    }

    #[test]
    fn an_expired_front_proxy_certificate_is_refused_whatever_its_headers_say() {
        let a = authenticator();
        let mut proxy = cert("front-proxy-client", b"front-proxy-ca");
        let now = SystemTime::now();
        proxy.not_after = now - Duration::from_secs(1);
        let h = headers(&[("X-Remote-User", "alice")]);
        let outcome = a.authenticate_at(Some(&proxy), &h, now);
        assert!(outcome.user.is_err());
        assert!(outcome.expired_certificate);
        // A valid bearer token on the same request still authenticates (the union's first
        // success wins): not refused, not counted.
        let h = headers(&[("X-Remote-User", "alice"), ("Authorization", "Bearer abc")]);
        let outcome = a.authenticate_at(Some(&proxy), &h, now);
        assert_eq!(outcome.user.unwrap().name, "kubegate");
        assert!(!outcome.expired_certificate);
    }

    #[test]
    fn a_client_ca_certificate_without_a_common_name_is_no_answer_not_an_error() {
        let a = authenticator();
        let c = cert("", b"client-ca");
        assert_eq!(
            a.authenticate(Some(&c), &HeaderMap::new()).unwrap().name,
            "system:anonymous"
        );
    }

    #[test]
    fn tokens_are_read_from_the_raw_header_bytes() {
        let a = authenticator();
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer abc \xff").unwrap(),
        );
        assert_eq!(a.authenticate(None, &h).unwrap().name, "kubegate");
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer t\xffx").unwrap(),
        );
        assert_eq!(a.authenticate(None, &h).unwrap().name, "bytes");
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer t\xfex").unwrap(),
        );
        assert!(a.authenticate(None, &h).is_err(), "not a token of the file");
    }

    #[test]
    fn a_second_space_before_the_token_warns_and_leaves_the_request_anonymous() {
        let a = authenticator();
        let h = headers(&[("Authorization", "Bearer  abc")]);
        let outcome = a.authenticate_at(None, &h, SystemTime::now());
        assert_eq!(outcome.user.unwrap().name, "system:anonymous");
        assert_eq!(outcome.warning, Some(crate::bearer::EXTRA_SPACE_WARNING));
    }
}
