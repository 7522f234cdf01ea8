//! Terminate mode's requests across replicas that fail, shut down, crash or are not ready yet:
//! what the apiserver provably did not process goes to another replica, what it may have
//! processed is reported, never replayed. Which replica answered is read from the simulator's
//! `X-Kubegate-Sim-Replica` header.
//!
//! 1. `one_http2_connection_spreads_its_requests_over_the_ready_replicas`, and none goes to a
//!    replica that is not ready.
//! 2. `one_replica_answers_every_request_after_the_goaway_each_anonymous_one_brings`.
//! 3. `a_replica_shutting_down_finishes_its_requests_and_gets_no_new_ones`.
//! 4. `a_crashed_replicas_reads_and_new_watches_are_retried_and_its_writes_reported_never_replayed`.
//! 5. `a_shutting_down_replicas_429_is_retried_on_another`.
//! 6. `reads_a_replicas_initializing_cache_refused_go_to_another`, and
//!    `custom_resources_read_from_a_replica_still_initializing_them_go_to_another`.
//! 7. `reads_a_replicas_failing_storage_refused_go_to_another_and_writes_do_not`.
//! 8. `no_ready_replica_is_a_503_status_the_client_retries`.

use kubegate_e2e::*;
use std::collections::HashMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_http2_connection_spreads_its_requests_over_the_ready_replicas() {
    let bed = terminating(3, &[], |_| {});
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut conn = kg.connect(pki, true).await.unwrap();
    let mut per: HashMap<String, usize> = HashMap::new();
    for _ in 0..30 {
        let r = conn.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        *per.entry(r.replica()).or_default() += 1;
    }
    for s in sims.iter() {
        let n = per.get(&s.name).copied().unwrap_or(0);
        assert!(n >= 8, "{} served {n} of 30: {per:?}", s.name);
    }
    // One replica stops being ready: the same connection's requests avoid it.
    sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", T);
    for _ in 0..20 {
        let r = conn.get("/version").await.unwrap();
        assert_eq!(r.status, 200);
        assert_ne!(r.replica(), "replica-2");
    }
    assert!(
        kg.metric(r#"kubegate_requests_total{backend="replica-1",code="2xx",verb="list"}"#) >= 8.0
    );
}

/// An apiserver closes an HTTP/2 connection with GOAWAY after every anonymous request and every
/// 401. With one replica, kubegate has no other backend to send the next request to: it must
/// leave each connection that said goodbye and open another to the same replica, every request
/// answered as the apiserver answers it (no 503), and the pool must not keep the dead
/// connections. (Which of kubegate's two ways of noticing the goodbye a request meets — the
/// connection already ended, or its stream refused by the GOAWAY — depends on timing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_answers_every_request_after_the_goaway_each_anonymous_one_brings() {
    // Token reviews off: their connection (kubegate's own identity) is not the subject here.
    let bed = terminating(1, &[], |c| c.terminate.token_review.enabled = false);
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut conn = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    for i in 0..30 {
        let r = conn.get("/readyz").await.unwrap();
        assert_eq!(r.status, 200, "anonymous request {i}: {}", r.text());
        let r = conn
            .send(
                "GET",
                "/version",
                &[("Authorization", "Bearer wrong")],
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            r.status,
            401,
            "request {i} with a wrong token: {}",
            r.text()
        );
    }
    // Connections that said goodbye leave the pool: at most the last one is still counted once
    // each closed connection's task has ended (on a loaded machine, a moment after its answer).
    wait_for(
        "the connections that said goodbye to leave the pool",
        T,
        || {
            let open = kg.metric(r#"kubegate_backend_upstream_connections{backend="replica-1"}"#);
            (open <= 2.0).then_some(())
        },
    );
    assert_eq!(
        kg.metric(r#"kubegate_requests_total{backend="replica-1",code="2xx",verb="get"}"#),
        30.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_shutting_down_finishes_its_requests_and_gets_no_new_ones() {
    let bed = terminating(3, &["--shutdown-delay-duration", "20s"], |cfg| {
        cfg.drain.timeout = secs(60)
    });
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    // Every replica takes 4 s per request; three at once land one on each.
    for s in sims.iter() {
        s.set_latency_ms(4000);
    }
    let mut in_flight = Vec::new();
    for _ in 0..3 {
        let mut c = kg.connect(pki, true).await.unwrap();
        in_flight.push(tokio::spawn(async move { c.get(CONFIGMAPS).await }));
    }
    wait_for("three requests in flight", T, || {
        (kg.metric(r#"kubegate_backend_requests_in_flight{backend="replica-1"}"#) == 1.0)
            .then_some(())
    });
    sims[0].signal(libc::SIGTERM);
    kg.wait_state("replica-1", "not_ready", T);
    for s in sims.iter() {
        s.set_latency_ms(0);
    }
    let mut conn = kg.connect(pki, true).await.unwrap();
    for _ in 0..20 {
        let r = conn.get("/version").await.unwrap();
        assert_eq!(r.status, 200);
        assert_ne!(
            r.replica(),
            "replica-1",
            "a new request went to the replica shutting down"
        );
    }
    let mut served_by = Vec::new();
    for t in in_flight {
        let r = t.await.unwrap().expect("the in-flight request completes");
        assert_eq!(r.status, 200, "{}", r.text());
        served_by.push(r.replica());
    }
    served_by.sort();
    assert_eq!(served_by, ["replica-1", "replica-2", "replica-3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_reads_and_new_watches_are_retried_and_its_writes_reported_never_replayed(
) {
    // Round-robin keeps sending to replica-1 while it is slow (least-request would avoid it).
    let mut bed = Cluster::new()
        .replicas(3)
        .etcd()
        .terminate()
        .configure(|cfg| cfg.balance = kubegate_config::BalancePolicy::RoundRobin)
        .start();
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    // A replica whose versions kubegate has not learned yet, while it knows the others', is
    // kept out of placement (version skew): learned first, then slowed down.
    wait_for("every replica's version learned", T, || {
        let metrics = kg.admin_body("/metrics");
        (1..=3)
            .all(|k| {
                metrics.contains(&format!(
                    "kubegate_backend_version_info{{backend=\"replica-{k}\""
                ))
            })
            .then_some(())
    });
    sims[0].set_latency_ms(60_000);
    let on_replica_1 = r#"kubegate_backend_requests_in_flight{backend="replica-1"}"#;
    // Reads, writes and new watches in turn, one at a time, until replica-1 holds one of
    // each: a request either comes back at once from another replica or stays in flight on
    // replica-1 (a watch's response headers too wait out the latency). The kinds come in a
    // cycle of four, so that round-robin over three replicas sends each kind to each replica.
    let (mut stuck_read, mut stuck_write, mut stuck_watch) = (None, None, None);
    let mut answered = Vec::new();
    let mut watching = Vec::new();
    for i in 0..30 {
        if stuck_read.is_some() && stuck_write.is_some() && stuck_watch.is_some() {
            break;
        }
        let before = kg.metric(on_replica_1);
        let mut c = kg.connect(pki, true).await.unwrap();
        if i % 4 == 2 {
            let task = tokio::spawn(async move {
                let w = c
                    .watch("/api/v1/namespaces/default/configmaps?watch=1", false)
                    .await;
                w.map(|w| (w, c))
            });
            let stuck = wait_for("the watch answered or held by replica-1", T, || {
                if kg.metric(on_replica_1) > before {
                    Some(true)
                } else {
                    task.is_finished().then_some(false)
                }
            });
            match stuck {
                true if stuck_watch.is_none() => stuck_watch = Some(task),
                _ => watching.push(task),
            }
            continue;
        }
        let write = i % 4 == 1;
        let task = tokio::spawn(async move {
            if write {
                let body = format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"w{i}"}},"data":{{"a":"b"}}}}"#
                );
                c.post(CONFIGMAPS, &body).await
            } else {
                c.get(CONFIGMAPS).await
            }
        });
        let stuck = wait_for("the request answered or held by replica-1", T, || {
            if kg.metric(on_replica_1) > before {
                Some(true)
            } else {
                task.is_finished().then_some(false)
            }
        });
        match (stuck, write) {
            (true, false) if stuck_read.is_none() => stuck_read = Some(task),
            (true, true) if stuck_write.is_none() => stuck_write = Some((i, task)),
            _ => answered.push(task),
        }
    }
    let (stuck_read, (w, stuck_write)) = (stuck_read.unwrap(), stuck_write.unwrap());
    let stuck_watch = stuck_watch.expect("replica-1 held a new watch");
    sims[0].kill();
    let r = stuck_read.await.unwrap().expect("the read is answered");
    assert_eq!(r.status, 200, "the read was not retried: {}", r.text());
    assert_ne!(r.replica(), "replica-1");
    // The watch had no answer yet when its replica died: another replica serves it, and it
    // hears what is written next.
    let (mut watch, _conn) = stuck_watch.await.unwrap().expect("the watch is answered");
    assert_eq!(watch.status, 200, "the new watch was not retried");
    let r = stuck_write.await.unwrap().expect("the write is answered");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.header("retry-after").is_none(),
        "a write must not be retried by the client either"
    );
    for t in answered {
        let r = t.await.unwrap().unwrap();
        assert!(r.status == 200 || r.status == 201, "{}", r.text());
    }
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="reset"}"#) >= 2.0);
    // The write on the crashed replica was never replayed on another.
    let mut c = kg.connect(pki, true).await.unwrap();
    let r = c
        .get(&format!("/api/v1/namespaces/default/configmaps/w{w}"))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "w{w}: {}", r.text());
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"after-the-crash"},"data":{"a":"b"}}"#;
    let r = c.post(CONFIGMAPS, body).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    loop {
        let e = watch.next(T).await.unwrap().expect("an event");
        if e.name == "after-the-crash" {
            assert_eq!(e.kind, "ADDED");
            break;
        }
    }
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutting_down_replicas_429_is_retried_on_another() {
    // kubegate must not notice the shutdown through its probes: the 429s are what it sees.
    let bed = terminating(3, &["--shutdown-send-retry-after"], probes_rarely);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    // A slow request straight to replica-1 keeps it answering 429 while it drains.
    sims[0].set_latency_ms(20_000);
    let mut direct = sims[0].connect(pki, false).await.unwrap();
    let slow = tokio::spawn(async move { direct.get("/version").await });
    sims[0].set_latency_ms(0);
    sims[0].signal(libc::SIGTERM);
    let mut probe = sims[0].connect(pki, false).await.unwrap();
    wait_for("replica-1 to answer 429", T, || {
        let rt = tokio::runtime::Handle::current();
        let r = tokio::task::block_in_place(|| rt.block_on(probe.get("/version"))).ok()?;
        (r.status == 429).then_some(())
    });
    let mut conn = kg.connect(pki, true).await.unwrap();
    for i in 0..30 {
        let r = conn.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_ne!(r.replica(), "replica-1");
    }
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="shutting_down"}"#) >= 1.0);
    slow.abort();
}

/// A replica whose watch caches re-initialize (the cacher after its etcd watch failed) answers
/// LISTs and watches 429 "storage is (re)initializing" while its `/readyz` passes: they go to
/// another replica (nothing was processed). When every replica's caches initialize, the
/// client gets the apiserver's own 429 and its Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_a_replicas_initializing_cache_refused_go_to_another() {
    let bed = terminating(2, &[], |_| {});
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut conn = kg.connect(pki, true).await.unwrap();
    sims[1].set_cache("initializing");
    for i in 0..4 {
        for path in [
            CONFIGMAPS,
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1",
        ] {
            let r = conn.get(path).await.unwrap();
            assert_eq!(r.status, 200, "{path} ({i}): {}", r.text());
            assert_eq!(r.replica(), "replica-1", "{path} ({i})");
        }
    }
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="storage_initializing"}"#) >= 1.0);
    assert_eq!(kg.state("replica-2").as_deref(), Some("ready"));
    sims[0].set_cache("initializing");
    let r = conn.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(
        r.text().contains("storage is (re)initializing"),
        "{}",
        r.text()
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    // Ready again: served where it lands.
    sims[1].set_cache("ready");
    let r = conn.get(CONFIGMAPS).await.unwrap();
    assert_eq!(
        (r.status, r.replica().as_str()),
        (200, "replica-2"),
        "{}",
        r.text()
    );
}

/// A custom resource's watch cache initializes after the built-in ones', and `/readyz` does
/// not wait for it (KEP-4568): a replica just started is ready, serves built-in resources, and
/// answers LISTs and watches of custom resources 429 "storage is (re)initializing". Those go to
/// another replica — once kubegate has read what the replicas serve and which group-versions
/// the cluster's APIServices hand to extension servers: until then a custom resource's answer
/// is not taken for the apiserver's own (`signals::Origin`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_read_from_a_replica_still_initializing_them_go_to_another() {
    let mut bed = terminating(2, &["--custom-resource-cache-init", "0s"], |_| {});
    // replica-2 comes back with its custom resources' caches an hour from initialized.
    bed.sims[1].restart_with(vec!["--custom-resource-cache-init".into(), "1h".into()]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let widgets = "/apis/kubegate.example.com/v1/namespaces/default/widgets";
    let mut direct = sims[1].connect(pki, false).await.unwrap();
    let r = direct.get(widgets).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(direct.get("/readyz").await.unwrap().status, 200);
    let mut conn = kg.connect(pki, true).await.unwrap();
    // Its built-in resources are served (kubegate found it ready again).
    let deadline = std::time::Instant::now() + T;
    loop {
        let r = conn.get(CONFIGMAPS).await.unwrap();
        if r.status == 200 && r.replica() == "replica-2" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica-2 never served a built-in LIST: {} {}",
            r.status,
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Learned with the cluster's APIServices (`versions::read`), published within a second.
    wait_for("replica-2's custom resources on /metrics", T, || {
        (kg.metric(r#"kubegate_backend_serves{backend="replica-2",group_version="kubegate.example.com/v1"}"#) == 1.0)
            .then_some(())
    });
    for i in 0..4 {
        for path in [
            widgets.to_string(),
            format!("{widgets}?watch=1&timeoutSeconds=1"),
        ] {
            let r = conn.get(&path).await.unwrap();
            assert_eq!(r.status, 200, "{path} ({i}): {}", r.text());
            assert_eq!(r.replica(), "replica-1", "{path} ({i})");
        }
    }
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="storage_initializing"}"#) >= 1.0);
}

/// A replica whose etcd fails answers 500 "etcdserver: request timed out" before its probe
/// shows it. Reads it failed (GET, LIST) go to another replica; writes do not (the replica
/// answered: a write may have reached etcd), and their 500 reaches the client. A read's
/// failure is a passive signal too: the replica is probed at once. When every replica fails
/// so, the read is held and asked again (`terminate.hold_reads_when_storage_fails`) until its
/// own `?timeout=`; then the client gets the apiserver's own answer, not one of kubegate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_a_replicas_failing_storage_refused_go_to_another_and_writes_do_not() {
    // kubegate must not notice the failure through its probes: the answers are what it sees.
    let bed = terminating(2, &[], probes_rarely);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut conn = kg.connect(pki, true).await.unwrap();
    let r = conn
        .send(
            "POST",
            CONFIGMAPS,
            &[("Content-Type", "application/json")],
            Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"}}"#),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    sims[1].force_check("etcd", true);
    // Writes first: a failed one is never replayed (it may have been processed).
    let mut failed_writes = 0;
    for i in 0..4 {
        let body =
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"s{i}"}}}}"#);
        let r = conn
            .send(
                "POST",
                CONFIGMAPS,
                &[("Content-Type", "application/json")],
                Some(&body),
            )
            .await
            .unwrap();
        match r.status {
            201 => assert_eq!(r.replica(), "replica-1"),
            500 => {
                assert!(
                    r.text().contains("etcdserver: request timed out"),
                    "{}",
                    r.text()
                );
                failed_writes += 1;
            }
            other => panic!("write {i}: {other} {}", r.text()),
        }
    }
    assert!(failed_writes >= 1, "no write reached replica-2");
    // Reads: another replica answers.
    for i in 0..4 {
        for path in [CONFIGMAPS, "/api/v1/namespaces/default/configmaps/kept"] {
            let r = conn.get(path).await.unwrap();
            assert_eq!(r.status, 200, "{path} ({i}): {}", r.text());
            assert_eq!(r.replica(), "replica-1", "{path} ({i})");
        }
    }
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="storage_failed"}"#) >= 1.0);
    // The failing answer was also a passive signal: replica-2 was probed at once, though its
    // probes are two minutes apart.
    wait_for("a probe asked by the failing answer", T, || {
        (kg.metric(r#"kubegate_backend_probes_total{backend="replica-2",result="fail"}"#) >= 1.0)
            .then_some(())
    });
    // Every replica's storage fails: held until its client's timeout, then the last one's
    // own answer.
    sims[0].force_check("etcd", true);
    let r = conn
        .get("/api/v1/namespaces/default/configmaps?timeout=5s")
        .await
        .unwrap();
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(
        kg.metric(r#"kubegate_holds_total{outcome="timed_out"}"#),
        1.0
    );
    assert!(
        r.text().contains("etcdserver: request timed out"),
        "{}",
        r.text()
    );
    assert_eq!(
        kg.metric(r#"kubegate_requests_failed_total{reason="unavailable"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ready_replica_is_a_503_status_the_client_retries() {
    let bed = terminating(1, &[], |cfg| {
        cfg.no_ready_backend = kubegate_config::NoReadyBackendPolicy::Refuse
    });
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    sims[0].force_check("etcd", true);
    kg.wait_state("replica-1", "not_ready", T);
    let mut conn = kg.connect(pki, true).await.unwrap();
    let r = conn.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    let v = r.json();
    assert_eq!(
        (v["kind"].as_str(), v["code"].as_u64()),
        (Some("Status"), Some(503))
    );
    assert_eq!(
        kg.metric(r#"kubegate_requests_failed_total{reason="no_ready_backend"}"#),
        1.0
    );
}
