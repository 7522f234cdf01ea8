//! Real kubectl processes alongside the synthetic clients: a get loop, a create loop and a
//! watch. Their failures are what a person at a terminal would have seen.

use crate::client::ErrorClass;
use crate::record::{Kind, Outcome, Recorder, Write};
use crate::traffic::tokio_util_like::Stop;
use crate::traffic::NAMESPACE;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// Writes to `path` the cluster's kubeconfig (in `pki`) with its server `gateway`; returns
/// `path`.
pub fn kubeconfig_for(pki: &Path, gateway: SocketAddr, path: &Path) -> anyhow::Result<PathBuf> {
    let text: String = std::fs::read_to_string(pki.join("kubeconfig"))?
        .lines()
        .map(|l| match l.split_once("server:") {
            Some((indent, _)) => format!("{indent}server: https://{gateway}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(path, text)?;
    Ok(path.to_path_buf())
}

/// kubectl from `KUBECTL`, `.tools/bin/kubectl` of the workspace, or PATH.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KUBECTL") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    for dir in exe.ancestors() {
        let candidate = dir.join(".tools/bin/kubectl");
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    kubegate_testbed::bins::which("kubectl")
}

/// The status of the last answer kubectl logged (`-v=6`: client-go's `round_trippers` line
/// `METHOD URL CODE TEXT in N milliseconds`), if it was an error: what the server said, exactly,
/// whatever words kubectl then printed (an apiserver's storage error is a 500 whose Status has
/// no reason, printed as the bare message).
fn last_error_status(stderr: &str) -> Option<u16> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains("round_trippers.go:") && l.trim_end().ends_with("milliseconds"))?;
    let (_, logged) = line.split_once("] ")?;
    let code: u16 = logged.split_whitespace().nth(2)?.parse().ok()?;
    (code >= 400).then_some(code)
}

fn classify(stderr: &str) -> ErrorClass {
    match last_error_status(stderr) {
        Some(429) => return ErrorClass::Http429,
        Some(500..=599) => return ErrorClass::Http5xx,
        Some(_) => return ErrorClass::Other,
        None => {}
    }
    let s = stderr.to_lowercase();
    // An answer from the server: its reason says what it was, whatever its message quotes (an
    // apiserver without etcd answers 500 with "connect: connection refused" in the message).
    if let Some(at) = s.find("error from server (") {
        let reason = &s[at + "error from server (".len()..];
        return if reason.starts_with("toomanyrequests") {
            ErrorClass::Http429
        } else if [
            "internalerror",
            "serviceunavailable",
            "timeout",
            "servertimeout",
            "badgateway",
        ]
        .iter()
        .any(|r| reason.starts_with(r))
        {
            ErrorClass::Http5xx
        } else {
            ErrorClass::Other
        };
    }
    // kubectl's words for a server's 5xx when it does not print "Error from server" (`create`
    // prints "failed to create ...: Internal error occurred: ..."; discovery's body may not be
    // a Status), which may quote the server's own dial errors.
    if s.contains("internal error occurred")
        || s.contains("an error on the server")
        || s.contains("the server is currently unable")
    {
        return ErrorClass::Http5xx;
    }
    // The apiserver's own storage error, passed on as a Status without a reason
    // (`ErrorToAPIStatus`): the etcd client's words, which may quote its own dial to etcd
    // ("connection refused"); kubectl's own connection errors name the server it dialed.
    if s.contains("rpc error: code = ") || s.contains("etcdserver: ") {
        return ErrorClass::Http5xx;
    }
    if s.contains("connection refused") {
        ErrorClass::Refused
    } else if s.contains("timeout") || s.contains("deadline") {
        ErrorClass::Timeout
    } else if s.contains("429") || s.contains("toomanyrequests") || s.contains("try again later") {
        ErrorClass::Http429
    } else if s.contains("serviceunavailable")
        || s.contains("internal error")
        || s.contains("internalerror")
        || s.contains("bad gateway")
        || s.contains("shutting down")
    {
        ErrorClass::Http5xx
    } else if s.contains("eof")
        || s.contains("reset")
        || s.contains("goaway")
        || s.contains("broken pipe")
    {
        ErrorClass::Reset
    } else {
        ErrorClass::Other
    }
}

async fn once(kubectl: &Path, kubeconfig: &Path, args: &[String]) -> Option<ErrorClass> {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--request-timeout", "30s"])
        // Each answer's status logged: what the run failed on is read from it (`classify`).
        .arg("-v=6")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .ok()?;
    if out.status.success() {
        return None;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What kubectl said, beside the run's other logs: the report has only its class.
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(kubeconfig.with_file_name("kubectl-errors.log"))
    {
        use std::io::Write;
        let _ = writeln!(log, "kubectl {}: {}", args.join(" "), stderr.trim());
    }
    Some(classify(&stderr))
}

/// `kubectl get configmaps` every second, and `kubectl create configmap` every two.
pub async fn loops(kubectl: PathBuf, kubeconfig: PathBuf, rec: Arc<Recorder>, stop: Stop) {
    let mut n = 0u64;
    while !stop.stopped() {
        n += 1;
        let args: Vec<String> = if n.is_multiple_of(2) {
            vec![
                "create".into(),
                "configmap".into(),
                format!("kubectl-{}-{n}", std::process::id()),
                "-n".into(),
                NAMESPACE.into(),
                "--from-literal=a=b".into(),
            ]
        } else {
            vec![
                "get".into(),
                "configmaps".into(),
                "-n".into(),
                NAMESPACE.into(),
                "-o".into(),
                "name".into(),
            ]
        };
        let started = Instant::now();
        let err = once(&kubectl, &kubeconfig, &args).await;
        let create = n.is_multiple_of(2);
        let outcome = Outcome {
            first: err,
            last: err,
            replica: None,
            ambiguous: create
                && matches!(
                    err,
                    Some(ErrorClass::Reset | ErrorClass::Timeout | ErrorClass::Http5xx)
                ),
        };
        let write = create.then(|| Write::Create {
            name: args[2].clone(),
        });
        rec.add(Kind::Kubectl, started, outcome, write);
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

/// `kubectl get configmaps --watch`: an exit before the end is counted as a failed kubectl.
pub async fn watch(kubectl: PathBuf, kubeconfig: PathBuf, rec: Arc<Recorder>, stop: Stop) {
    while !stop.stopped() {
        let Ok(mut child) = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "get",
                "configmaps",
                "-n",
                NAMESPACE,
                "--watch",
                "-o",
                "name",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
        else {
            return;
        };
        loop {
            tokio::select! {
                status = child.wait() => {
                    if !stop.stopped() {
                        // The watch ended under the user: one failure at this moment, not a stall.
                        let started = Instant::now();
                        let err = Some(if status.map(|s| s.success()).unwrap_or(false) { ErrorClass::Reset } else { ErrorClass::Other });
                        let outcome = Outcome { first: err, last: err, ..Outcome::default() };
                        rec.add(Kind::Kubectl, started, outcome, None);
                        rec.watch_broke(crate::record::WatchEndSeen::KubectlExited);
                    }
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.stopped() {
                        let _ = child.kill().await;
                        return;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_reason_decides_over_what_its_message_quotes() {
        assert_eq!(
            classify("error: failed to create configmap: Internal error occurred: dial tcp 127.0.0.1:2379: connect: connection refused"),
            ErrorClass::Http5xx
        );
        assert_eq!(
            classify("couldn't get current server API group list: an error on the server (\"dial tcp 127.0.0.1:2379: connect: connection refused\") has prevented the request from succeeding"),
            ErrorClass::Http5xx
        );
        assert_eq!(
            classify("Error from server (InternalError): Internal error occurred: dial tcp 127.0.0.1:2379: connect: connection refused"),
            ErrorClass::Http5xx
        );
        assert_eq!(
            classify(
                "Error from server (TooManyRequests): the server has received too many requests"
            ),
            ErrorClass::Http429
        );
        assert_eq!(
            classify("The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?\ndial tcp 127.0.0.1:6443: connect: connection refused"),
            ErrorClass::Refused
        );
        assert_eq!(
            classify("Error from server (NotFound): configmaps \"x\" not found"),
            ErrorClass::Other
        );
    }

    /// An apiserver's storage error is a 500 whose Status has no reason: kubectl prints its
    /// bare message, and only the logged status tells it from kubectl's own connection errors.
    #[test]
    fn the_logged_status_decides_over_what_kubectl_printed() {
        let answered = |code: &str, printed: &str| {
            format!("I1205 08:11:10.911690   27771 round_trippers.go:560] POST https://127.0.0.1:6443/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create 201 Created in 3 milliseconds\nI1205 08:11:10.911690   27771 round_trippers.go:560] POST https://127.0.0.1:6443/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create {code} in 1001 milliseconds\n{printed}")
        };
        let refused = "error: failed to create configmap: dial tcp 127.0.0.1:2379: connect: connection refused";
        assert_eq!(
            classify(&answered("500 Internal Server Error", refused)),
            ErrorClass::Http5xx
        );
        assert_eq!(
            classify(&answered(
                "500 Internal Server Error",
                "Error from server: etcdserver: request timed out"
            )),
            ErrorClass::Http5xx
        );
        assert_eq!(
            classify(&answered("429 Too Many Requests", "x")),
            ErrorClass::Http429
        );
        assert_eq!(classify(&answered("409 Conflict", "x")), ErrorClass::Other);
        // No status logged, the apiserver's storage error printed bare: its words say it.
        assert_eq!(
            classify("Error from server: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused\""),
            ErrorClass::Http5xx
        );
        // No answer logged: kubectl's own words.
        assert_eq!(classify(refused), ErrorClass::Refused);
    }
}
