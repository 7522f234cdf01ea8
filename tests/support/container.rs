//! A container spec (a Kubernetes pod's container, a systemd unit's sandbox) reproduced with a
//! real OCI runtime, runc: the user, a read-only root, exactly the mounts the spec names, its
//! command line, capabilities dropped, the host's network (`hostNetwork: true`). The root file
//! system holds the binary under test at the image's path, and the host's system libraries
//! read-only (a test build is linked dynamically; the release image's binary is static).
//!
//! Ended by PID (SIGKILL to the container's process) and deleted from runc when dropped.

use crate::kubegate::bin;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What to run.
#[derive(Clone, Debug)]
pub struct ContainerSpec {
    /// The command line (the first word is a path inside the container).
    pub args: Vec<String>,
    /// User and group ids.
    pub user: (u32, u32),
    /// The root file system is read-only.
    pub read_only_root: bool,
    /// Bind mounts: host path, container path, read-only.
    pub mounts: Vec<(PathBuf, String, bool)>,
    /// Capabilities kept (none: every one dropped).
    pub capabilities: Vec<String>,
    /// The open-files limit the runtime gives the process: (soft, hard).
    pub nofile: (u64, u64),
}

impl ContainerSpec {
    /// A pod manifest's first container as the kubelet would run it: its command, user,
    /// read-only root, capabilities, and each volume mount from its hostPath, found under
    /// `host` (`/` on the node itself, or a folder standing for it).
    pub fn of_pod(manifest: &str, host: &Path) -> ContainerSpec {
        let pod: serde_json::Value = serde_yaml_ng::from_str(manifest).unwrap();
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
                    host.join(host_path.trim_start_matches('/')),
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
            // A soft limit of 1024, as container runtimes commonly give: kubegate raises it
            // to the hard one (this machine's) itself.
            nofile: (1024, hard_nofile()),
        }
    }
}

/// This process's hard open-files limit.
pub fn hard_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(4).unwrap().parse().unwrap()
}

/// Runs a pod manifest's `probe` (`livenessProbe`, ...) once as the kubelet does — its scheme
/// and path, against `at` (where the probe's port is reached), HTTPS without verifying the
/// certificate — and returns the status code (0: no answer).
pub fn pod_probe(manifest: &str, probe: &str, at: SocketAddr) -> u16 {
    let pod: serde_json::Value = serde_yaml_ng::from_str(manifest).unwrap();
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
        .arg(format!("{scheme}://{at}{path}"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Waits for a pod manifest's readiness probe to pass against `at`, then checks its startup
/// and liveness probes pass too; the container's log on failure.
pub fn wait_pod_probes(manifest: &str, at: SocketAddr, container: &Container) {
    let ready =
        kubegate_testbed::wait_until("the readiness probe", Duration::from_secs(60), || {
            (pod_probe(manifest, "readinessProbe", at) == 200).then_some(())
        });
    assert!(ready.is_ok(), "{}", container.log());
    for probe in ["livenessProbe", "startupProbe"] {
        if manifest.contains(&format!("{probe}:")) {
            assert_eq!(pod_probe(manifest, probe, at), 200, "{probe}");
        }
    }
}

/// A running container.
pub struct Container {
    id: String,
    pid: i32,
    log: PathBuf,
    user: (u32, u32),
}

impl Container {
    /// Runs `spec` with kubegate (the test build) at `/usr/local/bin/kubegate`; its bundle
    /// and output go to `dir`.
    pub fn start(dir: &Path, name: &str, spec: &ContainerSpec) -> Container {
        let bundle = dir.join(format!("bundle-{name}"));
        let rootfs = bundle.join("rootfs");
        for d in [
            "usr/local/bin",
            "usr/lib",
            "usr/lib64",
            "etc",
            "proc",
            "dev",
            "sys",
            "tmp",
        ] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        for (link, target) in [("lib", "usr/lib"), ("lib64", "usr/lib64")] {
            std::os::unix::fs::symlink(target, rootfs.join(link)).unwrap();
        }
        std::fs::copy(bin("kubegate"), rootfs.join("usr/local/bin/kubegate")).unwrap();
        run(Command::new("runc").args(["spec", "--bundle"]).arg(&bundle));
        let path = bundle.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let process = &mut config["process"];
        process["terminal"] = false.into();
        process["args"] = serde_json::json!(spec.args);
        process["user"] = serde_json::json!({"uid": spec.user.0, "gid": spec.user.1});
        let caps = serde_json::json!(spec.capabilities);
        for set in ["bounding", "effective", "permitted", "ambient"] {
            process["capabilities"][set] = caps.clone();
        }
        process["rlimits"] = serde_json::json!([{"type": "RLIMIT_NOFILE", "soft": spec.nofile.0, "hard": spec.nofile.1}]);
        config["root"]["readonly"] = spec.read_only_root.into();
        // hostNetwork: the host's network namespace, so the replicas on 127.0.0.1 are there.
        let namespaces = config["linux"]["namespaces"].as_array_mut().unwrap();
        namespaces.retain(|n| n["type"] != "network");
        let mounts = config["mounts"].as_array_mut().unwrap();
        for lib in ["/usr/lib", "/usr/lib64"] {
            mounts.push(
                serde_json::json!({"destination": lib, "type": "bind", "source": lib,
                "options": ["rbind", "ro"]}),
            );
        }
        for (host, inside, ro) in &spec.mounts {
            let mut options = vec!["rbind"];
            if *ro {
                options.push("ro");
            }
            mounts.push(serde_json::json!({"destination": inside, "type": "bind",
                "source": host, "options": options}));
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let id = format!("kubegate-test-{}-{name}", std::process::id());
        let pid_file = bundle.join("pid");
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let status = Command::new("runc")
            .args(["run", "--detach", "--pid-file"])
            .arg(&pid_file)
            .arg("--bundle")
            .arg(&bundle)
            .arg(&id)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .expect("runc (Debian package runc) is installed");
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(status.success(), "runc run {id}: {status:?}\n{log_text}");
        let pid = crate::wait_for("the container's pid file", Duration::from_secs(10), || {
            std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
        });
        Container {
            id,
            pid,
            log,
            user: spec.user,
        }
    }

    /// Runs `args` inside the running container as its user (`crictl exec`, `kubectl exec`
    /// do the same through the runtime): what it printed, and whether it succeeded.
    pub fn exec(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("runc")
            .args([
                "exec",
                "--user",
                &format!("{}:{}", self.user.0, self.user.1),
            ])
            .arg(&self.id)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("runc exec");
        let text = crate::said(&out);
        (out.status.success(), text)
    }

    /// The container's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// What it wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether its process still runs.
    pub fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- log of container {} ----\n{}", self.id, self.log());
        }
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .status();
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .status();
    }
}

/// Runs a command that must succeed.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
