//! The certificates of a small kubeadm control plane, laid out as kubeadm does, for the load
//! test and `kubegate-sim certs` / `cluster`: the cluster CA and the front-proxy CA, the
//! apiserver's serving certificate, kubeadm's `front-proxy-client`, a serving certificate for
//! a TLS-terminating gateway, client certificates (admin, a node, a monitoring client), and an
//! admin kubeconfig.

use crate::pki::authority::{write_private, Authority, Leaf, Usage};
use crate::pki::kubeconfig::kubeconfig_with_certificate;
use crate::replica::FRONT_PROXY_CN;
use std::path::Path;
use time::Duration;

/// Names the serving certificates are valid for: what clients and gateways dial.
pub const KUBEADM_SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// Writes the layout into `dir`, and `kubeconfig` for `server` (e.g. `https://127.0.0.1:6443`).
pub fn write_kubeadm_layout(dir: &Path, server: &str) -> anyhow::Result<()> {
    write_kubeadm_layout_answering(dir, server, &[])
}

/// [`write_kubeadm_layout`], its serving certificates also valid for `also`: the server names
/// a cluster answers behind a gateway that routes by them.
pub fn write_kubeadm_layout_answering(
    dir: &Path,
    server: &str,
    also: &[&str],
) -> anyhow::Result<()> {
    let serving_names: Vec<&str> = KUBEADM_SERVING_NAMES.iter().chain(also).copied().collect();
    let ca = Authority::create(dir, "kubernetes", "ca")?;
    let front_proxy = Authority::create(dir, "front-proxy-ca", "front-proxy-ca")?;
    let year = Duration::days(365);
    let leaf = |cn, orgs, names, usage| Leaf {
        orgs,
        names,
        not_after: year,
        ..Leaf::new(cn, usage)
    };
    // kubeadm's front-proxy-client.crt: what a TLS-terminating gateway presents upstream.
    front_proxy.issue(
        "front-proxy-client",
        &leaf(FRONT_PROXY_CN, &[], &[], Usage::Client),
    )?;
    // What clients of a TLS-terminating gateway see, valid for the apiservers' names.
    ca.issue(
        "gateway",
        &leaf("kubegate", &[], &serving_names, Usage::Server),
    )?;
    ca.issue(
        "apiserver",
        &leaf("kube-apiserver", &[], &serving_names, Usage::Server),
    )?;
    let (admin_crt, admin_key) = ca.issue(
        "admin",
        &leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client),
    )?;
    ca.issue(
        "node",
        &leaf("system:node:node-1", &["system:nodes"], &[], Usage::Client),
    )?;
    // A workload's identity (a service account of `default`): what the apiserver's priority
    // and fairness puts in `workload-low`, where `admin` is exempt.
    ca.issue(
        "service-account",
        &leaf(
            "system:serviceaccount:default:loadtest",
            &["system:serviceaccounts"],
            &[],
            Usage::Client,
        ),
    )?;
    ca.issue(
        "kubegate-probe",
        &leaf("kubegate", &["system:monitoring"], &[], Usage::Client),
    )?;
    let kubeconfig = kubeconfig_with_certificate(
        server,
        ca.cert_pem().as_bytes(),
        &std::fs::read(admin_crt)?,
        &std::fs::read(admin_key)?,
    );
    write_private(&dir.join("kubeconfig"), &kubeconfig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_has_every_file_and_keys_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        write_kubeadm_layout(dir.path(), "https://127.0.0.1:6443").unwrap();
        for f in [
            "ca",
            "front-proxy-ca",
            "front-proxy-client",
            "gateway",
            "apiserver",
            "admin",
            "node",
            "kubegate-probe",
        ] {
            assert!(dir.path().join(format!("{f}.crt")).is_file(), "{f}.crt");
            let key = dir.path().join(format!("{f}.key"));
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}.key");
        }
        let kc = std::fs::read_to_string(dir.path().join("kubeconfig")).unwrap();
        assert!(kc.contains("server: https://127.0.0.1:6443"), "{kc}");
    }
}
