//! The operator's path, as docs/deploy.md writes it, run: every command block of the guide is
//! marked (in the page's source, an HTML comment before the block) with where it runs, and this
//! test runs the blocks marked as steps, as written and in order, on a stand-in for a kubeadm
//! node:
//!
//! - a private mount namespace (this test binary runs itself again under `unshare --mount`)
//!   whose `/etc/kubernetes`, `/etc/kubegate`, `/etc/keepalived` and `/etc/prometheus` are
//!   empty tmpfs, then laid out as `kubeadm init phase certs` lays them: the cluster and
//!   front-proxy CAs (RSA keys in PKCS#1, root, 0600, by `openssl` as kubeadm's are), the
//!   apiserver's certificate with the `certSANs` the guide's kubeadm fragment adds,
//!   `admin.conf` pointing at the VIP, an empty manifests folder;
//! - simulated apiservers on the nodes' (loopback) addresses, trusting kubegate's front-proxy
//!   name as the fragment says;
//! - the kubelet's part played by runc: each manifest in `/etc/kubernetes/manifests` run with
//!   exactly its mounts, user (65532), read-only root and capabilities, its probes run as the
//!   kubelet runs them;
//! - Prometheus with the scrape configuration `kubegate init` wrote (merged into a
//!   configuration of its own, as the guide says), which must find the target up;
//! - a second node, in a namespace of its own with the CAs the join brings, where the join's
//!   preflight rule holds: the manifests folder is empty when the guide runs `kubeadm join`.
//!
//! The steps for a dedicated balancer host run on a booted systemd instead: a container whose
//! PID 1 is systemd (`systemd-nspawn`), its root this machine's Debian root under a writable
//! overlay, with a private network and no `/etc/kubernetes`.
//!
//! 1. `every_command_block_of_the_guide_says_where_it_runs`
//! 2. `the_guide_runs_as_written_on_kubeadm_nodes`: passthrough, then terminate mode.
//! 3. `the_guide_runs_as_written_on_a_balancer_host_under_systemd`: the package, `kubegate
//!    init --shape systemd`, the unit started on a host without `/etc/kubernetes`; then a newer
//!    package installed over the running service restarts it.

use kubegate_e2e::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const GUIDE: &str = "docs/deploy.md";

/// Where a block runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    /// The variables a node's blocks use; the test sets its own.
    Set { node: String },
    /// A step on `node`, with tags: a mode (`passthrough`, `terminate`) it belongs to, and
    /// `running` for a step that needs kubegate running.
    Step { node: String, tags: Vec<String> },
    /// Not run on the stand-in, and why.
    NotRun(String),
}

#[derive(Debug, Clone)]
struct Block {
    marker: Marker,
    text: String,
    line: usize,
}

/// Every ```sh block of the guide with its marker; panics at a block without one.
fn guide_blocks() -> Vec<Block> {
    let text = std::fs::read_to_string(repo(GUIDE)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("```sh") {
            let marker_line = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .unwrap_or_default();
            let marker = parse_marker(marker_line).unwrap_or_else(|| {
                panic!(
                    "{GUIDE}:{}: a command block needs a marker comment before it (<!-- step: NODE [TAGS] -->, <!-- not run here: WHY -->, <!-- set by the test: NODE -->), found {marker_line:?}",
                    i + 1
                )
            });
            let indent = lines[i].len() - lines[i].trim_start().len();
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                body.push(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
                i += 1;
            }
            blocks.push(Block {
                marker,
                text: body.join("\n") + "\n",
                line: i + 1,
            });
        }
        i += 1;
    }
    blocks
}

fn parse_marker(line: &str) -> Option<Marker> {
    let inner = line.strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    if let Some(why) = inner.strip_prefix("not run here:") {
        return Some(Marker::NotRun(why.trim().to_string()));
    }
    if let Some(rest) = inner.strip_prefix("set by the test:") {
        let node = rest
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
            .find(|w| w.starts_with("node-"))?;
        return Some(Marker::Set {
            node: node.to_string(),
        });
    }
    let rest = inner.strip_prefix("step:")?;
    let mut words = rest.split_whitespace();
    let node = words.next()?.to_string();
    Some(Marker::Step {
        node,
        tags: words.map(str::to_string).collect(),
    })
}

#[test]
fn every_command_block_of_the_guide_says_where_it_runs() {
    let blocks = guide_blocks();
    let steps = blocks
        .iter()
        .filter(|b| matches!(b.marker, Marker::Step { .. }))
        .count();
    assert!(steps >= 8, "{steps} steps");
    for b in &blocks {
        match &b.marker {
            Marker::NotRun(why) => assert!(why.len() > 10, "{GUIDE}:{}: say why", b.line),
            Marker::Step { node, tags } => {
                assert!(
                    ["node-1", "node-2", "balancer"].contains(&node.as_str()),
                    "{node}"
                );
                for t in tags {
                    assert!(
                        ["passthrough", "terminate", "running"].contains(&t.as_str()),
                        "{GUIDE}:{}: unknown tag {t}",
                        b.line
                    );
                }
            }
            Marker::Set { .. } => {}
        }
    }
    // Each node's variables come before its steps.
    for node in ["node-1", "node-2"] {
        let set = blocks
            .iter()
            .position(|b| b.marker == Marker::Set { node: node.into() });
        let first = blocks
            .iter()
            .position(|b| matches!(&b.marker, Marker::Step { node: n, .. } if n == node));
        assert!(set.is_some() && set < first, "{node}: {set:?} {first:?}");
    }
}

/// The nodes' addresses on the stand-in: loopback, as every test's traffic.
const NODE_1: &str = "127.0.0.11";
const NODE_2: &str = "127.0.0.12";
const VIP: &str = "127.0.0.10";

/// Runs the guide's steps for each mode in a private mount namespace (this binary, again,
/// running `inner_kubeadm_node`).
#[test]
fn the_guide_runs_as_written_on_kubeadm_nodes() {
    for mode in ["passthrough", "terminate"] {
        let (passed, text) =
            in_private_mount_namespace("inner_kubeadm_node", &[("KUBEGATE_GUIDE_MODE", mode)]);
        println!("---- {mode} ----\n{text}");
        // The folder the guide writes a worker's files into was made on the shared /tmp.
        let _ = std::fs::remove_dir("/tmp/worker-1");
        assert!(passed, "the guide failed in {mode} mode:\n{text}");
    }
}

/// Runs `inner` (an ignored test of this module) again in a private mount namespace
/// (`unshare --mount`), with `env` and a work folder of its own (`KUBEGATE_GUIDE_WORK`, under
/// the target's folder, removed after): whether it passed, and what it printed.
fn in_private_mount_namespace(inner: &str, env: &[(&str, &str)]) -> (bool, String) {
    let work = tempfile::Builder::new()
        .prefix("guide-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    // Tests are named by their module path below the crate: `operator::inner_...`.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{inner}");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            name.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .env("KUBEGATE_GUIDE_WORK", work.path())
        .output()
        .expect("unshare (util-linux) is installed");
    let text = said(&out);
    let passed = out.status.success() && text.contains("test result: ok. 1 passed");
    (passed, text)
}

/// One node's stand-in, inside the private mount namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the_guide_runs_as_written_on_kubeadm_nodes inside a private mount namespace"]
async fn inner_kubeadm_node() {
    let mode = std::env::var("KUBEGATE_GUIDE_MODE").expect("run by the outer test");
    let work = PathBuf::from(std::env::var("KUBEGATE_GUIDE_WORK").unwrap());
    for dir in [
        "/etc/kubernetes",
        "/etc/kubegate",
        "/etc/keepalived",
        "/etc/prometheus",
        "/tmp/worker-1",
    ] {
        private_tmpfs(dir);
    }
    kubeadm_certs(Path::new("/etc/kubernetes"), None);
    let apiservers: Vec<kubegate_testbed::Replica> = [NODE_1, NODE_2]
        .iter()
        .enumerate()
        .map(|(i, ip)| apiserver(&work, i + 1, ip))
        .collect();

    let blocks = guide_blocks();
    let env = format!("NODE={NODE_1}\nPEERS={NODE_2}\nVIP={VIP}/8\n");
    let mut kubelet = Kubelet::default();
    let mut ran = 0;
    for b in &blocks {
        let Marker::Step { node, tags } = &b.marker else {
            continue;
        };
        let mode_tag = tags
            .iter()
            .find(|t| *t == "passthrough" || *t == "terminate");
        if node != "node-1" || mode_tag.is_some_and(|t| *t != mode) {
            continue;
        }
        if tags.iter().any(|t| t == "running") {
            // `kubeadm init` has run: the kubelet starts the static pods it finds.
            kubelet.started = true;
        }
        kubelet.sync(&work);
        let out = shell(&env, &b.text);
        println!("$ {GUIDE}:{}\n{}", b.line, out);
        ran += 1;
        kubelet.sync(&work);
        if b.text.contains("sed -i") {
            // The edit reached the running pod (its folder is mounted): the new grace shows.
            wait_for(
                "the edit in the running configuration",
                Duration::from_secs(30),
                || {
                    let config: serde_json::Value =
                        serde_json::from_str(&admin_get("/debug/config")).ok()?;
                    (config["shutdown"]["grace"] == "20s").then_some(())
                },
            );
        }
    }
    assert!(ran >= 6, "{ran} steps ran");
    let expected = if mode == "passthrough" { 2 } else { 1 };
    assert_eq!(kubelet.pods.len(), expected, "static pods run");
    for (c, manifest) in &kubelet.pods {
        assert!(c.running(), "{manifest}: {}", c.log());
    }

    // Prometheus, with the scrape configuration `kubegate init` wrote merged into one of its
    // own (scraping every second), finds this node's kubegate up over TLS with the token.
    let written: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string("/etc/kubegate/monitoring/prometheus.yaml").unwrap(),
    )
    .unwrap();
    let merged = format!(
        "global: {{scrape_interval: 1s}}\n{}",
        serde_yaml_ng::to_string(&written).unwrap()
    );
    let config = work.join("prometheus.yml");
    std::fs::write(&config, merged).unwrap();
    let port = free_port();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            work.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let _prometheus = Proc::spawn("prometheus", cmd, work.join("prometheus.log"));
    let target = format!("{NODE_1}:9444");
    wait_for(
        "Prometheus to scrape this node's kubegate",
        Duration::from_secs(60),
        || {
            let q = format!("up{{job=\"kubegate\",instance=\"{target}\"}}");
            let v = prometheus_query(port, &q)?;
            (v == 1.0).then_some(())
        },
    );

    // The second control-plane node: its own namespace, the CAs the join brings.
    second_node(&work, &blocks);
    drop(kubelet);
    drop(apiservers);
}

/// A fresh tmpfs at `dir`, seen only in this mount namespace.
fn private_tmpfs(dir: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `openssl` with `args`; panics with its output on failure.
fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new 2048-bit RSA key at `path`, in the PKCS#1 form kubeadm writes.
fn new_key(path: &str) {
    openssl(&["genrsa", "-traditional", "-out", path, "2048"]);
}

/// `/etc/kubernetes` as `kubeadm init phase certs` (and kubeconfig) leave it: the CAs — made
/// here, or copied from `cas` as `kubeadm join --certificate-key` brings them — the
/// apiserver's serving certificate, kubeadm's front-proxy client, `admin.conf` for the VIP,
/// and an empty manifests folder.
fn kubeadm_certs(k8s: &Path, cas: Option<&Path>) {
    let pki = k8s.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::create_dir_all(k8s.join("manifests")).unwrap();
    let p = |f: &str| pki.join(f).display().to_string();
    for (name, cn) in [("ca", "kubernetes"), ("front-proxy-ca", "front-proxy-ca")] {
        match cas {
            Some(from) => {
                for ext in ["crt", "key"] {
                    std::fs::copy(
                        from.join(format!("{name}.{ext}")),
                        pki.join(format!("{name}.{ext}")),
                    )
                    .unwrap();
                }
            }
            None => {
                new_key(&p(&format!("{name}.key")));
                openssl(&[
                    "req",
                    "-x509",
                    "-new",
                    "-days",
                    "3650",
                    "-subj",
                    &format!("/CN={cn}"),
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
                    "-key",
                    &p(&format!("{name}.key")),
                    "-out",
                    &p(&format!("{name}.crt")),
                ]);
            }
        }
        chmod(&pki.join(format!("{name}.key")), 0o600);
    }
    let leaf = |name: &str, subj: &str, ca: &str, ext: &str| {
        new_key(&p(&format!("{name}.key")));
        let csr = p(&format!("{name}.csr"));
        openssl(&[
            "req",
            "-new",
            "-subj",
            subj,
            "-key",
            &p(&format!("{name}.key")),
            "-out",
            &csr,
        ]);
        let extfile = p(&format!("{name}.ext"));
        std::fs::write(&extfile, ext).unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &p(&format!("{ca}.crt")),
            "-CAkey",
            &p(&format!("{ca}.key")),
            "-CAcreateserial",
            "-days",
            "365",
            "-extfile",
            &extfile,
            "-out",
            &p(&format!("{name}.crt")),
        ]);
        std::fs::remove_file(&csr).unwrap();
        std::fs::remove_file(&extfile).unwrap();
        chmod(&pki.join(format!("{name}.key")), 0o600);
    };
    // The certSANs of the guide's kubeadm fragment: the VIP and 127.0.0.1, besides kubeadm's.
    leaf(
        "apiserver",
        "/CN=kube-apiserver",
        "ca",
        &format!("extendedKeyUsage=serverAuth\nsubjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:{NODE_1},IP:{NODE_2},IP:{VIP},IP:127.0.0.1\n"),
    );
    leaf(
        "front-proxy-client",
        "/CN=front-proxy-client",
        "front-proxy-ca",
        "extendedKeyUsage=clientAuth\n",
    );
    leaf(
        "admin",
        "/O=system:masters/CN=kubernetes-admin",
        "ca",
        "extendedKeyUsage=clientAuth\n",
    );
    let b64 = |f: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(pki.join(f)).unwrap())
    };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: https://{VIP}:8443\n    certificate-authority-data: {}\ncontexts:\n- name: kubernetes-admin@kubernetes\n  context: {{cluster: kubernetes, user: kubernetes-admin}}\ncurrent-context: kubernetes-admin@kubernetes\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64("ca.crt"),
        b64("admin.crt"),
        b64("admin.key"),
    );
    std::fs::write(k8s.join("admin.conf"), kubeconfig).unwrap();
    chmod(&k8s.join("admin.conf"), 0o600);
    std::fs::remove_file(pki.join("admin.crt")).unwrap();
    std::fs::remove_file(pki.join("admin.key")).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A simulated apiserver on `ip:6443` with kubeadm's certificates, accepting kubeadm's
/// front-proxy name and kubegate's, as the guide's fragment sets
/// `--requestheader-allowed-names`.
fn apiserver(work: &Path, i: usize, ip: &str) -> kubegate_testbed::Replica {
    let pki = Path::new("/etc/kubernetes/pki");
    let mut flags = kubegate_testbed::ReplicaFlags::new(
        &format!("cp-{i}"),
        (pki.join("apiserver.crt"), pki.join("apiserver.key")),
        &pki.join("ca.crt"),
    );
    flags.address = format!("{ip}:6443").parse().unwrap();
    flags.front_proxy_ca = Some(pki.join("front-proxy-ca.crt"));
    flags.front_proxy_names = vec!["front-proxy-client".into(), "kubegate-front-proxy".into()];
    kubegate_testbed::Replica::start(flags, &work.join(format!("cp-{i}.log"))).unwrap()
}

/// The kubelet's part: once started, every static pod that appears in
/// /etc/kubernetes/manifests is run with runc and its probes waited for (the port read from
/// its manifest).
#[derive(Default)]
struct Kubelet {
    started: bool,
    pods: Vec<(Container, String)>,
}

impl Kubelet {
    fn sync(&mut self, work: &Path) {
        if !self.started {
            return;
        }
        let mut manifests: Vec<PathBuf> = std::fs::read_dir("/etc/kubernetes/manifests")
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !self.pods.iter().any(|(_, m)| *m == p.display().to_string()))
            .collect();
        manifests.sort();
        for path in manifests {
            let manifest = std::fs::read_to_string(&path).unwrap();
            let spec = ContainerSpec::of_pod(&manifest, Path::new("/"));
            assert_eq!(spec.user, (65532, 65532), "{}", path.display());
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let c = Container::start(work, &name, &spec);
            let pod: serde_yaml_ng::Value = serde_yaml_ng::from_str(&manifest).unwrap();
            let port = pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"]
                .as_u64()
                .unwrap() as u16;
            wait_pod_probes(
                &manifest,
                std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                &c,
            );
            self.pods.push((c, path.display().to_string()));
        }
    }
}

/// Runs `script` in bash after `env`, with kubegate, kubectl and the system's tools on the
/// PATH; panics with its output unless it succeeds.
fn shell(env: &str, script: &str) -> String {
    let kubegate_dir = bin("kubegate").parent().unwrap().to_path_buf();
    let kubectl_dir = kubectl_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        kubegate_dir.display(),
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c"])
        .arg(format!("{env}{script}"))
        .env("PATH", path)
        .output()
        .unwrap();
    let text = said(&out);
    assert!(out.status.success(), "{script}\n{text}");
    text
}

/// `path` of this node's admin endpoint, verified against the cluster CA, with the token.
fn admin_get(path: &str) -> String {
    let token = std::fs::read_to_string("/etc/kubernetes/pki/kubegate/metrics-token").unwrap();
    let out = Command::new("curl")
        .args([
            "--silent",
            "--max-time",
            "5",
            "--cacert",
            "/etc/kubernetes/pki/ca.crt",
        ])
        .args([
            "--header",
            &format!("Authorization: Bearer {}", token.trim()),
        ])
        .arg(format!("https://127.0.0.1:9444{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The value of a Prometheus instant query with one result.
fn prometheus_query(port: u16, q: &str) -> Option<f64> {
    let out = Command::new("curl")
        .args(["--silent", "--max-time", "5", "--get"])
        .args(["--data-urlencode", &format!("query={q}")])
        .arg(format!("http://127.0.0.1:{port}/api/v1/query"))
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// The guide's second control-plane node, in a mount namespace of its own: the manifests
/// folder is empty where the guide runs `kubeadm join` (its preflight), then the CAs the join
/// brings are laid out and the node's steps run.
fn second_node(work: &Path, blocks: &[Block]) {
    let cas = work.join("cas");
    std::fs::create_dir_all(&cas).unwrap();
    for f in [
        "ca.crt",
        "ca.key",
        "front-proxy-ca.crt",
        "front-proxy-ca.key",
    ] {
        std::fs::copy(Path::new("/etc/kubernetes/pki").join(f), cas.join(f)).unwrap();
    }
    let mut script = String::from("set -euo pipefail\n");
    for dir in ["/etc/kubernetes", "/etc/kubegate", "/etc/keepalived"] {
        script.push_str(&format!("mount -t tmpfs -o mode=0755 tmpfs {dir}\n"));
    }
    script.push_str("mkdir -p /etc/kubernetes/manifests /etc/kubernetes/pki\n");
    let mut joined = false;
    for b in blocks {
        match &b.marker {
            Marker::NotRun(_) if b.text.contains("kubeadm join") => {
                // kubeadm join's DirAvailable--etc-kubernetes-manifests preflight.
                script.push_str(&format!(
                    "[ -z \"$(ls -A /etc/kubernetes/manifests)\" ] || {{ echo '{GUIDE}:{}: kubeadm join would refuse: /etc/kubernetes/manifests is not empty'; exit 1; }}\n",
                    b.line
                ));
                script.push_str(&format!(
                    "cp {}/* /etc/kubernetes/pki/ && chmod 0600 /etc/kubernetes/pki/*.key\n",
                    cas.display()
                ));
                joined = true;
            }
            Marker::Step { node, .. } if node == "node-2" => {
                assert!(joined, "{GUIDE}:{}: a node-2 step before the join", b.line);
                script.push_str(&format!("# {GUIDE}:{}\n{}", b.line, b.text));
            }
            _ => {}
        }
    }
    assert!(joined, "the guide joins a second node");
    // Its admin certificate names it and comes from the cluster's CA.
    script.push_str(
        "openssl x509 -in /etc/kubernetes/pki/kubegate/admin.crt -noout -ext subjectAltName\n",
    );
    script.push_str("openssl verify -CAfile /etc/kubernetes/pki/ca.crt /etc/kubernetes/pki/kubegate/admin.crt\n");
    let env = format!("NODE={NODE_2}\nPEERS={NODE_1}\nVIP={VIP}/8\n");
    let file = work.join("node-2.sh");
    std::fs::write(&file, format!("{env}{script}")).unwrap();
    let out = shell(
        "",
        &format!(
            "unshare --mount --propagation private bash {}\n",
            file.display()
        ),
    );
    println!("node-2:\n{out}");
    assert!(out.contains(&format!("IP Address:{NODE_2}")), "{out}");
    assert!(out.contains("admin.crt: OK"), "{out}");
}

/// The guide's balancer steps on a booted systemd, in a private mount namespace (this binary,
/// again, running `inner_balancer_host`).
#[test]
fn the_guide_runs_as_written_on_a_balancer_host_under_systemd() {
    let (passed, text) = in_private_mount_namespace("inner_balancer_host", &[]);
    println!("{text}");
    assert!(passed, "the guide failed on the balancer host:\n{text}");
}

#[test]
#[ignore = "run by the_guide_runs_as_written_on_a_balancer_host_under_systemd inside a private mount namespace"]
fn inner_balancer_host() {
    let work = PathBuf::from(std::env::var("KUBEGATE_GUIDE_WORK").expect("run by the outer test"));
    // The packages: the release the guide installs and a newer one, both of this build's
    // binary (deploy/packaging/build-deb, as scripts/release builds them).
    let debs = work.join("debs");
    std::fs::create_dir_all(&debs).unwrap();
    for version in ["0.3.0", "0.3.1"] {
        let out = Command::new(repo("deploy/packaging/build-deb"))
            .arg(bin("kubegate"))
            .arg(version)
            .arg(&debs)
            .output()
            .unwrap();
        assert!(out.status.success(), "build-deb: {out:?}");
    }
    let host = Booted::start(&work, &debs);
    // The cluster CA pair the guide brings over from a control-plane node.
    let pki = Pki::new(&work.join("cluster-pki"));
    let k8s = host.root.join("etc/kubernetes/pki");
    std::fs::create_dir_all(&k8s).unwrap();
    std::fs::copy(pki.ca_file(), k8s.join("ca.crt")).unwrap();
    std::fs::copy(pki.dir().join("ca.key"), k8s.join("ca.key")).unwrap();
    chmod(&k8s.join("ca.key"), 0o600);

    let mut ran = 0;
    for b in guide_blocks() {
        if let Marker::Step { node, .. } = &b.marker {
            if node == "balancer" {
                let out = host.shell(&format!("cd /debs\n{}", b.text));
                println!("$ {GUIDE}:{}\n{out}", b.line);
                ran += 1;
            }
        }
    }
    assert!(ran >= 2, "{ran} balancer steps ran");
    // Started without /etc/kubernetes, as its own user, serving its admin endpoint.
    assert!(!host.root.join("etc/kubernetes").exists());
    let first = host.main_pid();
    let user = host.shell(&format!("ps -o user= -p {first}"));
    assert_eq!(user.trim(), "kubegate");
    host.shell("curl --silent --fail --insecure https://127.0.0.1:9444/livez");

    // A newer package over the running service: restarted on the new binary.
    println!("{}", host.shell("dpkg -i /debs/kubegate_0.3.1_amd64.deb"));
    wait_for("the service restarted", Duration::from_secs(60), || {
        let pid = host.main_pid();
        (pid != 0 && pid != first).then_some(())
    });
    assert_eq!(host.shell("systemctl is-active kubegate").trim(), "active");
    assert_eq!(
        host.shell("dpkg-query -W -f '${Version}' kubegate").trim(),
        "0.3.1"
    );
}

/// A container booted with systemd as PID 1: `systemd-nspawn` on this machine's root under an
/// overlay (writes go to a tmpfs), a private network, `debs` at `/debs`. Ended by killing its
/// PID 1 (which ends every process of its PID namespace) when dropped.
struct Booted {
    /// The container's root, as seen from here (writable: the overlay).
    root: PathBuf,
    nspawn: std::process::Child,
    /// Its PID 1 (systemd), in this PID namespace.
    init: i32,
}

impl Booted {
    fn start(work: &Path, debs: &Path) -> Booted {
        let layers = work.join("layers");
        let root = work.join("root");
        for d in [&layers, &root] {
            std::fs::create_dir_all(d).unwrap();
        }
        shell(
            "",
            &format!(
                "mount -t tmpfs tmpfs {l}\nmkdir {l}/upper {l}/work\nmount -t overlay overlay -o lowerdir=/,upperdir={l}/upper,workdir={l}/work {r}\n",
                l = layers.display(),
                r = root.display()
            ),
        );
        // A host without /etc/kubernetes, without the package this machine may have, and
        // without a container image's policy-rc.d (which forbids packages to start services).
        shell(
            "",
            &format!(
                "rm -rf {r}/etc/kubernetes {r}/usr/sbin/policy-rc.d\nchroot {r} sh -c 'dpkg -P kubegate >/dev/null 2>&1 || true'\n",
                r = root.display()
            ),
        );
        let log = std::fs::File::create(work.join("boot.log")).unwrap();
        let nspawn = Command::new("systemd-nspawn")
            .arg("--directory")
            .arg(&root)
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--link-journal=no",
                "--private-network",
                "--console=pipe",
            ])
            .arg(format!("--machine=kubegate-test-{}", std::process::id()))
            .arg(format!("--bind-ro={}:/debs", debs.display()))
            // Boot to basic.target: what the guide needs (systemd, journald, dpkg's triggers),
            // without whatever services this machine itself has enabled.
            .arg("systemd.unit=basic.target")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("systemd-nspawn (Debian package systemd-container) is installed");
        let nspawn_pid = nspawn.id();
        // nspawn forks a helper first, which starts the container's init: the child of nspawn
        // that is PID 1 of its own PID namespace (its last NSpid) is the one to enter and kill.
        let mut nspawn = nspawn;
        let init =
            kubegate_testbed::wait_until("the container's PID 1", Duration::from_secs(30), || {
                let children = std::fs::read_to_string(format!(
                    "/proc/{nspawn_pid}/task/{nspawn_pid}/children"
                ))
                .ok()?;
                children.split_whitespace().find_map(|pid| {
                    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                    let ns_pids = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
                    let ns_pids: Vec<&str> = ns_pids.split_whitespace().collect();
                    (ns_pids.len() > 1 && ns_pids.last() == Some(&"1")).then(|| pid.parse().ok())?
                })
            })
            .unwrap_or_else(|e| {
                let _ = nspawn.kill();
                let _ = nspawn.wait();
                panic!("{e}")
            });
        let booted = Booted { root, nspawn, init };
        wait_for(
            "systemd to finish booting",
            Duration::from_secs(120),
            || {
                let state = booted.run("systemctl is-system-running").1;
                ["running", "degraded"]
                    .contains(&state.trim())
                    .then_some(())
            },
        );
        booted
    }

    /// Runs `script` in bash inside the container (every namespace of its PID 1); whether it
    /// succeeded and what it printed.
    fn run(&self, script: &str) -> (bool, String) {
        let out = Command::new("nsenter")
            .args(["--target", &self.init.to_string(), "--all", "--"])
            .args([
                "env",
                "-i",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root",
            ])
            .args(["bash", "-euo", "pipefail", "-c", script])
            .output()
            .unwrap();
        let text = said(&out);
        (out.status.success(), text)
    }

    /// Runs `script` inside; panics with its output unless it succeeds.
    fn shell(&self, script: &str) -> String {
        let (ok, text) = self.run(script);
        if !ok {
            let (_, journal) = self.run("journalctl -u kubegate --no-pager | tail -40");
            panic!("{script}\n{text}\n---- journal of kubegate ----\n{journal}");
        }
        text
    }

    /// The service's main process (0 while it has none).
    fn main_pid(&self) -> i32 {
        self.shell("systemctl show --property MainPID --value kubegate")
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        // Killing PID 1 ends its whole PID namespace; nspawn then exits by itself.
        let _ = Command::new("kill")
            .args(["-KILL", &self.init.to_string()])
            .status();
        let _ = self.nspawn.wait();
    }
}
