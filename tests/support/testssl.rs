//! testssl.sh (Debian's), run against a kubegate port on loopback: what it offers, seen from
//! outside. It runs in a process group of its own (it starts `openssl` for each check), ended
//! whole if it overruns its deadline.

use kubegate_testbed::ChildProcess;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long one testssl.sh run may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(240);

/// testssl.sh's findings for `addr` with `checks` (`-p` protocols, `-E` ciphers per protocol),
/// as (id, finding) pairs from its JSON output; its files go to `dir`.
pub fn testssl(dir: &Path, addr: SocketAddr, checks: &[&str]) -> Vec<(String, String)> {
    assert!(addr.ip().is_loopback(), "loopback only: {addr}");
    let name = format!("testssl-{}", addr.port());
    let (json, out, err) = (
        dir.join(format!("{name}.json")),
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new("testssl");
    cmd.args(["--quiet", "--color", "0", "--warnings", "batch", "--sneaky"])
        .args(["--connect-timeout", "10", "--openssl-timeout", "10"])
        .arg("--jsonfile")
        .arg(&json)
        .args(checks)
        .arg(addr.to_string());
    let mut run = ChildProcess::spawn_group(&mut cmd, &out, &err)
        .expect("testssl (Debian package testssl.sh) is installed");
    let log = || {
        format!(
            "{}{}",
            std::fs::read_to_string(&out).unwrap_or_default(),
            std::fs::read_to_string(&err).unwrap_or_default()
        )
    };
    run.wait_exit(DEADLINE)
        .unwrap_or_else(|| panic!("testssl did not finish within {DEADLINE:?}: {}", log()));
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|_| panic!("testssl wrote no JSON: {}", log()));
    let findings: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    findings
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap_or_default().to_string(),
                f["finding"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The finding with `id`.
pub fn finding<'a>(findings: &'a [(String, String)], id: &str) -> &'a str {
    findings
        .iter()
        .find(|(i, _)| i == id)
        .map(|(_, f)| f.as_str())
        .unwrap_or_else(|| panic!("no finding {id} in {findings:?}"))
}
