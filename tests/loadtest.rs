//! A short failover load test in CI: `rolling-restart` and `freeze` against kubegate and
//! HAProxy (kubeadm's configuration), with real processes and real kubectl alongside.
//! The full matrix is a documented command (docs/failover.md), not a test.

use kubegate_e2e::bin;
use serde_json::Value;
use std::process::Command;

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

#[test]
fn short_rolling_restart_and_freeze_against_kubegate_and_haproxy() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let plot = dir.path().join("plot.svg");
    let out = Command::new(bin("kubegate-loadtest"))
        .args([
            "run",
            "--scenario",
            "rolling-restart,freeze",
            "--gateways",
            "kubegate,haproxy-kubeadm",
            "--short",
        ])
        // Relative paths, as `scripts/demo` passes them: the configuration files the tool writes
        // must still point at the right certificates.
        .current_dir(dir.path())
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

    let report: Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("well-formed JSON");
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
