//! kubegate's own life: its shutdown sequence, and a gateway at rest using no CPU.
//!
//! 1. `lifecycle_sigterm_delay_grace_exit_zero`.
//! 2. `an_idle_gateway_sleeps`: no thread wakes every millisecond once connections came.

use kubegate_e2e::replicas::open;
use kubegate_e2e::*;
use std::time::{Duration, Instant};

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
