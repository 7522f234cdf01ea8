//! Who the client is now, read as the apiserver reads it (real `kubegate` and `kubegate-sim`
//! processes; the replicas read bearer tokens as Go's `bearertoken.go` does and verify client
//! certificates at every request, as the apiserver's x509 authenticator does).
//!
//! 1. `a_limited_users_token_followed_by_bytes_the_apiserver_ignores_is_still_limited`: the
//!    bytes after a second space are not the token's; a token kubegate cannot read as text is
//!    answered 401, never passed on unnamed.
//! 2. `a_client_certificate_that_expires_on_an_open_connection_is_refused_from_then_on`.
//! 3. `a_rotated_front_proxy_certificate_never_expires_on_a_live_connection`: with watches
//!    and requests running from before the rotation until after the old certificate's
//!    expiry, no request gets 401 and no watch misses an event.

use kubegate_e2e::*;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_users_token_followed_by_bytes_the_apiserver_ignores_is_still_limited() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .tokens(&[("tok-ci", "ci-bot", "ci")])
        .dispatch("- name: ci\n  match: {users: [ci-bot]}\n  limit: {rate: 0.2, burst: 1}\n")
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    for h2 in [true, false] {
        let mut conn = Conn::open_anonymous(kg.listen, pki, h2).await.unwrap();
        let mut limited = 0;
        for _ in 0..20 {
            let headers: [(&str, &[u8]); 1] = [("Authorization", b"Bearer tok-ci \xff")];
            let r = conn
                .send_bytes("GET", CONFIGMAPS, &headers, None)
                .await
                .unwrap();
            match r.status {
                429 => limited += 1,
                200 => {}
                other => panic!("h2={h2}: {other} {}", r.text()),
            }
        }
        assert!(limited >= 15, "h2={h2}: {limited} of 20 limited");
    }
    // A token that is not text: the apiserver would read bytes kubegate cannot review, so
    // kubegate refuses it rather than let it pass unnamed.
    let before = bed.sims[0].counted("requests_received");
    let mut conn = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    let headers: [(&str, &[u8]); 1] = [("Authorization", b"Bearer tok-\xffci")];
    let r = conn
        .send_bytes("GET", CONFIGMAPS, &headers, None)
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(bed.sims[0].counted("requests_received"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_that_expires_on_an_open_connection_is_refused_from_then_on() {
    let bed = Cluster::new().replicas(1).terminate().start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let (crt, key) = pki.client_valid_for("brief", "brief-user", &["dev"], Duration::from_secs(3));
    let mut conn = Conn::open_as(kg.listen, pki, true, &crt, &key)
        .await
        .unwrap();
    let r = conn.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // The same connection, once the certificate has expired: 401, as the apiserver verifies
    // a certificate at every request. (Asked until it expires, at most half a minute.)
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let r = conn.get(CONFIGMAPS).await.unwrap();
        if r.status != 200 {
            break r;
        }
        assert!(Instant::now() < deadline, "still served long after expiry");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert!(refused.text().contains("expired"), "{}", refused.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_front_proxy_certificate_never_expires_on_a_live_connection() {
    let bed = Cluster::new().replicas(2).etcd().terminate().start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let fp = bed.front_proxy();
    // kubegate presents a certificate that expires in a minute...
    let expires_in = Duration::from_secs(60);
    fp.rotate(expires_in);
    let first_expires = Instant::now() + expires_in;
    wait_for(
        "kubegate to load the short-lived certificate",
        Duration::from_secs(30),
        || {
            (kg.metric(r#"kubegate_certificate_reloads_total{result="success"}"#) >= 1.0)
                .then_some(())
        },
    );
    // ...to a user whose requests carry identity: they go over connections that present it.
    let mut writer = Conn::open_as_user(kg.listen, pki, "dev", "dev-user", &["dev"]).await;
    let mut watcher = Conn::open_as_user(kg.listen, pki, "watcher", "dev-user", &["dev"]).await;
    let from_list = writer.watch_after_list(CONFIGMAPS).await;
    let mut watch = watcher.stream(&from_list).await.unwrap();
    assert_eq!(watch.status, 200);
    // A quarter of the way, it is replaced by one valid for a day.
    let rotate_at = Instant::now() + Duration::from_secs(15);
    let mut rotated = false;
    let mut written = 0u32;
    let mut refused = Vec::new();
    let end = first_expires + Duration::from_secs(15);
    while Instant::now() < end {
        if !rotated && Instant::now() >= rotate_at {
            fp.rotate(Duration::from_secs(86_400));
            rotated = true;
        }
        let body = format!(r#"{{"metadata":{{"name":"cm-{written}"}}}}"#);
        let r = writer.post(CONFIGMAPS, &body).await.unwrap();
        if r.status != 201 {
            refused.push((r.status, r.text()));
        } else {
            written += 1;
        }
        let r = writer.get(CONFIGMAPS).await.unwrap();
        if r.status != 200 {
            refused.push((r.status, r.text()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );
    assert!(written >= 60, "{written} written");
    // The watch saw every write, in order, across the close of the connections that
    // presented the first certificate.
    for i in 0..written {
        let event = watch.next_json(Duration::from_secs(30)).await;
        assert_eq!(event["type"], "ADDED", "{event}");
        assert_eq!(event["object"]["metadata"]["name"], format!("cm-{i}"));
    }
    assert_eq!(
        bed.sims
            .iter()
            .map(|s| s.counted("expired_certificates_refused"))
            .sum::<u64>(),
        0
    );
}
