//! End-to-end tests of `kubegate-sim` against `reference/apiserver-semantics.md`: real processes,
//! real TLS, real etcd.
//!
//! 1. `health_endpoints_match_the_apiserver_byte_for_byte`
//! 2. `startup_accepts_tcp_and_livez_before_readyz`
//! 3. `sigterm_default_mode_sequence`: readyz fails at once, served during the delay, in-flight
//!    request completes, HTTP/2 GOAWAY, new TCP refused, exit 0.
//! 4. `sigterm_retry_after_mode_answers_429`
//! 5. `second_sigterm_exits_at_once_with_status_1`
//! 6. `watch_resumes_on_another_replica_through_etcd`
//! 7. `compacted_resource_version_gets_410_expired`
//! 8. `authentication_client_certs_tokens_and_anonymous`
//! 9. `goaway_chance_makes_http2_clients_reconnect`
//! 10. `crud_and_status_errors`
//! 11. `priority_and_fairness_classifies_rejects_and_reports_as_the_apiserver`

use kubegate_e2e::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// Replica `a` started with `args`, its PKI and their folder (dropped last).
fn replica(args: &[&str]) -> (tempfile::TempDir, Pki, Sim) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = start(&pki, "a", args);
    (dir, pki, sim)
}

fn start(pki: &Pki, name: &str, args: &[&str]) -> Sim {
    Sim::start(
        pki,
        name,
        SimOptions {
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_match_the_apiserver_byte_for_byte() {
    let (_dir, pki, sim) = replica(&[]);
    let mut c = sim.connect(&pki, false).await.unwrap();

    let r = c.get("/readyz").await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));

    let r = c.get("/readyz?verbose").await.unwrap();
    let body = r.text();
    assert_eq!(r.status, 200);
    assert!(body.starts_with("[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n[+]poststarthook/"), "{body}");
    assert!(
        body.ends_with("[+]shutdown ok\nreadyz check passed\n"),
        "{body}"
    );
    assert!(!body.contains("[-]"));

    let r = c
        .get("/readyz?verbose&exclude=etcd&exclude=nonesuch")
        .await
        .unwrap();
    let body = r.text();
    assert!(body.contains("\n[+]etcd excluded: ok\n"), "{body}");
    assert!(body.ends_with("warn: some health checks cannot be excluded: no matches for \"nonesuch\"\nreadyz check passed\n"), "{body}");

    let r = c.get("/readyz/etcd").await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));

    let r = c.get("/livez?verbose").await.unwrap();
    let body = r.text();
    assert!(body.ends_with("livez check passed\n"), "{body}");
    for absent in [
        "[+]shutdown ok",
        "[+]informer-sync ok",
        "[+]etcd-readiness ok",
    ] {
        assert!(!body.contains(absent), "livez has no {absent}");
    }

    // A failing check: 500, always verbose, reason withheld; the single check says why.
    sim.force_check("etcd", true);
    let r = c.get("/readyz").await.unwrap();
    assert_eq!(r.status, 500);
    assert!(r.text().contains("\n[-]etcd failed: reason withheld\n"));
    assert!(r.text().ends_with("readyz check failed\n"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = c.get("/readyz/etcd").await.unwrap();
    assert_eq!(r.status, 500);
    assert_eq!(
        r.text(),
        "internal server error: etcd check failed (fault injected)\n"
    );
    let r = c.get("/livez").await.unwrap();
    assert_eq!(r.status, 500, "livez has an etcd check too");
    let r = c.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 500, "storage requests fail while etcd is lost");
    assert!(
        r.text().contains("etcdserver: request timed out"),
        "{}",
        r.text()
    );
    assert_eq!(c.get("/healthz").await.unwrap().status, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_accepts_tcp_and_livez_before_readyz() {
    let (_dir, pki, sim) = replica(&["--startup-duration", "3s"]);
    let mut c = sim
        .connect(&pki, false)
        .await
        .expect("TCP and TLS accepted during startup");
    assert_eq!(c.get("/livez").await.unwrap().status, 200);
    let r = c.get("/readyz").await.unwrap();
    assert_eq!(r.status, 500);
    assert!(
        r.text()
            .contains("[-]poststarthook/storage-readiness failed: reason withheld\n"),
        "{}",
        r.text()
    );
    let r = c.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "LIST while the watch cache initialises");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.text().contains("storage is (re)initializing"));
    wait_for("readyz to pass after startup", T, || {
        let rt = tokio::runtime::Handle::current();
        let status = tokio::task::block_in_place(|| rt.block_on(c.get("/readyz")))
            .unwrap()
            .status;
        (status == 200).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_default_mode_sequence() {
    // A delay long enough that every check below falls inside it on a loaded machine.
    let (_dir, pki, mut sim) = replica(&["--shutdown-delay-duration", "8s"]);
    let mut h2 = sim.connect(&pki, true).await.unwrap();
    let mut h1 = sim.connect(&pki, false).await.unwrap();
    assert_eq!(h2.get("/version").await.unwrap().status, 200);

    let t0 = Instant::now();
    sim.signal(libc::SIGTERM);
    // readyz fails with [-]shutdown while the listener is still open (checked next)...
    wait_for("readyz to fail", Duration::from_secs(7), || {
        let rt = tokio::runtime::Handle::current();
        let r = tokio::task::block_in_place(|| rt.block_on(h1.get("/readyz"))).unwrap();
        (r.status == 500 && r.text().contains("[-]shutdown failed: reason withheld\n"))
            .then_some(())
    });
    // ...livez stays 200 and everything else is served normally during the delay.
    let livez = h1.get("/livez").await.expect("livez during the delay");
    assert_eq!(livez.status, 200);
    let list = h2.get(CONFIGMAPS).await.expect("list during the delay");
    assert_eq!(list.status, 200);
    let mut fresh = sim
        .connect(&pki, false)
        .await
        .expect("listener open during the delay");
    assert_eq!(fresh.get("/version").await.unwrap().status, 200);

    // A request in flight when the delay ends still completes.
    sim.set_latency_ms(1500);
    let in_flight = tokio::spawn(async move {
        let r = h2.get(CONFIGMAPS).await;
        (r.map(|r| r.status).unwrap_or(0), h2)
    });
    // New TCP connections are refused once the delay is over.
    wait_refused_after(sim.addr, t0, Duration::from_secs(8));
    let (status, h2) = in_flight.await.unwrap();
    assert_eq!(status, 200, "in-flight request completes");
    // The HTTP/2 connection was sent GOAWAY and ends.
    wait_for("the HTTP/2 connection to close", T, || {
        h2.is_closed().then_some(())
    });
    let status = sim.wait_exit(T);
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_retry_after_mode_answers_429() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = start(
        &pki,
        "a",
        &[
            "--shutdown-delay-duration",
            "1s",
            "--shutdown-send-retry-after=true",
        ],
    );
    sim.signal(libc::SIGTERM);
    let r = wait_for("429 after the delay", T, || {
        let rt = tokio::runtime::Handle::current();
        tokio::task::block_in_place(|| {
            rt.block_on(async {
                let mut c = sim.connect(&pki, false).await.ok()?;
                let r = c.get(CONFIGMAPS).await.ok()?;
                (r.status == 429).then_some(r)
            })
        })
    });
    assert_eq!(r.header("retry-after"), Some("5"));
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(
        r.text(),
        "The apiserver is shutting down, please try again later.\n"
    );
    // Health paths still answer (readyz failing), over a new connection: the listener is open.
    let mut c = sim.connect(&pki, false).await.unwrap();
    let r = c.get("/readyz").await.unwrap();
    assert_eq!(r.status, 500);
    assert!(r.text().contains("[-]shutdown failed"));
    assert_eq!(c.get("/livez").await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_sigterm_exits_at_once_with_status_1() {
    let (_dir, pki, mut sim) = replica(&["--shutdown-delay-duration", "30s"]);
    sim.signal(libc::SIGTERM);
    let mut c = sim.connect(&pki, false).await.unwrap();
    wait_for("shutdown to begin", T, || {
        let rt = tokio::runtime::Handle::current();
        let r = tokio::task::block_in_place(|| rt.block_on(c.get("/readyz"))).unwrap();
        (r.status == 500).then_some(())
    });
    sim.signal(libc::SIGTERM);
    assert_eq!(sim.wait_exit(T).code(), Some(1));
}

async fn create(c: &mut Conn, name: &str) -> i64 {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
    let r = c.post(CONFIGMAPS, &body.to_string()).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn event(v: &Value) -> (String, String, i64) {
    (
        v["type"].as_str().unwrap().to_string(),
        v["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        v["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_on_another_replica_through_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let etcd = etcd(dir.path());
    let mut a = start(&pki, "a", &["--etcd-servers", &etcd.url()]);
    let b = start(&pki, "b", &["--etcd-servers", &etcd.url()]);
    let mut on_b = b.connect(&pki, true).await.unwrap();
    let rv0 = create(&mut on_b, "before").await;

    let mut watcher = a.connect(&pki, false).await.unwrap();
    let mut w = watcher
        .stream(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv0}"
        ))
        .await
        .unwrap();
    assert_eq!(w.status, 200);
    create(&mut on_b, "one").await;
    create(&mut on_b, "two").await;
    let e1 = event(&w.next_json(T).await);
    let e2 = event(&w.next_json(T).await);
    assert_eq!((e1.0.as_str(), e1.1.as_str()), ("ADDED", "one"));
    assert_eq!((e2.0.as_str(), e2.1.as_str()), ("ADDED", "two"));
    let last = e2.2;

    // Replica A goes away; changes keep happening through B.
    a.kill();
    create(&mut on_b, "three").await;
    let del = on_b
        .request("DELETE", "/api/v1/namespaces/default/configmaps/one", None)
        .await
        .unwrap();
    assert_eq!(del.status, 200);

    // The watch resumes on B from the last resourceVersion: nothing missed, nothing repeated.
    let mut w = on_b
        .stream(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={last}"
        ))
        .await
        .unwrap();
    let e3 = event(&w.next_json(T).await);
    let e4 = event(&w.next_json(T).await);
    assert_eq!((e3.0.as_str(), e3.1.as_str()), ("ADDED", "three"));
    assert_eq!((e4.0.as_str(), e4.1.as_str()), ("DELETED", "one"));
    assert!(last < e3.2 && e3.2 < e4.2);
    assert!(
        w.next(Duration::from_millis(500)).await.is_err(),
        "no further event"
    );
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_resource_version_gets_410_expired() {
    let (_dir, pki, sim) = replica(&[]);
    let mut c = sim.connect(&pki, true).await.unwrap();
    // The in-memory store keeps the last 1000 changes, like a compacted etcd.
    for i in 0..1010 {
        create(&mut c, &format!("cm-{i}")).await;
    }
    let mut w = c
        .stream("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=2")
        .await
        .unwrap();
    assert_eq!(w.status, 200);
    let e = w.next_json(T).await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(
        w.next(T).await.unwrap().is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_client_certs_tokens_and_anonymous() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "s3cret,kubegate,uid-1,\"system:monitoring\"\n").unwrap();
    let open = start(&pki, "open", &[]);
    let closed = start(
        &pki,
        "closed",
        &[
            "--anonymous-auth=false",
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    );

    // Anonymous allowed: health and /version yes, API no (403).
    let mut anon = Conn::open_anonymous(open.addr, &pki, false).await.unwrap();
    assert_eq!(anon.get("/readyz").await.unwrap().status, 200);
    assert_eq!(anon.get("/version").await.unwrap().status, 200);
    let r = anon.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 403);
    let s = r.json();
    assert_eq!(s["message"], "configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"");

    // Anonymous off: 401 with a JSON Status, even for /readyz.
    let mut anon = Conn::open_anonymous(closed.addr, &pki, false)
        .await
        .unwrap();
    let r = anon.get("/readyz").await.unwrap();
    assert_eq!(r.status, 401);
    let s = r.json();
    assert_eq!(
        (s["kind"].as_str(), s["reason"].as_str(), s["code"].as_i64()),
        (Some("Status"), Some("Unauthorized"), Some(401))
    );
    let r = anon
        .send(
            "GET",
            "/readyz",
            &[("authorization", "Bearer s3cret")],
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "a bearer token authenticates");
    let r = anon
        .send("GET", "/readyz", &[("authorization", "Bearer wrong")], None)
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    let mut cert = closed.connect(&pki, false).await.unwrap();
    assert_eq!(
        cert.get("/readyz").await.unwrap().status,
        200,
        "a client certificate authenticates"
    );
    assert_eq!(cert.get(CONFIGMAPS).await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_chance_makes_http2_clients_reconnect() {
    let (_dir, pki, sim) = replica(&["--goaway-chance", "0.02"]);
    let mut c = sim.connect(&pki, true).await.unwrap();
    let mut reconnects = 0;
    for _ in 0..600 {
        if c.is_closed() {
            reconnects += 1;
            c = sim.connect(&pki, true).await.unwrap();
        }
        match c.get("/version").await {
            Ok(r) => assert_eq!(r.status, 200),
            // A request racing the GOAWAY may be refused by the client; it reconnects.
            Err(_) => {
                reconnects += 1;
                c = sim.connect(&pki, true).await.unwrap();
            }
        }
    }
    // Expected about 12; the chance of none in 600 is 0.98^600 ≈ 5e-6.
    assert!(reconnects >= 1, "no GOAWAY in 600 HTTP/2 requests");
    // HTTP/1.1 is never affected.
    let mut h1 = sim.connect(&pki, false).await.unwrap();
    for _ in 0..200 {
        assert_eq!(h1.get("/version").await.unwrap().status, 200);
    }
    assert!(!h1.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_and_status_errors() {
    let (_dir, pki, sim) = replica(&[]);
    let mut c = sim.connect(&pki, true).await.unwrap();
    let rv = create(&mut c, "x").await;
    let path = "/api/v1/namespaces/default/configmaps/x";
    let r = c
        .post(CONFIGMAPS, r#"{"metadata":{"name":"x"}}"#)
        .await
        .unwrap();
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "AlreadyExists");
    let stale = json!({"metadata": {"name": "x", "resourceVersion": (rv - 1).to_string()}, "data": {"k": "2"}});
    let r = c
        .request("PUT", path, Some(&stale.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "Conflict");
    let fresh =
        json!({"metadata": {"name": "x", "resourceVersion": rv.to_string()}, "data": {"k": "2"}});
    let r = c
        .request("PUT", path, Some(&fresh.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let got: Value = serde_json::from_slice(&c.get(path).await.unwrap().body).unwrap();
    assert_eq!(got["data"]["k"], "2");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}});
    let r = c
        .post(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            &lease.to_string(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let list: Value = serde_json::from_slice(
        &c.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(list["kind"], "LeaseList");
    assert_eq!(list["items"][0]["spec"]["holderIdentity"], "me");
    assert_eq!(c.request("DELETE", path, None).await.unwrap().status, 200);
    let r = c.get(path).await.unwrap();
    assert_eq!(r.status, 404);
    let s = r.json();
    assert_eq!(s["message"], "configmaps \"x\" not found");
    let r = c.get("/api/v1/namespaces/default/widgets").await.unwrap();
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_fairness_classifies_rejects_and_reports_as_the_apiserver() {
    const LEVEL: &str = "x-kubernetes-pf-prioritylevel-uid";
    const SCHEMA: &str = "x-kubernetes-pf-flowschema-uid";
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = start(&pki, "apf", &[]);
    // A service account's requests are workload-low's; an administrator's are exempt.
    let mut sa = Conn::open_as_user(
        sim.addr,
        &pki,
        "sa",
        "system:serviceaccount:default:app",
        &["system:serviceaccounts"],
    )
    .await;
    let mut admin = sim.connect(&pki, true).await.unwrap();
    let path = CONFIGMAPS;
    let calm = sa.get(path).await.unwrap();
    assert_eq!(calm.status, 200);
    let (level, schema) = (calm.header(LEVEL).unwrap(), calm.header(SCHEMA).unwrap());
    let exempt = admin.get(path).await.unwrap();
    assert_eq!(exempt.status, 200);
    assert_ne!(exempt.header(LEVEL), Some(level));

    // Traffic that does not pass through the test saturates workload-low: rejected before
    // any handler, as the apiserver's filter answers, with both headers.
    sim.saturate_level("workload-low", Some(1));
    let rejected = sa.get(path).await.unwrap();
    assert_eq!(rejected.status, 429);
    assert_eq!(
        rejected.text(),
        "Too many requests, please try again later.\n"
    );
    assert_eq!(rejected.header("retry-after"), Some("1"));
    assert_eq!(rejected.header(LEVEL), Some(level));
    assert_eq!(rejected.header(SCHEMA), Some(schema));
    // The other levels serve on.
    assert_eq!(admin.get(path).await.unwrap().status, 200);
    let created = sa
        .post(path, r#"{"metadata":{"name":"cm1"}}"#)
        .await
        .unwrap();
    assert_eq!(created.status, 429, "a write of the level is rejected too");

    let metrics = admin.get("/metrics").await.unwrap().text();
    assert!(
        metrics.contains(r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts",priority_level="workload-low"} 1"#),
        "{metrics}"
    );
    let dump = admin
        .get("/debug/api_priority_and_fairness/dump_priority_levels")
        .await
        .unwrap()
        .text();
    let row = dump
        .lines()
        .find(|l| l.starts_with("workload-low,"))
        .unwrap_or_else(|| panic!("{dump}"));
    let cells: Vec<&str> = row.split(',').map(str::trim).collect();
    assert_eq!(
        (cells[6], cells[7]),
        ("1", "2"),
        "dispatched, rejected: {row}"
    );

    sim.saturate_level("workload-low", None);
    assert_eq!(sa.get(path).await.unwrap().status, 200);
}
