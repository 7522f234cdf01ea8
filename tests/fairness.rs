//! What one client can take of what kubegate shares among all of them (real `kubegate` and
//! `kubegate-sim` processes): TokenReview slots, holds while no replica is ready, and what it
//! holds by going silent or not reading.
//!
//! 1. `a_new_token_from_another_host_is_named_in_time_while_one_host_floods_new_tokens`, and a
//!    client kubegate named before keeps its name through the flood.
//! 2. `one_connection_holds_at_most_its_share_while_no_replica_is_ready`.
//! 3. `an_http2_client_that_stops_answering_is_closed_with_its_watch_upstream`.
//! 4. `a_watch_whose_client_reads_nothing_is_cut_alone`.

use kubegate_e2e::*;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_from_another_host_is_named_in_time_while_one_host_floods_new_tokens() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .tokens(&[
            ("tok-known", "known-user", "dev"),
            ("tok-new", "new-user", "dev"),
        ])
        // A rule that names senders: a token kubegate cannot name in time is answered 429.
        .dispatch(
            "- name: named\n  match: {users: [new-user, known-user]}\n  limit: {rate: 1000}\n",
        )
        .configure(|cfg| {
            cfg.terminate.token_review.max_in_flight = 4;
            cfg.terminate.token_review.timeout = Duration::from_secs(2);
            // The known client's name is due for renewal during the flood.
            cfg.terminate.token_review.ttl = Duration::from_secs(1);
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    // Named before the flood.
    let mut known = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    let r = known
        .get_with_token(CONFIGMAPS, "tok-known", "known/1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // Every review now takes 300 ms at the replica.
    bed.sims[0].set_latency_ms(300);
    // One host floods never-seen tokens on forty connections.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for c in 0..40 {
        let mut conn = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
        let stop = stop.clone();
        flood.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let token = format!("bogus-{c}-{i}");
                let _ = conn.get_with_token(CONFIGMAPS, &token, "flood/1").await;
                i += 1;
            }
        }));
    }
    wait_for("the flood to fill the reviews", T, || {
        (kg.metric(r#"kubegate_token_reviews_total{result="skipped"}"#) >= 10.0).then_some(())
    });
    // Another host's new token: named within the review timeout, never 429.
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut newcomer = Conn::open_anonymous_from(other, kg.listen, pki)
        .await
        .unwrap();
    let started = Instant::now();
    let r = newcomer
        .get_with_token(CONFIGMAPS, "tok-new", "new/1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // The known client, from the flooding host itself, keeps its name while it is renewed.
    for _ in 0..10 {
        let r = known
            .get_with_token(CONFIGMAPS, "tok-known", "known/1")
            .await
            .unwrap();
        assert_eq!(
            r.status,
            200,
            "a named client turned unreviewed: {}",
            r.text()
        );
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        let _ = tokio::time::timeout(T, f).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_holds_at_most_its_share_while_no_replica_is_ready() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .configure(|cfg| {
            // What is not held is refused at once (503), not sent to the replica not ready.
            cfg.no_ready_backend = kubegate_config::NoReadyBackendPolicy::Refuse;
            cfg.terminate.hold_when_none_ready = Duration::from_secs(60);
            // A connection's share: a tenth, 2.
            cfg.terminate.max_held_when_none_ready = 20;
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    bed.sims[0].force_check("etcd", true);
    kg.wait_state("replica-1", "not_ready", T);
    let mut greedy = Conn::open(kg.listen, pki, true).await.unwrap();
    greedy.set_request_timeout(Duration::from_secs(90));
    let mut asks = Vec::new();
    for _ in 0..6 {
        let mut c = greedy.share();
        asks.push(tokio::spawn(
            async move { c.get(CONFIGMAPS).await.unwrap() },
        ));
    }
    // Four are not held: answered at once (503, no replica ready), while two wait.
    let refused = wait_for("four of the six refused", T, || {
        let done = asks.iter().filter(|a| a.is_finished()).count();
        (done >= 4).then_some(done)
    });
    assert_eq!(refused, 4);
    assert_eq!(kg.metric("kubegate_held"), 2.0);
    assert!(kg.metric(r#"kubegate_holds_total{outcome="over_limit"}"#) >= 4.0);
    // Another connection is held still: its own share.
    let mut other = Conn::open(kg.listen, pki, true).await.unwrap();
    other.set_request_timeout(Duration::from_secs(90));
    let held = tokio::spawn(async move { other.get(CONFIGMAPS).await.unwrap() });
    wait_for("the other connection's request held", T, || {
        (kg.metric("kubegate_held") == 3.0).then_some(())
    });
    bed.sims[0].force_check("etcd", false);
    assert_eq!(held.await.unwrap().status, 200);
    let mut statuses = Vec::new();
    for a in asks {
        statuses.push(a.await.unwrap().status);
    }
    statuses.sort();
    assert_eq!(statuses, [200, 200, 503, 503, 503, 503]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_stops_answering_is_closed_with_its_watch_upstream() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .configure(|cfg| {
            cfg.terminate.client_ping_interval = Duration::from_secs(1);
            cfg.terminate.client_ping_timeout = Duration::from_secs(1);
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut raw = h2raw::RawH2::connect(kg.listen, pki).await.unwrap();
    raw.get(1, &format!("{CONFIGMAPS}?watch=1")).await.unwrap();
    wait_for("the watch open upstream", T, || {
        (bed.sims[0].watches_open() == 1).then_some(())
    });
    // The client reads nothing more: kubegate's PING goes unanswered.
    wait_for("the silent client's watch closed upstream", T, || {
        (bed.sims[0].watches_open() == 0).then_some(())
    });
    assert_eq!(kg.metric_sum("kubegate_client_connections"), 0.0);
    drop(raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_client_reads_nothing_is_cut_alone() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .configure(|cfg| {
            cfg.terminate.slow_watch_timeout = Duration::from_secs(2);
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut raw = h2raw::RawH2::connect(kg.listen, pki).await.unwrap();
    // No window for any stream's data: the client can take headers, never an event.
    raw.frame(h2raw::kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0])
        .await
        .unwrap();
    raw.get(1, &format!("{CONFIGMAPS}?watch=1")).await.unwrap();
    wait_for("the watch open upstream", T, || {
        (bed.sims[0].watches_open() == 1).then_some(())
    });
    let mut admin = Conn::open(kg.listen, pki, true).await.unwrap();
    for i in 0..40 {
        let body = format!(r#"{{"metadata":{{"name":"cm-{i}"}}}}"#);
        let r = admin.post(CONFIGMAPS, &body).await.unwrap();
        assert_eq!(r.status, 201);
    }
    // Its events wait: past the timeout, the watch is cut and its upstream watch goes.
    wait_for("the unread watch cut", T, || {
        (kg.metric(r#"kubegate_watches_ended_total{reason="slow_client"}"#) >= 1.0).then_some(())
    });
    wait_for("its upstream watch closed", T, || {
        (bed.sims[0].watches_open() == 0).then_some(())
    });
    // Cut alone: other clients go on.
    assert_eq!(admin.get(CONFIGMAPS).await.unwrap().status, 200);
    drop(raw);
}
