//! `kubegate-sim certs DIR`: a CA, a serving certificate, client certificates and a kubeconfig,
//! laid out like a small kubeadm PKI; a front-proxy CA and its client certificate (what a
//! TLS-terminating gateway presents to the apiservers), and a serving certificate for such a
//! gateway.

use anyhow::Context;
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::Path;
use time::{Duration, OffsetDateTime};

/// Names the serving certificate is valid for: what clients and kubegate dial.
pub const SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// Writes the PKI into `dir` and a kubeconfig for `server` (e.g. `https://127.0.0.1:6443`).
pub fn write(dir: &Path, server: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let (ca_cert, ca_key) = authority(dir, "kubernetes", "ca")?;
    let (fp_cert, fp_key) = authority(dir, "front-proxy-ca", "front-proxy-ca")?;

    let signed = |issuer: &rcgen::Certificate,
                  issuer_key: &KeyPair,
                  names: Vec<String>,
                  cn: &str,
                  org: Option<&str>,
                  usage: ExtendedKeyUsagePurpose,
                  file: &str|
     -> anyhow::Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(names)?;
        p.distinguished_name = name(cn, org);
        p.extended_key_usages = vec![usage];
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut p, 365);
        let cert = p.signed_by(&key, issuer, issuer_key)?;
        save(dir, &format!("{file}.crt"), &cert.pem())?;
        save(dir, &format!("{file}.key"), &key.serialize_pem())?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let leaf = |names, cn: &str, org, usage, file: &str| {
        signed(&ca_cert, &ca_key, names, cn, org, usage, file)
    };
    // kubeadm's front-proxy-client.crt: what a TLS-terminating gateway presents upstream.
    signed(
        &fp_cert,
        &fp_key,
        vec![],
        "front-proxy-client",
        None,
        ExtendedKeyUsagePurpose::ClientAuth,
        "front-proxy-client",
    )?;
    // What clients of a TLS-terminating gateway see, valid for the apiservers' names.
    leaf(
        SERVING_NAMES.iter().map(|s| s.to_string()).collect(),
        "kubegate",
        None,
        ExtendedKeyUsagePurpose::ServerAuth,
        "gateway",
    )?;
    leaf(
        SERVING_NAMES.iter().map(|s| s.to_string()).collect(),
        "kube-apiserver",
        None,
        ExtendedKeyUsagePurpose::ServerAuth,
        "apiserver",
    )?;
    let (admin_cert, admin_key) = leaf(
        vec![],
        "kubernetes-admin",
        Some("system:masters"),
        ExtendedKeyUsagePurpose::ClientAuth,
        "admin",
    )?;
    leaf(
        vec![],
        "system:node:node-1",
        Some("system:nodes"),
        ExtendedKeyUsagePurpose::ClientAuth,
        "node",
    )?;
    leaf(
        vec![],
        "kubegate",
        Some("system:monitoring"),
        ExtendedKeyUsagePurpose::ClientAuth,
        "kubegate-probe",
    )?;
    save(
        dir,
        "kubeconfig",
        &kubeconfig(server, &ca_cert.pem(), &admin_cert, &admin_key),
    )?;
    Ok(())
}

/// Writes a self-signed CA `<file>.crt`/`.key` with common name `cn`.
fn authority(dir: &Path, cn: &str, file: &str) -> anyhow::Result<(rcgen::Certificate, KeyPair)> {
    let key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name = name(cn, None);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca, 3650);
    let cert = ca.self_signed(&key)?;
    save(dir, &format!("{file}.crt"), &cert.pem())?;
    save(dir, &format!("{file}.key"), &key.serialize_pem())?;
    Ok((cert, key))
}

/// A kubeconfig with everything embedded, so it works from any directory.
pub fn kubeconfig(server: &str, ca: &str, cert: &str, key: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubegate-sim\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: kubernetes-admin@kubegate-sim\n  context:\n    cluster: kubegate-sim\n    user: kubernetes-admin\n    namespace: default\ncurrent-context: kubernetes-admin@kubegate-sim\n",
        b64(ca),
        b64(cert),
        b64(key)
    )
}

fn name(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    if let Some(o) = org {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(days);
}

fn save(dir: &Path, file: &str, content: &str) -> anyhow::Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, content).with_context(|| format!("write {}", path.display()))?;
    if file.ends_with(".key") || file == "kubeconfig" {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}
