//! Who is asking: client certificates (CN = user, O = groups), static bearer tokens
//! (`--token-auth-file`), or anonymous. Authorization is the default RBAC in miniature:
//! authenticated users may do anything; anonymous users may read health and `/version`.

use std::collections::HashMap;
use x509_parser::prelude::{FromDer, X509Certificate};

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups, including `system:authenticated` or `system:unauthenticated`.
    pub groups: Vec<String>,
}

impl User {
    /// `system:anonymous`.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    /// Not anonymous.
    pub fn authenticated(&self) -> bool {
        self.name != "system:anonymous"
    }

    /// The identity in a verified client certificate (DER).
    pub fn from_certificate(der: &[u8]) -> Option<User> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        groups.push("system:authenticated".into());
        Some(User { name, groups })
    }
}

/// Static tokens read from a `--token-auth-file` (`token,user,uid,"group1,group2"`).
#[derive(Default)]
pub struct Tokens(HashMap<String, User>);

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
            let _uid = fields.next();
            let mut groups: Vec<String> = fields
                .next()
                .map(|g| {
                    g.trim_matches('"')
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            groups.push("system:authenticated".into());
            map.insert(
                token.to_string(),
                User {
                    name: name.to_string(),
                    groups,
                },
            );
        }
        Tokens(map)
    }

    /// The user a `Bearer` token names.
    pub fn user(&self, authorization: Option<&str>) -> Option<User> {
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        self.0.get(token).cloned()
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

    #[test]
    fn token_file_lines_become_users() {
        let t = Tokens::parse("abc,kubegate,uid1,\"system:monitoring,ops\"\n# c\nxyz,bob,2\n");
        let u = t.user(Some("Bearer abc")).unwrap();
        assert_eq!(u.name, "kubegate");
        assert_eq!(
            u.groups,
            ["system:monitoring", "ops", "system:authenticated"]
        );
        assert_eq!(t.user(Some("Bearer xyz")).unwrap().name, "bob");
        assert!(t.user(Some("Bearer nope")).is_none());
        assert!(t.user(Some("Basic abc")).is_none());
    }

    #[test]
    fn only_health_and_version_are_public() {
        assert!(public_path("/readyz"));
        assert!(public_path("/livez/etcd"));
        assert!(public_path("/version"));
        assert!(!public_path("/api"));
        assert!(!public_path("/readyzx"));
    }
}
