//! The admin endpoint under abuse and with authentication: real `kubegate` and `kubegate-sim`
//! processes, raw TCP and TLS clients.
//!
//! 1. `a_crowd_of_idle_connections_does_not_keep_probes_out`: the oldest connection makes room.
//! 2. `a_request_head_that_never_ends_is_cut_off`: `admin.header_read_timeout`.
//! 3. `an_oversized_request_head_is_refused_with_431`.
//! 4. `with_tls_and_authentication_only_the_probes_are_public`: client certificates, bearer
//!    tokens (rotated without a reload), `/debug/config` without secrets, plain HTTP refused,
//!    TLS 1.3 only (`admin.tls.min_version`, seen by testssl.sh), and `kubegate status` over
//!    TLS with a token (from the configuration) or a client certificate (from flags).

use kubegate_e2e::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn open_descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A status line's code, from a raw HTTP/1.1 response.
fn status(raw: &str) -> u16 {
    raw.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One replica, kubegate in front with its admin endpoint configured by `admin`.
fn setup(admin: impl FnOnce(&mut kubegate_config::AdminConfig) + 'static) -> Started {
    Cluster::new()
        .configure(|cfg| admin(&mut cfg.admin))
        .start()
}

#[test]
fn a_crowd_of_idle_connections_does_not_keep_probes_out() {
    let bed = setup(|admin| {
        admin.max_connections = 8;
        admin.header_read_timeout = secs(20);
    });
    let kg = &bed.kg;
    let before = open_descriptors(kg.proc.pid());
    // 50 clients connect and say nothing; the header timeout is long, so only the limit helps.
    let idle: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(kg.admin).unwrap())
        .collect();
    wait_for("idle connections evicted", T, || {
        (kg.metric(r#"kubegate_admin_refused_total{reason="evicted"}"#) >= 42.0).then_some(())
    });
    // A probe still gets its answer, on a connection of its own.
    let started = Instant::now();
    let probe = plain_http(kg.admin, "GET", "/readyz");
    assert_eq!(status(&probe), 200, "{probe}");
    assert!(started.elapsed() < T);
    // kubegate holds at most the limit (and the metrics scrape just made) beyond its baseline,
    // once the evicted connections' tasks have run (counted before they close: on a loaded
    // machine the closes can lag the counter).
    wait_for("evicted admin connections closed", T, || {
        (open_descriptors(kg.proc.pid()) <= before + 8 + 2).then_some(())
    });
    drop(idle);
}

#[test]
fn a_request_head_that_never_ends_is_cut_off() {
    let bed = setup(|admin| admin.header_read_timeout = secs(2));
    let kg = &bed.kg;
    let mut slow = TcpStream::connect(kg.admin).unwrap();
    slow.set_read_timeout(Some(T)).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Then nothing more: kubegate ends the connection after 2 s (maybe with a 408 first).
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = slow.read_to_end(&mut rest);
    assert!(
        read.is_ok(),
        "connection closed by kubegate, not by our deadline: {read:?}"
    );
    let answer = String::from_utf8_lossy(&rest);
    assert!(
        answer.is_empty() || status(&answer) == 408,
        "nothing served for an unfinished head: {answer}"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    wait_for("timeout counted", T, || {
        (kg.metric(r#"kubegate_admin_refused_total{reason="timeout"}"#) >= 1.0).then_some(())
    });
    assert_eq!(status(&plain_http(kg.admin, "GET", "/livez")), 200);
}

#[test]
fn an_oversized_request_head_is_refused_with_431() {
    let bed = setup(|_| {});
    let kg = &bed.kg;
    let mut s = TcpStream::connect(kg.admin).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let big = "a".repeat(64 * 1024);
    // The server may stop reading and answer before the whole head is written.
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert_eq!(status(&answer), 431, "{answer}");
    assert_eq!(status(&plain_http(kg.admin, "GET", "/livez")), 200);
    wait_for("too_large counted", T, || {
        (kg.metric(r#"kubegate_admin_refused_total{reason="too_large"}"#) >= 1.0).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_and_authentication_only_the_probes_are_public() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = Sim::start(&pki, "replica-1", SimOptions::default());
    let (crt, key) = pki.serving("kubegate-admin");
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, "first-token\n").unwrap();
    let mut cfg = KubegateConfig::new(&[&sim]);
    let mut tls = kubegate_config::ServingTls::new(crt, key);
    tls.client_ca_file = Some(pki.ca_file());
    tls.min_version = Some(kubegate_config::TlsVersion::Tls13);
    cfg.admin.tls = Some(tls);
    cfg.admin.bearer_token_file = Some(tokens.clone());
    // The test support reaches /livez over plain HTTP; here the endpoint speaks TLS only.
    let config_path = dir.path().join("kubegate.yaml");
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    kubegate_testbed::kubegate::write_text(
        &cfg.render(listen, admin, &pki.ca_file()),
        &config_path,
    )
    .unwrap();
    let mut cmd = std::process::Command::new(bin("kubegate"));
    cmd.arg("run").arg("--config").arg(&config_path);
    let _kg = Proc::spawn("kubegate", cmd, dir.path().join("kubegate.log"));

    let anonymous = || async { Conn::open_anonymous(admin, &pki, false).await };
    let mut conn = None;
    for _ in 0..100 {
        if let Ok(c) = anonymous().await {
            conn = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut anon = conn.expect("the admin endpoint answers over TLS");

    // Probes are public; everything else needs a certificate or a token.
    assert_eq!(anon.get("/livez").await.unwrap().status, 200);
    let deadline = Instant::now() + T;
    while anon.get("/readyz").await.unwrap().status != 200 {
        assert!(Instant::now() < deadline, "kubegate never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = anon.get("/metrics").await.unwrap();
    assert_eq!(refused.status, 401);
    assert!(refused
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Bearer")));
    let (ccrt, ckey) = pki.client("monitoring", "prometheus", "system:monitoring");
    let mut with_cert = Conn::open_as(admin, &pki, false, &ccrt, &ckey)
        .await
        .unwrap();
    let metrics = with_cert.get("/metrics").await.unwrap();
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .text()
        .contains(r#"kubegate_admin_refused_total{reason="unauthorized"} 1"#));

    let bearer = |t: &str| format!("Bearer {t}");
    let get_with = |token: String| {
        let pki = &pki;
        async move {
            let mut c = Conn::open_anonymous(admin, pki, false).await.unwrap();
            c.send("GET", "/debug/config", &[("authorization", &token)], None)
                .await
                .unwrap()
        }
    };
    let config = get_with(bearer("first-token")).await;
    assert_eq!(config.status, 200);
    let text = config.text();
    assert!(text.contains(&tokens.display().to_string()), "{text}");
    assert!(
        !text.contains("first-token"),
        "a secret in /debug/config: {text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "a key in /debug/config");
    assert_eq!(get_with(bearer("wrong-token")).await.status, 401);

    // A rotated token works at once, without a reload; the old one stops.
    std::fs::write(&tokens, "second-token\n").unwrap();
    assert_eq!(get_with(bearer("second-token")).await.status, 200);
    assert_eq!(get_with(bearer("first-token")).await.status, 401);

    // Plain HTTP gets no answer from a TLS endpoint.
    let plain = std::thread::spawn(move || plain_http(admin, "GET", "/livez"))
        .join()
        .unwrap();
    assert_ne!(status(&plain), 200, "{plain}");

    // TLS 1.3 only, as configured.
    let found = testssl(dir.path(), admin, &["-p"]);
    assert_eq!(finding(&found, "TLS1_2"), "not offered");
    assert!(
        finding(&found, "TLS1_3").starts_with("offered"),
        "{found:?}"
    );

    // `kubegate status`: from the configuration (TLS verified with admin.tls.client_ca_file,
    // the token from admin.bearer_token_file), from flags with a client certificate, and
    // refused without credentials.
    let kubegate_status = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(bin("kubegate"))
            .arg("status")
            .args(args)
            .output()
            .unwrap()
    };
    let from_config = kubegate_status(&["--config".as_ref(), config_path.as_os_str()]);
    let table = String::from_utf8_lossy(&from_config.stdout);
    assert!(
        from_config.status.success(),
        "{}",
        String::from_utf8_lossy(&from_config.stderr)
    );
    assert!(
        table.starts_with("NAME") && table.contains("replica-1"),
        "{table}"
    );
    let url = format!("https://{admin}");
    let with_cert = kubegate_status(&[
        "--admin".as_ref(),
        url.as_ref(),
        "--ca-file".as_ref(),
        pki.ca_file().as_os_str(),
        "--cert-file".as_ref(),
        ccrt.as_os_str(),
        "--key-file".as_ref(),
        ckey.as_os_str(),
    ]);
    assert!(
        with_cert.status.success(),
        "{}",
        String::from_utf8_lossy(&with_cert.stderr)
    );
    assert!(String::from_utf8_lossy(&with_cert.stdout).contains("replica-1"));
    let without = kubegate_status(&[
        "--admin".as_ref(),
        url.as_ref(),
        "--ca-file".as_ref(),
        pki.ca_file().as_os_str(),
    ]);
    assert!(!without.status.success());
    assert!(
        String::from_utf8_lossy(&without.stderr).contains("HTTP 401"),
        "{}",
        String::from_utf8_lossy(&without.stderr)
    );

    // `kubegate drain` changes something: with authentication configured, only an
    // authenticated caller may, wherever it connects from.
    let kubegate_cli = |command: &str, args: &[&std::ffi::OsStr]| {
        std::process::Command::new(bin("kubegate"))
            .args([command, "replica-1"])
            .args(args)
            .output()
            .unwrap()
    };
    let ca = pki.ca_file();
    let tls_only = [
        "--admin".as_ref(),
        url.as_ref(),
        "--ca-file".as_ref(),
        ca.as_os_str(),
    ];
    let refused = kubegate_cli("drain", &tls_only);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("HTTP 403"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let drained = kubegate_cli("drain", &["--config".as_ref(), config_path.as_os_str()]);
    assert!(
        drained.status.success(),
        "{}",
        String::from_utf8_lossy(&drained.stderr)
    );
    assert!(String::from_utf8_lossy(&drained.stdout).contains("replica-1: drained"));
    let table = kubegate_status(&["--config".as_ref(), config_path.as_os_str()]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("ready,drained"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    let undrained = kubegate_cli("undrain", &["--config".as_ref(), config_path.as_os_str()]);
    assert!(undrained.status.success());
    assert!(String::from_utf8_lossy(&undrained.stdout).contains("replica-1: undrained"));
}
