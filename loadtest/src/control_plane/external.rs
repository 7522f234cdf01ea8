//! A control plane the load test does not run: real apiservers (a kind or kubeadm cluster), or
//! processes started elsewhere. A file names each replica's address and the commands that carry
//! each fault out on it (`systemctl`, `crictl stop`, `docker pause`, ...), the commands that take
//! etcd away and bring it back, and the directory with the credentials to use.
//!
//! ```yaml
//! pki: ./pki                 # ca.crt, admin.crt, admin.key, kubeconfig (and for L7 gateways
//!                            # front-proxy-client.crt/.key the apiservers trust, apiserver.crt/.key
//!                            # a gateway may serve)
//! replicas:
//!   - name: cp-1
//!     address: 172.18.0.2:6443
//!     stop: docker exec cp-1 sh -c 'crictl stop $(crictl ps -q --name kube-apiserver)'
//!     start: docker exec cp-1 sh -c 'until crictl ps -q --name kube-apiserver | grep -q .; do sleep 1; done'
//!     kill: docker exec cp-1 sh -c 'crictl stop --timeout 0 $(crictl ps -q --name kube-apiserver)'
//!     freeze: docker pause cp-1
//!     thaw: docker unpause cp-1
//! etcd:
//!   stop: docker exec cp-1 ...
//!   start: docker exec cp-1 ...
//! command_timeout: 2m
//! ```
//!
//! Every command runs with `sh -c`, with `REPLICA` and `ADDRESS` set, and must return once its
//! fault is carried out (`stop`: once the apiserver has exited). A fault whose command is
//! missing cannot be run against this control plane, and the run says so.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalSpec {
    /// The credentials directory (relative to the file).
    pub pki: PathBuf,
    /// The replicas.
    pub replicas: Vec<ExternalReplica>,
    /// How etcd is taken away and brought back.
    #[serde(default)]
    pub etcd: Option<EtcdCommands>,
    /// The longest a command may take.
    #[serde(default = "default_timeout", with = "duration")]
    pub command_timeout: Duration,
}

/// One replica and its commands.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalReplica {
    /// How the report names it.
    pub name: String,
    /// Where gateways reach it.
    pub address: SocketAddr,
    /// Graceful stop (SIGTERM); returns once the apiserver exited.
    pub stop: Option<String>,
    /// Starts it again (after `stop` or `kill`).
    pub start: Option<String>,
    /// Kills it at once (SIGKILL).
    pub kill: Option<String>,
    /// Stops it answering anything, its connections left open (SIGSTOP, `docker pause`).
    pub freeze: Option<String>,
    /// Undoes `freeze`.
    pub thaw: Option<String>,
    /// Makes its `/readyz` fail on `etcd` while it stays up (rarely possible on a real one).
    pub fail_readyz: Option<String>,
    /// Undoes `fail_readyz`.
    pub pass_readyz: Option<String>,
}

/// etcd's commands.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdCommands {
    /// Takes etcd away from every replica.
    pub stop: String,
    /// Brings it back.
    pub start: String,
}

fn default_timeout() -> Duration {
    Duration::from_secs(120)
}

mod duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

impl ExternalSpec {
    /// Reads `path`; the credentials directory is resolved against the file's.
    pub fn load(path: &Path) -> anyhow::Result<ExternalSpec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let mut spec: ExternalSpec = serde_yaml_ng::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        anyhow::ensure!(!spec.replicas.is_empty(), "{}: no replicas", path.display());
        if spec.pki.is_relative() {
            spec.pki = path.parent().unwrap_or(Path::new(".")).join(&spec.pki);
        }
        // Gateways run in directories of their own: they need the path from anywhere.
        spec.pki = std::fs::canonicalize(&spec.pki)
            .map_err(|e| anyhow::anyhow!("{}: pki {}: {e}", path.display(), spec.pki.display()))?;
        Ok(spec)
    }
}

/// Runs `command` (with `sh -c`) for `replica` within `timeout`; its output goes to `log`.
pub async fn run(
    command: &str,
    replica: Option<&ExternalReplica>,
    timeout: Duration,
    log: &Path,
) -> anyhow::Result<()> {
    use std::process::Stdio;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(r) = replica {
        cmd.env("REPLICA", &r.name)
            .env("ADDRESS", r.address.to_string());
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => {
            let status = status?;
            anyhow::ensure!(status.success(), "`{command}` exited with {status}");
            Ok(())
        }
        Err(_) => {
            // The command and whatever it started, by its process group.
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            anyhow::bail!("`{command}` did not finish within {timeout:?}")
        }
    }
}
