//! TLS versions as the configuration writes them: `"1.2"` or `"1.3"` (a YAML number `1.2` is
//! read the same).

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// The lowest TLS version a connection may use (`min_version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 (and 1.3).
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl TlsVersion {
    /// As the configuration writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }

    fn parse(s: &str) -> Option<TlsVersion> {
        match s.trim().trim_start_matches("TLS").trim_start_matches("v") {
            "1.2" => Some(TlsVersion::Tls12),
            "1.3" => Some(TlsVersion::Tls13),
            _ => None,
        }
    }
}

impl Serialize for TlsVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TlsVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TlsVersion, D::Error> {
        struct Version;
        impl Visitor<'_> for Version {
            type Value = TlsVersion;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"1.2\" or \"1.3\" (TLS 1.0 and 1.1 are not offered)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TlsVersion, E> {
                TlsVersion::parse(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TlsVersion, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(Version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_strings_or_numbers() {
        for (yaml, want) in [("'1.2'", TlsVersion::Tls12), ("1.3", TlsVersion::Tls13)] {
            let v: TlsVersion = serde_yaml_ng::from_str(yaml).unwrap();
            assert_eq!(v, want);
        }
        let e = serde_yaml_ng::from_str::<TlsVersion>("'1.1'").unwrap_err();
        assert!(e.to_string().contains("\"1.2\" or \"1.3\""), "{e}");
    }
}
