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
//! 4. `exec_port_forward_and_logs_through_kubegate`: `kubectl exec -i` over WebSocket and
//!    over SPDY (stdin echoed, exit codes), `port-forward` (bytes through) and `logs -f`,
//!    through passthrough and terminate mode.
//! 5. `kubectl_watch_and_the_python_client_see_every_change_across_restarts_and_a_crash`:
//!    `kubectl get --watch` and the Python client's watch through terminate mode keep running
//!    through a rolling restart and a SIGKILL, each change seen once.
//!
//! 6. `kubectls_command_and_session_route_and_are_named_in_the_log_and_on_the_status_page`:
//!    a `dispatch` rule takes `kubectl get` (its `Kubectl-Command`) to one replica; the access
//!    log names each request's command and run (`Kubectl-Session`), the status page the
//!    busiest commands.
//!
//! kubectl comes from `scripts/install-deps` (.tools/bin/kubectl); the Python client from
//! Debian's python3-kubernetes. A missing client fails the test, it never skips.

use kubegate_e2e::*;
use kubegate_testbed::ChildProcess;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `out`, once it is known that kubectl `args` succeeded (its output in the failure otherwise).
fn succeeded(args: &[&str], out: Output) -> Output {
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let out = Command::new(kubectl_bin())
        // kubectl's own headers (Kubectl-Command, -Session) as it sends them by default.
        .env_remove("KUBECTL_COMMAND_HEADERS")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--request-timeout", "10s"])
        .args(args)
        .output()
        .unwrap();
    succeeded(args, out)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// kubectl with `args` against `kc`, left running: its output read line by line
/// ([`lines_of`]), its errors dropped; ended by its PID when dropped.
fn kubectl_streaming(kc: &Path, args: &[&str]) -> ChildProcess {
    ChildProcess::adopt(
        Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kc)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
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

    let mut watch = kubectl_streaming(
        kc,
        &["get", "configmaps", "--watch", "--output-watch-events"],
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

/// Three replicas on one etcd, accepting `tok-ops` as a token, with extra flags `args`;
/// kubegate in front, terminating TLS when `terminate`.
fn cluster(terminate: bool, args: &[&str]) -> Started {
    let bed = Cluster::new()
        .replicas(3)
        .etcd()
        .tokens(&[("tok-ops", "ops-bot", "ops")])
        .sim_args(args);
    if terminate { bed.terminate() } else { bed }.start()
}

#[test]
fn kubectl_direct_and_through_kubegate() {
    let bed = cluster(false, &[]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let direct = pki.kubeconfig(&format!("https://{}", sims[0].addr));
    kubectl_scenario(&direct, "direct", "kubernetes-admin");

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
    let bed = cluster(true, &[]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
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
    for s in sims.iter() {
        let series = format!(
            "kubegate_requests_total{{backend=\"{}\",code=\"2xx\",verb=\"get\"}}",
            s.name
        );
        assert!(kg.metric(&series) > 0.0, "{series}");
    }
}

/// Lists configmaps, then watches them from that list until the one named `sys.argv[3]`
/// (or `sys.argv[2]` seconds).
const PYTHON_LIST_WATCH: &str = r#"
import sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
listed = v1.list_namespaced_config_map("default")
print("LIST", len(listed.items), listed.metadata.resource_version, flush=True)
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, "default",
                   resource_version=listed.metadata.resource_version,
                   timeout_seconds=int(sys.argv[2])):
    print("EVENT", ev["type"], ev["object"].metadata.name, flush=True)
    if ev["object"].metadata.name == sys.argv[3]:
        break
"#;

/// `/usr/bin/python3 -c PYTHON_LIST_WATCH KUBECONFIG TIMEOUT LAST` with Debian's
/// python3-kubernetes, its output piped.
fn python_list_watch(kubeconfig: &Path, timeout_s: u32, last: &str) -> ChildProcess {
    ChildProcess::adopt(
        Command::new("/usr/bin/python3")
            .args(["-c", PYTHON_LIST_WATCH])
            .arg(kubeconfig)
            .args([&timeout_s.to_string(), last])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("/usr/bin/python3 with Debian's python3-kubernetes"),
    )
}

/// Lists and watches with the Python client through `kg`, while kubectl creates an object.
fn python_client(pki: &Pki, kg: &Kubegate) {
    let kc = pki.kubeconfig(&format!("https://{}", kg.listen));
    kubectl(
        &kc,
        &["create", "configmap", "existing", "--from-literal=a=b"],
    );
    let mut py = python_list_watch(&kc, 20, "from-kubectl");
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
        let bed = cluster(terminate, &[]);
        let (kg, pki) = (&bed.kg, &bed.pki);
        python_client(pki, kg);
    }
}

/// Runs kubectl with `input` on its stdin and `env` set.
fn kubectl_input(kc: &Path, args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kc)
        .args(["--request-timeout", "20s"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    use std::io::Read;
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let mut child = ChildProcess::adopt(child);
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let status = child
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("kubectl {args:?} did not end"));
    let out = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    succeeded(args, out)
}

/// exec (WebSocket and SPDY), port-forward and `logs -f` through `kg`.
fn sessions_scenario(kc: &Path) {
    kubectl(kc, &["run", "p1", "--image=busybox", "--restart=Never"]);
    // exec over WebSocket (kubectl's default), then over SPDY: stdin comes back.
    for (protocol, env) in [
        ("websocket", vec![]),
        ("spdy", vec![("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")]),
    ] {
        let input = format!("through kubegate over {protocol}\n");
        let out = kubectl_input(kc, &["exec", "-i", "p1", "--", "cat"], &input, &env);
        assert_eq!(String::from_utf8_lossy(&out.stdout), input, "{protocol}");
    }
    // A failing command's exit code reaches kubectl.
    let out = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kc)
        .args(["exec", "p1", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // port-forward: bytes to the local port come back from the pod.
    let port = free_port();
    let mut forward = kubectl_streaming(kc, &["port-forward", "p1", &format!("{port}:8080")]);
    let rx = lines_of(forward.child_mut().unwrap());
    wait_line(&rx, "port-forward to listen", |l| {
        l.starts_with("Forwarding from 127.0.0.1")
    });
    for i in 0..2 {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let msg = format!("port-forward connection {i}\n");
        s.write_all(msg.as_bytes()).unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), msg);
    }
    forward.kill();

    // logs -f: lines keep coming.
    let mut logs = kubectl_streaming(kc, &["logs", "-f", "p1"]);
    let rx = lines_of(logs.child_mut().unwrap());
    wait_line(&rx, "the fifth log line", |l| {
        l.starts_with("p1 log line 5")
    });
    logs.kill();
    kubectl(kc, &["delete", "pod", "p1"]);
}

#[test]
fn exec_port_forward_and_logs_through_kubegate() {
    for terminate in [false, true] {
        let bed = cluster(terminate, &[]);
        let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
        sessions_scenario(&pki.kubeconfig(&format!("https://{}", kg.listen)));
        if terminate {
            let long = r#"kubegate_requests_total{backend="replica-1",code="1xx",verb="create"}"#;
            let upgraded: f64 = sims
                .iter()
                .map(|s| {
                    kg.metric(&long.replace("replica-1", &s.name))
                        + kg.metric(&long.replace("replica-1", &s.name).replace("create", "get"))
                })
                .sum();
            assert!(upgraded >= 4.0, "upgrades counted: {upgraded}");
        }
    }
}

/// `kubectl get --watch` and the Python client's watch, through terminate mode, see every
/// configmap created while each replica is restarted in turn and the one holding the watches
/// is killed: both keep running, and each name comes once.
#[test]
fn kubectl_watch_and_the_python_client_see_every_change_across_restarts_and_a_crash() {
    let mut bed = cluster(true, &["--shutdown-delay-duration", "2s"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let kc = pki.kubeconfig(&format!("https://{}", kg.listen));
    kubectl(&kc, &["create", "configmap", "first", "--from-literal=a=b"]);

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
    let kubectl_lines = lines_of(watch.child_mut().unwrap());
    wait_line(&kubectl_lines, "kubectl's initial listing", |l| {
        l.contains("first")
    });
    let mut py = python_list_watch(&kc, 300, "last");
    let py_lines = lines_of(py.child_mut().unwrap());
    wait_line(&py_lines, "the Python client's list", |l| {
        l.starts_with("LIST")
    });
    let long_running = |kg: &Kubegate| -> Vec<f64> {
        sims_names()
            .iter()
            .map(|n| {
                kg.metric(&format!(
                    "kubegate_backend_long_running_requests{{backend=\"{n}\"}}"
                ))
            })
            .collect()
    };
    wait_for("both watches open", Duration::from_secs(30), || {
        (long_running(kg).iter().sum::<f64>() == 2.0).then_some(())
    });

    let mut created = Vec::new();
    let make = |kc: &Path, created: &mut Vec<String>| {
        let name = format!("cm-{:02}", created.len() + 1);
        kubectl(kc, &["create", "configmap", &name, "--from-literal=a=b"]);
        created.push(name);
    };
    for sim in sims.iter_mut() {
        make(&kc, &mut created);
        sim.signal(libc::SIGTERM);
        make(&kc, &mut created);
        let status = sim.wait_exit(Duration::from_secs(30));
        assert!(status.success(), "{status:?}");
        sim.restart();
        kg.wait_state(&sim.name, "ready", Duration::from_secs(30));
        make(&kc, &mut created);
    }
    let held = long_running(kg);
    let victim = held
        .iter()
        .position(|n| *n > 0.0)
        .expect("a replica holds the watches");
    sims[victim].kill();
    make(&kc, &mut created);
    make(&kc, &mut created);
    kubectl(&kc, &["create", "configmap", "last", "--from-literal=a=b"]);
    created.push("last".into());

    // kubectl printed each one once, and is still watching.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !seen.contains_key("last") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = kubectl_lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("kubectl's watch: {e}; seen {seen:?}"));
        let mut cols = line.split_whitespace();
        if let (Some(event), Some(name)) = (cols.next(), cols.next()) {
            if event == "ADDED" && name != "first" {
                *seen.entry(name.to_string()).or_default() += 1;
            }
        }
    }
    assert!(watch.running(), "kubectl get --watch ended");
    for name in &created {
        assert_eq!(
            seen.get(name),
            Some(&1),
            "{name} in kubectl's watch: {seen:?}"
        );
    }
    assert_eq!(seen.len(), created.len(), "{seen:?}");
    watch.kill();

    // The Python client saw them once each, in order, and ended by itself at "last".
    let mut names = Vec::new();
    loop {
        let line = wait_line(&py_lines, "the Python client's events", |l| {
            l.starts_with("EVENT")
        });
        let name = line.rsplit(' ').next().unwrap().to_string();
        assert!(line.starts_with("EVENT ADDED"), "{line}");
        let done = name == "last";
        names.push(name);
        if done {
            break;
        }
    }
    assert_eq!(names, created);
    let status = py
        .wait_exit(Duration::from_secs(15))
        .expect("the Python client ends after its last event");
    assert!(status.success());
}

fn sims_names() -> [&'static str; 3] {
    ["replica-1", "replica-2", "replica-3"]
}

#[test]
fn kubectls_command_and_session_route_and_are_named_in_the_log_and_on_the_status_page() {
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .configure(|c| c.terminate.access_log.format = kubegate_config::AccessLogFormat::Json)
        .dispatch(
            "- name: gets\n  match: {kubectl_commands: [kubectl get]}\n  backends: [replica-2]\n",
        )
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let kc = pki.kubeconfig(&format!("https://{}", kg.listen));
    kubectl(&kc, &["create", "configmap", "headers", "-n", "default"]);
    for _ in 0..3 {
        kubectl(&kc, &["get", "configmaps", "-n", "default"]);
    }
    let lines = wait_for("the four commands' lines", Duration::from_secs(30), || {
        let lines: Vec<serde_json::Value> = kg
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("kubectl_command").is_some())
            .collect();
        let gets = lines.iter().filter(|l| l["verb"] == "list").count();
        (gets >= 3 && lines.iter().any(|l| l["verb"] == "create")).then_some(lines)
    });
    let create = lines.iter().find(|l| l["verb"] == "create").unwrap();
    assert_eq!(
        create["kubectl_command"], "kubectl create configmap",
        "{create}"
    );
    let lists: Vec<_> = lines.iter().filter(|l| l["verb"] == "list").collect();
    let mut sessions = std::collections::HashSet::new();
    for l in &lists {
        assert_eq!(l["kubectl_command"], "kubectl get", "{l}");
        assert_eq!(l["replica"], "replica-2", "the rule took it: {l}");
        sessions.insert(l["kubectl_session"].as_str().unwrap().to_string());
    }
    assert_eq!(sessions.len(), 3, "one session a run: {sessions:?}");
    assert!(!sessions.contains(create["kubectl_session"].as_str().unwrap()));
    let taken = kg.metric(r#"kubegate_dispatch_requests_total{cluster="default",rule="gets"}"#);
    assert!(taken >= 3.0, "the rule took the gets: {taken}");
    let page = kg.admin_body("/");
    for row in [
        "<tr><td>kubectl get<td class=n>",
        "<tr><td>kubectl create configmap<td class=n>",
    ] {
        assert!(page.contains(row), "{row}: {page}");
    }
}
