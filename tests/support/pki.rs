//! Certificates made at test time: one CA, a serving certificate per replica (its common name
//! names the replica, so a client can tell which replica it reached), and client certificates.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// The front-proxy CA and kubegate's certificate from it.
pub struct FrontProxyPki {
    /// The CA (`--requestheader-client-ca-file`).
    pub ca: PathBuf,
    /// kubegate's front-proxy client certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// A CA and the files it signed, in a temporary directory.
pub struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// Names every serving certificate is valid for, unless a test asks otherwise.
pub const SERVING_NAMES: &[&str] = &["kubernetes", "localhost", "127.0.0.1"];

impl Pki {
    /// A new CA in `dir` (`ca.crt`), plus an admin client pair (`admin.crt`, `admin.key`).
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("test-ca-{}", std::process::id()),
        );
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = p.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca,
            ca_key,
        };
        pki.client("admin", "kubernetes-admin", "system:masters");
        pki
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `ca.crt`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Writes `<file>.crt`/`.key`: a serving certificate with common name `cn`, valid for
    /// `names`, from `not_before_days` to `not_after_days` relative to now.
    pub fn serving_with(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        not_before_days: i64,
        not_after_days: i64,
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = OffsetDateTime::now_utc();
        p.not_before = now + Duration::days(not_before_days);
        p.not_after = now + Duration::days(not_after_days);
        self.sign(file, p, key)
    }

    /// Signs `params` with the CA and writes `<file>.crt` and `<file>.key`.
    fn sign(&self, file: &str, params: CertificateParams, key: KeyPair) -> (PathBuf, PathBuf) {
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (crt, k) = (
            self.dir.join(format!("{file}.crt")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&crt, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (crt, k)
    }

    /// A valid serving certificate for replica `cn`.
    pub fn serving(&self, cn: &str) -> (PathBuf, PathBuf) {
        self.serving_with(cn, cn, SERVING_NAMES, -1, 30)
    }

    /// Writes `kubeconfig-<port>` for the admin user against `server` (`https://IP:PORT`).
    pub fn kubeconfig(&self, server: &str) -> PathBuf {
        use base64::Engine;
        let b64 = |f: &str| {
            base64::engine::general_purpose::STANDARD
                .encode(std::fs::read(self.dir.join(f)).unwrap())
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    namespace: default\ncurrent-context: test\n",
            b64("ca.crt"),
            b64("admin.crt"),
            b64("admin.key")
        );
        let path = self.dir.join(format!(
            "kubeconfig-{}",
            server.rsplit(':').next().unwrap_or("x")
        ));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes a kubeconfig against `server` that authenticates with a bearer `token`.
    pub fn token_kubeconfig(&self, server: &str, token: &str) -> PathBuf {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(self.ca_file()).unwrap());
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: token\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: token\n    namespace: default\ncurrent-context: test\n"
        );
        let path = self.dir.join(format!(
            "kubeconfig-token-{}",
            server.rsplit(':').next().unwrap_or("x")
        ));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` in `group`.
    pub fn client(&self, file: &str, user: &str, group: &str) -> (PathBuf, PathBuf) {
        self.client_in(file, user, &[group])
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` in `groups` (one O each).
    pub fn client_in(&self, file: &str, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, user);
        // rcgen keeps one value per attribute type: a second organization goes in under the
        // same OID (2.5.4.10) as a custom type, which certificates and parsers read as another O.
        for (i, g) in groups.iter().enumerate() {
            let kind = match i {
                0 => DnType::OrganizationName,
                1 => DnType::CustomDnType(vec![2, 5, 4, 10]),
                _ => panic!("at most two organizations"),
            };
            dn.push(kind, *g);
        }
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(file, p, key)
    }

    /// A second CA, in `front-proxy/`, with kubegate's front-proxy client certificate
    /// (`front-proxy-client.crt`, CN `front-proxy-client`), as kubeadm lays them out.
    pub fn front_proxy(&self) -> FrontProxyPki {
        let pki = Pki::new(&self.dir.join("front-proxy"));
        let (cert, key) = pki.client_in("front-proxy-client", "front-proxy-client", &[]);
        FrontProxyPki {
            ca: pki.ca_file(),
            cert,
            key,
        }
    }

    /// Writes `tokens.csv` for `--token-auth-file` with one token per (token, user, group).
    pub fn token_file(&self, tokens: &[(&str, &str, &str)]) -> PathBuf {
        let path = self.dir.join("tokens.csv");
        let text: String = tokens
            .iter()
            .enumerate()
            .map(|(i, (t, u, g))| format!("{t},{u},uid{i},\"{g}\"\n"))
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    }
}
