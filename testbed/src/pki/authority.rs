//! A CA in a folder, and the leaves it issues: the one place certificates are signed.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// What a leaf certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A server (extended key usage `serverAuth`).
    Server,
    /// A client (`clientAuth`).
    Client,
}

/// A leaf certificate to issue.
#[derive(Clone, Debug)]
pub struct Leaf<'a> {
    /// Common name: the user of a client certificate.
    pub cn: &'a str,
    /// Organizations: the groups of a client certificate (at most two).
    pub orgs: &'a [&'a str],
    /// The UID attribute (1.3.6.1.4.1.57683.2) a 1.33+ apiserver reads a user's UID from.
    pub uid: Option<&'a str>,
    /// Subject alternative names (DNS names or IP addresses).
    pub names: &'a [&'a str],
    /// What it is for.
    pub usage: Usage,
    /// Valid from now plus this (negative: in the past).
    pub not_before: Duration,
    /// Valid until now plus this.
    pub not_after: Duration,
}

impl<'a> Leaf<'a> {
    /// A certificate for `cn`, valid from an hour ago for 30 days.
    pub fn new(cn: &'a str, usage: Usage) -> Leaf<'a> {
        Leaf {
            cn,
            orgs: &[],
            uid: None,
            names: &[],
            usage,
            not_before: Duration::hours(-1),
            not_after: Duration::days(30),
        }
    }
}

/// A CA: `<file>.crt` and `<file>.key` in its folder.
pub struct Authority {
    dir: PathBuf,
    file: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    /// A new self-signed CA with common name `cn`, written as `<file>.crt`/`.key` in `dir`
    /// (created if missing), valid for ten years.
    pub fn create(dir: &Path, cn: &str, file: &str) -> anyhow::Result<Authority> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name = name(cn, &[]);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        p.not_before = now - Duration::hours(1);
        p.not_after = now + Duration::days(3650);
        let cert = p.self_signed(&key)?;
        let ca = Authority {
            dir: dir.to_path_buf(),
            file: file.to_string(),
            cert,
            key,
        };
        ca.save(file, &ca.cert.pem(), &ca.key.serialize_pem())?;
        Ok(ca)
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<file>.crt`.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.file))
    }

    /// Its certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// Issues `leaf` as `<file>.crt`/`.key` in the CA's folder; returns their paths.
    pub fn issue(&self, file: &str, leaf: &Leaf<'_>) -> anyhow::Result<(PathBuf, PathBuf)> {
        let key = KeyPair::generate()?;
        let mut p =
            CertificateParams::new(leaf.names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        p.distinguished_name = name(leaf.cn, leaf.orgs);
        if let Some(uid) = leaf.uid {
            p.distinguished_name
                .push(DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 57683, 2]), uid);
        }
        p.extended_key_usages = vec![match leaf.usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let now = OffsetDateTime::now_utc();
        p.not_before = now + leaf.not_before;
        p.not_after = now + leaf.not_after;
        let cert = p.signed_by(&key, &self.cert, &self.key)?;
        self.save(file, &cert.pem(), &key.serialize_pem())
    }

    fn save(&self, file: &str, cert: &str, key: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let crt = self.dir.join(format!("{file}.crt"));
        let k = self.dir.join(format!("{file}.key"));
        std::fs::write(&crt, cert).with_context(|| format!("write {}", crt.display()))?;
        write_private(&k, key)?;
        Ok((crt, k))
    }
}

/// Writes `text` readable by its owner only (keys, kubeconfigs with keys in them).
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", path.display()))
}

/// A subject: `cn`, and one O per organization. rcgen keeps one value per attribute type: a
/// second organization goes in under the same OID (2.5.4.10) as a custom type, which
/// certificates and parsers read as another O.
fn name(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    for (i, o) in orgs.iter().enumerate() {
        let kind = match i {
            0 => DnType::OrganizationName,
            1 => DnType::CustomDnType(vec![2, 5, 4, 10]),
            _ => panic!("at most two organizations"),
        };
        dn.push(kind, *o);
    }
    dn
}
