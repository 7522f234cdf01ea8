//! Who the apiserver is told a terminate-mode client is: the certificate's identity, never
//! headers the client sent; real `kubegate` and `kubegate-sim` processes, the simulator trusting
//! kubegate's front-proxy certificate (requestheader authentication).
//!
//! 1. `identity_comes_from_the_certificate_never_from_headers`: HTTP/1.1 and HTTP/2, with a
//!    client certificate, a bearer token, and nothing, each sending forged `X-Remote-*`.
//! 2. `every_configured_identity_header_is_stripped_and_trusted_proxies_keep_their_forwarded_for`.

use kubegate_e2e::*;

const FORGED: &[(&str, &str)] = &[
    ("X-Remote-User", "system:admin"),
    ("x-remote-group", "system:masters"),
    ("X-Remote-Extra-Scopes", "everything"),
];

/// `kubectl auth whoami`'s request, as (user, groups), with forged identity headers.
async fn whoami(conn: &mut Conn) -> Result<(String, Vec<String>), Response> {
    let r = conn.self_subject_review(FORGED).await.expect("an answer");
    if r.status != 201 {
        return Err(r);
    }
    let v = r.json();
    let info = &v["status"]["userInfo"];
    assert!(
        info["extra"].as_object().is_none_or(|e| e.is_empty()),
        "forged extra reached the apiserver: {v}"
    );
    Ok((
        info["username"].as_str().unwrap().to_string(),
        info["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap().to_string())
            .collect(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_comes_from_the_certificate_never_from_headers() {
    let bed = terminating(2, &[], |_| {});
    let (kg, pki) = (&bed.kg, &bed.pki);
    let (dev_crt, dev_key) = pki.client_in("dev", "dev-user", &["dev", "ops"]);
    for h2 in [false, true] {
        // A verified client certificate: CN and each O, whatever the headers say.
        let mut conn = Conn::open_as(kg.listen, pki, h2, &dev_crt, &dev_key)
            .await
            .unwrap();
        let (user, groups) = whoami(&mut conn).await.unwrap();
        assert_eq!(user, "dev-user", "h2={h2}");
        assert_eq!(groups, ["dev", "ops", "system:authenticated"], "h2={h2}");

        // A bearer token: the token's user, the forged headers gone.
        let mut conn = Conn::open_anonymous(kg.listen, pki, h2).await.unwrap();
        let mut headers = FORGED.to_vec();
        headers.push(("Authorization", "Bearer tok-ops"));
        let r = conn.self_subject_review(&headers).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        assert!(r.text().contains(r#""username":"ops-bot""#), "{}", r.text());

        // Nothing: anonymous, which may not ask who it is (403 naming system:anonymous).
        let mut conn = Conn::open_anonymous(kg.listen, pki, h2).await.unwrap();
        let r = whoami(&mut conn).await.unwrap_err();
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("system:anonymous"), "{}", r.text());
        // ...and may read /readyz (anonymous stays anonymous upstream, not 401).
        assert_eq!(conn.get("/readyz").await.unwrap().status, 200);
    }
    assert!(kg.metric("kubegate_identity_headers_stripped_total") >= 18.0);

    // A verified certificate that names no user: 401, never an anonymous request.
    let mut conn = Conn::open_as_user(kg.listen, pki, "nameless", "", &["dev"]).await;
    let r = conn.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("no common name"), "{}", r.text());
    assert!(kg.metric(r#"kubegate_requests_failed_total{reason="unauthenticated"}"#) >= 1.0);

    // X-Forwarded-For: a client's own list is replaced by the address kubegate saw.
    let mut conn = kg.connect(pki, true).await.unwrap();
    let r = conn
        .send("GET", "/version", &[("X-Forwarded-For", "6.6.6.6")], None)
        .await
        .unwrap();
    assert_eq!(r.header("x-kubegate-sim-forwarded-for"), Some("127.0.0.1"));
    for identity in ["client_certificate", "bearer_token", "anonymous"] {
        let series = format!("kubegate_requests_by_identity_total{{identity=\"{identity}\"}}");
        assert!(kg.metric(&series) >= 2.0, "{series}");
    }
}

/// Replicas reading two group headers, kubegate configured with both: a client cannot add a
/// group through the second (the class of kcp's GHSA-c8w2-fgvx-vhv4); a proxy in
/// `terminate.trusted_proxies` keeps its `X-Forwarded-For`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_configured_identity_header_is_stripped_and_trusted_proxies_keep_their_forwarded_for()
{
    let bed = terminating(
        1,
        &["--requestheader-group-headers", "X-Other-Group"],
        |cfg| {
            let fp = cfg.upstream.front_proxy.as_mut().unwrap();
            fp.group_headers = vec!["X-Remote-Group".into(), "X-Other-Group".into()];
            cfg.terminate.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
        },
    );
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut conn = Conn::open_as_user(kg.listen, pki, "dev", "dev-user", &["dev"]).await;
    let r = conn
        .self_subject_review(&[
            ("X-Other-Group", "system:masters"),
            ("X-Forwarded-For", "203.0.113.9"),
        ])
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(!r.text().contains("system:masters"), "{}", r.text());
    assert!(r.text().contains(r#""dev""#), "{}", r.text());
    assert_eq!(
        r.header("x-kubegate-sim-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1")
    );
}
