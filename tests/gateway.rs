//! End-to-end tests of the kubegate gateway: real `kubegate` and `kubegate-sim` processes on
//! loopback with certificates made per test.
//!
//! 1. `spreads_connections_by_policy`: least-connections, round-robin and power-of-two.
//! 2. `not_ready_backend_drains_then_closes`: readyz 500 (etcd), port open: no new connections
//!    after interval × fall; an open one lives until drain.failing_timeout, then is closed and
//!    counted.
//! 3. `shutdown_answer_takes_a_backend_out_after_one_probe`.
//!    `a_failure_is_confirmed_at_the_fast_interval`: fall counted at fast_interval, not interval.
//!    `a_flapping_backend_needs_more_passes_each_time`: flap damping doubles the passes needed.
//! 4. `killed_backend_is_retried_transparently`.
//! 5. `frozen_backend_connections_are_closed_and_it_returns_after_sigcont`.
//! 6. `untrusted_certificates_never_become_ready`: unknown CA, name mismatch, expired.
//! 7. `lifecycle_sigterm_delay_grace_exit_zero`.
//! 8. `reload_adds_and_removes_backends_and_refuses_bad_files`.
//! 9. `metrics_pass_promtool`.
//! 10. `check_reports_file_line_column`.
//! 11. `an_idle_gateway_sleeps`: no thread wakes every millisecond once connections came.

use kubegate_config::BalancePolicy;
use kubegate_e2e::*;
use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

fn sims(pki: &Pki, n: usize) -> Vec<Sim> {
    (1..=n)
        .map(|i| Sim::start(pki, &format!("replica-{i}"), SimOptions::default()))
        .collect()
}

/// Which replica served a connection, from the certificate it presented.
fn served_by<'a>(sims: &'a [Sim], conn: &Conn) -> &'a str {
    sims.iter()
        .find(|s| s.cert_der == conn.peer())
        .map(|s| s.name.as_str())
        .expect("peer certificate is one of the replicas'")
}

fn wait_all_ready(kg: &Kubegate, sims: &[Sim]) {
    for s in sims {
        kg.wait_state(&s.name, "ready", Duration::from_secs(30));
    }
}

/// Opens `n` connections through kubegate, each proven with a request; returns them.
async fn open(kg: &Kubegate, pki: &Pki, n: usize) -> Vec<Conn> {
    let mut conns = Vec::new();
    for _ in 0..n {
        let mut c = kg
            .connect(pki, false)
            .await
            .expect("connect through kubegate");
        assert_eq!(c.get("/version").await.unwrap().status, 200);
        conns.push(c);
    }
    conns
}

fn count<'a>(sims: &'a [Sim], conns: &[Conn]) -> HashMap<&'a str, usize> {
    let mut m = HashMap::new();
    for c in conns {
        *m.entry(served_by(sims, c)).or_insert(0) += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spreads_connections_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sims = sims(&pki, 3);
    for (policy, n) in [
        (BalancePolicy::LeastConnections, 30),
        (BalancePolicy::RoundRobin, 30),
        (BalancePolicy::PowerOfTwo, 60),
    ] {
        let mut cfg = KubegateConfig::new(&sims.iter().collect::<Vec<_>>());
        cfg.balance = policy;
        let kg = Kubegate::start(&pki, &cfg);
        wait_all_ready(&kg, &sims);
        let conns = open(&kg, &pki, n).await;
        let per = count(&sims, &conns);
        let (min, max) = (
            sims.iter()
                .map(|s| per.get(s.name.as_str()).copied().unwrap_or(0))
                .min()
                .unwrap(),
            per.values().copied().max().unwrap(),
        );
        match policy {
            // Held connections with rotating ties: exactly even.
            BalancePolicy::LeastConnections | BalancePolicy::RoundRobin => {
                assert_eq!((min, max), (n / 3, n / 3), "{policy:?}: {per:?}")
            }
            // Two random choices, the emptier wins: never far from even.
            _ => assert!(max - min <= 6 && min > 0, "{policy:?}: {per:?}"),
        }
        for s in &sims {
            let series = format!("kubegate_backend_connections{{backend=\"{}\"}}", s.name);
            assert_eq!(
                kg.metric(&series) as usize,
                per[s.name.as_str()],
                "{series}"
            );
        }
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_sigterm_delay_grace_exit_zero() {
    // Long enough that each step below happens inside its phase even on a loaded machine.
    let mut bed = Cluster::new()
        .replicas(2)
        .configure(|cfg| {
            cfg.shutdown.delay = secs(8);
            cfg.shutdown.grace = secs(6);
        })
        .start();
    let (kg, pki) = (&mut bed.kg, &bed.pki);
    wait_for("kubegate /readyz 200", Duration::from_secs(30), || {
        kg.admin_get("/readyz")
            .filter(|r| r.starts_with("HTTP/1.1 200"))
    });
    let mut held = open(kg, pki, 1).await.pop().unwrap();

    let t0 = Instant::now();
    kg.proc.signal(libc::SIGTERM);
    // 1. /readyz fails while /livez stays 200 ...
    wait_for("/readyz 503", Duration::from_secs(7), || {
        kg.admin_get("/readyz")
            .filter(|r| r.starts_with("HTTP/1.1 503"))
    });
    assert_eq!(
        kg.admin_get("/livez").unwrap().lines().next(),
        Some("HTTP/1.1 200 OK")
    );
    // 2. ... and the listeners still accept (shutdown.delay) ...
    let mut during = kg
        .connect(pki, false)
        .await
        .expect("accepted during shutdown.delay");
    assert_eq!(during.get("/version").await.unwrap().status, 200);
    // 3. ... until the delay has passed: then new connections are refused ...
    wait_refused_after(kg.listen, t0, Duration::from_secs(8));
    // 4. ... while open connections keep working within the grace period ...
    assert_eq!(held.get("/version").await.unwrap().status, 200);
    // 5. ... and the process exits 0 once the grace period has passed, closing them.
    let status = kg.proc.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let total = t0.elapsed();
    assert!(
        total >= Duration::from_secs(14),
        "exited after {total:?}, before delay + grace"
    );
    assert!(held.is_closed());
    assert!(during.is_closed());
}

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
    std::fs::write(&kg.config_path, "listeners: [\n").unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool() {
    let bed = Cluster::new().replicas(2).start();
    let (kg, pki, sims, dir) = (&bed.kg, &bed.pki, &bed.sims, &bed.dir);
    sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", Duration::from_secs(30));
    let _conns = open(kg, pki, 2).await;
    let metrics = kg.admin_body("/metrics");
    for family in [
        "kubegate_build_info",
        "kubegate_lifecycle_phase",
        "kubegate_backend_state",
        "kubegate_backend_probes_total",
        "kubegate_backend_probe_duration_seconds",
        "kubegate_backend_readyz_check_failing",
        "kubegate_backend_state_transitions_total",
        "kubegate_backend_connections",
        "kubegate_backend_connections_total",
        "kubegate_backend_bytes_total",
        "kubegate_config_reloads_total",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} missing"
        );
    }
    assert_eq!(
        kg.metric("kubegate_backend_state{backend=\"replica-2\",state=\"not_ready\"}"),
        1.0
    );
    assert_eq!(
        kg.metric("kubegate_backend_state{backend=\"replica-2\",state=\"ready\"}"),
        0.0
    );
    assert_eq!(
        kg.metric("kubegate_backend_readyz_check_failing{backend=\"replica-2\",check=\"etcd\"}"),
        1.0
    );
    promtool_check_metrics(dir.path(), &metrics);
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

/// Context switches of every thread of process `pid` so far: each is a wake-up.
fn wakeups(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gateway_sleeps() {
    let bed = Cluster::new()
        .configure(|cfg| cfg.health.interval = secs(1))
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    // pingora's listening service starts a clock thread that wakes every millisecond with the
    // first accepted connection, for the rest of the process's life (most of an idle
    // kubegate's CPU once, see bench/README.md). Whatever its name, it would show as 1,000
    // wake-ups a second; an idle kubegate only wakes for its probes.
    let mut c = kg.connect(pki, false).await.unwrap();
    assert_eq!(c.get("/version").await.unwrap().status, 200);
    drop(c);
    let pid = kg.proc.pid();
    let (woken0, t0) = (wakeups(pid), Instant::now());
    // A measurement window, not a wait: nothing talks to kubegate meanwhile (polling its admin
    // endpoint would wake it). A load on the machine only lowers the count.
    std::thread::sleep(Duration::from_secs(3));
    let rate = (wakeups(pid) - woken0) as f64 / t0.elapsed().as_secs_f64();
    eprintln!("idle kubegate: {rate:.0} wake-ups/s");
    assert!(rate < 100.0, "{rate:.0} wake-ups per second while idle");
}

/// Sets the soft open-files limit of process `pid` with util-linux `prlimit` (the hard limit
/// stays, so that the soft one can be raised again without privileges).
fn set_nofile(pid: i32, limit: usize) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={limit}:"))
        .status()
        .expect("prlimit runs");
    assert!(status.success(), "prlimit --pid={pid} --nofile={limit}:");
}

/// Out of descriptors, kubegate fails accepts and skips probes, but does not blame the backend:
/// it stays ready and open connections keep working; once descriptors are free it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_blames_no_backend() {
    let bed = Cluster::new().start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut open_before = open(kg, pki, 1).await.remove(0);

    // No descriptor left: the admin endpoint cannot accept either, so progress is read from
    // kubegate's log until the limit is raised again.
    let pid = kg.proc.pid();
    // The limit bounds descriptor *numbers*: the kernel hands out the lowest free one, so a
    // limit just below the count of open descriptors still lets a socket take a hole left by
    // a closed one. Above stdin, stdout and stderr nothing can be allocated.
    set_nofile(pid, 3);
    let waiting = std::net::TcpStream::connect(kg.listen).expect("queued by the kernel");
    wait_for(
        "a failed accept and more than fall probes not run",
        Duration::from_secs(60),
        || {
            let log = kg.log();
            (log.contains("accept failed") && log.matches("probe not run").count() > 3)
                .then_some(())
        },
    );
    // The open connection needs no new descriptor.
    assert_eq!(open_before.get("/version").await.unwrap().status, 200);

    set_nofile(pid, 4096);
    assert!(kg.metric(r#"kubegate_accept_errors_total{reason="out_of_resources"}"#) >= 1.0);
    assert!(
        kg.metric(r#"kubegate_backend_probes_total{backend="replica-1",result="not_run"}"#) > 3.0
    );
    assert_eq!(kg.state("replica-1").as_deref(), Some("ready"));
    assert_eq!(
        kg.metric(r#"kubegate_backend_connections_closed_total{backend="replica-1",reason="backend_down"}"#),
        0.0
    );
    // The queued connection is accepted now, and new ones are served.
    wait_for(
        "the queued connection accepted",
        Duration::from_secs(30),
        || {
            (kg.metric(r#"kubegate_backend_connections_total{backend="replica-1"}"#) >= 2.0)
                .then_some(())
        },
    );
    drop(waiting);
    let mut after = kg
        .connect(pki, false)
        .await
        .expect("connect after recovery");
    assert_eq!(after.get("/version").await.unwrap().status, 200);
    assert_eq!(open_before.get("/version").await.unwrap().status, 200);
}

/// The keepalive timer the kernel runs on the socket with local port `local` and remote port
/// `remote` (`/proc/net/tcp`: timer kind 2, expiry in clock ticks of 1/100 s), if any.
fn keepalive_timer(local: u16, remote: u16) -> Option<Duration> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        if port(f[1])? != local || port(f[2])? != remote {
            return None;
        }
        let (kind, when) = f[5].split_once(':')?;
        let ticks = u64::from_str_radix(when, 16).ok()?;
        (kind == "02").then(|| Duration::from_millis(ticks * 10))
    })
}

/// Client connections carry TCP keepalive with the configured idle time, so a client that
/// vanishes is found; a reload changes it for new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_carry_the_configured_keepalive() {
    // Idle times far from the default (15 s) and from each other, so that the timer left when
    // the test reads it says which one is set even if the read comes late.
    let keepalive = |idle| kubegate_config::KeepaliveConfig {
        idle,
        interval: secs(2),
        count: 3,
    };
    let bed = Cluster::new()
        .configure(move |cfg| cfg.client_keepalive = keepalive(secs(120)))
        .start();
    let (kg, mut cfg) = (&bed.kg, bed.config.clone());

    let timer_of = |client: &std::net::TcpStream| {
        let port = client.local_addr().unwrap().port();
        wait_for(
            "kubegate's socket for the client",
            Duration::from_secs(30),
            || keepalive_timer(kg.listen.port(), port),
        )
    };
    let first = std::net::TcpStream::connect(kg.listen).unwrap();
    let left = timer_of(&first);
    assert!(
        left > Duration::from_secs(60) && left <= Duration::from_secs(120),
        "keepalive fires in {left:?}, configured idle 120s"
    );

    cfg.client_keepalive = keepalive(secs(1200));
    kg.rewrite(&cfg);
    wait_for("the reload", Duration::from_secs(30), || {
        (kg.metric(r#"kubegate_config_reloads_total{result="success"}"#) >= 1.0).then_some(())
    });
    // The accept loop applies it to its listener when it next runs; a connection racing it
    // may still get 120 s, so try a few.
    let later = wait_for(
        "a connection with the reloaded keepalive",
        Duration::from_secs(30),
        || {
            let c = std::net::TcpStream::connect(kg.listen).unwrap();
            let left = timer_of(&c);
            (left > Duration::from_secs(600)).then_some(left)
        },
    );
    assert!(later <= Duration::from_secs(1200), "{later:?}");
}

/// The open-files limits of process `pid`: (soft, hard), from `/proc/PID/limits`.
fn nofile(pid: i32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].parse().unwrap(), f[4].parse().unwrap())
}

/// Started with a soft open-files limit of 1024 (what containers commonly get: about 500
/// passthrough connections), kubegate raises it to the hard limit and serves 5,000 connections
/// at once; `process_open_fds` follows them up and back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_descriptor_limit_of_1024_is_raised_and_5000_connections_are_served() {
    const N: usize = 5_000;
    let me = std::process::id() as i32;
    let (_, hard) = nofile(me);
    assert!(
        hard >= 2 * N as u64 + 1024,
        "the hard open-files limit ({hard}) is too low for this test"
    );
    // The replica (and this test's clients) need the room: only raised, never lowered, so
    // the tests running beside this one are not affected.
    set_nofile(me, hard as usize);
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = Sim::start(&pki, "replica-1", SimOptions::default());
    let soft = format!("--nofile=1024:{hard}");
    let kg = Kubegate::start_under(
        &pki,
        &KubegateConfig::new(&[&sim]),
        &[],
        &["prlimit", &soft],
    );
    kg.wait_state("replica-1", "ready", Duration::from_secs(30));
    assert_eq!(
        nofile(kg.proc.pid()),
        (hard, hard),
        "raised to the hard limit"
    );
    assert!(kg.log().contains("soft_before=1024"), "{}", kg.log());
    assert_eq!(
        kg.metric("kubegate_client_connection_limit"),
        ((hard - 256) / 2).min(20_000) as f64
    );
    let idle_fds = kg.metric("process_open_fds");

    // 5,000 TLS connections through kubegate to the replica, 100 handshakes at a time; each
    // handshake proves the connection reached the replica.
    let pki = std::sync::Arc::new(pki);
    let listen = kg.listen;
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N / 100 {
        let batch: Vec<_> = (0..100)
            .map(|_| {
                let pki = pki.clone();
                tokio::spawn(async move { Conn::open(listen, &pki, false).await })
            })
            .collect();
        for t in batch {
            conns.push(t.await.unwrap().expect("a connection through kubegate"));
        }
    }
    let series = r#"kubegate_backend_connections{backend="replica-1"}"#;
    assert_eq!(kg.metric(series), N as f64);
    // Each connection holds two descriptors (client side and replica side). The idle count
    // can include a probe's connection that happened to be open when it was read, so the
    // floor is 2N on its own, not 2N above that reading.
    let fds = kg.metric("process_open_fds");
    assert!(
        fds >= 2.0 * N as f64 && fds <= idle_fds + 2.0 * N as f64 + 100.0,
        "{fds} descriptors open with {N} connections (idle: {idle_fds})"
    );
    assert!(
        kg.metric("process_max_fds") >= hard as f64,
        "process_max_fds shows the raised limit"
    );
    drop(conns);
    wait_for(
        "the connections' descriptors closed",
        Duration::from_secs(60),
        || (kg.metric("process_open_fds") < idle_fds + 100.0).then_some(()),
    );
    assert_eq!(
        kg.metric(r#"kubegate_client_limit_closes_total{reason="connections"}"#),
        0.0
    );
}
