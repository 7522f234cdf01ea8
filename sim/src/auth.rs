//! Who is asking, decided as kube-apiserver decides it (`pkg/kubeapiserver/authenticator`):
//! requestheader (a front proxy's certificate plus `X-Remote-*` headers), then client
//! certificates, then bearer tokens (`--token-auth-file`); the first that succeeds wins. If none
//! does and any of them failed with an error (a certificate the client CA does not sign, an
//! unknown token, a front-proxy CN not in `--requestheader-allowed-names`), the request gets
//! 401 — never anonymous (`union.NewFailOnError`). Otherwise it is anonymous, if allowed.
//! Authorization is the default RBAC in miniature: authenticated users may do anything but
//! what `--authorization-forbid` takes from them; anonymous users may read health and
//! `/version` ([`Authenticator::allows`], which SubjectAccessReviews ask too).

use http::header::{HeaderMap, HeaderName};
use std::collections::{BTreeMap, HashMap};
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
}

impl PeerCert {
    /// Reads a DER certificate.
    pub fn from_der(der: &[u8]) -> Option<PeerCert> {
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
        })
    }
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
    /// `Ok(None)`: not a front-proxy request (not its CA, or no user header).
    fn authenticate(&self, peer: &PeerCert, headers: &HeaderMap) -> Result<Option<User>, String> {
        if !self.ca_subjects.contains(&peer.issuer) {
            return Ok(None);
        }
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

/// The token of an `Authorization` value, as the apiserver's bearer-token authenticator
/// reads it: trimmed, the scheme `bearer` in any case, the token the word after it.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let mut parts = authorization.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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

    /// Who sent a request with `headers` over a connection that presented `peer`; `Err` means
    /// 401, with why.
    pub fn authenticate(
        &self,
        peer: Option<&PeerCert>,
        headers: &HeaderMap,
    ) -> Result<User, String> {
        let mut errors = Vec::new();
        if let (Some(rh), Some(peer)) = (&self.request_header, peer) {
            match rh.authenticate(peer, headers) {
                Ok(Some(user)) => return Ok(user),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if let (Some(subjects), Some(peer)) = (&self.client_ca_subjects, peer) {
            if subjects.contains(&peer.issuer) && !peer.common_name.is_empty() {
                let mut user =
                    User::authenticated_user(peer.common_name.clone(), peer.organizations.clone());
                user.uid = peer.uid.clone();
                return Ok(user);
            }
            errors.push(format!(
                "verifying certificate CN={} failed: x509: certificate signed by unknown authority",
                peer.common_name
            ));
        }
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if let Some(bearer) = authorization.and_then(bearer_token) {
            match self.tokens.user(bearer) {
                Some(user) => return Ok(user),
                None => errors.push("invalid bearer token".into()),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        if self.anonymous {
            Ok(User::anonymous())
        } else {
            Err("anonymous requests are not allowed".into())
        }
    }
}

/// Static tokens read from a `--token-auth-file` (`token,user,uid,"group1,group2"`), less the
/// ones revoked since (the fault port's `/revoke`: a deleted service account's token, which
/// the apiserver then answers 401 for).
#[derive(Default)]
pub struct Tokens {
    users: HashMap<String, User>,
    revoked: std::sync::RwLock<std::collections::HashSet<String>>,
}

impl Tokens {
    /// Parses the CSV file format of kube-apiserver's `--token-auth-file`.
    pub fn parse(text: &str) -> Tokens {
        let mut map = HashMap::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let mut fields = line.splitn(4, ',');
            let (Some(token), Some(name)) = (fields.next(), fields.next()) else {
                continue;
            };
            let uid = fields.next().unwrap_or_default().to_string();
            let groups: Vec<String> = fields
                .next()
                .map(|g| {
                    g.trim_matches('"')
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let mut user = User::authenticated_user(name.to_string(), groups);
            user.uid = uid;
            map.insert(token.to_string(), user);
        }
        Tokens {
            users: map,
            revoked: Default::default(),
        }
    }

    /// The user a bearer token names, unless it was revoked.
    pub fn user(&self, token: &str) -> Option<User> {
        let revoked = self.revoked.read().unwrap_or_else(|e| e.into_inner());
        if revoked.contains(token) {
            return None;
        }
        self.users.get(token).cloned()
    }

    /// `token` is no longer accepted; whether it was one of the file's.
    pub fn revoke(&self, token: &str) -> bool {
        let known = self.users.contains_key(token);
        if known {
            self.revoked
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(token.to_string());
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
        PeerCert {
            common_name: cn.into(),
            organizations: vec!["system:masters".into()],
            issuer: issuer.to_vec(),
            uid: String::new(),
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
            tokens: Tokens::parse("abc,kubegate,uid1,\"system:monitoring,ops\"\n"),
            anonymous: true,
            token_reviewers: Vec::new(),
            forbidden: vec![("mallory".into(), "services".into())],
        }
    }

    #[test]
    fn token_file_lines_become_users() {
        let t = Tokens::parse("abc,kubegate,uid1,\"system:monitoring,ops\"\n# c\nxyz,bob,2\n");
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
}
