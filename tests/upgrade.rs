//! Upgrading kubegate itself without a blip: `kubegate run --upgrade` takes the listening
//! sockets over from the running process (real processes, real signals, passthrough mode).
//!
//! 1. `three_upgrades_under_traffic_refuse_and_reset_nothing`: a client opens a new connection
//!    every 10 ms (TLS handshake and a request through kubegate each) while watches stream;
//!    kubegate is upgraded three times. No connection is refused or reset; the watches end
//!    only when the process that carried them drains; each old process exits 0; each new one
//!    starts its counters from zero.
//! 2. `a_successor_that_dies_before_taking_over_changes_nothing`.

use kubegate_e2e::replicas::sims;
use kubegate_e2e::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn setup() -> (tempfile::TempDir, Pki, Vec<Sim>, KubegateConfig) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sims = sims(&pki, 2);
    let mut cfg = KubegateConfig::new(&sims.iter().collect::<Vec<_>>());
    cfg.shutdown.grace = secs(3);
    cfg.upgrade = Some(kubegate_config::UpgradeConfig {
        socket: dir.path().join("upgrade.sock"),
    });
    (dir, pki, sims, cfg)
}

fn successor(kg: &Kubegate, n: usize) -> Proc {
    let mut cmd = std::process::Command::new(bin("kubegate"));
    cmd.arg("run")
        .arg("--config")
        .arg(&kg.config_path)
        .arg("--upgrade");
    Proc::spawn(
        "kubegate (successor)",
        cmd,
        kg.config_path.with_extension(format!("upgrade-{n}.log")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_upgrades_under_traffic_refuse_and_reset_nothing() {
    let (_dir, pki, sims, cfg) = setup();
    let pki = Arc::new(pki);
    let mut kg = Kubegate::start(&pki, &cfg);
    for s in &sims {
        kg.wait_state(&s.name, "ready", T);
    }
    let started = Instant::now();

    // New connections, one every 10 ms, each a TLS handshake and a request through kubegate.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let churn = {
        let (stop, ok, failures, pki, addr) = (
            stop.clone(),
            ok.clone(),
            failures.clone(),
            pki.clone(),
            kg.listen,
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let result = async {
                    let mut c = Conn::open(addr, &pki, false).await?;
                    let r = c.get("/version").await?;
                    std::io::Result::Ok(r.status)
                }
                .await;
                match result {
                    Ok(200) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(other) => failures.lock().unwrap().push(format!("status {other}")),
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{:?}: {e}", e.kind())),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    // Long-lived connections: watches carried by the first process.
    let mut watches = Vec::new();
    for _ in 0..3 {
        let mut c = Conn::open(kg.listen, &pki, true).await.unwrap();
        let lines = c
            .stream("/api/v1/namespaces/default/configmaps?watch=1")
            .await
            .unwrap();
        assert_eq!(lines.status, 200);
        watches.push((c, lines));
    }
    let watchers: Vec<_> = watches
        .into_iter()
        .map(|(c, mut lines)| {
            tokio::spawn(async move {
                let _keep = c;
                loop {
                    match lines.next(Duration::from_secs(120)).await {
                        Ok(Some(_)) => continue,
                        _ => return Instant::now(),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let first_upgrade = Instant::now();
    let mut first_exit = None;
    let mut connections_before = f64::MAX;
    for n in 1..=3 {
        let mut next = successor(&kg, n);
        // The old process hands over, drains (shutdown.grace 3 s here) and exits 0.
        let status = tokio::task::block_in_place(|| kg.proc.wait_exit(T));
        assert!(
            status.success(),
            "old process exited {status:?}:\n{}",
            kg.log()
        );
        first_exit.get_or_insert_with(Instant::now);
        assert!(next.running(), "the successor runs:\n{}", next.log());
        kg.proc = next;
        // The admin socket went over too; what answers there now is the new process, whose
        // counters started at zero.
        wait_for("the successor serving", T, || {
            (kg.metric(r#"kubegate_lifecycle_phase{phase="serving"}"#) == 1.0).then_some(())
        });
        let connections = kg.metric(r#"kubegate_backend_connections_total{backend="replica-1"}"#)
            + kg.metric(r#"kubegate_backend_connections_total{backend="replica-2"}"#);
        assert!(
            connections < connections_before,
            "upgrade {n}: {connections} connections counted, {connections_before} by its predecessor"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        connections_before = kg
            .metric(r#"kubegate_backend_connections_total{backend="replica-1"}"#)
            + kg.metric(r#"kubegate_backend_connections_total{backend="replica-2"}"#);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    churn.await.unwrap();

    let failures = failures.lock().unwrap().clone();
    let ok = ok.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} failed of {}: {failures:?}",
        failures.len(),
        ok
    );
    assert!(ok > 100, "only {ok} connections in {:?}", started.elapsed());

    // The watches outlived the start of the first upgrade and ended with the first process's
    // drain, not before.
    let first_exit = first_exit.unwrap();
    for w in watchers {
        let ended = w.await.unwrap();
        assert!(
            ended > first_upgrade,
            "a watch ended before the upgrade began"
        );
        assert!(
            ended <= first_exit + Duration::from_secs(2),
            "a watch outlived the process that carried it by {:?}",
            ended - first_exit
        );
    }
}

#[test]
fn a_successor_that_dies_before_taking_over_changes_nothing() {
    let (_dir, pki, sims, mut cfg) = setup();
    // Only the successor's configuration: a backend that never becomes ready keeps it from
    // accepting, so it is still waiting when it is killed.
    let mut kg = Kubegate::start(&pki, &cfg);
    for s in &sims {
        kg.wait_state(&s.name, "ready", T);
    }
    cfg.set_backends(&[("nowhere", "127.0.0.1:1".parse().unwrap())]);
    // The same file: the running process refuses the reload (listeners unchanged, but a
    // reload is not what this is about) — write a second file for the successor.
    let other = kg.config_path.with_extension("successor.yaml");
    std::fs::write(&other, cfg.render(kg.listen, kg.admin, &pki.ca_file())).unwrap();
    let mut cmd = std::process::Command::new(bin("kubegate"));
    cmd.arg("run").arg("--config").arg(&other).arg("--upgrade");
    let mut next = Proc::spawn("kubegate (successor)", cmd, other.with_extension("log"));
    wait_for("the successor holds the sockets", T, || {
        next.log()
            .contains("received the listening sockets")
            .then_some(())
    });
    next.kill();
    // The running process noticed and serves on, still ready and still upgradable.
    wait_for("handover abandoned", T, || {
        kg.log().contains("handover abandoned").then_some(())
    });
    assert!(kg.proc.running());
    let ready = plain_http(kg.admin, "GET", "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let r = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut c = Conn::open(kg.listen, &pki, false).await.unwrap();
        c.get("/version").await.unwrap().status
    });
    assert_eq!(r, 200);
}
