//! Real Kubernetes clients against the simulator, directly and through kubegate in front of
//! three replicas sharing one etcd.
//!
//! 1. `kubectl_direct_and_through_kubegate`: kubectl v1.35 runs `get --raw /readyz?verbose`,
//!    `create configmap`, `get configmaps`, `get configmaps --watch` (an event arrives), `delete`.
//! 2. `python_client_lists_and_watches_through_kubegate`: the Python kubernetes client.
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

/// Runs the kubectl scenario against `server`; `tag` keeps object names apart.
fn kubectl_scenario(pki: &Pki, server: &str, tag: &str) {
    let kc = pki.kubeconfig(server);
    let readyz = stdout(&kubectl(&kc, &["get", "--raw", "/readyz?verbose"]));
    assert!(readyz.ends_with("readyz check passed\n"), "{readyz}");
    let name = format!("kubectl-{tag}");
    let created = stdout(&kubectl(
        &kc,
        &["create", "configmap", &name, "--from-literal=a=b"],
    ));
    assert_eq!(created.trim(), format!("configmap/{name} created"));
    let listed = stdout(&kubectl(&kc, &["get", "configmaps"]));
    assert!(listed.starts_with("NAME"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")) && l.contains(" 1 ")),
        "{listed}"
    );

    let mut watch = ChildProcess::adopt(
        Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["get", "configmaps", "--watch", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rx = lines_of(watch.child_mut().unwrap());
    wait_line(&rx, "the watch's initial listing", |l| l.contains(&name));
    let second = format!("{name}-2");
    kubectl(&kc, &["create", "configmap", &second, "--from-literal=x=y"]);
    let event = wait_line(&rx, "the ADDED event", |l| l.contains(&second));
    assert!(event.starts_with("ADDED"), "{event}");
    kubectl(&kc, &["delete", "configmap", &name]);
    let event = wait_line(&rx, "the DELETED event", |l| {
        l.starts_with("DELETED") && l.contains(&name)
    });
    assert!(event.contains(&name));
    watch.kill();
    kubectl(&kc, &["delete", "configmap", &second]);
}

fn replicas(pki: &Pki, etcd: &Etcd) -> Vec<Sim> {
    (1..=3)
        .map(|i| {
            Sim::start(
                pki,
                &format!("replica-{i}"),
                SimOptions {
                    args: vec!["--etcd-servers".into(), etcd.url.clone()],
                    ..Default::default()
                },
            )
        })
        .collect()
}

#[test]
fn kubectl_direct_and_through_kubegate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let etcd = Etcd::start(dir.path());
    let sims = replicas(&pki, &etcd);
    kubectl_scenario(&pki, &format!("https://{}", sims[0].addr), "direct");

    let kg = Kubegate::start(&pki, &KubegateConfig::new(&sims.iter().collect::<Vec<_>>()));
    for s in &sims {
        kg.wait_state(&s.name, "ready", Duration::from_secs(30));
    }
    kubectl_scenario(&pki, &format!("https://{}", kg.listen), "gateway");
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

#[test]
fn python_client_lists_and_watches_through_kubegate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let etcd = Etcd::start(dir.path());
    let sims = replicas(&pki, &etcd);
    let kg = Kubegate::start(&pki, &KubegateConfig::new(&sims.iter().collect::<Vec<_>>()));
    for s in &sims {
        kg.wait_state(&s.name, "ready", Duration::from_secs(30));
    }
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
