//! Who a client is, and how that reaches the apiserver: a verified client certificate becomes
//! the front-proxy headers (`X-Remote-User` = CN, one `X-Remote-Group` per O), sent over
//! kubegate's front-proxy certificate. Every incoming header with one of those names, or the
//! extra prefix, is removed first, whatever the client sent, so a client can never choose its
//! identity. Bearer tokens and `Impersonate-*` pass untouched (the apiserver authenticates and
//! authorizes them).

use http::header::{HeaderMap, HeaderName, HeaderValue};
use kubegate_config::FrontProxy;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The identity in a client certificate kubegate verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    /// The certificate's common name.
    pub user: String,
    /// Its organizations.
    pub groups: Vec<String>,
}

impl CertIdentity {
    /// Reads CN and O from a DER certificate, as the apiserver's `CommonNameUserConversion`
    /// does. `None` without a CN.
    pub fn from_der(der: &[u8]) -> Option<CertIdentity> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let subject = cert.subject();
        let user = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some(CertIdentity { user, groups })
    }
}

/// The header names of the apiserver's `--requestheader-*` flags.
#[derive(Debug, Clone)]
pub struct IdentityHeaders {
    user: HeaderName,
    group: HeaderName,
    uid: HeaderName,
    /// Lower case, as header names are kept.
    extra_prefix: String,
}

impl Default for IdentityHeaders {
    /// The apiserver's defaults; stripped even when kubegate has no front-proxy identity.
    fn default() -> Self {
        IdentityHeaders {
            user: HeaderName::from_static("x-remote-user"),
            group: HeaderName::from_static("x-remote-group"),
            uid: HeaderName::from_static("x-remote-uid"),
            extra_prefix: "x-remote-extra-".into(),
        }
    }
}

impl IdentityHeaders {
    /// The names configured for the front proxy (validated as header names).
    pub fn new(fp: &FrontProxy) -> Result<IdentityHeaders, String> {
        let name = |s: &str| {
            HeaderName::from_bytes(s.to_ascii_lowercase().as_bytes())
                .map_err(|e| format!("{s:?}: {e}"))
        };
        Ok(IdentityHeaders {
            user: name(&fp.username_header)?,
            group: name(&fp.group_header)?,
            uid: name(&fp.uid_header)?,
            extra_prefix: fp.extra_prefix.to_ascii_lowercase(),
        })
    }

    fn is_identity(&self, name: &HeaderName) -> bool {
        name == self.user
            || name == self.group
            || name == self.uid
            || name.as_str().starts_with(&self.extra_prefix)
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

    /// Sets the headers for `identity`. Values that cannot be header values (control
    /// characters) make the identity unusable: `false`, and nothing is set.
    pub fn apply(&self, identity: &CertIdentity, headers: &mut HeaderMap) -> bool {
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
        headers.insert(self.user.clone(), user);
        for g in groups {
            headers.append(self.group.clone(), g);
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
            ("X-Remote-Userx", "kept: another header"),
        ]);
        assert_eq!(ids.strip(&mut h), 5);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(
            left,
            ["authorization", "impersonate-user", "x-remote-userx"]
        );
    }

    #[test]
    fn configured_names_are_stripped_and_set() {
        let fp = FrontProxy {
            cert_file: "c".into(),
            key_file: "k".into(),
            username_header: "X-Auth-User".into(),
            group_header: "X-Auth-Group".into(),
            extra_prefix: "X-Auth-Extra-".into(),
            uid_header: "X-Auth-Uid".into(),
        };
        let ids = IdentityHeaders::new(&fp).unwrap();
        let mut h = headers(&[("x-auth-user", "mallory"), ("X-Auth-Extra-A", "b")]);
        assert_eq!(ids.strip(&mut h), 2);
        let who = CertIdentity {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), "ops".into()],
        };
        assert!(ids.apply(&who, &mut h));
        assert_eq!(h["x-auth-user"], "system:node:n1");
        let groups: Vec<_> = h.get_all("x-auth-group").iter().collect();
        assert_eq!(groups, ["system:nodes", "ops"]);
    }

    #[test]
    fn an_identity_that_cannot_be_a_header_sets_nothing() {
        let ids = IdentityHeaders::default();
        let mut h = HeaderMap::new();
        let who = CertIdentity {
            user: "bad\nname".into(),
            groups: vec![],
        };
        assert!(!ids.apply(&who, &mut h));
        assert!(h.is_empty());
    }
}
