//! The configuration file: a reload that applies what changed and refuses a broken file whole,
//! and `kubegate check` naming each problem's file, line and column.
//!
//! 1. `reload_adds_and_removes_backends_and_refuses_bad_files`.
//! 2. `check_reports_file_line_column`.

use kubegate_e2e::replicas::{open, served_by, sims, wait_all_ready};
use kubegate_e2e::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_and_removes_backends_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sims = sims(&pki, 3);
    let cfg = KubegateConfig::new(&[&sims[0], &sims[1]]);
    let kg = Kubegate::start(&pki, &cfg);
    wait_all_ready(&kg, &sims[..2]);
    let conns = open(&kg, &pki, 2).await;
    let mut kept = conns
        .into_iter()
        .find(|c| served_by(&sims, c) == "replica-1")
        .unwrap();

    // Replace replica-2 with replica-3.
    kg.rewrite(&KubegateConfig::new(&[&sims[0], &sims[2]]));
    kg.wait_state("replica-3", "ready", Duration::from_secs(30));
    wait_for("replica-2 to be forgotten", Duration::from_secs(30), || {
        kg.state("replica-2").is_none().then_some(())
    });
    assert_eq!(
        kept.get("/version").await.unwrap().status,
        200,
        "kept backend's connection survives"
    );
    assert_eq!(
        kg.metric("kubegate_config_reloads_total{result=\"success\"}"),
        1.0
    );

    // A broken file changes nothing and is counted.
    kubegate_testbed::kubegate::write_text("listeners: [\n", &kg.config_path).unwrap();
    wait_for(
        "the failed reload to be counted",
        Duration::from_secs(30),
        || (kg.metric("kubegate_config_reloads_total{result=\"failure\"}") == 1.0).then_some(()),
    );
    assert_eq!(kg.metric("kubegate_config_last_reload_successful"), 0.0);
    let names: Vec<String> = kg
        .backends()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["replica-1", "replica-3"]);
    assert_eq!(kept.get("/version").await.unwrap().status, 200);
    assert!(kg.log().contains("configuration reload refused"));
    // SIGHUP with the broken file in place is refused too.
    kg.proc.signal(libc::SIGHUP);
    wait_for(
        "the SIGHUP reload to be refused",
        Duration::from_secs(30),
        || (kg.metric("kubegate_config_reloads_total{result=\"failure\"}") == 2.0).then_some(()),
    );
    assert_eq!(kg.get(&pki, "/version").await.unwrap().status, 200);
}

#[test]
fn check_reports_file_line_column() {
    assert_check_refuses(
        |_| {
            "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\n  - address: 127.0.0.1:7001\nhealth:\n  interval: fast\n  tls: {insecure_skip_verify: true}\n".into()
        },
        &[("7:3", "invalid duration \"fast\"")],
    );
    assert_check_refuses(
        |_| {
            "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\n  - address: 127.0.0.1:7001\nhealth:\n  tls: {insecure_skip_verify: true}\n".into()
        },
        &[("5:14", "duplicate backend address 127.0.0.1:7001")],
    );

    let dir = tempfile::tempdir().unwrap();
    let (code, _) = check_config(
        &dir.path().join("ok.yaml"),
        "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls: {insecure_skip_verify: true}\n",
    );
    assert_eq!(code, Some(0));
}
