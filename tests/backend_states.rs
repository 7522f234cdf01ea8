//! A replica's state as kubegate finds it, and what each state does to the connections it
//! holds (passthrough): real `kubegate` and `kubegate-sim` processes on loopback.
//!
//! 1. `not_ready_backend_drains_then_closes`: readyz 500 (etcd), port open: no new connections
//!    after interval × fall; an open one lives until drain.failing_timeout, then is closed and
//!    counted.
//! 2. `shutdown_answer_takes_a_backend_out_after_one_probe`.
//! 3. `a_failure_is_confirmed_at_the_fast_interval`: fall counted at fast_interval, not interval.
//! 4. `a_flapping_backend_needs_more_passes_each_time`: flap damping doubles the passes needed.
//! 5. `killed_backend_is_retried_transparently`.
//! 6. `frozen_backend_connections_are_closed_and_it_returns_after_sigcont`.
//! 7. `untrusted_certificates_never_become_ready`: unknown CA, name mismatch, expired.

use kubegate_config::BalancePolicy;
use kubegate_e2e::replicas::{count, open, served_by};
use kubegate_e2e::*;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_backend_drains_then_closes() {
    let bed = Cluster::new()
        .replicas(3)
        .configure(|cfg| {
            cfg.drain.timeout = secs(120);
            cfg.drain.failing_timeout = secs(10);
        })
        .start();
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut conns = open(kg, pki, 3).await;
    let target = &sims[0];
    let mut held = conns
        .drain(..)
        .find(|c| served_by(sims, c) == target.name)
        .expect("least-connections put one connection on each replica");

    let failed_at = Instant::now();
    target.force_check("etcd", true);
    kg.wait_state(&target.name, "not_ready", Duration::from_secs(30));
    let backend = kg
        .backends()
        .into_iter()
        .find(|b| b["name"] == target.name.as_str())
        .unwrap();
    assert_eq!(backend["failing_checks"], serde_json::json!(["etcd"]));

    // No new connection lands on it.
    let fresh = open(kg, pki, 12).await;
    assert!(!count(sims, &fresh).contains_key(target.name.as_str()));

    // The open connection still works during the drain...
    assert_eq!(held.get("/version").await.unwrap().status, 200);
    // ...and is closed at drain.failing_timeout (not the 120 s drain.timeout of shutdowns).
    wait_for(
        "the drained connection to be closed",
        Duration::from_secs(60),
        || held.is_closed().then_some(()),
    );
    let lived = failed_at.elapsed();
    assert!(
        lived >= Duration::from_secs(10),
        "closed after {lived:?}, before the timeout"
    );
    assert!(
        lived < Duration::from_secs(100),
        "closed after {lived:?}: the 120 s timeout was used"
    );
    let series = format!(
        "kubegate_backend_connections_closed_total{{backend=\"{}\",reason=\"drain_timeout\"}}",
        target.name
    );
    wait_for(
        "the forced close to be counted",
        Duration::from_secs(30),
        || (kg.metric(&series) == 1.0).then_some(()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answer_takes_a_backend_out_after_one_probe() {
    let bed = Cluster::new()
        .replicas(2)
        .sim_args(&["--shutdown-delay-duration", "20s"])
        // An ordinary failure would need `fall` failed probes in a row: 1000 of them, several
        // minutes even at the fast interval. One `[-]shutdown` answer is enough.
        .configure(|cfg| cfg.health.fall = 1000)
        .start();
    let (kg, sims) = (&bed.kg, &bed.sims);
    sims[0].signal(libc::SIGTERM);
    kg.wait_state(&sims[0].name, "not_ready", Duration::from_secs(30));
    let fails = r#"kubegate_backend_probes_total{backend="replica-1",result="fail"}"#;
    assert!(
        kg.metric(fails) < 1000.0,
        "{} failed probes",
        kg.metric(fails)
    );
    let b = kg
        .backends()
        .into_iter()
        .find(|b| b["name"] == "replica-1")
        .unwrap();
    assert_eq!(b["shutting_down"], true);
    assert_eq!(b["failing_checks"], serde_json::json!(["shutdown"]));
    let series = "kubegate_backend_state_transitions_total{backend=\"replica-1\",from=\"ready\",to=\"not_ready\"}";
    assert_eq!(kg.metric(series), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_confirmed_at_the_fast_interval() {
    // At the normal interval, fall 3 would take two more 10 s intervals after the first
    // failure; at the fast interval, two more 100 ms ones.
    let bed = Cluster::new()
        .replicas(2)
        .configure(|cfg| {
            cfg.health.interval = secs(10);
            cfg.health.fast_interval = ms(100);
            cfg.health.rise = 1;
            cfg.health.fall = 3;
        })
        .start();
    let (kg, sims) = (&bed.kg, &bed.sims);
    sims[0].force_check("etcd", true);
    // The next probe comes at the normal interval; a failed connect makes kubegate probe at
    // once, but the replica still accepts, so wait for the interval to come round.
    let fails = r#"kubegate_backend_probes_total{backend="replica-1",result="fail"}"#;
    wait_for("the first failed probe", Duration::from_secs(30), || {
        (kg.metric(fails) >= 1.0).then_some(())
    });
    kg.wait_state("replica-1", "not_ready", Duration::from_secs(15));
    // Reached at the fast interval: at the normal one it would still take 20 s. No probe has
    // run since (the next is an interval away), so exactly `fall` failed.
    assert_eq!(kg.metric(fails), 3.0, "exactly fall probes failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_backend_needs_more_passes_each_time() {
    let bed = Cluster::new()
        .replicas(2)
        .configure(|cfg| {
            cfg.health.interval = ms(200);
            cfg.health.flap_damping.window = secs(60);
            cfg.health.flap_damping.max_rise = 8;
        })
        .start();
    let (kg, sims) = (&bed.kg, &bed.sims);
    let passes = r#"kubegate_backend_probes_total{backend="replica-1",result="pass"}"#;
    let passes_to_ready = |kg: &Kubegate| {
        kg.backends()
            .into_iter()
            .find(|b| b["name"] == "replica-1")
            .unwrap()["passes_to_ready"]
            .as_u64()
            .unwrap()
    };
    // Each fall comes soon after the backend (re)entered ready: 2 -> 4 -> 8 -> 8 (max_rise).
    for expected in [4, 8, 8] {
        sims[0].force_check("etcd", true);
        kg.wait_state("replica-1", "not_ready", Duration::from_secs(30));
        assert_eq!(passes_to_ready(kg), expected);
        let passes_before = kg.metric(passes);
        sims[0].force_check("etcd", false);
        kg.wait_state("replica-1", "ready", Duration::from_secs(30));
        let passed = kg.metric(passes) - passes_before;
        assert!(
            passed >= expected as f64,
            "ready again after {passed} passing probes, {expected} were needed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_backend_is_retried_transparently() {
    let mut bed = Cluster::new()
        .replicas(3)
        .configure(|cfg| {
            cfg.balance = BalancePolicy::RoundRobin;
            cfg.health.interval = secs(2);
            cfg.health.rise = 1;
        })
        .start();
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    sims[1].kill();
    // Round robin reaches the dead replica within the first three connections, long before
    // the 2 s probe interval notices: every client must still succeed.
    for i in 0..30 {
        let resp = kg.get(pki, "/version").await;
        assert_eq!(
            resp.map(|r| r.status).unwrap_or(0),
            200,
            "client {i} failed"
        );
    }
    assert!(kg.metric("kubegate_connect_retries_total") >= 1.0);
    assert!(
        kg.metric(
            "kubegate_backend_connect_errors_total{backend=\"replica-2\",reason=\"refused\"}"
        ) >= 1.0
    );
    kg.wait_state("replica-2", "down", Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_backend_connections_are_closed_and_it_returns_after_sigcont() {
    // Probes every 300 ms, timeout 500 ms, fall 2.
    let bed = Cluster::new().replicas(3).start();
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let conns = open(kg, pki, 3).await;
    let target = &sims[2];
    let held = conns
        .into_iter()
        .find(|c| served_by(sims, c) == target.name)
        .unwrap();

    target.signal(libc::SIGSTOP);
    // Probes time out (timeout × fall): the replica goes down and its connections are closed,
    // without waiting for anything from the client side.
    wait_for(
        "the frozen replica's connection to be closed",
        Duration::from_secs(30),
        || held.is_closed().then_some(()),
    );
    assert_eq!(kg.state(&target.name).as_deref(), Some("down"));
    let fresh = open(kg, pki, 9).await;
    assert!(!count(sims, &fresh).contains_key(target.name.as_str()));
    let series = format!(
        "kubegate_backend_connections_closed_total{{backend=\"{}\",reason=\"backend_down\"}}",
        target.name
    );
    assert_eq!(kg.metric(&series), 1.0);

    target.signal(libc::SIGCONT);
    kg.wait_state(&target.name, "ready", Duration::from_secs(30));
    drop(fresh);
    let again = open(kg, pki, 9).await;
    assert_eq!(count(sims, &again).get(target.name.as_str()), Some(&3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificates_never_become_ready() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let other_ca = Pki::new(&dir.path().join("other"));
    let good = Sim::start(&pki, "good", SimOptions::default());
    let cases = [
        ("foreign", other_ca.serving("foreign"), "unknown_ca"),
        (
            "misnamed",
            pki.serving_with("misnamed", "misnamed", &["other.example"], -1, 30),
            "name_mismatch",
        ),
        (
            "expired",
            pki.serving_with("expired", "expired", &["kubernetes"], -30, -1),
            "expired",
        ),
    ];
    let bad: Vec<(Sim, &str)> = cases
        .into_iter()
        .map(|(name, pair, why)| {
            (
                Sim::start(
                    &pki,
                    name,
                    SimOptions {
                        serving: Some(pair),
                        ..Default::default()
                    },
                ),
                why,
            )
        })
        .collect();
    let mut all = vec![&good];
    all.extend(bad.iter().map(|(s, _)| s));
    let kg = Kubegate::start(&pki, &KubegateConfig::new(&all));
    kg.wait_state("good", "ready", Duration::from_secs(30));
    for (sim, why) in &bad {
        kg.wait_state(&sim.name, "not_ready", Duration::from_secs(30));
        let b = kg
            .backends()
            .into_iter()
            .find(|b| b["name"] == sim.name.as_str())
            .unwrap();
        assert_eq!(b["last_probe_result"], "tls_error", "{b}");
        let detail = b["last_probe_detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("TLS {why}")),
            "{}: {detail}",
            sim.name
        );
    }
    // Clients are only ever sent to the trusted replica.
    for _ in 0..6 {
        let c = kg.connect(&pki, false).await.unwrap();
        assert_eq!(c.peer(), good.cert_der.as_slice());
    }
}
