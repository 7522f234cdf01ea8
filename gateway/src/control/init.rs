//! `kubegate init`: writes what one node needs to run kubegate, for the shape chosen — a
//! static pod on a kubeadm control-plane node (behind a VIP held by keepalived), a node-local
//! pod, or a systemd service — so that the deployment guide's steps are few and cannot drift
//! from what kubegate reads:
//!
//! - kubegate's configuration, in the folder its pod mounts (a folder, so that an edit made by
//!   rename reaches the running pod);
//! - the certificates, signed by the node's CAs as kubeadm laid them out: the admin endpoint's
//!   (so Prometheus can scrape it from elsewhere over TLS), and in terminate mode the serving
//!   certificate clients see and a front-proxy client certificate of kubegate's own; with the
//!   metrics token, owned by the user the pod runs as;
//! - the pod manifest (the shipped one), keepalived's configuration with unicast peers, a
//!   Prometheus scrape configuration whose TLS settings match the admin certificate, the
//!   kubeadm `ClusterConfiguration` fragment the apiservers need, and the RBAC binding
//!   terminate mode's token reviews need;
//! - and it prints the commands that come next.
//!
//! Idempotent: a file already as `init` would write it is left alone; a certificate that still
//! names what is needed and is valid for a month is kept, as is the token; a file that differs
//! (an operator's edit) is kept unless `--force`. `--dry-run` prints the plan and writes
//! nothing. `--root` writes under another folder (another node's files, or a try-out); the CAs
//! are read under it, or from this node's `/etc/kubernetes/pki` when it has none.

mod pki;
mod render;
mod spec;

use pki::{Signer, Usage};
pub use spec::{Init, InitArgs, Mode, Shape, ADMIN_SERVER_NAME, FRONT_PROXY_CN, POD_UID};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Who owns kubegate's secrets: the pods' user, or (systemd) root with the `kubegate`
/// group, which the package creates.
fn secret_owner(init: &Init) -> Result<(u32, u32, u32), String> {
    match init.shape {
        Shape::StaticPod | Shape::NodeLocal => Ok((POD_UID, POD_UID, 0o400)),
        Shape::Systemd => {
            let gid = group_id("kubegate").ok_or(
                "no kubegate group: install the package first (it creates the kubegate user and group)",
            )?;
            Ok((0, gid, 0o440))
        }
    }
}

/// One file of the plan.
struct Planned {
    /// As on the node.
    path: String,
    content: Vec<u8>,
    mode: u32,
    owner: (u32, u32),
    /// Not printed by `--dry-run`.
    secret: bool,
    /// Kept when it exists (a key, the token: regenerating them would break what uses them).
    keep_existing: bool,
}

/// What became of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It did not exist: written.
    Created,
    /// It was already as `init` would write it.
    Unchanged,
    /// It differs from what `init` would write (an operator's edit): kept, as `--force` was
    /// not given.
    KeptDiffering,
    /// A key, certificate or token already there: kept.
    Kept,
    /// It differed and `--force` rewrote it.
    Rewritten,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Unchanged => "unchanged",
            Outcome::KeptDiffering => "kept (differs from what init writes; --force rewrites it)",
            Outcome::Kept => "kept",
            Outcome::Rewritten => "rewritten",
        }
    }
}

/// Plans, then writes (or with `dry_run`, prints) every file; returns the report printed.
pub fn run(args: InitArgs) -> Result<String, String> {
    let (dry_run, force) = (args.dry_run, args.force);
    let init = Init::new(args)?;
    let plan = plan(&init)?;
    let mut report = String::new();
    for p in &plan {
        let target = init.at(&p.path);
        let existing = std::fs::read(&target).ok();
        let outcome = match &existing {
            None => Outcome::Created,
            Some(_) if p.keep_existing => Outcome::Kept,
            Some(old) if *old == p.content => Outcome::Unchanged,
            Some(_) if force => Outcome::Rewritten,
            Some(_) => Outcome::KeptDiffering,
        };
        if dry_run {
            report.push_str(&format!(
                "would write {} ({:o}, {}:{}): {}\n",
                p.path,
                p.mode,
                p.owner.0,
                p.owner.1,
                if matches!(outcome, Outcome::Created | Outcome::Rewritten) {
                    "new"
                } else {
                    outcome.as_str()
                }
            ));
            if !p.secret && matches!(outcome, Outcome::Created | Outcome::Rewritten) {
                for line in String::from_utf8_lossy(&p.content).lines() {
                    report.push_str(&format!("    {line}\n"));
                }
            }
            continue;
        }
        if matches!(outcome, Outcome::Created | Outcome::Rewritten) {
            write(&target, &p.content, p.mode, p.owner)
                .map_err(|e| format!("{}: {e}", target.display()))?;
        }
        report.push_str(&format!("{}: {}\n", p.path, outcome.as_str()));
    }
    report.push('\n');
    report.push_str(&next_steps(&init));
    Ok(report)
}

/// Every file, in the order they are written (keys before the certificates that need them,
/// the manifest last: the kubelet starts the pod as soon as it appears).
fn plan(init: &Init) -> Result<Vec<Planned>, String> {
    let (uid, gid, secret_mode) = secret_owner(init)?;
    let text = |path: &str, content: String, mode: u32| Planned {
        path: path.to_string(),
        content: content.into_bytes(),
        mode,
        owner: (0, 0),
        secret: false,
        keep_existing: false,
    };
    let mut plan = Vec::new();
    // The CAs under the root, or this node's own when the root has none (another node's files
    // written on a control-plane node).
    let k8s_pki = [
        init.at("/etc/kubernetes/pki"),
        PathBuf::from("/etc/kubernetes/pki"),
    ]
    .into_iter()
    .find(|d| d.join("ca.key").exists())
    .unwrap_or_else(|| init.at("/etc/kubernetes/pki"));
    let pki = init.pki_dir_seen();
    // The certificates: kept while they still name what is needed.
    let ca = Signer::load(&k8s_pki, "ca").map_err(|e| {
        format!("the cluster CA: {e} (run kubegate init as root on a kubeadm control-plane node, after `kubeadm init phase certs`, or with --root pointing at a copy of /etc/kubernetes/pki)")
    })?;
    let mut admin_names = vec![
        init.address.to_string(),
        "127.0.0.1".to_string(),
        ADMIN_SERVER_NAME.to_string(),
    ];
    admin_names.dedup();
    let mut leaves = vec![("admin", &ca, "kubegate-admin", admin_names, Usage::Server)];
    let front_proxy;
    if init.mode == Mode::Terminate {
        let mut names: Vec<String> = vec![
            init.endpoint_host(),
            init.address.to_string(),
            "127.0.0.1".into(),
        ];
        names.extend(
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from),
        );
        names.extend(init.sans.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        leaves.push(("serving", &ca, "kubegate", names, Usage::Server));
        front_proxy = Signer::load(&k8s_pki, "front-proxy-ca")
            .map_err(|e| format!("the front-proxy CA: {e}"))?;
        leaves.push((
            "front-proxy-client",
            &front_proxy,
            FRONT_PROXY_CN,
            Vec::new(),
            Usage::Client,
        ));
    }
    for (file, signer, cn, names, usage) in leaves {
        let crt_path = format!("{pki}/{file}.crt");
        let key_path = format!("{pki}/{file}.key");
        let existing = std::fs::read_to_string(init.at(&crt_path)).ok();
        let key_there = init.at(&key_path).exists();
        let keep = existing
            .as_deref()
            .is_some_and(|c| key_there && pki::covers(c, &names) && same_issuer(c, signer));
        let (cert, key) = if keep {
            (existing.unwrap_or_default(), Vec::new())
        } else {
            let issued = signer.issue(cn, &[], &names, usage)?;
            (issued.cert, issued.key.into_bytes())
        };
        if !keep {
            plan.push(Planned {
                path: key_path,
                content: key,
                mode: secret_mode,
                owner: (uid, gid),
                secret: true,
                keep_existing: false,
            });
        }
        plan.push(Planned {
            path: crt_path,
            content: cert.into_bytes(),
            mode: 0o444,
            owner: (uid, gid),
            secret: false,
            keep_existing: keep,
        });
    }
    plan.push(Planned {
        path: format!("{pki}/metrics-token"),
        content: token()?.into_bytes(),
        mode: secret_mode,
        owner: (uid, gid),
        secret: true,
        keep_existing: true,
    });
    if init.shape == Shape::Systemd {
        plan.push(Planned {
            path: init.ca_seen().to_string(),
            content: ca.cert_pem.clone().into_bytes(),
            mode: 0o444,
            owner: (uid, gid),
            secret: false,
            keep_existing: false,
        });
    }
    let mut config = text(init.config_path(), render::config(init), 0o644);
    if init.shape == Shape::Systemd {
        // As the package leaves it: the service's group reads it, nobody else.
        config.owner = (0, gid);
        config.mode = 0o640;
    }
    plan.push(config);
    plan.push(text(
        "/etc/kubegate/monitoring/prometheus.yaml",
        render::prometheus(init),
        0o644,
    ));
    if init.shape != Shape::Systemd {
        plan.push(text(
            "/etc/kubegate/kubeadm-config.yaml",
            render::kubeadm(init),
            0o644,
        ));
    }
    if init.mode == Mode::Terminate {
        plan.push(text(
            "/etc/kubegate/kubegate-rbac.yaml",
            render::RBAC.to_string(),
            0o644,
        ));
    }
    if let Some(k) = render::keepalived(init) {
        plan.push(text("/etc/keepalived/keepalived.conf", k, 0o644));
    }
    if let (Some(path), Some(m)) = (init.manifest_path(), render::manifest(init)) {
        plan.push(text(path, m, 0o644));
    }
    Ok(plan)
}

/// Whether `cert` was issued by `signer`'s CA (a certificate from another cluster's CA is
/// never kept).
fn same_issuer(cert: &str, signer: &Signer) -> bool {
    use rustls_pki_types::pem::PemObject;
    let subject_of = |pem: &str, issuer: bool| {
        let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
        let (_, c) = x509_parser::parse_x509_certificate(&der).ok()?;
        Some(if issuer {
            c.issuer().as_raw().to_vec()
        } else {
            c.subject().as_raw().to_vec()
        })
    };
    subject_of(cert, true).is_some()
        && subject_of(cert, true) == subject_of(&signer.cert_pem, false)
}

/// A new metrics token: 32 random bytes, hex.
fn token() -> Result<String, String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness for the token".to_string())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
}

/// Writes `content` to `path` (its folder made as needed) by a rename, so that a reader never
/// sees half a file, with `mode` and `owner`.
fn write(path: &Path, content: &[u8], mode: u32, owner: (u32, u32)) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        // A folder of secrets belongs to their owner; others are the usual 0755.
        let dir_mode = if mode & 0o004 == 0 { 0o750 } else { 0o755 };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))?;
        std::os::unix::fs::chown(dir, Some(owner.0), Some(owner.1))?;
    }
    let tmp = dir.join(format!(
        ".{}.kubegate-init",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    std::fs::write(&tmp, content)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::os::unix::fs::chown(&tmp, Some(owner.0), Some(owner.1))?;
    std::fs::rename(&tmp, path)
}

/// The id of group `name`, from the system's group database.
fn group_id(name: &str) -> Option<u32> {
    let groups = std::fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name)
            .then(|| f.nth(1)?.parse().ok())
            .flatten()
    })
}

/// The commands that come next, for `init`'s shape.
fn next_steps(init: &Init) -> String {
    let mut s = String::from("Next:\n");
    let config = init.config_path();
    s.push_str(&format!(
        "  kubegate check --config {config}    # what kubegate will load\n"
    ));
    match init.shape {
        Shape::StaticPod => {
            s.push_str("  # first control-plane node: merge /etc/kubegate/kubeadm-config.yaml into the ClusterConfiguration, then\n");
            s.push_str("  kubeadm init --config kubeadm.yaml --upload-certs\n");
            s.push_str("  # other control-plane nodes: kubegate init after `kubeadm join --control-plane` (the join wants an empty manifests folder)\n");
        }
        Shape::NodeLocal => {
            s.push_str(&format!(
                "  # point the node's clients at https://{} (docs/deploy.md, \"Node-local mode\")\n",
                init.listen
            ));
        }
        Shape::Systemd => {
            s.push_str("  systemctl enable --now kubegate\n");
        }
    }
    if init.mode == Mode::Terminate {
        s.push_str("  kubectl apply -f /etc/kubegate/kubegate-rbac.yaml    # token reviews (once per cluster)\n");
    }
    if init.vip.is_some() {
        s.push_str("  systemctl restart keepalived\n");
    }
    s.push_str(&format!(
        "  kubegate status --config {config}\n  # Prometheus: /etc/kubegate/monitoring/prometheus.yaml, with {} and {}/metrics-token\n",
        init.ca_seen(),
        init.pki_dir_seen()
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(shape: Shape, mode: Mode) -> InitArgs {
        InitArgs {
            shape,
            mode,
            address: "10.0.0.11".parse().unwrap(),
            backends: Vec::new(),
            peers: vec!["10.0.0.13".parse().unwrap(), "10.0.0.12".parse().unwrap()],
            vip: Some("10.0.0.10/24".into()),
            interface: "eth0".into(),
            listen: None,
            sans: Vec::new(),
            image: None,
            root: PathBuf::from("/"),
            dry_run: true,
            force: false,
        }
    }

    #[test]
    fn rendered_configurations_are_valid_configurations() {
        for shape in [Shape::StaticPod, Shape::NodeLocal, Shape::Systemd] {
            for mode in [Mode::Passthrough, Mode::Terminate] {
                let init = Init::new(args(shape, mode)).unwrap();
                let text = render::config(&init);
                let config: kubegate_config::Config = serde_yaml_ng::from_str(&text)
                    .unwrap_or_else(|e| panic!("{shape:?} {mode:?}: {e}\n{text}"));
                assert_eq!(config.backends.len(), 3);
                assert_eq!(
                    config.backends[0].address,
                    "10.0.0.11:6443".parse().unwrap(),
                    "backends sorted, named cp-1..: {text}"
                );
                assert!(config.admin.tls.is_some());
            }
        }
    }

    #[test]
    fn keepalived_speaks_unicast_to_the_peers_and_scrapes_name_every_node() {
        let init = Init::new(args(Shape::StaticPod, Mode::Terminate)).unwrap();
        let k = render::keepalived(&init).unwrap();
        assert!(k.contains("unicast_src_ip 10.0.0.11"), "{k}");
        assert!(k.contains("        10.0.0.12\n        10.0.0.13\n"), "{k}");
        assert!(k.contains("https://127.0.0.1:9444/readyz/lifecycle"), "{k}");
        let p = render::prometheus(&init);
        assert!(
            p.contains(r#"targets: ["10.0.0.11:9444", "10.0.0.12:9444", "10.0.0.13:9444"]"#),
            "{p}"
        );
        assert!(p.contains("server_name: kubegate-admin"), "{p}");
        let kubeadm = render::kubeadm(&init);
        assert!(
            kubeadm.contains("controlPlaneEndpoint: \"10.0.0.10:8443\""),
            "{kubeadm}"
        );
        assert!(
            kubeadm.contains("value: front-proxy-client,kubegate-front-proxy"),
            "{kubeadm}"
        );
    }

    #[test]
    fn the_manifest_is_the_shipped_one_with_the_image_asked_for() {
        let mut a = args(Shape::StaticPod, Mode::Passthrough);
        a.image = Some("registry.example.com/kubegate:1.2.3".into());
        let m = render::manifest(&Init::new(a).unwrap()).unwrap();
        assert!(
            m.contains("image: registry.example.com/kubegate:1.2.3"),
            "{m}"
        );
        assert!(!m.contains(spec::SHIPPED_IMAGE));
        assert!(
            render::manifest(&Init::new(args(Shape::Systemd, Mode::Passthrough)).unwrap())
                .is_none()
        );
    }

    #[test]
    fn the_apiservers_port_is_refused_beside_them() {
        let mut a = args(Shape::StaticPod, Mode::Passthrough);
        a.listen = Some("0.0.0.0:6443".parse().unwrap());
        assert!(Init::new(a).err().unwrap().contains("conflicts"));
    }
}
