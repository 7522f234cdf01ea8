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
    /// One half of a key pair whose other half is missing: the pair is written whole (a
    /// certificate is never left beside a key it does not belong to).
    half_pair: bool,
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
    if !dry_run {
        // Before anything is read or written in it: a folder an earlier release left to the
        // pod's user is taken back first.
        let pki = init.at(init.pki_dir_seen());
        folder(&pki, Some(secret_owner(&init)?.1))
            .map_err(|e| format!("{}: {e}", pki.display()))?;
    }
    let mut report = String::new();
    for p in &plan {
        let target = init.at(&p.path);
        let existing = read_existing(&target).map_err(|e| format!("{}: {e}", target.display()))?;
        let outcome = match &existing {
            None => Outcome::Created,
            Some(_) if p.keep_existing => Outcome::Kept,
            Some(old) if *old == p.content => Outcome::Unchanged,
            Some(_) if force || p.half_pair => Outcome::Rewritten,
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
        half_pair: false,
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
    let mut admin_names = init.addresses();
    admin_names.extend(init.loopbacks());
    admin_names.push(ADMIN_SERVER_NAME.to_string());
    admin_names.dedup();
    let mut leaves = vec![("admin", &ca, "kubegate-admin", admin_names, Usage::Server)];
    let front_proxy;
    if init.mode == Mode::Terminate {
        let mut names: Vec<String> = vec![init.endpoint_host()];
        names.extend(init.addresses());
        names.extend(init.loopbacks());
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
        let existing = read_existing(&init.at(&crt_path))
            .ok()
            .flatten()
            .and_then(|c| String::from_utf8(c).ok());
        let key_there = std::fs::symlink_metadata(init.at(&key_path)).is_ok();
        let half_pair = existing.is_some() != key_there;
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
                half_pair,
            });
        }
        plan.push(Planned {
            path: crt_path,
            content: cert.into_bytes(),
            mode: 0o444,
            owner: (uid, gid),
            secret: false,
            keep_existing: keep,
            half_pair,
        });
    }
    plan.push(Planned {
        path: format!("{pki}/metrics-token"),
        content: token()?.into_bytes(),
        mode: secret_mode,
        owner: (uid, gid),
        secret: true,
        keep_existing: true,
        half_pair: false,
    });
    if init.shape == Shape::Systemd {
        plan.push(Planned {
            path: init.ca_seen().to_string(),
            content: ca.cert_pem.clone().into_bytes(),
            mode: 0o444,
            owner: (uid, gid),
            secret: false,
            keep_existing: false,
            half_pair: false,
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

/// Whether `cert` was issued by `signer`'s CA: its issuer is the CA's subject and its
/// signature verifies with the CA's key (a certificate from another cluster's CA, even one
/// named alike — every kubeadm CA is `CN=kubernetes` — is never kept).
fn same_issuer(cert: &str, signer: &Signer) -> bool {
    use rustls_pki_types::pem::PemObject;
    let der = |pem: &str| rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).ok();
    let (Some(cert), Some(ca)) = (der(cert), der(&signer.cert_pem)) else {
        return false;
    };
    let (Ok((_, cert)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(&cert),
        x509_parser::parse_x509_certificate(&ca),
    ) else {
        return false;
    };
    cert.issuer().as_raw() == ca.subject().as_raw()
        && cert.verify_signature(Some(ca.public_key())).is_ok()
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

/// Writes `content` to `path` by a rename, so that a reader never sees half a file, with
/// `mode` and `owner`, and never through a link: the temporary file is created new
/// (`O_EXCL | O_NOFOLLOW`, a random name) with no permission beyond its owner's, owned and
/// given its mode through the open descriptor, and renamed over `path`. A link (or anything
/// but a plain file) already at `path` is refused, not followed or replaced. Its folder is
/// made (or set right) first ([`folder`]).
fn write(path: &Path, content: &[u8], mode: u32, owner: (u32, u32)) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    folder(dir, None)?;
    refuse_link(path)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.kubegate-init", nonce()?));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let written = (|| {
        file.write_all(content)?;
        std::os::unix::fs::fchown(&file, Some(owner.0), Some(owner.1))?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Makes `dir` (with its parents) if missing; with `secrets_group`, it is the folder of
/// secrets and is set right whether new or not: root's, with the secrets' group, 0750.
/// Whoever reads the keys (the pod's user) can read them there but cannot add, remove or
/// replace a name in it: no link can be planted for the next `init` to write through. A link
/// in `dir`'s place is refused.
fn folder(dir: &Path, secrets_group: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    refuse_link(dir)?;
    let Some(group) = secrets_group else {
        return Ok(());
    };
    // Opened without following a link, then owned and moded through the descriptor.
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    std::os::unix::fs::fchown(&handle, Some(0), Some(group))?;
    handle.set_permissions(std::fs::Permissions::from_mode(0o750))
}

/// An error if `path` is a symbolic link, or anything but a plain file or folder.
fn refuse_link(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(std::io::Error::other(
            "is a symbolic link: kubegate init writes nothing through a link (remove it, or write elsewhere with --root)",
        )),
        Ok(m) if !m.is_file() && !m.is_dir() => Err(std::io::Error::other(
            "is neither a file nor a folder: kubegate init does not replace it",
        )),
        _ => Ok(()),
    }
}

/// A random name part, so that nobody can guess (and plant) the temporary file's name.
fn nonce() -> std::io::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| std::io::Error::other("no randomness"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The file at `path` if it is a plain file (a link is not read through).
fn read_existing(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    refuse_link(path)?;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match opened {
        Ok(mut f) => {
            let mut content = Vec::new();
            f.read_to_end(&mut content)?;
            Ok(Some(content))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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
        s.push_str("  kubectl apply -f /etc/kubegate/kubegate-rbac.yaml    # token reviews, the shed object (once per cluster)\n");
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
            other_address: None,
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

    /// A node under a temporary root: the cluster and front-proxy CAs where kubeadm puts
    /// them, and a file outside every folder init writes (what a link would aim at).
    fn node() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let pki = root.path().join("etc/kubernetes/pki");
        std::fs::create_dir_all(&pki).unwrap();
        for name in ["ca", "front-proxy-ca"] {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            std::fs::write(pki.join(format!("{name}.crt")), cert.pem()).unwrap();
            std::fs::write(pki.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        let outside = root.path().join("outside/shadow");
        std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
        std::fs::write(&outside, "root's secret\n").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        (root, outside)
    }

    fn writing(root: &Path) -> InitArgs {
        InitArgs {
            root: root.to_path_buf(),
            dry_run: false,
            vip: None,
            peers: Vec::new(),
            ..args(Shape::StaticPod, Mode::Terminate)
        }
    }

    fn unchanged(outside: &Path) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(outside).unwrap();
        assert_eq!(std::fs::read(outside).unwrap(), b"root's secret\n");
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o600));
    }

    #[test]
    fn init_writes_nothing_through_a_link_at_any_name_it_writes() {
        // Every name init writes, as a first run on a fresh node writes them.
        let names: Vec<String> = {
            let (root, _) = node();
            let init = Init::new(writing(root.path())).unwrap();
            plan(&init).unwrap().into_iter().map(|p| p.path).collect()
        };
        assert!(names.len() >= 10, "{names:?}");
        for name in &names {
            let (root, outside) = node();
            let at = root.path().join(name.trim_start_matches('/'));
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&outside, &at).unwrap();
            let e = run(writing(root.path())).expect_err(name);
            assert!(
                e.contains(name.as_str()) && e.contains("symbolic link"),
                "{name}: {e}"
            );
            unchanged(&outside);
            assert!(
                std::fs::symlink_metadata(&at)
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "{name}: the link is left for the operator to see"
            );
        }
        // A link in the place of the folder of keys.
        let (root, outside) = node();
        let pki = root.path().join("etc/kubernetes/pki/kubegate");
        std::os::unix::fs::symlink(outside.parent().unwrap(), &pki).unwrap();
        let e = run(writing(root.path())).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        unchanged(&outside);
        assert_eq!(
            std::fs::read_dir(outside.parent().unwrap())
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn the_folder_of_keys_is_roots_and_the_pods_user_only_reads_it() {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        let (root, _) = node();
        let pki = root.path().join("etc/kubernetes/pki/kubegate");
        // As an earlier release left it: the pod's user owned the folder.
        std::fs::create_dir_all(&pki).unwrap();
        std::os::unix::fs::chown(&pki, Some(POD_UID), Some(POD_UID)).unwrap();
        run(writing(root.path())).unwrap();
        let m = std::fs::metadata(&pki).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, POD_UID, 0o750));
        let key = std::fs::metadata(pki.join("serving.key")).unwrap();
        assert_eq!((key.uid(), key.mode() & 0o7777), (POD_UID, 0o400));
        // The way to the folder is open to all (as /etc is); only the folder is guarded.
        let mut up = pki.as_path();
        while let Some(parent) = up.parent().filter(|p| p.starts_with(root.path())) {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
            up = parent;
        }
        let as_pod = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .current_dir(&pki)
                .uid(POD_UID)
                .gid(POD_UID)
                .status()
                .unwrap()
                .success()
        };
        assert!(
            as_pod("cat serving.key >/dev/null"),
            "the pod's user reads its key"
        );
        assert!(!as_pod("touch planted"), "and cannot add a name");
        assert!(!as_pod("ln -s /etc/shadow metrics-token.new"), "nor a link");
        assert!(!as_pod("mv serving.key moved"), "nor move one");
    }

    #[test]
    fn a_half_key_pair_is_written_whole() {
        let (root, _) = node();
        run(writing(root.path())).unwrap();
        let pki = root.path().join("etc/kubernetes/pki/kubegate");
        let cert_before = std::fs::read(pki.join("serving.crt")).unwrap();
        std::fs::remove_file(pki.join("serving.key")).unwrap();
        let report = run(writing(root.path())).unwrap();
        assert!(
            report.contains("/etc/kubernetes/pki/kubegate/serving.key: created"),
            "{report}"
        );
        assert!(
            report.contains("/etc/kubernetes/pki/kubegate/serving.crt: rewritten"),
            "{report}"
        );
        let cert = std::fs::read_to_string(pki.join("serving.crt")).unwrap();
        assert_ne!(
            cert.as_bytes(),
            cert_before,
            "a new certificate for the new key"
        );
        let key = std::fs::read_to_string(pki.join("serving.key")).unwrap();
        let key = rcgen::KeyPair::from_pem(&key).unwrap();
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            parsed.public_key().raw,
            key.public_key_der(),
            "the certificate belongs to the key beside it"
        );
    }

    /// Two CAs named alike (every kubeadm cluster's is `CN=kubernetes`): a certificate the
    /// other one signed is not kept, one this one signed is.
    #[test]
    fn a_certificate_is_kept_only_if_the_nodes_ca_signed_it() {
        let dir = tempfile::tempdir().unwrap();
        let ca = |folder: &str| {
            let path = dir.path().join(folder);
            std::fs::create_dir_all(&path).unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "kubernetes");
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            std::fs::write(path.join("ca.crt"), cert.pem()).unwrap();
            std::fs::write(path.join("ca.key"), key.serialize_pem()).unwrap();
            Signer::load(&path, "ca").unwrap()
        };
        let (ours, theirs) = (ca("ours"), ca("theirs"));
        let names = vec!["kubernetes".to_string()];
        let by_ours = ours.issue("kubegate", &[], &names, Usage::Server).unwrap();
        let by_theirs = theirs
            .issue("kubegate", &[], &names, Usage::Server)
            .unwrap();
        assert!(same_issuer(&by_ours.cert, &ours));
        assert!(
            !same_issuer(&by_theirs.cert, &ours),
            "same name, another key"
        );
        assert!(!same_issuer("not a certificate", &ours));
    }

    #[test]
    fn a_dual_stack_node_is_served_on_both_families_and_named_by_both() {
        let dual = |shape| InitArgs {
            other_address: Some("fd00::11".parse().unwrap()),
            ..args(shape, Mode::Terminate)
        };
        for (shape, listen) in [
            (Shape::StaticPod, "[::]:8443"),
            (Shape::Systemd, "[::]:6443"),
            (Shape::NodeLocal, "127.0.0.1:7443"),
        ] {
            let init = Init::new(dual(shape)).unwrap();
            let text = render::config(&init);
            let config: kubegate_config::Config = serde_yaml_ng::from_str(&text).unwrap();
            assert_eq!(
                config.listeners[0].address,
                listen.parse().unwrap(),
                "{text}"
            );
            assert!(config.admin.address.ip().is_unspecified() && config.admin.address.is_ipv6());
            // A replica is a host: listed once, in the first address's family.
            assert_eq!(config.backends.len(), 3, "{text}");
            assert!(
                config.backends.iter().all(|b| b.address.is_ipv4()),
                "{text}"
            );
        }
        // IPv6 alone: every address of its family too.
        let v6 = InitArgs {
            address: "fd00::11".parse().unwrap(),
            peers: Vec::new(),
            vip: None,
            ..args(Shape::StaticPod, Mode::Passthrough)
        };
        let text = render::config(&Init::new(v6).unwrap());
        let config: kubegate_config::Config = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(config.listeners[0].address, "[::]:8443".parse().unwrap());
        assert_eq!(
            config.backends[0].address,
            "[fd00::11]:6443".parse().unwrap()
        );
        // Two addresses of one family are not a dual-stack node.
        let twice_v4 = InitArgs {
            other_address: Some("10.0.0.99".parse().unwrap()),
            ..args(Shape::StaticPod, Mode::Terminate)
        };
        assert!(Init::new(twice_v4)
            .err()
            .unwrap()
            .contains("one IPv4 and one IPv6"));
        // keepalived speaks one family: peers of the other are refused.
        let v6_peer = InitArgs {
            peers: vec!["fd00::12".parse().unwrap()],
            ..dual(Shape::StaticPod)
        };
        assert!(Init::new(v6_peer)
            .err()
            .unwrap()
            .contains("--peer fd00::12"));
        let kubeadm = render::kubeadm(&Init::new(dual(Shape::StaticPod)).unwrap());
        assert!(kubeadm.contains(r#""fd00::11""#), "{kubeadm}");
        // The certificates name both addresses.
        let (root, _) = node();
        run(InitArgs {
            other_address: Some("fd00::11".parse().unwrap()),
            ..writing(root.path())
        })
        .unwrap();
        let pki = root.path().join("etc/kubernetes/pki/kubegate");
        // Both addresses, and ::1 where `kubegate status` asks the admin endpoint on the node.
        let both = [
            "10.0.0.11".to_string(),
            "fd00::11".to_string(),
            "::1".to_string(),
        ];
        for cert in ["serving.crt", "admin.crt"] {
            let pem = std::fs::read_to_string(pki.join(cert)).unwrap();
            assert!(pki::covers(&pem, &both), "{cert}");
        }
    }

    #[test]
    fn the_apiservers_port_is_refused_beside_them() {
        let mut a = args(Shape::StaticPod, Mode::Passthrough);
        a.listen = Some("0.0.0.0:6443".parse().unwrap());
        assert!(Init::new(a).err().unwrap().contains("conflicts"));
    }
}
