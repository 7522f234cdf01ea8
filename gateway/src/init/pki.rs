//! The certificates `kubegate init` issues, signed by the node's own CAs as kubeadm laid them
//! out (`ca.crt`/`ca.key`, `front-proxy-ca.crt`/`front-proxy-ca.key`): kubeadm writes its CA
//! keys as PKCS#1 RSA ("RSA PRIVATE KEY"), or SEC1 ECDSA with `encryptionAlgorithm:
//! ECDSA-P256`; both are read here (wrapped as PKCS#8 for the signer). The leaves get ECDSA
//! P-256 keys of their own, valid for a year, as kubeadm's own leaves are.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose, SanType, SignatureAlgorithm,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::IpAddr;
use std::path::Path;
use time::{Duration, OffsetDateTime};

/// A CA that signs: its certificate and key.
pub struct Signer {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate as read (PEM).
    pub cert_pem: String,
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// `serverAuth`.
    Server,
    /// `clientAuth`.
    Client,
}

/// A leaf certificate and its key, PEM.
pub struct Issued {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl Signer {
    /// Reads the CA `<name>.crt` and `<name>.key` in `dir`.
    pub fn load(dir: &Path, name: &str) -> Result<Signer, String> {
        let cert_path = dir.join(format!("{name}.crt"));
        let key_path = dir.join(format!("{name}.key"));
        let cert_pem = std::fs::read_to_string(&cert_path)
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        let key_pem = std::fs::read_to_string(&key_path)
            .map_err(|e| format!("{}: {e}", key_path.display()))?;
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        let params = CertificateParams::from_ca_cert_der(&der)
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        let key = signing_key(&key_pem).map_err(|e| format!("{}: {e}", key_path.display()))?;
        Ok(Signer {
            params,
            key,
            cert_pem,
        })
    }

    /// Issues a leaf for `cn` (groups `orgs`), valid for `names` (IP addresses and DNS names).
    pub fn issue(
        &self,
        cn: &str,
        orgs: &[&str],
        names: &[String],
        usage: Usage,
    ) -> Result<Issued, String> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        params.distinguished_name = dn;
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n
                    .clone()
                    .try_into()
                    .map(SanType::DnsName)
                    .map_err(|e| format!("{n:?} as a DNS name: {e}")),
            })
            .collect::<Result<_, _>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = now + Duration::days(365);
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("a key: {e}"))?;
        let issuer = self
            .params
            .clone()
            .self_signed(&self.key)
            .map_err(|e| format!("the CA: {e}"))?;
        let cert = params
            .signed_by(&key, &issuer, &self.key)
            .map_err(|e| format!("signing {cn}: {e}"))?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// A CA key in any of the forms kubeadm writes, with the algorithm it signs with.
fn signing_key(pem: &str) -> Result<KeyPair, String> {
    let key = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (pkcs8, alg): (Vec<u8>, &'static SignatureAlgorithm) = match &key {
        PrivateKeyDer::Pkcs8(k) => {
            let der = k.secret_pkcs8_der().to_vec();
            let alg = if contains(&der, RSA_OID) {
                &rcgen::PKCS_RSA_SHA256
            } else if contains(&der, P384_OID) {
                &rcgen::PKCS_ECDSA_P384_SHA384
            } else {
                &rcgen::PKCS_ECDSA_P256_SHA256
            };
            (der, alg)
        }
        PrivateKeyDer::Pkcs1(k) => (pkcs8_of_rsa(k.secret_pkcs1_der()), &rcgen::PKCS_RSA_SHA256),
        PrivateKeyDer::Sec1(k) => {
            let sec1 = k.secret_sec1_der();
            if contains(sec1, P384_OID) {
                (pkcs8_of_ec(sec1, P384_OID), &rcgen::PKCS_ECDSA_P384_SHA384)
            } else if contains(sec1, P256_OID) {
                (pkcs8_of_ec(sec1, P256_OID), &rcgen::PKCS_ECDSA_P256_SHA256)
            } else {
                return Err("an EC key on a curve other than P-256 or P-384".into());
            }
        }
        _ => return Err("an unsupported private key format".into()),
    };
    KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8.into(), alg).map_err(|e| e.to_string())
}

/// rsaEncryption, 1.2.840.113549.1.1.1, as DER.
const RSA_OID: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];
/// id-ecPublicKey, 1.2.840.10045.2.1.
const EC_OID: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1, 1.2.840.10045.3.1.7.
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1, 1.3.132.0.34.
const P384_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A DER element: `tag`, its length, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// PKCS#8 `PrivateKeyInfo` around an algorithm identifier and a key.
fn pkcs8(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let version = [0x02, 0x01, 0x00];
    let mut body = version.to_vec();
    body.extend(der(0x30, algorithm));
    body.extend(der(0x04, key));
    der(0x30, &body)
}

/// PKCS#1 `RSAPrivateKey` as PKCS#8.
fn pkcs8_of_rsa(pkcs1: &[u8]) -> Vec<u8> {
    let mut algorithm = RSA_OID.to_vec();
    algorithm.extend([0x05, 0x00]);
    pkcs8(&algorithm, pkcs1)
}

/// SEC1 `ECPrivateKey` on `curve` as PKCS#8.
fn pkcs8_of_ec(sec1: &[u8], curve: &[u8]) -> Vec<u8> {
    let mut algorithm = EC_OID.to_vec();
    algorithm.extend_from_slice(curve);
    pkcs8(&algorithm, sec1)
}

/// Whether the PEM certificate `cert` names every one of `names` (in its SANs) and is valid
/// for at least 30 more days: a certificate `kubegate init` wrote before is kept when it does.
pub fn covers(cert: &str, names: &[String]) -> bool {
    let Ok(der) = CertificateDer::from_pem_slice(cert.as_bytes()) else {
        return false;
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    let month = std::time::SystemTime::now() + std::time::Duration::from_secs(30 * 86_400);
    let month = month
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(i64::MAX);
    if parsed.validity().not_after.timestamp() < month {
        return false;
    }
    let mut sans: Vec<String> = Vec::new();
    if let Ok(Some(ext)) = parsed.subject_alternative_name() {
        for n in &ext.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => sans.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                        _ => None,
                    };
                    sans.extend(ip.map(|ip| ip.to_string()));
                }
                _ => {}
            }
        }
    }
    names.iter().all(|n| sans.contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use std::process::Command;

    /// A CA as kubeadm writes one: `openssl` makes the key (`genkey` args) and a self-signed
    /// CA certificate, `<name>.crt`/`.key` in `dir`.
    fn openssl_ca(dir: &Path, name: &str, genkey: &[&str]) {
        let run = |cmd: &mut Command| {
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = dir.join(format!("{name}.key"));
        run(Command::new("openssl")
            .arg(genkey[0])
            .arg("-out")
            .arg(&key)
            .args(&genkey[1..]));
        run(Command::new("openssl")
            .args(["req", "-x509", "-new", "-days", "30", "-subj"])
            .arg(format!("/CN={name}"))
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            .arg("-key")
            .arg(&key)
            .arg("-out")
            .arg(dir.join(format!("{name}.crt"))));
    }

    #[test]
    fn kubeadm_ca_keys_sign_leaves_that_verify() {
        let dir = tempfile::tempdir().unwrap();
        // kubeadm's default: RSA 2048 in PKCS#1; with ECDSA-P256, SEC1; and PKCS#8.
        let kinds: [(&str, &[&str], &str); 3] = [
            (
                "rsa-ca",
                &["genrsa", "-traditional", "2048"],
                "RSA PRIVATE KEY",
            ),
            (
                "ec-ca",
                &["ecparam", "-genkey", "-name", "prime256v1", "-noout"],
                "EC PRIVATE KEY",
            ),
            (
                "pkcs8-ca",
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                ],
                "BEGIN PRIVATE KEY",
            ),
        ];
        for (name, genkey, label) in kinds {
            openssl_ca(dir.path(), name, genkey);
            let key = std::fs::read_to_string(dir.path().join(format!("{name}.key"))).unwrap();
            assert!(key.contains(label), "{name}: {key}");
            let signer = Signer::load(dir.path(), name).unwrap();
            let names = vec!["10.0.0.10".to_string(), "kubernetes".to_string()];
            let leaf = signer
                .issue("kubegate", &[], &names, Usage::Server)
                .unwrap();
            assert!(covers(&leaf.cert, &names), "{name}");
            assert!(!covers(&leaf.cert, &["10.0.0.11".into()]), "{name}");
            verify(&signer.cert_pem, &leaf.cert);
        }
    }

    /// The leaf verifies against the CA, with rustls' own verifier.
    fn verify(ca: &str, leaf: &str) {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            provider,
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(leaf.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &rustls_pki_types::ServerName::try_from("kubernetes").unwrap(),
                &[],
                rustls_pki_types::UnixTime::now(),
            )
            .unwrap();
    }

    #[test]
    fn der_lengths_are_encoded_long_form_past_127() {
        assert_eq!(der(0x04, &[1, 2]), [0x04, 2, 1, 2]);
        let long = der(0x04, &[0u8; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }
}
