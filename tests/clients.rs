//! Real Kubernetes clients against the simulator, directly and through kubegate in front of
//! three replicas sharing one etcd.
//!
//! 1. `kubectl_direct_and_through_kubegate`: kubectl v1.35 runs `get --raw /readyz?verbose`,
//!    `auth whoami`, `create configmap`, `get configmaps`, `apply` (create, then change),
//!    `get configmaps --watch` (events arrive), `delete` — straight to a replica and through
//!    passthrough.
//! 2. `kubectl_through_terminate_mode_with_a_certificate_and_a_token`: the same through
//!    terminate mode, with a client certificate and with a bearer token.
//! 3. `python_client_lists_and_watches_through_kubegate`: the Python kubernetes client,
//!    through passthrough and terminate mode.
//!
//! kubectl comes from `scripts/install-deps` (.tools/bin/kubectl); the Python client from
//! Debian's python3-kubernetes. A missing client fails the test, it never skips.

use kubegate_e2e::*;
use kubegate_process::ChildProcess;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn kubectl_bin() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/kubectl");
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-deps",
        path.display()
    );
    path
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let out = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--request-timeout", "10s"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A child's stdout lines, delivered as they come.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return l,
            Ok(_) => {}
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
}

/// Runs the kubectl scenario with kubeconfig `kc`, expected to authenticate as `user`; `tag`
/// keeps object names apart.
fn kubectl_scenario(kc: &Path, tag: &str, user: &str) {
    let readyz = stdout(&kubectl(kc, &["get", "--raw", "/readyz?verbose"]));
    assert!(readyz.ends_with("readyz check passed\n"), "{readyz}");
    let whoami = stdout(&kubectl(kc, &["auth", "whoami"]));
    assert!(
        whoami
            .lines()
            .any(|l| l.starts_with("Username") && l.trim_end().ends_with(user)),
        "{whoami}"
    );
    let name = format!("kubectl-{tag}");
    let created = stdout(&kubectl(
        kc,
        &["create", "configmap", &name, "--from-literal=a=b"],
    ));
    assert_eq!(created.trim(), format!("configmap/{name} created"));
    let listed = stdout(&kubectl(kc, &["get", "configmaps"]));
    assert!(listed.starts_with("NAME"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")) && l.contains(" 1 ")),
        "{listed}"
    );
    // apply: created, then changed (a strategic merge patch).
    let manifest = kc.with_file_name(format!("{tag}-applied.yaml"));
    let applied = format!("{name}-applied");
    for (value, outcome) in [("1", "created"), ("2", "configured")] {
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {applied}\ndata:\n  v: \"{value}\"\n"),
        )
        .unwrap();
        let out = stdout(&kubectl(kc, &["apply", "-f", manifest.to_str().unwrap()]));
        assert_eq!(out.trim(), format!("configmap/{applied} {outcome}"));
    }
    let data = stdout(&kubectl(
        kc,
        &["get", "configmap", &applied, "-o", "jsonpath={.data.v}"],
    ));
    assert_eq!(data, "2");

    let mut watch = ChildProcess::adopt(
        Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kc)
            .args(["get", "configmaps", "--watch", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rx = lines_of(watch.child_mut().unwrap());
    wait_line(&rx, "the watch's initial listing", |l| l.contains(&name));
    let second = format!("{name}-2");
    kubectl(kc, &["create", "configmap", &second, "--from-literal=x=y"]);
    let event = wait_line(&rx, "the ADDED event", |l| l.contains(&second));
    assert!(event.starts_with("ADDED"), "{event}");
    kubectl(kc, &["delete", "configmap", &name]);
    let event = wait_line(&rx, "the DELETED event", |l| {
        l.starts_with("DELETED") && l.contains(&name)
    });
    assert!(event.contains(&name));
    watch.kill();
    kubectl(kc, &["delete", "configmap", &second, &applied]);
}

/// Three replicas on `etcd`, trusting `fp` as their front proxy and `tok-ops` as a token.
fn replicas(pki: &Pki, etcd: &Etcd, fp: &FrontProxyPki) -> Vec<Sim> {
    let tokens = pki.token_file(&[("tok-ops", "ops-bot", "ops")]);
    (1..=3)
        .map(|i| {
            Sim::start(
                pki,
                &format!("replica-{i}"),
                SimOptions {
                    args: vec![
                        "--etcd-servers".into(),
                        etcd.url.clone(),
                        "--token-auth-file".into(),
                        tokens.display().to_string(),
                    ],
                    front_proxy_ca: Some(fp.ca.clone()),
                    ..Default::default()
                },
            )
        })
        .collect()
}

/// kubegate in front of `sims`, terminating TLS when `terminate`.
fn gateway(pki: &Pki, fp: &FrontProxyPki, sims: &[Sim], terminate: bool) -> Kubegate {
    let mut cfg = KubegateConfig::new(&sims.iter().collect::<Vec<_>>());
    if terminate {
        cfg.terminate = Some(TerminateFiles::new(pki, fp));
    }
    let kg = Kubegate::start(pki, &cfg);
    for s in sims {
        kg.wait_state(&s.name, "ready", Duration::from_secs(30));
    }
    kg
}

#[test]
fn kubectl_direct_and_through_kubegate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let fp = pki.front_proxy();
    let etcd = Etcd::start(dir.path());
    let sims = replicas(&pki, &etcd, &fp);
    let direct = pki.kubeconfig(&format!("https://{}", sims[0].addr));
    kubectl_scenario(&direct, "direct", "kubernetes-admin");

    let kg = gateway(&pki, &fp, &sims, false);
    let kc = pki.kubeconfig(&format!("https://{}", kg.listen));
    kubectl_scenario(&kc, "passthrough", "kubernetes-admin");
    // kubectl's connections really went through kubegate, to more than one replica.
    let used = sims
        .iter()
        .filter(|s| {
            kg.metric(&format!(
                "kubegate_backend_connections_total{{backend=\"{}\"}}",
                s.name
            )) > 0.0
        })
        .count();
    assert!(used >= 2, "kubectl connections reached {used} replica(s)");
}

#[test]
fn kubectl_through_terminate_mode_with_a_certificate_and_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let fp = pki.front_proxy();
    let etcd = Etcd::start(dir.path());
    let sims = replicas(&pki, &etcd, &fp);
    let kg = gateway(&pki, &fp, &sims, true);
    let server = format!("https://{}", kg.listen);
    // The admin's certificate ends at kubegate; the replicas see its identity.
    kubectl_scenario(
        &pki.kubeconfig(&server),
        "terminate-cert",
        "kubernetes-admin",
    );
    // A bearer token passes through to the replicas.
    kubectl_scenario(
        &pki.token_kubeconfig(&server, "tok-ops"),
        "terminate-token",
        "ops-bot",
    );
    // kubectl's requests were spread over the replicas.
    for s in &sims {
        let series = format!(
            "kubegate_requests_total{{backend=\"{}\",code=\"2xx\",verb=\"get\"}}",
            s.name
        );
        assert!(kg.metric(&series) > 0.0, "{series}");
    }
}

const PYTHON_CLIENT: &str = r#"
import sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
listed = v1.list_namespaced_config_map("default")
print("LIST", len(listed.items), listed.metadata.resource_version, flush=True)
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, "default",
                   resource_version=listed.metadata.resource_version, timeout_seconds=20):
    print("EVENT", ev["type"], ev["object"].metadata.name, flush=True)
    if ev["object"].metadata.name == "from-kubectl":
        break
"#;

/// Lists and watches with the Python client through `kg`, while kubectl creates an object.
fn python_client(pki: &Pki, kg: &Kubegate) {
    let kc = pki.kubeconfig(&format!("https://{}", kg.listen));
    kubectl(
        &kc,
        &["create", "configmap", "existing", "--from-literal=a=b"],
    );
    let mut py = ChildProcess::adopt(
        Command::new("/usr/bin/python3")
            .args(["-c", PYTHON_CLIENT])
            .arg(&kc)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("/usr/bin/python3 with Debian's python3-kubernetes"),
    );
    let rx = lines_of(py.child_mut().unwrap());
    let list = wait_line(&rx, "the Python client's list", |l| l.starts_with("LIST"));
    assert!(list.starts_with("LIST 1 "), "{list}");
    kubectl(
        &kc,
        &["create", "configmap", "from-kubectl", "--from-literal=x=y"],
    );
    let event = wait_line(&rx, "the Python client's watch event", |l| {
        l.starts_with("EVENT")
    });
    assert_eq!(event, "EVENT ADDED from-kubectl");
    let status = py
        .wait_exit(Duration::from_secs(15))
        .expect("the Python client ends after its event");
    assert!(status.success());
}

#[test]
fn python_client_lists_and_watches_through_kubegate() {
    for terminate in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path());
        let fp = pki.front_proxy();
        let etcd = Etcd::start(dir.path());
        let sims = replicas(&pki, &etcd, &fp);
        let kg = gateway(&pki, &fp, &sims, terminate);
        python_client(&pki, &kg);
    }
}
