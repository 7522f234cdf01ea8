//! The deployment files under `deploy/`, checked with the tools that will read them.
//!
//! 1. `sd_notify_ready_reloading_stopping`: kubegate with `NOTIFY_SOCKET` sends `READY=1` only
//!    once it serves, `RELOADING=1` on SIGHUP, `STOPPING=1` on SIGTERM.
//! 2. `manifests_parse_as_kubernetes_objects_and_their_configs_pass_check`
//! 3. `systemd_unit_passes_systemd_analyze_verify`
//! 4. `keepalived_config_passes_config_test`
//! 5. `the_static_pod_runs_as_shipped_in_passthrough_mode`, `..._in_terminate_mode`,
//!    `the_node_local_pod_runs_as_shipped`: each manifest's container spec (user, read-only
//!    root, exactly its mounts, its command line, no capability) run with runc, on a stand-in
//!    for the node's files with kubeadm's ownerships and modes, in front of simulated
//!    apiservers, up to `/readyz` 200 and a request through it. Terminate mode with kubeadm's
//!    own front-proxy key (root, 0600) fails, naming the file.
//! 6. `the_systemd_sandbox_lets_kubegate_write_only_its_state_and_runtime_directories`.

use kubegate_e2e::replicas::{sims, sims_with};
use kubegate_e2e::*;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn sd_notify_ready_reloading_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = Sim::start(&pki, "replica-1", SimOptions::default());
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut kg = Kubegate::start_with_env(
        &pki,
        &KubegateConfig::new(&[&sim]),
        &[("NOTIFY_SOCKET", &path)],
    );

    let ready = recv(&sock);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    // READY=1 came after the listener and the admin endpoint were up.
    assert!(std::net::TcpStream::connect(kg.listen).is_ok());
    assert!(kg.admin_get("/livez").unwrap().starts_with("HTTP/1.1 200"));

    kg.proc.signal(libc::SIGHUP);
    assert_eq!(recv(&sock), "RELOADING=1");
    assert_eq!(recv(&sock), "READY=1");

    kg.proc.signal(libc::SIGTERM);
    let stopping = recv(&sock);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(kg.proc.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn manifests_parse_as_kubernetes_objects_and_their_configs_pass_check() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    // kubectl maps kinds through discovery even for a client-side dry run: give it a server.
    let sim = Sim::start(&pki, "api", SimOptions::default());
    let kubeconfig = pki.kubeconfig(&format!("https://{}", sim.addr));
    let kubectl = kubectl_bin();
    for (manifest, name) in [
        ("deploy/static-pod/kubegate.yaml", "kubegate"),
        ("deploy/static-pod/kubegate-terminate.yaml", "kubegate"),
        (
            "deploy/node-local/kubegate-node-local.yaml",
            "kubegate-node-local",
        ),
    ] {
        let out = run_ok(
            Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args([
                    "create",
                    "--dry-run=client",
                    "--validate=false",
                    "-o",
                    "yaml",
                    "-f",
                ])
                .arg(repo(manifest)),
        );
        assert!(out.contains("kind: Pod\n"), "{manifest}: {out}");
        assert!(
            out.contains(&format!("  name: {name}\n")),
            "{manifest}: {out}"
        );
        assert!(out.contains("hostNetwork: true"), "{manifest}");
    }
    // The static pods' grace period covers kubegate's own drain.
    for pod in [
        "deploy/static-pod/kubegate.yaml",
        "deploy/static-pod/kubegate-terminate.yaml",
    ] {
        let pod = std::fs::read_to_string(repo(pod)).unwrap();
        assert!(pod.contains("terminationGracePeriodSeconds: 45"));
    }

    // The configs they mount pass `kubegate check` once the files they name exist (the CA,
    // the admin certificate and token): only those paths are replaced. And the rollback
    // rehearsal: the previous release accepts each of them as it is (`--compat`).
    let (admin_crt, admin_key) =
        pki.serving_with("admin-serving", "kubegate-admin", &["127.0.0.1"], -1, 30);
    let own = dir.path().join("kubegate-pki");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::copy(&admin_crt, own.join("admin.crt")).unwrap();
    std::fs::copy(&admin_key, own.join("admin.key")).unwrap();
    std::fs::write(own.join("metrics-token"), "t\n").unwrap();
    for config in [
        "deploy/static-pod/kubegate-config.yaml",
        "deploy/node-local/kubegate.yaml",
        "deploy/packaging/kubegate.yaml",
    ] {
        let text = std::fs::read_to_string(repo(config)).unwrap();
        assert_eq!(
            text.matches("/etc/kubernetes/pki/ca.crt").count(),
            1,
            "{config}"
        );
        let local = dir.path().join(Path::new(config).file_name().unwrap());
        std::fs::write(
            &local,
            text.replace(
                "/etc/kubernetes/pki/ca.crt",
                pki.ca_file().to_str().unwrap(),
            )
            .replace(
                "/etc/kubernetes/pki/kubegate/",
                &format!("{}/", own.display()),
            ),
        )
        .unwrap();
        run_ok(
            Command::new(bin("kubegate"))
                .args(["check", "--compat", PREVIOUS_RELEASE, "--config"])
                .arg(&local),
        );
    }
    for config in [
        "deploy/static-pod/kubegate-terminate-config.yaml",
        "deploy/systemd/../packaging/kubegate.yaml",
    ] {
        let text = std::fs::read_to_string(repo(config)).unwrap();
        let release = kubegate_config::parse_version(PREVIOUS_RELEASE).unwrap();
        assert_eq!(
            kubegate_config::keys_newer_than(&text, release),
            vec![],
            "{config} uses keys {PREVIOUS_RELEASE} refuses: a rollback would fail"
        );
    }
}

/// The release before this one: what a rollback goes back to.
const PREVIOUS_RELEASE: &str = "0.2.0";

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo("deploy/systemd/kubegate.service")).unwrap();
    for needed in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "TimeoutStopSec=45",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
    ] {
        assert!(unit.contains(needed), "unit lacks {needed}");
    }
    // systemd-analyze checks that ExecStart exists: point it at the built binary.
    let local = dir.path().join("kubegate.service");
    std::fs::write(
        &local,
        unit.replace("/usr/bin/kubegate", bin("kubegate").to_str().unwrap()),
    )
    .unwrap();
    run_ok(Command::new("systemd-analyze").arg("verify").arg(&local));
}

#[test]
fn keepalived_config_passes_config_test() {
    run_ok(
        Command::new("keepalived")
            .args(["--config-test", "-f"])
            .arg(repo("deploy/keepalived/keepalived.conf")),
    );
    let conf = std::fs::read_to_string(repo("deploy/keepalived/keepalived.conf")).unwrap();
    assert!(
        conf.contains("\n$ADMIN=https://127.0.0.1:9444\n"),
        "ADMIN defaults to the shipped admin address, with TLS"
    );
    for check in ["/readyz/lifecycle", "/readyz/backends"] {
        assert!(
            conf.contains(&format!("${{ADMIN}}{check}\"")),
            "a track_script checks kubegate's {check}"
        );
    }
}

/// kubeadm's layout for a test: `host` stands for the node's root.
struct Node {
    host: PathBuf,
    pki: Pki,
}

impl Node {
    /// The cluster CA at /etc/kubernetes/pki/ca.crt (0644, root), as kubeadm writes it.
    fn new(dir: &Path) -> Node {
        let host = dir.join("host");
        let pki_dir = host.join("etc/kubernetes/pki");
        let pki = Pki::new(&dir.join("cluster-pki"));
        std::fs::create_dir_all(&pki_dir).unwrap();
        std::fs::create_dir_all(host.join("etc/kubegate")).unwrap();
        std::fs::copy(pki.ca_file(), pki_dir.join("ca.crt")).unwrap();
        Node { host, pki }
    }

    /// Writes `text` at `path` on the node with `mode`, owned by `uid`.
    fn write(&self, path: &str, text: &[u8], uid: u32, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.host.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Copies `from` to `path` on the node with `mode`, owned by `uid`.
    fn copy(&self, from: &Path, path: &str, uid: u32, mode: u32) {
        self.write(path, &std::fs::read(from).unwrap(), uid, mode);
    }

    /// The admin endpoint's certificate (the cluster CA's, naming `kubegate-admin` and
    /// 127.0.0.1) and the metrics token, in /etc/kubernetes/pki/kubegate/ owned by the
    /// image's user, as `kubegate init` writes them.
    fn admin_files(&self) {
        let (crt, key) = self.pki.serving_with(
            "admin-serving",
            "kubegate-admin",
            &["kubegate-admin", "127.0.0.1"],
            -1,
            30,
        );
        let dir = "/etc/kubernetes/pki/kubegate";
        self.copy(&crt, &format!("{dir}/admin.crt"), UID, 0o444);
        self.copy(&key, &format!("{dir}/admin.key"), UID, 0o400);
        self.write(
            &format!("{dir}/metrics-token"),
            b"scrape-token\n",
            UID,
            0o400,
        );
    }

    /// `path` of the admin endpoint at `admin` (TLS, verified against the cluster CA, with the
    /// metrics token): the body and the status code on its last line.
    fn admin(&self, admin: std::net::SocketAddr, path: &str) -> String {
        let out = Command::new("curl")
            .args(["--silent", "--max-time", "5", "--cacert"])
            .arg(self.pki.ca_file())
            .args(["--header", "Authorization: Bearer scrape-token"])
            .args(["--write-out", "\n%{http_code}"])
            .arg(format!("https://{admin}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Replaces the file at `path` on the node by writing a new one and renaming it over the
    /// old, as `sed -i`, editors and Ansible do.
    fn replace_by_rename(&self, path: &str, text: &[u8]) {
        let p = self.host.join(path.trim_start_matches('/'));
        let tmp = p.with_extension("new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
    }

    /// `pod` as the node runs it: the admin endpoint's files, its configuration written for
    /// `sims`, its container started, its probes passed. Its listener, admin address and
    /// container.
    fn run_shipped(
        &self,
        dir: &Path,
        pod: &Shipped,
        sims: &[Sim],
    ) -> (std::net::SocketAddr, std::net::SocketAddr, Container) {
        self.admin_files();
        let backends = sims.iter().collect::<Vec<_>>();
        let (listen, admin) = self.configure(pod.config, pod.config_at, &backends);
        let c = Container::start(dir, pod.name, &pod_spec(pod.manifest, self));
        wait_probes(pod.manifest, admin, &c);
        (listen, admin, c)
    }

    /// A shipped configuration (`deploy/...`) as the node would have it: its paths as they
    /// are (the container's), its listener, admin address and backends those of this test.
    fn configure(
        &self,
        shipped: &str,
        at: &str,
        backends: &[&Sim],
    ) -> (std::net::SocketAddr, std::net::SocketAddr) {
        let text = std::fs::read_to_string(repo(shipped)).unwrap();
        let mut c: kubegate_config::Config = serde_yaml_ng::from_str(&text).unwrap();
        let (listen, admin) = (free_addr(), free_addr());
        c.listeners[0].address = listen;
        c.admin.address = admin;
        c.backends = backends
            .iter()
            .map(|s| kubegate_config::BackendSpec::named(&s.name, s.addr))
            .collect();
        self.write(at, c.to_yaml().as_bytes(), 0, 0o644);
        (listen, admin)
    }
}

fn free_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// A shipped pod manifest's container, its hostPaths under `node`.
fn pod_spec(manifest: &str, node: &Node) -> ContainerSpec {
    ContainerSpec::of_pod(
        &std::fs::read_to_string(repo(manifest)).unwrap(),
        &node.host,
    )
}

/// Waits for a shipped manifest's probes to pass against `admin`.
fn wait_probes(manifest: &str, admin: std::net::SocketAddr, container: &Container) {
    wait_pod_probes(
        &std::fs::read_to_string(repo(manifest)).unwrap(),
        admin,
        container,
    );
}

/// Waits for `/readyz` 200 on `admin`; the container's log on failure.
fn wait_ready(admin: std::net::SocketAddr, container: &Container) {
    let ready =
        kubegate_testbed::wait_until("kubegate /readyz 200", Duration::from_secs(60), || {
            plain_http(admin, "GET", "/readyz")
                .starts_with("HTTP/1.1 200")
                .then_some(())
        });
    assert!(ready.is_ok(), "{}", container.log());
}

const UID: u32 = 65532;

/// A pod `deploy/` ships: its manifest, and its configuration and where the manifest mounts it.
struct Shipped {
    /// The container's name in the test.
    name: &'static str,
    manifest: &'static str,
    config: &'static str,
    config_at: &'static str,
}

/// The static pod in terminate mode.
const STATIC_TERMINATE: Shipped = Shipped {
    name: "static-terminate",
    manifest: "deploy/static-pod/kubegate-terminate.yaml",
    config: "deploy/static-pod/kubegate-terminate-config.yaml",
    config_at: "/etc/kubegate/pod/kubegate.yaml",
};

/// The node-local pod.
const NODE_LOCAL: Shipped = Shipped {
    name: "node-local",
    manifest: "deploy/node-local/kubegate-node-local.yaml",
    config: "deploy/node-local/kubegate.yaml",
    config_at: "/etc/kubegate/node-local/kubegate.yaml",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_pod_runs_as_shipped_in_passthrough_mode() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(dir.path());
    let sims = sims(&node.pki, 3);
    let config = "/etc/kubegate/pod/kubegate.yaml";
    let (listen, admin) = node.configure(
        "deploy/static-pod/kubegate-config.yaml",
        config,
        &[&sims[0], &sims[1]],
    );
    node.admin_files();
    // Beside the CA, what a passthrough gateway must not need: the CA key.
    node.write("/etc/kubernetes/pki/ca.key", b"secret", 0, 0o600);
    let spec = pod_spec("deploy/static-pod/kubegate.yaml", &node);
    assert!(
        spec.mounts
            .iter()
            .all(|(host, _, _)| !host.ends_with("pki")),
        "the whole of /etc/kubernetes/pki is not mounted"
    );
    let c = Container::start(dir.path(), "static-passthrough", &spec);
    wait_probes("deploy/static-pod/kubegate.yaml", admin, &c);
    let mut conn = Conn::open(listen, &node.pki, false).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);
    assert!(c.log().contains(r#""soft_before":"1024""#), "{}", c.log());
    // Scraped over TLS with the token; refused without it.
    let metrics = node.admin(admin, "/metrics");
    assert!(metrics.ends_with("\n200"), "{metrics}");

    // An edit made by rename (sed -i, an editor, Ansible) reaches the pod: it mounts the
    // configuration's folder.
    let mut c2: kubegate_config::Config =
        serde_yaml_ng::from_str(&std::fs::read_to_string(node.host.join(&config[1..])).unwrap())
            .unwrap();
    c2.backends.push(kubegate_config::BackendSpec::named(
        &sims[2].name,
        sims[2].addr,
    ));
    node.replace_by_rename(config, c2.to_yaml().as_bytes());
    wait_for("the renamed-in backend", Duration::from_secs(30), || {
        node.admin(admin, "/debug/backends")
            .contains("replica-3")
            .then_some(())
    });
    drop(c);

    // Mounted as a single file (the manifests before 0.3.0), the same edit never arrives:
    // the mount keeps the old file; kubegate says so.
    let mut spec = spec;
    for m in &mut spec.mounts {
        if m.1 == "/etc/kubegate" {
            *m = (
                node.host.join(&config[1..]),
                "/etc/kubegate/kubegate.yaml".into(),
                true,
            );
        }
    }
    node.replace_by_rename(config, c2.to_yaml().as_bytes());
    let c = Container::start(dir.path(), "static-single-file", &spec);
    wait_probes("deploy/static-pod/kubegate.yaml", admin, &c);
    c2.backends.pop();
    node.replace_by_rename(config, c2.to_yaml().as_bytes());
    wait_for("the stale mount noticed", Duration::from_secs(30), || {
        node.admin(admin, "/metrics")
            .lines()
            .any(|l| l == "kubegate_config_file_stale 1")
            .then_some(())
    });
    assert!(node.admin(admin, "/debug/backends").contains("replica-3"));
    assert!(c.log().contains("single-file bind mount"), "{}", c.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_pod_runs_as_shipped_in_terminate_mode() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(dir.path());
    // The front-proxy CA, with kubeadm's shared client certificate (root, 0600) and one of
    // kubegate's own (CN kubegate-front-proxy), which the apiservers allow besides kubeadm's.
    let fp = Pki::new(&dir.path().join("front-proxy-pki"));
    let (kubeadm_crt, kubeadm_key) = fp.client_in("front-proxy-client", "front-proxy-client", &[]);
    let (own_crt, own_key) = fp.client_in("kubegate-fp", "kubegate-front-proxy", &[]);
    let pki = "/etc/kubernetes/pki";
    node.copy(
        &fp.ca_file(),
        &format!("{pki}/front-proxy-ca.crt"),
        0,
        0o644,
    );
    node.copy(
        &kubeadm_crt,
        &format!("{pki}/front-proxy-client.crt"),
        0,
        0o644,
    );
    node.copy(
        &kubeadm_key,
        &format!("{pki}/front-proxy-client.key"),
        0,
        0o600,
    );
    // kubegate's files, as docs/deploy.md has the operator lay them out.
    let (serving_crt, serving_key) = node.pki.serving("kubegate");
    node.copy(
        &serving_crt,
        &format!("{pki}/kubegate/serving.crt"),
        UID,
        0o444,
    );
    node.copy(
        &serving_key,
        &format!("{pki}/kubegate/serving.key"),
        UID,
        0o400,
    );
    node.copy(
        &own_crt,
        &format!("{pki}/kubegate/front-proxy-client.crt"),
        UID,
        0o444,
    );
    node.copy(
        &own_key,
        &format!("{pki}/kubegate/front-proxy-client.key"),
        UID,
        0o400,
    );
    let sims = sims_with(&node.pki, 2, || SimOptions {
        front_proxy_ca: Some(fp.ca_file()),
        front_proxy_names: Some(vec![
            "front-proxy-client".into(),
            "kubegate-front-proxy".into(),
        ]),
        ..Default::default()
    });
    // The admin endpoint serves TLS: the probes are HTTPS, the metrics need the token.
    let (listen, admin, c) = node.run_shipped(dir.path(), &STATIC_TERMINATE, &sims);
    let anonymous = Command::new("curl")
        .args(["--silent", "--max-time", "5", "--cacert"])
        .arg(node.pki.ca_file())
        .args(["--write-out", "\n%{http_code}"])
        .arg(format!("https://{admin}/metrics"))
        .output()
        .unwrap();
    let anonymous = String::from_utf8_lossy(&anonymous.stdout).to_string();
    assert!(anonymous.ends_with("\n401"), "{anonymous}");
    let scraped = node.admin(admin, "/metrics");
    assert!(scraped.ends_with("\n200"), "{scraped}");
    assert!(scraped.contains("kubegate_build_info"));
    // The admin's certificate ends at kubegate; the replica sees its identity through
    // kubegate's own front-proxy certificate.
    let mut conn = Conn::open(listen, &node.pki, true).await.unwrap();
    let review =
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","spec":{}}"#;
    let r = conn
        .post("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.text().contains("kubernetes-admin"), "{}", r.text());
    // The CLI in the image, as `crictl exec` / `kubectl exec` run it (docs/deploy.md): the
    // configuration there names the admin endpoint, its CA and token.
    let (ok, status) = c.exec(&[
        "kubegate",
        "status",
        "--config",
        "/etc/kubegate/kubegate.yaml",
    ]);
    assert!(ok, "kubegate status inside the pod: {status}");
    assert!(
        status.contains("replica-1") && status.contains("ready"),
        "{status}"
    );
    drop(c);

    // With kubeadm's shared pair in place of kubegate's own, the container cannot read the
    // key (root, 0600) and says which file.
    let mut config =
        std::fs::read_to_string(node.host.join("etc/kubegate/pod/kubegate.yaml")).unwrap();
    config = config.replace(
        "/etc/kubernetes/pki/kubegate/front-proxy-client",
        "/etc/kubernetes/pki/front-proxy-client",
    );
    node.write(
        "/etc/kubegate/pod/kubegate.yaml",
        config.as_bytes(),
        0,
        0o644,
    );
    let mut spec = pod_spec(STATIC_TERMINATE.manifest, &node);
    spec.mounts.push((
        node.host.join("etc/kubernetes/pki/front-proxy-client.key"),
        "/etc/kubernetes/pki/front-proxy-client.key".into(),
        true,
    ));
    spec.mounts.push((
        node.host.join("etc/kubernetes/pki/front-proxy-client.crt"),
        "/etc/kubernetes/pki/front-proxy-client.crt".into(),
        true,
    ));
    let c = Container::start(dir.path(), "static-terminate-kubeadm-key", &spec);
    let refused = kubegate_testbed::wait_until(
        "kubegate to refuse to start",
        Duration::from_secs(30),
        || (!c.running()).then_some(()),
    );
    assert!(
        refused.is_ok(),
        "kubegate started with a key it cannot read"
    );
    assert!(
        c.log()
            .contains("/etc/kubernetes/pki/front-proxy-client.key: Permission denied"),
        "{}",
        c.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_local_pod_runs_as_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(dir.path());
    // kube-proxy's service-account token, as the apiservers know it.
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "kube-proxy-token,system:serviceaccount:kube-system:kube-proxy,kp,\"system:serviceaccounts\"\n",
    )
    .unwrap();
    let sims = sims_with(&node.pki, 2, || SimOptions {
        args: vec!["--token-auth-file".into(), tokens.display().to_string()],
        ..Default::default()
    });
    // The container runs until the test ends.
    let (listen, _, _container) = node.run_shipped(dir.path(), &NODE_LOCAL, &sims);
    let mut conn = Conn::open(listen, &node.pki, true).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);

    // kube-proxy's kubeconfig is one ConfigMap for every node, rendered by kubeadm (at init
    // and at every `upgrade apply`) from controlPlaneEndpoint: with the endpoint the node-local
    // gateway's own address (127.0.0.1:7443 in the guide; this test's listener here), the
    // same text works on every node, through that node's gateway.
    let configmap = kube_proxy_configmap(&format!("https://{listen}"));
    let cm: serde_yaml_ng::Value = serde_yaml_ng::from_str(&configmap).unwrap();
    let kubeconfig: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(cm["data"]["kubeconfig.conf"].as_str().unwrap()).unwrap();
    let cluster = &kubeconfig["clusters"][0]["cluster"];
    let user = &kubeconfig["users"][0]["user"];
    // The pod's service-account CA is the cluster CA; its token file holds its token.
    assert_eq!(
        cluster["certificate-authority"].as_str(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    );
    assert_eq!(
        user["tokenFile"].as_str(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    let out = Command::new("curl")
        .args(["--silent", "--max-time", "5", "--cacert"])
        .arg(node.pki.ca_file())
        .args(["--header", "Authorization: Bearer kube-proxy-token"])
        .args(["--header", "Content-Type: application/json", "--data"])
        .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#)
        .arg(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            cluster["server"].as_str().unwrap()
        ))
        .output()
        .unwrap();
    let review = String::from_utf8_lossy(&out.stdout);
    assert!(
        review.contains("system:serviceaccount:kube-system:kube-proxy"),
        "kube-proxy reaches an apiserver through the node's gateway: {review}"
    );
}

/// kube-proxy's ConfigMap as kubeadm renders it (`kubeadm init phase addon kube-proxy`, the
/// `KubeProxyConfigMap19` template of cmd/kubeadm/app/phases/addons/proxy/manifests.go), with
/// `server` the cluster's controlPlaneEndpoint; its `config.conf` cut to what names the
/// kubeconfig.
fn kube_proxy_configmap(server: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  labels:
    app: kube-proxy
  name: kube-proxy
  namespace: kube-system
data:
  config.conf: |-
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    clientConnection:
      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  kubeconfig.conf: |-
    apiVersion: v1
    kind: Config
    clusters:
    - cluster:
        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
        server: {server}
      name: default
    contexts:
    - context:
        cluster: default
        namespace: default
        user: default
      name: default
    current-context: default
    users:
    - name: default
      user:
        tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
"#
    )
}

/// The values of `key` in a systemd unit, in order.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// The unit's sandbox as systemd builds it, with runc: its user, a read-only root
/// (`ProtectSystem=strict`), `ReadOnlyPaths`, a private /tmp, and writable
/// `StateDirectory`/`RuntimeDirectory` owned by the user. kubegate configured as the docs say
/// (discovery's state file in /var/lib/kubegate, the upgrade socket in /run/kubegate) writes
/// both, and reaches `/readyz` 200.
#[test]
fn the_systemd_sandbox_lets_kubegate_write_only_its_state_and_runtime_directories() {
    let unit = std::fs::read_to_string(repo("deploy/systemd/kubegate.service")).unwrap();
    assert_eq!(unit_values(&unit, "ProtectSystem"), ["strict"]);
    assert_eq!(unit_values(&unit, "PrivateTmp"), ["yes"]);
    assert_eq!(unit_values(&unit, "User"), ["kubegate"]);
    let state = unit_values(&unit, "StateDirectory")[0];
    let runtime = unit_values(&unit, "RuntimeDirectory")[0];
    let exec: Vec<String> = unit_values(&unit, "ExecStart")[0]
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(exec[0], "/usr/bin/kubegate");

    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(dir.path());
    let sim = Sim::start(&node.pki, "replica-1", SimOptions::default());
    // A system user of its own (the package creates `kubegate`; any uid but root will do).
    let uid = 64_900;
    let state_dir = dir.path().join("state");
    let runtime_dir = dir.path().join("runtime");
    let tmp = dir.path().join("tmp");
    for d in [&state_dir, &runtime_dir, &tmp] {
        std::fs::create_dir_all(d).unwrap();
        std::os::unix::fs::chown(d, Some(uid), Some(uid)).unwrap();
    }
    let kubeconfig = node.pki.kubeconfig(&format!("https://{}", sim.addr));
    node.copy(&kubeconfig, "/etc/kubegate/discovery.kubeconfig", 0, 0o644);
    let (_, admin) = node.configure(
        "deploy/packaging/kubegate.yaml",
        "/etc/kubegate/kubegate.yaml",
        &[&sim],
    );
    let path = node.host.join("etc/kubegate/kubegate.yaml");
    let mut c: kubegate_config::Config =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    c.discovery = Some(kubegate_config::DiscoveryConfig {
        kubeconfig: "/etc/kubegate/discovery.kubeconfig".into(),
        state_file: Some(format!("/var/lib/{state}/backends.json").into()),
        debounce: ms(200),
    });
    c.upgrade = Some(kubegate_config::UpgradeConfig {
        socket: format!("/run/{runtime}/upgrade.sock").into(),
    });
    node.write(
        "/etc/kubegate/kubegate.yaml",
        c.to_yaml().as_bytes(),
        0,
        0o644,
    );

    // A path with "-" is optional: mounted when the host has it.
    let mut mounts: Vec<(PathBuf, String, bool)> = unit_values(&unit, "ReadOnlyPaths")[0]
        .split_whitespace()
        .filter_map(|p| {
            let (optional, p) = match p.strip_prefix('-') {
                Some(p) => (true, p),
                None => (false, p),
            };
            let host = node.host.join(p.trim_start_matches('/'));
            (!optional || host.exists()).then(|| (host, p.to_string(), true))
        })
        .collect();
    mounts.push((state_dir.clone(), format!("/var/lib/{state}"), false));
    mounts.push((runtime_dir.clone(), format!("/run/{runtime}"), false));
    mounts.push((tmp, "/tmp".into(), false));
    let mut args = exec;
    args[0] = "/usr/local/bin/kubegate".into();
    let spec = ContainerSpec {
        args,
        user: (uid, uid),
        read_only_root: true,
        mounts,
        capabilities: Vec::new(),
        nofile: (1024, hard_nofile()),
    };
    let container = Container::start(dir.path(), "systemd", &spec);
    wait_ready(admin, &container);
    wait_for("discovery's state file", Duration::from_secs(30), || {
        std::fs::read_to_string(state_dir.join("backends.json"))
            .ok()
            .filter(|t| t.contains(&sim.addr.to_string()))
    });
    assert!(
        runtime_dir.join("upgrade.sock").exists(),
        "{}",
        container.log()
    );
}
