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

use kubegate_e2e::*;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

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

    // The configs they mount pass `kubegate check` once the CA they name exists; the CA path
    // is the only thing replaced.
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
            ),
        )
        .unwrap();
        run_ok(
            Command::new(bin("kubegate"))
                .args(["check", "--config"])
                .arg(&local),
        );
    }
}

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
    let out = Command::new("keepalived")
        .args(["--config-test", "-f"])
        .arg(repo("deploy/keepalived/keepalived.conf"))
        .output()
        .expect("keepalived (Debian package keepalived) is installed");
    assert!(
        out.status.success(),
        "keepalived --config-test: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = std::fs::read_to_string(repo("deploy/keepalived/keepalived.conf")).unwrap();
    assert!(
        conf.contains("\n$ADMIN=http://127.0.0.1:9444\n"),
        "ADMIN defaults to the admin address"
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

/// A pod manifest's container as a [`ContainerSpec`]: its command, user, read-only root,
/// capabilities, and each volume mount from the hostPath under `node`.
fn pod_spec(manifest: &str, node: &Node) -> ContainerSpec {
    let pod: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo(manifest)).unwrap()).unwrap();
    let spec = &pod["spec"];
    assert_eq!(spec["hostNetwork"], true, "{manifest}");
    let c = &spec["containers"][0];
    let sc = &c["securityContext"];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mounts = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let volume = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap();
            let host_path = volume["hostPath"]["path"].as_str().unwrap();
            (
                node.host.join(host_path.trim_start_matches('/')),
                m["mountPath"].as_str().unwrap().to_string(),
                m["readOnly"] == true,
            )
        })
        .collect();
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{manifest}");
    ContainerSpec {
        args: strings(&c["command"]),
        user: (
            sc["runAsUser"].as_u64().unwrap() as u32,
            sc["runAsGroup"].as_u64().unwrap() as u32,
        ),
        read_only_root: sc["readOnlyRootFilesystem"] == true,
        mounts,
        capabilities: strings(&sc["capabilities"]["add"])
            .into_iter()
            .map(|c| format!("CAP_{c}"))
            .collect(),
        // A soft limit of 1024, as container runtimes commonly give: kubegate raises it to the
        // hard one (this machine's) itself.
        nofile: (1024, hard_nofile()),
    }
}

/// Runs `manifest`'s `probe` (`livenessProbe`, ...) once as the kubelet does — its scheme and
/// path, against `admin` (the test's address for the port), HTTPS without verifying the
/// certificate — and returns the status code (0: no answer).
fn kubelet_probe(manifest: &str, probe: &str, admin: std::net::SocketAddr) -> u16 {
    let pod: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo(manifest)).unwrap()).unwrap();
    let get = &pod["spec"]["containers"][0][probe]["httpGet"];
    let scheme = get["scheme"].as_str().unwrap_or("HTTP").to_lowercase();
    let path = get["path"].as_str().unwrap();
    let out = Command::new("curl")
        .args([
            "--silent",
            "--insecure",
            "--max-time",
            "5",
            "--output",
            "/dev/null",
        ])
        .args(["--write-out", "%{http_code}"])
        .arg(format!("{scheme}://{admin}{path}"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Waits for `manifest`'s readiness probe to pass against `admin`, then checks its startup
/// and liveness probes pass too; the container's log on failure.
fn wait_probes(manifest: &str, admin: std::net::SocketAddr, container: &Container) {
    let ready =
        kubegate_testbed::wait_until("the readiness probe", Duration::from_secs(60), || {
            (kubelet_probe(manifest, "readinessProbe", admin) == 200).then_some(())
        });
    assert!(ready.is_ok(), "{}", container.log());
    for probe in ["livenessProbe", "startupProbe"] {
        let pod = std::fs::read_to_string(repo(manifest)).unwrap();
        if pod.contains(&format!("{probe}:")) {
            assert_eq!(
                kubelet_probe(manifest, probe, admin),
                200,
                "{manifest} {probe}"
            );
        }
    }
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

/// This process's hard open-files limit.
fn hard_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(4).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_pod_runs_as_shipped_in_passthrough_mode() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(dir.path());
    let sims: Vec<Sim> = (1..=2)
        .map(|i| Sim::start(&node.pki, &format!("replica-{i}"), SimOptions::default()))
        .collect();
    let (listen, admin) = node.configure(
        "deploy/static-pod/kubegate-config.yaml",
        "/etc/kubegate/kubegate.yaml",
        &sims.iter().collect::<Vec<_>>(),
    );
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
    node.write(
        &format!("{pki}/kubegate/metrics-token"),
        b"scrape-token\n",
        UID,
        0o400,
    );
    let sims: Vec<Sim> = (1..=2)
        .map(|i| {
            Sim::start(
                &node.pki,
                &format!("replica-{i}"),
                SimOptions {
                    front_proxy_ca: Some(fp.ca_file()),
                    front_proxy_names: Some(vec![
                        "front-proxy-client".into(),
                        "kubegate-front-proxy".into(),
                    ]),
                    ..Default::default()
                },
            )
        })
        .collect();
    let (listen, admin) = node.configure(
        "deploy/static-pod/kubegate-terminate-config.yaml",
        "/etc/kubegate/kubegate.yaml",
        &sims.iter().collect::<Vec<_>>(),
    );
    let spec = pod_spec("deploy/static-pod/kubegate-terminate.yaml", &node);
    let c = Container::start(dir.path(), "static-terminate", &spec);
    // The admin endpoint serves TLS: the probes are HTTPS, the metrics need the token.
    wait_probes("deploy/static-pod/kubegate-terminate.yaml", admin, &c);
    let metrics = |token: Option<&str>| {
        let mut curl = Command::new("curl");
        curl.args(["--silent", "--max-time", "5", "--cacert"])
            .arg(node.pki.ca_file())
            .args(["--write-out", "\n%{http_code}"]);
        if let Some(t) = token {
            curl.args(["--header", &format!("Authorization: Bearer {t}")]);
        }
        // The serving certificate names the cluster's endpoints, 127.0.0.1 among them.
        let out = curl
            .arg(format!("https://{admin}/metrics"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(metrics(None).ends_with("\n401"), "{}", metrics(None));
    let scraped = metrics(Some("scrape-token"));
    assert!(scraped.ends_with("\n200"), "{scraped}");
    assert!(scraped.contains("kubegate_build_info"));
    // The admin's certificate ends at kubegate; the replica sees its identity through
    // kubegate's own front-proxy certificate.
    let mut conn = Conn::open(listen, &node.pki, true).await.unwrap();
    let review =
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","spec":{}}"#;
    let r = conn
        .request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(review),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.text().contains("kubernetes-admin"), "{}", r.text());
    drop(c);

    // With kubeadm's shared pair in place of kubegate's own, the container cannot read the
    // key (root, 0600) and says which file.
    let mut config = std::fs::read_to_string(node.host.join("etc/kubegate/kubegate.yaml")).unwrap();
    config = config.replace(
        "/etc/kubernetes/pki/kubegate/front-proxy-client",
        "/etc/kubernetes/pki/front-proxy-client",
    );
    node.write("/etc/kubegate/kubegate.yaml", config.as_bytes(), 0, 0o644);
    let mut spec = spec;
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
    let sims: Vec<Sim> = (1..=2)
        .map(|i| Sim::start(&node.pki, &format!("replica-{i}"), SimOptions::default()))
        .collect();
    let (listen, admin) = node.configure(
        "deploy/node-local/kubegate.yaml",
        "/etc/kubegate/node-local.yaml",
        &sims.iter().collect::<Vec<_>>(),
    );
    let spec = pod_spec("deploy/node-local/kubegate-node-local.yaml", &node);
    let c = Container::start(dir.path(), "node-local", &spec);
    wait_probes("deploy/node-local/kubegate-node-local.yaml", admin, &c);
    let mut conn = Conn::open(listen, &node.pki, true).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);
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

    let mut mounts: Vec<(PathBuf, String, bool)> = unit_values(&unit, "ReadOnlyPaths")[0]
        .split_whitespace()
        .map(|p| {
            (
                node.host.join(p.trim_start_matches('/')),
                p.to_string(),
                true,
            )
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
