//! Several control planes behind one kubegate, chosen by the TLS server name: each cluster
//! with its own CA, replicas and probes; a client reaches only the cluster it names, in
//! passthrough whatever segments its ClientHello comes in, in terminate mode seeing that
//! cluster's certificate and verified by that cluster's CA; a name no cluster answers, and no
//! name at all without a `default_cluster`, are turned away with a TLS alert and counted.

use kubegate_config::{
    ClusterSpec, DispatchRule, Fallback, FrontProxy, ListenerMode, RuleMatch, ServingTls,
    TlsVersion, UpstreamConfig,
};
use kubegate_e2e::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(30);

/// A PKI for each of `names`, each in a folder of its name under `dir`.
fn pkis<const N: usize>(dir: &std::path::Path, names: [&str; N]) -> [Pki; N] {
    names.map(|name| Pki::new(&dir.join(name)))
}

/// A replica of a cluster whose CA is `pki`, serving `names`.
fn replica(pki: &Pki, name: &str, names: &[&str]) -> Sim {
    let serving = pki.serving_with(name, name, names, -1, 30);
    Sim::start(
        pki,
        name,
        SimOptions {
            serving: Some(serving),
            ..Default::default()
        },
    )
}

/// `c` served in terminate mode: its own certificate (`kubegate-<cluster>`, from `pki`) for
/// `name`, its clients verified by `pki`'s CA, `fp` its front-proxy identity upstream.
fn terminating(
    mut c: ClusterSpec,
    pki: &Pki,
    fp: &FrontProxyPki,
    name: &str,
    upstream: &UpstreamConfig,
) -> ClusterSpec {
    let (cert_file, key_file) =
        pki.serving_with(&format!("kubegate-{}", c.name), "kubegate", &[name], -1, 30);
    c.tls = Some(ServingTls::new(cert_file, key_file).verifying(Some(pki.ca_file())));
    let mut upstream = upstream.clone();
    upstream.front_proxy = Some(FrontProxy::new(fp.cert.clone(), fp.key.clone()));
    c.upstream = Some(upstream);
    c
}

/// A connection to `listen` asking for server `name` (HTTP/2 when `h2`).
async fn open(listen: SocketAddr, config: rustls::ClientConfig, name: &str, h2: bool) -> Conn {
    Conn::open_named(listen, config, name, h2)
        .await
        .unwrap_or_else(|e| panic!("a connection to {name}: {e}"))
}

/// A connection to `listen` asking for server `name` (HTTP/2 when `config` offers it) is
/// refused, with an error that names `alert` (the TLS alert; "" for any error).
async fn refused(listen: SocketAddr, config: rustls::ClientConfig, name: &str, alert: &str) {
    let h2 = config.alpn_protocols.iter().any(|p| p == b"h2");
    let e = Conn::open_named(listen, config, name, h2)
        .await
        .err()
        .unwrap_or_else(|| panic!("a connection to {name:?} was not refused"));
    assert!(e.to_string().contains(alert), "{name}: {e}");
}

/// The certificate kubegate serves cluster `c` with ([`terminating`]'s), as DER.
fn kubegate_cert(pki: &Pki, c: &str) -> Vec<u8> {
    let pem = std::fs::read(pki.dir().join(format!("kubegate-{c}.crt"))).unwrap();
    let der: rustls_pki_types::CertificateDer<'static> =
        rustls_pki_types::pem::PemObject::from_pem_slice(&pem).unwrap();
    der.to_vec()
}

/// Reads configmaps on `conn`: 200, answered by the simulated replica `replica`.
async fn read_served_by(conn: &mut Conn, replica: &str) {
    let r = conn.get(CONFIGMAPS).await.expect("an answer");
    assert_eq!(
        (r.status, r.replica().as_str()),
        (200, replica),
        "{}",
        r.text()
    );
}

/// The replica (by its certificate) that answered on `conn`, with the request's status.
async fn answered(conn: &mut Conn, sims: &[&Sim]) -> (String, u16) {
    let r = conn.get(CONFIGMAPS).await.expect("an answer");
    let who = sims
        .iter()
        .find(|s| s.cert_der == conn.peer())
        .map_or("someone else".to_string(), |s| s.name.clone());
    (who, r.status)
}

/// Presents `from`'s admin certificate at `name`, trusting `at`'s CA for the server: the
/// handshake's error, `None` when the connection ended without an answer (TLS 1.3: the
/// client's handshake ends before the server has read its certificate), or the answer.
async fn admin_of_another_cluster(
    listen: SocketAddr,
    at: &Pki,
    from: &Pki,
    name: &str,
) -> Result<Option<Response>, String> {
    let config = client_config_as(
        at,
        &[b"http/1.1"],
        &from.dir().join("admin.crt"),
        &from.dir().join("admin.key"),
    );
    let mut c = Conn::open_named(listen, config, name, false)
        .await
        .map_err(|e| e.to_string())?;
    Ok(c.get(CONFIGMAPS).await.ok())
}

/// Forwards one connection to `to`, sending the client's first `split` bytes in a segment of
/// their own and the rest after a pause: a ClientHello in two TCP segments (and so, read as
/// they come, in two reads).
async fn splitting_forwarder(to: SocketAddr, split: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut client, _) = listener.accept().await.unwrap();
        let mut upstream = TcpStream::connect(to).await.unwrap();
        upstream.set_nodelay(true).unwrap();
        let mut head = vec![0u8; split];
        client.read_exact(&mut head).await.unwrap();
        upstream.write_all(&head).await.unwrap();
        upstream.flush().await.unwrap();
        // Part of the stimulus, not a wait: the second segment comes later.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_reaches_only_the_cluster_its_server_name_names() {
    let dir = tempfile::tempdir().unwrap();
    let [pki, pki_a, pki_b] = pkis(dir.path(), ["gateway", "a", "b"]);
    let a_names = ["a.example", "api.a.example", "kubernetes"];
    let (a1, a2) = (
        replica(&pki_a, "a1", &a_names),
        replica(&pki_a, "a2", &a_names),
    );
    let b1 = replica(&pki_b, "b1", &["b.example", "kubernetes"]);
    let mut cfg = KubegateConfig::new(&[]);
    cfg.clusters = vec![
        cluster_spec(
            "a",
            &["a.example", "*.a.example"],
            &pki_a,
            &[&a1, &a2],
            &cfg.health,
        ),
        cluster_spec("b", &["b.example"], &pki_b, &[&b1], &cfg.health),
    ];
    let kg = Kubegate::start(&pki, &cfg);
    for name in ["a1", "a2", "b1"] {
        kg.wait_state(name, "ready", T);
    }
    let (a_sims, b_sims) = ([&a1, &a2], [&b1]);
    let as_a = |h2| tls_client_config(&pki_a, if h2 { &[b"h2"] } else { &[b"http/1.1"] });
    let as_b = tls_client_config(&pki_b, &[b"http/1.1"]);

    // By exact name and by wildcard, over HTTP/1.1 and HTTP/2: cluster a's replicas only,
    // both of them in turn.
    let mut reached = std::collections::BTreeSet::new();
    for (i, name) in ["a.example", "api.a.example", "a.example", "api.a.example"]
        .into_iter()
        .enumerate()
    {
        let mut c = open(kg.listen, as_a(i % 2 == 0), name, i % 2 == 0).await;
        let (who, status) = answered(&mut c, &a_sims).await;
        assert_eq!(status, 200, "{name}");
        assert!(who == "a1" || who == "a2", "{name} reached {who}");
        reached.insert(who);
    }
    assert_eq!(reached.len(), 2, "both of a's replicas take connections");
    let mut c = open(kg.listen, as_b.clone(), "b.example", false).await;
    assert_eq!(answered(&mut c, &b_sims).await, ("b1".to_string(), 200));

    // A ClientHello that comes in two segments, cut inside its record header and inside the
    // message, is read whole.
    for split in [3, 100] {
        let via = splitting_forwarder(kg.listen, split).await;
        let mut c = Conn::open_named(via, as_b.clone(), "b.example", false)
            .await
            .unwrap_or_else(|e| panic!("split at {split}: {e}"));
        assert_eq!(answered(&mut c, &b_sims).await, ("b1".to_string(), 200));
    }

    // Cluster a's certificate presented to cluster b reaches b's replica, whose CA refuses it:
    // the client is never served as a's admin there.
    match admin_of_another_cluster(kg.listen, &pki_b, &pki_a, "b.example").await {
        Err(e) => assert!(e.contains("alert"), "{e}"),
        Ok(None) => {}
        Ok(Some(r)) => assert_eq!(r.status, 401, "a's admin at b: {}", r.text()),
    }

    // A name no cluster answers, and no name at all (an IP address sends none) without a
    // default_cluster: a TLS alert, counted; the replicas never see them.
    refused(kg.listen, as_b.clone(), "c.example", "UnrecognisedName").await;
    assert_eq!(kg.refused("unknown_server_name"), 1.0);
    refused(kg.listen, as_b.clone(), "127.0.0.1", "UnrecognisedName").await;
    assert_eq!(kg.refused("no_server_name"), 1.0);

    // The status endpoint names each backend's cluster.
    let view: Vec<serde_json::Value> =
        serde_json::from_str(&kg.admin_body("/debug/backends")).unwrap();
    let clusters: Vec<(String, String)> = view
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["cluster"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        clusters,
        [("a1", "a"), ("a2", "a"), ("b1", "b")].map(|(n, c)| (n.to_string(), c.to_string()))
    );
    // The status page has a table per cluster.
    let page = kg.admin_body("/");
    let (at_a, at_b) = (
        page.find("Backends of cluster a").expect("a's table"),
        page.find("Backends of cluster b").expect("b's table"),
    );
    assert!(at_a < page.find(">a2<").unwrap() && page.find(">a2<").unwrap() < at_b);
    assert!(page.find(">b1<").unwrap() > at_b);
    // `kubegate status` shows the cluster first.
    let out = std::process::Command::new(bin("kubegate"))
        .args(["status", "--admin", &kg.admin.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("CLUSTER  NAME"), "{text}");
    for (cluster, name) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().take(2).eq([cluster, name])),
            "{text}"
        );
    }
}

/// A listener's `default_cluster` takes clients that send no server name; a cluster whose
/// replicas are all down leaves the other cluster served and kubegate ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_cluster_takes_clients_without_a_name_and_one_cluster_down_spares_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let [pki, pki_a, pki_b] = pkis(dir.path(), ["gateway", "a", "b"]);
    let a1 = replica(&pki_a, "a1", &["a.example", "kubernetes", "127.0.0.1"]);
    let mut b1 = replica(&pki_b, "b1", &["b.example", "kubernetes"]);
    let mut cfg = KubegateConfig::new(&[]);
    cfg.clusters = vec![
        cluster_spec("a", &["a.example"], &pki_a, &[&a1], &cfg.health),
        cluster_spec("b", &["b.example"], &pki_b, &[&b1], &cfg.health),
    ];
    cfg.listeners[0].default_cluster = Some("a".into());
    let kg = Kubegate::start(&pki, &cfg);
    kg.wait_state("a1", "ready", T);
    kg.wait_state("b1", "ready", T);
    let as_a = tls_client_config(&pki_a, &[b"http/1.1"]);
    let mut c = open(kg.listen, as_a.clone(), "127.0.0.1", false).await;
    assert_eq!(answered(&mut c, &[&a1]).await, ("a1".to_string(), 200));

    b1.kill();
    kg.wait_state("b1", "down", T);
    // Cluster b has no replica: its client's connection is closed.
    let client = tls_client_config(&pki_b, &[b"http/1.1"]);
    refused(kg.listen, client, "b.example", "").await;
    assert_eq!(kg.refused("no_ready_backend"), 1.0);
    let mut c = open(kg.listen, as_a, "a.example", false).await;
    assert_eq!(answered(&mut c, &[&a1]).await, ("a1".to_string(), 200));
    assert_eq!(kg.metric("kubegate_ready"), 1.0, "cluster a still serves");
    // Per cluster: which backend is whose, and each one's ready backends.
    assert_eq!(
        kg.metric(r#"kubegate_backend_cluster{backend="b1",cluster="b"}"#),
        1.0
    );
    assert_eq!(
        kg.metric(r#"kubegate_cluster_ready_backends{cluster="a"}"#),
        1.0
    );
    assert_eq!(
        kg.metric(r#"kubegate_cluster_ready_backends{cluster="b"}"#),
        0.0
    );
    assert!(kg
        .admin_body("/metrics")
        .contains(r#"kubegate_cluster_ready_backends{cluster="b"} 0"#));
}

/// Terminate mode: each cluster's certificate is what its clients see, its CA verifies their
/// certificates (a certificate of cluster a is refused at b's name), its requests go to its
/// own replicas with its own front-proxy identity, and a connection made to one cluster's
/// name carries no request for another's (421).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_mode_serves_each_cluster_with_its_own_certificate_ca_and_replicas_and_answers_421_for_another_clusters_name(
) {
    let dir = tempfile::tempdir().unwrap();
    let [pki, pki_a, pki_b] = pkis(dir.path(), ["gateway", "a", "b"]);
    let (fp_a, fp_b) = (pki_a.front_proxy(), pki_b.front_proxy());
    let a1 = Sim::behind_front_proxy(&pki_a, &fp_a, "a1", Vec::new());
    let a2 = Sim::behind_front_proxy(&pki_a, &fp_a, "a2", Vec::new());
    let b1 = Sim::behind_front_proxy(&pki_b, &fp_b, "b1", Vec::new());
    let mut cfg = KubegateConfig::new(&[]);
    cfg.listeners[0].mode = ListenerMode::Terminate;
    let terminating = |c, pki, fp, name| terminating(c, pki, fp, name, &cfg.upstream);
    cfg.clusters = vec![
        terminating(
            cluster_spec("a", &["a.example"], &pki_a, &[&a1, &a2], &cfg.health),
            &pki_a,
            &fp_a,
            "a.example",
        ),
        terminating(
            cluster_spec("b", &["b.example"], &pki_b, &[&b1], &cfg.health),
            &pki_b,
            &fp_b,
            "b.example",
        ),
    ];
    // b's tenant takes TLS 1.3 alone; a keeps rustls's default (1.2 and 1.3).
    cfg.clusters[1].tls.as_mut().unwrap().min_version = Some(TlsVersion::Tls13);
    let kg = Kubegate::start(&pki, &cfg);
    for name in ["a1", "a2", "b1"] {
        kg.wait_state(name, "ready", T);
    }
    // One HTTP/2 connection per cluster: each sees its cluster's certificate, and its
    // requests are spread over its own replicas only, as its admin.
    let mut seen = std::collections::BTreeSet::new();
    let client = tls_client_config(&pki_a, &[b"h2"]);
    let mut c = open(kg.listen, client, "a.example", true).await;
    assert_eq!(c.peer(), kubegate_cert(&pki_a, "a"));
    for _ in 0..6 {
        let r = c.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        seen.insert(r.replica());
    }
    assert_eq!(seen, ["a1", "a2"].map(String::from).into());
    let client = tls_client_config(&pki_b, &[b"h2"]);
    let mut c = open(kg.listen, client, "b.example", true).await;
    assert_eq!(c.peer(), kubegate_cert(&pki_b, "b"));
    read_served_by(&mut c, "b1").await;

    // A request naming another cluster on a's connection: 421 before anything is done for
    // it (no token review at a, nothing forwarded), over HTTP/2 and HTTP/1.1; the client
    // recovers on a connection made to that name.
    misdirected_requests_get_421_and_recover(&kg, &pki_a, &pki_b).await;

    // A client offering TLS 1.2 alone: taken at a's name, refused at b's.
    let client = tls12_client_config(&pki_a, &[b"h2"]);
    let mut c = open(kg.listen, client, "a.example", true).await;
    let r = c.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let client = tls12_client_config(&pki_b, &[b"h2"]);
    refused(kg.listen, client, "b.example", "ProtocolVersion").await;

    // Cluster a's admin certificate at b's name: b's CA does not verify it.
    match admin_of_another_cluster(kg.listen, &pki_b, &pki_a, "b.example").await {
        Err(e) => assert!(e.contains("alert"), "{e}"),
        Ok(None) => {}
        Ok(Some(r)) => panic!("a's admin was answered at b: {} {}", r.status, r.text()),
    }
    assert!(
        kg.metric(r#"kubegate_tls_handshake_failures_total{reason="error"}"#) >= 1.0,
        "kubegate refused the handshake itself"
    );

    // A name no cluster answers: the alert, counted.
    let client = tls_client_config(&pki_b, &[b"h2"]);
    refused(kg.listen, client, "c.example", "UnrecognisedName").await;
    assert_eq!(kg.refused("unknown_server_name"), 1.0);
}

/// On a connection made to a's name, a request whose authority is b's name (or a name no
/// cluster serves) is answered 421, before any token review; its own name and an IP literal
/// are served; the same request on a connection made to b's name is served by b.
async fn misdirected_requests_get_421_and_recover(kg: &Kubegate, pki_a: &Pki, pki_b: &Pki) {
    const PATH: &str = CONFIGMAPS;
    let reviews = || kg.metric_sum("kubegate_token_reviews_total");
    let reviews_before = reviews();
    for h2 in [true, false] {
        let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
        let mut on_a = open(kg.listen, tls_client_config(pki_a, alpn), "a.example", h2).await;
        for authority in ["b.example", "B.Example.:6443", "c.example"] {
            on_a.naming(authority);
            let r = on_a
                .send(
                    "GET",
                    PATH,
                    &[("Authorization", "Bearer b-tenants-token")],
                    None,
                )
                .await
                .unwrap();
            assert_eq!(r.status, 421, "h2={h2} {authority}: {}", r.text());
            assert!(r.text().contains("Misdirected"), "{}", r.text());
            assert_eq!(r.replica(), "<none>", "not forwarded");
            if !h2 {
                assert_eq!(r.header("connection"), Some("close"));
                // HTTP/1.1: the connection ends with the answer; a new one to a's name.
                on_a = open(kg.listen, tls_client_config(pki_a, alpn), "a.example", h2).await;
            }
        }
        for authority in ["a.example", "A.EXAMPLE:443", "127.0.0.1:6443", "[::1]:6443"] {
            on_a.naming(authority);
            let r = on_a.get(PATH).await.unwrap();
            assert_eq!(r.status, 200, "h2={h2} {authority}: {}", r.text());
            assert!(r.replica().starts_with('a'), "{}", r.replica());
        }
        // The client's recovery (RFC 9110 §15.5.20): the request again, on a new connection
        // to the name it asks for.
        let mut on_b = open(kg.listen, tls_client_config(pki_b, alpn), "b.example", h2).await;
        read_served_by(&mut on_b, "b1").await;
    }
    assert_eq!(
        reviews(),
        reviews_before,
        "a misdirected token was reviewed"
    );
    assert_eq!(
        kg.metric(r#"kubegate_requests_failed_total{reason="misdirected"}"#),
        6.0
    );
}

/// Cluster a's replicas crash and come back one after the other while cluster b's clients
/// open connection after connection: not one of b's fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_one_cluster_costs_the_other_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let [pki, pki_a, pki_b] = pkis(dir.path(), ["gateway", "a", "b"]);
    let a_names = ["a.example", "kubernetes"];
    let mut a_sims = [
        replica(&pki_a, "a1", &a_names),
        replica(&pki_a, "a2", &a_names),
    ];
    let b_names = ["b.example", "kubernetes"];
    let (b1, b2) = (
        replica(&pki_b, "b1", &b_names),
        replica(&pki_b, "b2", &b_names),
    );
    let mut cfg = KubegateConfig::new(&[]);
    let a_refs: Vec<&Sim> = a_sims.iter().collect();
    cfg.clusters = vec![
        cluster_spec("a", &["a.example"], &pki_a, &a_refs, &cfg.health),
        cluster_spec("b", &["b.example"], &pki_b, &[&b1, &b2], &cfg.health),
    ];
    let kg = Kubegate::start(&pki, &cfg);
    for name in ["a1", "a2", "b1", "b2"] {
        kg.wait_state(name, "ready", T);
    }
    // b's clients, a new connection for every request, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients = {
        let (stop, listen) = (stop.clone(), kg.listen);
        let config = tls_client_config(&pki_b, &[b"http/1.1"]);
        tokio::spawn(async move {
            let (mut served, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let answer = async {
                    let mut c =
                        Conn::open_named(listen, config.clone(), "b.example", false).await?;
                    c.get(CONFIGMAPS).await
                };
                match answer.await {
                    Ok(r) if r.status == 200 => served += 1,
                    Ok(r) => failed.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (served, failed)
        })
    };
    for sim in a_sims.iter_mut() {
        let name = sim.name.clone();
        sim.kill();
        kg.wait_state(&name, "down", T);
        sim.restart();
        kg.wait_state(&name, "ready", T);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (served, failed) = clients.await.unwrap();
    assert!(failed.is_empty(), "b's clients failed: {failed:?}");
    assert!(served >= 10, "b's clients were served {served} times");
    assert_eq!(
        kg.metric(
            r#"kubegate_backend_state_transitions_total{backend="b1",from="ready",to="down"}"#
        ) + kg.metric(
            r#"kubegate_backend_state_transitions_total{backend="b2",from="ready",to="down"}"#
        ),
        0.0
    );
}

/// A reload adds a cluster, removes one and gives a third another replica: clients of the new
/// one get through, the removed one's names are unrecognized, and a connection open to the
/// kept cluster goes on as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_changes_and_removes_clusters_without_touching_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let pkis = pkis(dir.path(), ["gateway", "a", "b", "c"]);
    let [pki, pki_a, pki_b, pki_c] = &pkis;
    let a1 = replica(pki_a, "a1", &["a.example", "kubernetes"]);
    let a2 = replica(pki_a, "a2", &["a.example", "kubernetes"]);
    let b1 = replica(pki_b, "b1", &["b.example", "kubernetes"]);
    let c1 = replica(pki_c, "c1", &["c.example", "kubernetes"]);
    let mut cfg = KubegateConfig::new(&[]);
    cfg.clusters = vec![
        cluster_spec("a", &["a.example"], pki_a, &[&a1], &cfg.health),
        cluster_spec("b", &["b.example"], pki_b, &[&b1], &cfg.health),
    ];
    let kg = Kubegate::start(pki, &cfg);
    kg.wait_state("a1", "ready", T);
    kg.wait_state("b1", "ready", T);
    let as_a = tls_client_config(pki_a, &[b"h2"]);
    let mut kept = open(kg.listen, as_a.clone(), "a.example", true).await;
    assert_eq!(answered(&mut kept, &[&a1]).await, ("a1".to_string(), 200));

    let base = cfg.health.clone();
    cfg.clusters = vec![
        cluster_spec("a", &["a.example"], pki_a, &[&a1, &a2], &base),
        cluster_spec("c", &["c.example"], pki_c, &[&c1], &base),
    ];
    kg.rewrite(&cfg);
    kg.wait_state("c1", "ready", T);
    kg.wait_state("a2", "ready", T);
    wait_for("b1 forgotten", T, || kg.state("b1").is_none().then_some(()));
    assert_eq!(
        kg.metric(r#"kubegate_config_reloads_total{result="success"}"#),
        1.0
    );

    // The connection opened before the reload is served by the same replica still.
    assert_eq!(answered(&mut kept, &[&a1]).await, ("a1".to_string(), 200));
    let client = tls_client_config(pki_c, &[b"h2"]);
    let mut c = open(kg.listen, client, "c.example", true).await;
    assert_eq!(answered(&mut c, &[&c1]).await, ("c1".to_string(), 200));
    let client = tls_client_config(pki_b, &[b"h2"]);
    refused(kg.listen, client, "b.example", "UnrecognisedName").await;
    // a's new replica takes new connections too.
    let mut reached = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let mut c = open(kg.listen, as_a.clone(), "a.example", true).await;
        reached.insert(answered(&mut c, &[&a1, &a2]).await.0);
    }
    assert!(reached.contains("a2"), "{reached:?}");
    // Once b1 is forgotten, nothing of cluster b is left in the metrics.
    wait_for("b's series gone", T, || {
        let m = kg.admin_body("/metrics");
        (!m.contains(r#"cluster="b""#) && !m.contains(r#"backend="b1""#)).then_some(())
    });
}

/// The same in terminate mode: a reload adds cluster c (its certificate, its client CA, its
/// front-proxy identity), removes b, and gives a a new replica, a new server name and a
/// dispatch rule sending its reads there; a connection opened to a before the reload stays
/// open, falls under the new rule at its next request, and may name a's new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_changes_and_removes_clusters_in_terminate_mode() {
    let dir = tempfile::tempdir().unwrap();
    let pkis = pkis(dir.path(), ["gateway", "a", "b", "c"]);
    let [pki, pki_a, pki_b, pki_c] = &pkis;
    let (fp_a, fp_b, fp_c) = (
        pki_a.front_proxy(),
        pki_b.front_proxy(),
        pki_c.front_proxy(),
    );
    let a1 = Sim::behind_front_proxy(pki_a, &fp_a, "a1", Vec::new());
    let a2 = Sim::behind_front_proxy(pki_a, &fp_a, "a2", Vec::new());
    let b1 = Sim::behind_front_proxy(pki_b, &fp_b, "b1", Vec::new());
    let c1 = Sim::behind_front_proxy(pki_c, &fp_c, "c1", Vec::new());
    let mut cfg = KubegateConfig::new(&[]);
    cfg.listeners[0].mode = ListenerMode::Terminate;
    let (health, upstream) = (cfg.health.clone(), cfg.upstream.clone());
    let a = |sims: &[&Sim]| {
        let c = cluster_spec("a", &["a.example"], pki_a, sims, &health);
        terminating(c, pki_a, &fp_a, "a.example", &upstream)
    };
    // A rule of each cluster named `reads`: each cluster's counts apart.
    let reads = |backends: &[&str]| DispatchRule {
        name: Some("reads".into()),
        matches: RuleMatch {
            verbs: vec!["list".into()],
            resources: vec!["configmaps".into()],
            ..Default::default()
        },
        backends: backends.iter().map(|b| b.to_string()).collect(),
        fallback: Fallback::None,
        limit: None,
        reject: None,
        expires: None,
    };
    // A cluster of one replica, which its `reads` rule names.
    let single = |name: &str, pki: &Pki, fp: &FrontProxyPki, sim: &Sim| {
        let host = format!("{name}.example");
        let spec = cluster_spec(name, &[host.as_str()], pki, &[sim], &health);
        let mut c = terminating(spec, pki, fp, &host, &upstream);
        c.dispatch = vec![reads(&[sim.name.as_str()])];
        c
    };
    cfg.clusters = vec![a(&[&a1]), single("b", pki_b, &fp_b, &b1)];
    let kg = Kubegate::start(pki, &cfg);
    kg.wait_state("a1", "ready", T);
    kg.wait_state("b1", "ready", T);
    let b_series = [
        r#"kubegate_dispatch_requests_total{cluster="b",rule="reads"} 0"#,
        r#"kubegate_version_skew_routed_total{cluster="b",group_version="discovery"} 0"#,
    ];
    let metrics = kg.admin_body("/metrics");
    for series in b_series {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    let client = tls_client_config(pki_a, &[b"h2"]);
    let mut kept = open(kg.listen, client, "a.example", true).await;
    read_served_by(&mut kept, "a1").await;
    // A name a does not answer yet is misdirected on a's connection.
    kept.naming("api.a.example");
    assert_eq!(kept.get("/version").await.unwrap().status, 421);
    kept.naming("a.example");

    let mut a = a(&[&a1, &a2]);
    a.dispatch = vec![reads(&["a2"])];
    // ... and one it answers after the reload: the connection's cluster is the one in force.
    a.server_names.push("api.a.example".into());
    cfg.clusters = vec![a, single("c", pki_c, &fp_c, &c1)];
    kg.rewrite(&cfg);
    kg.wait_state("c1", "ready", T);
    kg.wait_state("a2", "ready", T);
    assert_eq!(
        kg.metric(r#"kubegate_config_reloads_total{result="success"}"#),
        1.0,
        "{}",
        kg.log()
    );

    // The connection from before the reload: open still, its reads now a2's, a's new name
    // its own.
    for _ in 0..3 {
        read_served_by(&mut kept, "a2").await;
    }
    kept.naming("api.a.example");
    let r = kept.get("/version").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.replica().starts_with('a'), "{}", r.replica());
    kept.naming("c.example");
    assert_eq!(kept.get("/version").await.unwrap().status, 421);
    kept.naming("a.example");
    // c: its own certificate, its replica, its CA (a's admin is refused at its name).
    let client = tls_client_config(pki_c, &[b"h2"]);
    let mut to_c = open(kg.listen, client, "c.example", true).await;
    assert_eq!(to_c.peer(), kubegate_cert(pki_c, "c"));
    read_served_by(&mut to_c, "c1").await;
    match admin_of_another_cluster(kg.listen, pki_c, pki_a, "c.example").await {
        Err(e) => assert!(e.contains("alert"), "{e}"),
        Ok(None) => {}
        Ok(Some(r)) => panic!("a's admin was answered at c: {} {}", r.status, r.text()),
    }
    // b's name is no longer answered.
    let client = tls_client_config(pki_b, &[b"h2"]);
    refused(kg.listen, client, "b.example", "UnrecognisedName").await;
    // Each cluster's `reads` counted its own requests; b's series went with b.
    assert_eq!(
        kg.metric(r#"kubegate_dispatch_requests_total{cluster="a",rule="reads"}"#),
        3.0
    );
    assert_eq!(
        kg.metric(r#"kubegate_dispatch_requests_total{cluster="c",rule="reads"}"#),
        1.0
    );
    let metrics = kg.admin_body("/metrics");
    for series in b_series {
        let family = series.split('{').next().unwrap();
        assert!(
            !metrics.contains(&format!("{family}{{cluster=\"b\"")),
            "b's series are still exported:\n{metrics}"
        );
    }
}
