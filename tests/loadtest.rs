//! Short failover load tests in CI, with real processes and real kubectl alongside: L4
//! (`rolling-restart` and `freeze` against kubegate and HAProxy in kubeadm's configuration) and
//! L7 (kubegate's terminate mode through a rolling restart, a crash under writes, a freeze and
//! every replica going down, beside HAProxy terminating TLS); and a short soak with faults. The
//! full matrices and the 30-minute soak are documented commands (docs/failover.md), not tests.

use kubegate_e2e::bin;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;

/// One load test at a time: each drives a whole control plane, and two at once on a small
/// machine would measure each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(r: &Value, scenario: &str, gateway: &str) -> Value {
    r.as_array()
        .unwrap()
        .iter()
        .find(|x| x["scenario"] == scenario && x["gateway"] == gateway)
        .unwrap_or_else(|| panic!("no run {scenario} · {gateway}"))
        .clone()
}

fn total(v: &Value) -> u64 {
    v.as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

/// Runs `kubegate-loadtest run` in `dir` with `args` and the report and plot options; returns
/// the process output and the parsed report.
fn loadtest(dir: &Path, args: &[&str]) -> (Output, Value) {
    let out = Command::new(bin("kubegate-loadtest"))
        .arg("run")
        .args(args)
        // Relative paths, as `scripts/demo` passes them: the configuration files the tool writes
        // must still point at the right certificates.
        .current_dir(dir)
        .args([
            "--dir",
            "work",
            "--json",
            "report.json",
            "--plot",
            "plot.svg",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("| scenario | gateway |"), "{table}");
    let report: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap())
        .expect("well-formed JSON");
    (out, report)
}

#[test]
fn short_rolling_restart_and_freeze_against_kubegate_and_haproxy() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (_, report) = loadtest(
        dir.path(),
        &[
            "--scenario",
            "rolling-restart,freeze",
            "--gateways",
            "kubegate,haproxy-kubeadm",
            "--short",
        ],
    );
    let plot = dir.path().join("plot.svg");
    assert_eq!(report.as_array().unwrap().len(), 4);
    for r in report.as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(total(&r["requests"]) > 100, "too little traffic: {r}");
        assert!(
            r["kubectl_runs"].as_u64().unwrap() > 0,
            "kubectl ran alongside"
        );
    }

    // kubegate: a rolling restart with a 5 s shutdown delay costs clients nothing.
    let rr = run(&report, "rolling-restart", "kubegate");
    assert_eq!(total(&rr["client_go_failures"]), 0, "{rr}");
    assert_eq!(total(&rr["first_attempt_failures"]), 0, "{rr}");
    assert_eq!(
        rr["watch"]["relists"], 0,
        "watches resume, never relist: {rr}"
    );

    // kubegate: clients are moved off a frozen replica by kubegate (probe timeouts, ~2 s
    // here), not by client-go's 30 s + 15 s ping timeout. How fast is the report's business;
    // this bound only has to tell the two apart on a loaded machine.
    let fz = run(&report, "freeze", "kubegate");
    let recovery = fz["recovery_ms"].as_u64().unwrap();
    assert!(recovery < 20_000, "recovery {recovery} ms: {fz}");
    // The peer ran the same scenario and was measured (its figures are the report's).
    let peer = run(&report, "freeze", "haproxy-kubeadm");
    assert_eq!(peer["status"], "ok", "{peer}");

    // The plot is a well-formed SVG document.
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let parsed = Command::new("python3")
        .args(["-c", "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith('svg'), r.tag"])
        .arg(&plot)
        .status()
        .unwrap();
    assert!(parsed.success(), "SVG does not parse as XML");
}

/// What clients of a run noticed: failures after client-go's retries, ambiguous writes,
/// failed kubectl runs, watch breaks.
fn noticed(r: &Value) -> u64 {
    total(&r["client_go_failures"])
        + r["ambiguous_writes"]["total"].as_u64().unwrap()
        + r["kubectl_failures"].as_u64().unwrap()
        + r["watch"]["breaks"].as_array().unwrap().len() as u64
}

#[test]
fn short_l7_runs_show_nothing_a_client_can_notice_through_terminate_mode() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (_, faults) = loadtest(
        dir.path(),
        &[
            "--scenario",
            "crash-writes,freeze,all-down",
            "--gateways",
            "kubegate-l7",
            "--short",
        ],
    );
    let side = tempfile::tempdir().unwrap();
    let (_, restart) = loadtest(
        side.path(),
        &[
            "--scenario",
            "rolling-restart",
            "--gateways",
            "kubegate-l7,haproxy-l7",
            "--short",
        ],
    );
    for r in faults
        .as_array()
        .unwrap()
        .iter()
        .chain(restart.as_array().unwrap())
    {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(total(&r["requests"]) > 100, "too little traffic: {r}");
        assert!(
            r["kubectl_runs"].as_u64().unwrap() > 0,
            "kubectl ran alongside: {r}"
        );
        let a = &r["ambiguous_writes"];
        assert_eq!(
            a["total"].as_u64().unwrap(),
            a["applied"].as_u64().unwrap() + a["not_applied"].as_u64().unwrap(),
            "every ambiguous write was looked up: {r}"
        );
    }

    // Through a rolling restart, a crash under writes and a freeze: no failed first attempt
    // but ambiguous writes, no kubectl failure (its `get --watch` included), no watch break
    // seen by a client, no relist.
    for scenario in ["rolling-restart", "crash-writes", "freeze"] {
        let report = if scenario == "rolling-restart" {
            &restart
        } else {
            &faults
        };
        let r = run(report, scenario, "kubegate-l7");
        assert_eq!(total(&r["first_attempt_failures"]), 0, "{scenario}: {r}");
        assert_eq!(total(&r["client_go_failures"]), 0, "{scenario}: {r}");
        assert_eq!(r["kubectl_failures"], 0, "{scenario}: {r}");
        assert_eq!(
            r["watch"]["breaks"].as_array().unwrap().len(),
            0,
            "{scenario}: {r}"
        );
        assert_eq!(r["watch"]["relists"], 0, "{scenario}: {r}");
    }
    // The watches did move: kubegate continued them on other replicas.
    let rr = run(&restart, "rolling-restart", "kubegate-l7");
    assert!(
        !rr["watch"]["gateway_resumes"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{rr}"
    );
    // Requests spread evenly over the replicas after the restart.
    let share = rr["replica_share"]["max_over_min"].as_f64();
    assert!(
        share.is_some_and(|s| s <= 1.2),
        "replica share {share:?}: {rr}"
    );

    // Every replica down: kubegate stays up and answers every request itself (a 503 Status,
    // which client-go retries), nothing breaks under a client, and it serves again within
    // interval × rise (2 s) of the first replica being ready.
    let down = run(&faults, "all-down", "kubegate-l7");
    for class in down["first_attempt_failures"].as_object().unwrap().keys() {
        assert!(
            class == "http_5xx" || class == "http_429",
            "{class}: every request answered with a status: {down}"
        );
    }
    assert_eq!(total(&down["client_go_failures"]), 0, "{down}");
    let again = down["served_again_ms"].as_i64().unwrap();
    assert!(
        again <= 2_000,
        "served again {again} ms after the first ready: {down}"
    );

    // Beside HAProxy terminating TLS in the same rolling restart: never more noticed, and
    // fewer whenever HAProxy's clients noticed anything.
    let peer = run(&restart, "rolling-restart", "haproxy-l7");
    let (ours, theirs) = (noticed(&rr), noticed(&peer));
    assert!(
        ours <= theirs && (theirs == 0 || ours < theirs),
        "kubegate-l7 {ours}, haproxy-l7 {theirs}: {rr}\n{peer}"
    );
}

/// A 90-second soak with a fixed fault plan: every acknowledged create is in the store, none is
/// applied twice, kubegate never restarts, its descriptors return to their baseline, and every
/// client-visible failure lies inside a fault's window. (The 30-minute soak is a documented
/// command.)
#[test]
fn a_short_soak_loses_nothing_and_kubegate_never_restarts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("kubegate-loadtest"))
        .args(["soak", "--duration", "90s", "--seed", "3"])
        .current_dir(dir.path())
        .args(["--dir", "work", "--json", "soak.json", "--plot", "soak.svg"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("soak.json")).unwrap()).unwrap();
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 7, "{table}");
    assert!(checks.iter().all(|c| c["passed"] == true), "{table}");
    assert!(report["faults"].as_array().unwrap().len() >= 5, "{table}");
    for l in report["listeners"].as_array().unwrap() {
        assert!(l["creates_acknowledged"].as_u64().unwrap() > 100, "{table}");
        assert!(l["requests"].as_u64().unwrap() > 500, "{table}");
    }
    let svg = std::fs::read_to_string(dir.path().join("soak.svg")).unwrap();
    assert!(svg.contains("descriptors") && svg.contains("<polyline"));
}
