//! Client sockets: the open-files limit kubegate lives within, and the TCP keepalive its
//! listeners give the connections they accept.
//!
//! 1. `running_out_of_descriptors_blames_no_backend`.
//! 2. `client_connections_carry_the_configured_keepalive`.
//! 3. `a_soft_descriptor_limit_of_1024_is_raised_and_5000_connections_are_served`.

use kubegate_e2e::replicas::open;
use kubegate_e2e::*;
use std::process::Command;
use std::time::Duration;

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
