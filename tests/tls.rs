//! TLS settings seen from outside: testssl.sh (Debian's) probes a real kubegate's listener,
//! and what it offers — protocol versions, cipher suites — is what the configuration says;
//! toward the replicas, the suite kubegate negotiates is the one configured (the simulator
//! says which it got); `kubegate check` refuses a suite it does not know, at its position.
//! (The admin endpoint's `min_version` is checked in `admin.rs`.)

use kubegate_config::TlsVersion;
use kubegate_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_kubegate_offers_and_asks_for_is_what_the_configuration_says() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .configure(|cfg| {
            let tls = cfg.listeners[0].tls.as_mut().unwrap();
            tls.min_version = Some(TlsVersion::Tls12);
            tls.cipher_suites = vec![
                "TLS13_AES_256_GCM_SHA384".into(),
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into(),
            ];
            cfg.upstream.tls.min_version = Some(TlsVersion::Tls13);
            cfg.upstream.tls.cipher_suites = vec!["TLS13_CHACHA20_POLY1305_SHA256".into()];
        })
        .start();
    let found = testssl(bed.dir.path(), bed.kg.listen, &["-p", "-E"]);
    for (old, id) in [
        ("SSLv2", "SSLv2"),
        ("SSLv3", "SSLv3"),
        ("TLS 1.0", "TLS1"),
        ("TLS 1.1", "TLS1_1"),
    ] {
        assert_eq!(finding(&found, id), "not offered", "{old}");
    }
    assert_eq!(finding(&found, "TLS1_2"), "offered");
    assert!(
        finding(&found, "TLS1_3").starts_with("offered"),
        "{found:?}"
    );
    let mut ciphers: Vec<&str> = found
        .iter()
        .filter(|(id, _)| id.starts_with("cipher-tls"))
        .map(|(id, _)| id.as_str())
        .collect();
    ciphers.sort();
    assert_eq!(
        ciphers,
        ["cipher-tls1_2_xc02c", "cipher-tls1_3_x1302"],
        "exactly the configured suites: {found:?}"
    );

    // The serving certificate's expiry is exported (the test PKI issues for 30 days).
    let serving = bed.config.listeners[0]
        .tls
        .as_ref()
        .unwrap()
        .cert_file
        .clone();
    let series = format!(
        "kubegate_certificate_expiry_timestamp_seconds{{file=\"{}\"}}",
        serving.display()
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expiry = wait_for(
        "the expiry published",
        std::time::Duration::from_secs(30),
        || Some(bed.kg.metric(&series)).filter(|v| *v > 0.0),
    );
    let days = (expiry - now) / 86400.0;
    assert!((29.0..=30.5).contains(&days), "expires in {days} days");

    // Toward the replica: the one suite configured, over TLS 1.3.
    let r = bed.kg.get(&bed.pki, "/version").await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-kubegate-sim-tls"),
        Some("TLSv1_3 TLS13_CHACHA20_POLY1305_SHA256")
    );
}

#[test]
fn check_refuses_an_unknown_suite_at_its_position() {
    // The names kubegate knows are listed after the unknown one.
    assert_check_refuses(
        |_| {
            "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\n\
             health:\n  tls:\n    insecure_skip_verify: true\n    min_version: \"1.3\"\n    cipher_suites:\n      - TLS13_AES_128_GCM_SHA256\n      - TLS_RSA_WITH_RC4_128_SHA\n".into()
        },
        &[(
            "11:9",
            "unknown cipher suite \"TLS_RSA_WITH_RC4_128_SHA\"; kubegate offers TLS13_AES_256_GCM_SHA384",
        )],
    );
}
