//! A Kubernetes object named in the configuration as `NAMESPACE/NAME` (the ConfigMap of
//! `terminate.shed_object`), checked as the apiserver checks the names (a namespace is a DNS
//! label, a ConfigMap's name a DNS subdomain), so a typo fails `kubegate check` rather than
//! every watch.

use std::fmt;

/// A namespaced object's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ObjectName {
    /// Reads `NAMESPACE/NAME`, or says why it is not one.
    pub fn parse(text: &str) -> Result<ObjectName, String> {
        let (namespace, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: write NAMESPACE/NAME"))?;
        if !is_label(namespace) {
            return Err(format!(
                "{namespace:?}: a namespace is 1 to 63 lower-case letters, digits and -, starting and ending with a letter or digit"
            ));
        }
        if name.is_empty() || name.len() > 253 || !name.split('.').all(is_label) {
            return Err(format!(
                "{name:?}: a name is lower-case letters, digits, - and ., at most 253, each part starting and ending with a letter or digit"
            ));
        }
        Ok(ObjectName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A DNS-1123 label (`IsDNS1123Label`).
pub fn is_label(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|&b| alnum(b) || b == b'-')
        && alnum(bytes[0])
        && alnum(bytes[bytes.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_as_the_apiserver_checks_them() {
        let o = ObjectName::parse("kube-system/kubegate-shed").unwrap();
        assert_eq!(
            (o.namespace.as_str(), o.name.as_str()),
            ("kube-system", "kubegate-shed")
        );
        assert_eq!(o.to_string(), "kube-system/kubegate-shed");
        assert!(ObjectName::parse("kube-system/a.b-c").is_ok());
        for bad in [
            "kubegate-shed",
            "Kube/x",
            "kube-system/",
            "/x",
            "a/b/c",
            "-a/x",
            "a/x-",
            "a/x..y",
        ] {
            assert!(ObjectName::parse(bad).is_err(), "{bad}");
        }
    }
}
