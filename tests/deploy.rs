//! The deployment files under `deploy/`, checked with the tools that will read them.
//!
//! 1. `sd_notify_ready_reloading_stopping`: kubegate with `NOTIFY_SOCKET` sends `READY=1` only
//!    once it serves, `RELOADING=1` on SIGHUP, `STOPPING=1` on SIGTERM.
//! 2. `manifests_parse_as_kubernetes_objects_and_their_configs_pass_check`
//! 3. `systemd_unit_passes_systemd_analyze_verify`
//! 4. `keepalived_config_passes_config_test`

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
    let kubectl = repo(".tools/bin/kubectl");
    assert!(kubectl.exists(), "run scripts/install-deps");
    for (manifest, name) in [
        ("deploy/static-pod/kubegate.yaml", "kubegate"),
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
    // The static pod's grace period covers kubegate's own drain.
    let pod = std::fs::read_to_string(repo("deploy/static-pod/kubegate.yaml")).unwrap();
    assert!(pod.contains("terminationGracePeriodSeconds: 45"));

    // The configs they mount pass `kubegate check` once the CA they name exists; the CA path
    // is the only thing replaced.
    for config in [
        "deploy/static-pod/kubegate-config.yaml",
        "deploy/node-local/kubegate.yaml",
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
        unit.replace("/usr/local/bin/kubegate", bin("kubegate").to_str().unwrap()),
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
        conf.contains("http://127.0.0.1:9444/readyz"),
        "track_script checks kubegate's /readyz"
    );
}
