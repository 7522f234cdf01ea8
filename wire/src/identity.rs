//! Who a client is, and how that reaches the apiserver: a verified client certificate becomes
//! the front-proxy headers (`X-Remote-User` = CN, one `X-Remote-Group` per O, `X-Remote-Uid`
//! = the subject's UID attribute as 1.33+ reads it), sent over kubegate's front-proxy
//! certificate. Every incoming header with one of those names, or the
//! extra prefix, is removed first, whatever the client sent, so a client can never choose its
//! identity. Bearer tokens and `Impersonate-*` pass untouched (the apiserver authenticates and
//! authorizes them).

use http::header::{HeaderMap, HeaderName, HeaderValue};
use kubegate_config::FrontProxy;
use x509_parser::prelude::{FromDer, X509Certificate};

/// A user, its groups and UID (the apiserver's `user.Info`): what a client certificate
/// kubegate verified names (CN, O, the UID attribute), or what a TokenReview said of a bearer
/// token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name: a certificate's common name, a token's reviewed user.
    pub user: String,
    /// Its groups: a certificate's organizations, a token's reviewed groups.
    pub groups: Vec<String>,
    /// Its UID, when one is given: a certificate's subject attribute [`UID_OID`], a token's
    /// reviewed `uid`.
    pub uid: Option<String>,
    /// Its extra attributes, keys as given: a token's reviewed `extra` (a bound service
    /// account token's pod and node); a certificate has none.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// The subject attribute 1.33+ reads a client certificate's UID from
/// (`AllowParsingUserUIDFromCertAuth`): 1.3.6.1.4.1.57683.2.
pub const UID_OID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];

/// Why a verified certificate names no user the apiserver would accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateName {
    /// No common name, or an empty one ("common name of client certificate is empty").
    NoCommonName,
    /// More than one UID attribute, an empty one, or one that is not a string: the
    /// apiserver's x509 authenticator refuses the certificate.
    BadUid,
}

impl UserInfo {
    /// Reads CN, O and the UID attribute from a DER certificate, as the apiserver's
    /// `CommonNameUserConversion` does in 1.33+ (Go's `pkix.Name` keeps the last CN when a
    /// subject has several; at most one UID, not empty).
    pub fn from_der(der: &[u8]) -> Result<UserInfo, CertificateName> {
        let (_, cert) =
            X509Certificate::from_der(der).map_err(|_| CertificateName::NoCommonName)?;
        let subject = cert.subject();
        let user = subject
            .iter_common_name()
            .last()
            .and_then(|cn| cn.as_str().ok())
            .filter(|cn| !cn.is_empty())
            .ok_or(CertificateName::NoCommonName)?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        let oid = x509_parser::der_parser::oid::Oid::from(UID_OID)
            .map_err(|_| CertificateName::BadUid)?;
        let uids: Vec<_> = subject.iter_by_oid(&oid).collect();
        let uid = match uids.as_slice() {
            [] => None,
            [one] => match one.as_str() {
                Ok(uid) if !uid.is_empty() => Some(uid.to_string()),
                _ => return Err(CertificateName::BadUid),
            },
            _ => return Err(CertificateName::BadUid),
        };
        Ok(UserInfo {
            user,
            groups,
            uid,
            extra: Default::default(),
        })
    }
}

/// The header names of the apiserver's `--requestheader-*` flags: every one stripped from
/// client requests, the first username and group header set to the identity kubegate vouches
/// for.
#[derive(Debug, Clone)]
pub struct IdentityHeaders {
    users: Vec<HeaderName>,
    groups: Vec<HeaderName>,
    uids: Vec<HeaderName>,
    /// Lower case, as header names are kept.
    extra_prefixes: Vec<String>,
}

/// Stripped whatever the configured names: the prefix of every header of the front-proxy
/// scheme's defaults, so that an apiserver configured with them is safe from a client even
/// when kubegate is configured with other names.
const ALWAYS_STRIPPED: &str = "x-remote-";

impl Default for IdentityHeaders {
    /// The apiserver's defaults; stripped even when kubegate has no front-proxy identity.
    fn default() -> Self {
        IdentityHeaders {
            users: vec![HeaderName::from_static("x-remote-user")],
            groups: vec![HeaderName::from_static("x-remote-group")],
            uids: vec![HeaderName::from_static("x-remote-uid")],
            extra_prefixes: vec!["x-remote-extra-".into()],
        }
    }
}

impl IdentityHeaders {
    /// The names configured for the front proxy (validated as header names).
    pub fn new(fp: &FrontProxy) -> Result<IdentityHeaders, String> {
        let names = |list: &[String]| {
            list.iter()
                .map(|s| {
                    HeaderName::from_bytes(s.to_ascii_lowercase().as_bytes())
                        .map_err(|e| format!("{s:?}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        // 0.1.0's single names, when a configuration was not validated (tests build them).
        let list = |single: &Option<String>, list: &[String]| match single {
            Some(one) => vec![one.clone()],
            None => list.to_vec(),
        };
        let ids = IdentityHeaders {
            users: names(&list(&fp.username_header, &fp.username_headers))?,
            groups: names(&list(&fp.group_header, &fp.group_headers))?,
            uids: names(&list(&fp.uid_header, &fp.uid_headers))?,
            extra_prefixes: list(&fp.extra_prefix, &fp.extra_prefixes)
                .iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
        };
        if ids.users.is_empty() || ids.groups.is_empty() {
            return Err("username_headers and group_headers need at least one name".into());
        }
        Ok(ids)
    }

    /// Whether a header named `name` carries a front-proxy identity (one of the configured
    /// names or prefixes, or the scheme's default family).
    pub fn is_identity(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        n.starts_with(ALWAYS_STRIPPED)
            || self.users.contains(name)
            || self.groups.contains(name)
            || self.uids.contains(name)
            || self
                .extra_prefixes
                .iter()
                .any(|p| n.starts_with(p.as_str()))
    }

    /// Removes every header a client could pick its identity with; returns how many values
    /// were removed. Names are compared in lower case, which is how both HTTP/1.1 and HTTP/2
    /// headers are held.
    pub fn strip(&self, headers: &mut HeaderMap) -> usize {
        let names: Vec<HeaderName> = headers
            .keys()
            .filter(|n| self.is_identity(n))
            .cloned()
            .collect();
        let mut removed = 0;
        for n in &names {
            removed += headers.get_all(n).iter().count();
            headers.remove(n);
        }
        removed
    }

    /// Whether every name in `identity` can travel as a header value unchanged: no control
    /// character (HTTP forbids them) and no space or tab at either end (HTTP/1.1 parsers trim
    /// them, so the apiserver could read another name).
    pub fn sendable(identity: &UserInfo) -> bool {
        let ok = |v: &str| {
            !v.chars().any(char::is_control)
                && !v.starts_with([' ', '\t'])
                && !v.ends_with([' ', '\t'])
        };
        ok(&identity.user)
            && identity.groups.iter().all(|g| ok(g))
            && identity.uid.as_deref().is_none_or(ok)
    }

    /// Sets the headers for `identity`. Values that cannot be header values (control
    /// characters) make the identity unusable: `false`, and nothing is set.
    pub fn apply(&self, identity: &UserInfo, headers: &mut HeaderMap) -> bool {
        let Ok(user) = HeaderValue::from_str(&identity.user) else {
            return false;
        };
        let Ok(groups) = identity
            .groups
            .iter()
            .map(|g| HeaderValue::from_str(g))
            .collect::<Result<Vec<_>, _>>()
        else {
            return false;
        };
        let uid = match identity.uid.as_deref().map(HeaderValue::from_str) {
            None => None,
            Some(Ok(uid)) => Some(uid),
            Some(Err(_)) => return false,
        };
        headers.insert(self.users[0].clone(), user);
        for g in groups {
            headers.append(self.groups[0].clone(), g);
        }
        // The first UID header, as the apiserver's `RemoteRequestHeaderUID` (on in 1.33)
        // reads it; configured without one, the UID is not sent.
        if let (Some(uid), Some(name)) = (uid, self.uids.first()) {
            headers.insert(name.clone(), uid);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn every_identity_header_is_stripped_whatever_its_case() {
        let ids = IdentityHeaders::default();
        let mut h = headers(&[
            ("X-Remote-User", "system:admin"),
            ("x-remote-group", "system:masters"),
            ("X-REMOTE-GROUP", "other"),
            ("X-Remote-Extra-Scopes", "all"),
            ("x-remote-uid", "0"),
            ("Authorization", "Bearer t"),
            ("Impersonate-User", "bob"),
            // Not one of the scheme's names, but of its family: stripped whatever the names.
            ("X-Remote-Userx", "mallory"),
            ("X-Remote-Anything", "x"),
            ("X-Remotely", "kept: another header"),
        ]);
        assert_eq!(ids.strip(&mut h), 7);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["authorization", "impersonate-user", "x-remotely"]);
    }

    #[test]
    fn configured_names_are_stripped_and_set() {
        let fp = FrontProxy {
            username_headers: vec!["X-Auth-User".into(), "X-Other-User".into()],
            group_headers: vec!["X-Auth-Group".into(), "X-Other-Group".into()],
            extra_prefixes: vec!["X-Auth-Extra-".into(), "X-Other-Extra-".into()],
            uid_headers: vec!["X-Auth-Uid".into()],
            ..FrontProxy::new("c".into(), "k".into())
        };
        let ids = IdentityHeaders::new(&fp).unwrap();
        // An apiserver configured with two group headers reads both: a client must not add
        // groups through the second (GHSA-c8w2-fgvx-vhv4's class), nor through the defaults.
        let mut h = headers(&[
            ("x-auth-user", "mallory"),
            ("X-Other-User", "mallory"),
            ("X-Other-Group", "system:masters"),
            ("X-Auth-Extra-A", "b"),
            ("X-Other-Extra-Scopes", "all"),
            ("X-Auth-Uid", "0"),
            ("X-Remote-Group", "system:masters"),
        ]);
        assert_eq!(ids.strip(&mut h), 7);
        assert!(h.is_empty(), "{h:?}");
        let who = UserInfo {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), "ops".into()],
            uid: Some("4f2c".into()),
            extra: Default::default(),
        };
        assert!(ids.apply(&who, &mut h));
        assert_eq!(h["x-auth-user"], "system:node:n1");
        let groups: Vec<_> = h.get_all("x-auth-group").iter().collect();
        assert_eq!(groups, ["system:nodes", "ops"]);
        assert_eq!(h["x-auth-uid"], "4f2c");
    }

    #[test]
    fn of_two_common_names_the_last_is_the_user_as_in_go() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "first");
        // rcgen keeps one value per type: the second CN under its OID as a custom type.
        dn.push(rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]), "second");
        dn.push(rcgen::DnType::OrganizationName, "ops");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let id = UserInfo::from_der(cert.der()).unwrap();
        assert_eq!(id.user, "second");
        assert_eq!(id.groups, ["ops"]);
        assert_eq!(id.uid, None);
    }

    fn with_subject(attrs: &[(Vec<u64>, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        for (oid, value) in attrs {
            dn.push(rcgen::DnType::CustomDnType(oid.clone()), *value);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_subjects_uid_attribute_is_read_as_1_33_reads_it() {
        let cn = vec![2, 5, 4, 3];
        let uid = UID_OID.to_vec();
        let id = UserInfo::from_der(&with_subject(&[
            (cn.clone(), "alice"),
            (uid.clone(), "u-1"),
        ]))
        .unwrap();
        assert_eq!(
            (id.user.as_str(), id.uid.as_deref()),
            ("alice", Some("u-1"))
        );
        assert_eq!(
            UserInfo::from_der(&with_subject(&[(cn.clone(), "alice"), (uid.clone(), "")])),
            Err(CertificateName::BadUid),
            "an empty UID"
        );
        assert_eq!(
            UserInfo::from_der(&with_subject(&[(uid, "u-1")])),
            Err(CertificateName::NoCommonName)
        );
    }

    #[test]
    fn names_that_would_not_arrive_unchanged_are_not_sendable() {
        let who = |user: &str, group: &str| UserInfo {
            user: user.into(),
            groups: vec![group.into()],
            uid: None,
            extra: Default::default(),
        };
        assert!(IdentityHeaders::sendable(&who(
            "system:node:n1",
            "system:nodes"
        )));
        assert!(IdentityHeaders::sendable(&who("Zoë", "é quipe")));
        for (user, group) in [
            ("bad\nname", "g"),
            ("tab\tin", "g"),
            (" admin", "g"),
            ("admin ", "g"),
            ("ok", "g\u{7f}"),
            ("ok", "\u{85}next"),
        ] {
            assert!(
                !IdentityHeaders::sendable(&who(user, group)),
                "{user:?} {group:?}"
            );
        }
    }

    #[test]
    fn an_identity_that_cannot_be_a_header_sets_nothing() {
        let ids = IdentityHeaders::default();
        let mut h = HeaderMap::new();
        let who = UserInfo {
            user: "bad\nname".into(),
            groups: vec![],
            uid: None,
            extra: Default::default(),
        };
        assert!(!ids.apply(&who, &mut h));
        assert!(h.is_empty());
    }
}
