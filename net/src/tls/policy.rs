//! The TLS versions and cipher suites an operator chose for one side of kubegate
//! (`min_version`, `cipher_suites` under `listeners[].tls`, `admin.tls`, `upstream.tls`,
//! `health.tls`): a crypto provider holding only the chosen suites, and the versions allowed.
//! Names are rustls's; an unknown one is an error that lists the known ones.

use super::provider::provider;
use kubegate_config::TlsVersion;
use rustls::crypto::CryptoProvider;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};
use std::sync::Arc;

/// What one side of kubegate offers or accepts.
#[derive(Clone, Debug)]
pub struct TlsPolicy {
    provider: Arc<CryptoProvider>,
    versions: &'static [&'static SupportedProtocolVersion],
}

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
const ONLY_13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

impl Default for TlsPolicy {
    /// rustls's defaults: TLS 1.2 and 1.3, every suite of the provider.
    fn default() -> Self {
        TlsPolicy {
            provider: provider(),
            versions: BOTH,
        }
    }
}

impl TlsPolicy {
    /// `min_version` (default 1.2) and `cipher_suites` (rustls's names, in order of
    /// preference; empty: every suite of the provider). Errors say which name is unknown, or
    /// that no suite is left for an allowed version.
    pub fn new(
        min_version: Option<TlsVersion>,
        cipher_suites: &[String],
    ) -> Result<TlsPolicy, String> {
        let versions = match min_version {
            None | Some(TlsVersion::Tls12) => BOTH,
            Some(TlsVersion::Tls13) => ONLY_13,
        };
        let base = provider();
        if cipher_suites.is_empty() {
            return Ok(TlsPolicy {
                provider: base,
                versions,
            });
        }
        let mut chosen = Vec::with_capacity(cipher_suites.len());
        for name in cipher_suites {
            let suite = base
                .cipher_suites
                .iter()
                .find(|s| name_of(**s) == name.trim())
                .ok_or_else(|| {
                    format!(
                        "unknown cipher suite {name:?}; kubegate offers {}",
                        cipher_suite_names().join(", ")
                    )
                })?;
            chosen.push(*suite);
        }
        if !chosen.iter().any(|s| s.tls13().is_some()) {
            return Err(
                "no TLS 1.3 cipher suite is listed: TLS 1.3 is always allowed, so list at least one TLS13_* suite"
                    .into(),
            );
        }
        if versions == BOTH && !chosen.iter().any(|s| s.tls13().is_none()) {
            return Err("no TLS 1.2 cipher suite is listed while min_version allows TLS 1.2: list one, or set min_version: \"1.3\"".into());
        }
        let provider = CryptoProvider {
            cipher_suites: chosen,
            ..(*base).clone()
        };
        Ok(TlsPolicy {
            provider: Arc::new(provider),
            versions,
        })
    }

    /// The crypto provider with the chosen suites.
    pub fn provider(&self) -> Arc<CryptoProvider> {
        self.provider.clone()
    }

    /// The protocol versions allowed.
    pub fn versions(&self) -> &'static [&'static SupportedProtocolVersion] {
        self.versions
    }
}

/// rustls's name of a suite (`TLS13_AES_128_GCM_SHA256`).
fn name_of(suite: SupportedCipherSuite) -> &'static str {
    suite.suite().as_str().unwrap_or("unnamed")
}

/// The names of every cipher suite kubegate's provider has, preferred first.
pub fn cipher_suite_names() -> Vec<&'static str> {
    provider()
        .cipher_suites
        .iter()
        .map(|s| name_of(*s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &TlsPolicy) -> Vec<&'static str> {
        p.provider()
            .cipher_suites
            .iter()
            .map(|s| name_of(*s))
            .collect()
    }

    #[test]
    fn suites_are_chosen_by_name_in_the_given_order() {
        let p = TlsPolicy::new(
            Some(TlsVersion::Tls12),
            &[
                "TLS13_AES_256_GCM_SHA384".into(),
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            names(&p),
            [
                "TLS13_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        assert_eq!(p.versions().len(), 2);
        let only13 = TlsPolicy::new(Some(TlsVersion::Tls13), &[]).unwrap();
        assert_eq!(only13.versions().len(), 1);
        assert!(names(&only13).len() >= 3);
    }

    #[test]
    fn unknown_or_unusable_suites_are_refused() {
        let e = TlsPolicy::new(None, &["TLS_RSA_WITH_RC4_128_SHA".into()]).unwrap_err();
        assert!(
            e.contains("unknown cipher suite") && e.contains("TLS13_AES_128_GCM_SHA256"),
            "{e}"
        );
        let e = TlsPolicy::new(None, &["TLS13_AES_128_GCM_SHA256".into()]).unwrap_err();
        assert!(e.contains("no TLS 1.2 cipher suite"), "{e}");
        let e = TlsPolicy::new(
            Some(TlsVersion::Tls13),
            &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()],
        )
        .unwrap_err();
        assert!(e.contains("no TLS 1.3"), "{e}");
        assert!(TlsPolicy::new(
            Some(TlsVersion::Tls13),
            &["TLS13_AES_128_GCM_SHA256".into()]
        )
        .is_ok());
    }
}
