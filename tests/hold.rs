//! `terminate.hold_when_none_ready`: while no replica of the cluster is ready, new work waits
//! for the first that is (under `no_ready_backend: alive`, the first that answers its probe
//! again), that long at most, at most `terminate.max_held_when_none_ready` at
//! once; then `no_ready_backend` decides,
//! as it does at once without a hold. A request through terminate mode and a passthrough
//! connection, each held through a replica's brief `/readyz` failure (an etcd leader
//! election, as a replica sees it); one held past its bound; one more than may be held.

use kubegate_config::NoReadyBackendPolicy;
use kubegate_e2e::*;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// One replica behind kubegate (terminating TLS when `terminate`), holding up to `up_to` and
/// `max_held` at once (`terminate.hold_when_none_ready`, `max_held_when_none_ready`), refusing when nothing is ready after: the replica's etcd check is
/// failing when it returns, so that no replica is ready.
fn outage(terminate: bool, up_to: Duration, max_held: usize) -> Started {
    let mut cluster = Cluster::new().configure(move |c| {
        c.terminate.hold_when_none_ready = up_to;
        c.terminate.max_held_when_none_ready = max_held;
        c.no_ready_backend = NoReadyBackendPolicy::Refuse;
    });
    if terminate {
        cluster = cluster.terminate();
    }
    let bed = cluster.start();
    bed.sims[0].force_check("etcd", true);
    bed.kg.wait_state(&bed.sims[0].name, "not_ready", T);
    bed
}

/// Waits until kubegate holds `n` connections or requests.
fn wait_held(kg: &Kubegate, n: f64) {
    wait_for(&format!("{n} held"), T, || {
        (kg.metric("kubegate_held") == n).then_some(())
    });
}

/// The status of `GET /api/v1/namespaces/default/configmaps` through kubegate at `listen` on a connection of
/// its own (HTTP/2, as `pki`'s client), or 0 when the connection was closed unanswered
/// (passthrough refusing).
fn request(listen: std::net::SocketAddr, pki: &Pki) -> tokio::task::JoinHandle<u16> {
    request_to(listen, pki, CONFIGMAPS)
}

/// Sends `path` through `bed`'s kubegate, which holds it for a second at least and then
/// answers 503, counted as a hold that timed out.
async fn held_a_second_then_refused(bed: &Started, path: &'static str) {
    let started = Instant::now();
    assert_eq!(
        request_to(bed.kg.listen, &bed.pki, path).await.unwrap(),
        503
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "held first");
    assert_eq!(
        bed.kg
            .metric(r#"kubegate_holds_total{outcome="timed_out"}"#),
        1.0
    );
}

/// A [`request`], held (and not answered meanwhile) until the first replica's etcd check
/// passes again: the status it is then answered with.
async fn held_until_etcd_returns(bed: &Started) -> u16 {
    let request = request(bed.kg.listen, &bed.pki);
    wait_held(&bed.kg, 1.0);
    assert!(!request.is_finished(), "answered while held");
    bed.sims[0].force_check("etcd", false);
    request.await.unwrap()
}

/// [`request`] to `path`.
fn request_to(
    listen: std::net::SocketAddr,
    pki: &Pki,
    path: &'static str,
) -> tokio::task::JoinHandle<u16> {
    let tls = tls_client_config(pki, &[b"h2"]);
    tokio::spawn(async move {
        match Conn::open_named(listen, tls, "127.0.0.1", true).await {
            Ok(mut c) => c.get(path).await.map_or(0, |r| r.status),
            Err(_) => 0,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_through_a_brief_outage_for_the_first_ready_replica() {
    for terminate in [true, false] {
        let bed = outage(terminate, Duration::from_secs(60), 10);
        let kg = &bed.kg;
        // The outage ends: the held request goes to the replica and is answered by it.
        assert_eq!(
            held_until_etcd_returns(&bed).await,
            200,
            "terminate {terminate}"
        );
        assert_eq!(kg.metric("kubegate_held"), 0.0);
        assert_eq!(
            kg.metric(r#"kubegate_holds_total{outcome="ready"}"#),
            1.0,
            "terminate {terminate}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_hold_is_refused_after_it_and_the_held_are_bounded() {
    // Past `up_to`, `no_ready_backend: refuse` answers 503, as without a hold.
    let bed = outage(true, Duration::from_secs(1), 1);
    held_a_second_then_refused(&bed, CONFIGMAPS).await;

    // A request's own `?timeout=` ends its hold first: nobody waits for it after that.
    let bed = outage(true, Duration::from_secs(60), 10);
    held_a_second_then_refused(&bed, "/api/v1/namespaces/default/configmaps?timeout=1s").await;

    // With `max_held` (1) waiting, one more is not held: refused at once, counted.
    let bed = outage(true, Duration::from_secs(60), 1);
    let kg = &bed.kg;
    let first = request(kg.listen, &bed.pki);
    wait_held(kg, 1.0);
    assert_eq!(request(kg.listen, &bed.pki).await.unwrap(), 503);
    assert_eq!(
        kg.metric(r#"kubegate_holds_total{outcome="over_limit"}"#),
        1.0
    );
    assert!(!first.is_finished(), "the first is still held");
    bed.sims[0].force_check("etcd", false);
    assert_eq!(first.await.unwrap(), 200);
}

/// A request under a `dispatch` rule whose replicas are not ready is placed a second time over
/// every replica (`fallback: all`): its waits count once, so it is held the bound in all — one
/// hold that timed out, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_fallback_does_not_hold_a_request_twice() {
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .dispatch(
            "- name: pinned\n  match: {verbs: [\"*\"]}\n  backends: [replica-1]\n  fallback: all\n",
        )
        .configure(|c| {
            c.terminate.hold_when_none_ready = Duration::from_secs(1);
            c.no_ready_backend = NoReadyBackendPolicy::Refuse;
        })
        .start();
    for sim in &bed.sims {
        sim.force_check("etcd", true);
        bed.kg.wait_state(&sim.name, "not_ready", T);
    }
    held_a_second_then_refused(&bed, CONFIGMAPS).await;
    let fell_back = bed
        .kg
        .metric(r#"kubegate_dispatch_fallback_total{cluster="default",rule="pinned"}"#);
    assert_eq!(fell_back, 1.0, "placed again over every replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_not_ready_replicas_may_serve_the_first_passing_probe_ends_the_wait() {
    // `no_ready_backend: alive`: a replica answering its probe again may take the held request
    // before it has passed `rise` probes (here far more than the test waits for).
    let bed = Cluster::new()
        .terminate()
        .configure(|c| {
            c.terminate.hold_when_none_ready = Duration::from_secs(60);
            c.no_ready_backend = NoReadyBackendPolicy::Alive;
        })
        .start();
    let kg = &bed.kg;
    let replica = &bed.sims[0].name;
    let mut config = bed.config.clone();
    config.health.rise = 100;
    kg.rewrite(&config);
    wait_for("the reload", T, || {
        (kg.metric(r#"kubegate_config_reloads_total{result="success"}"#) >= 1.0).then_some(())
    });
    bed.sims[0].force_check("etcd", true);
    kg.wait_state(replica, "not_ready", T);
    assert_eq!(held_until_etcd_returns(&bed).await, 200);
    assert_eq!(
        kg.state(replica).as_deref(),
        Some("not_ready"),
        "answered before ready"
    );
    assert_eq!(kg.metric(r#"kubegate_holds_total{outcome="ready"}"#), 1.0);
}

/// Etcd stops while the replicas' `/readyz` still passes (kubegate's probes here need far more
/// failures than the test lasts to call them not ready): a read every replica answers with a
/// storage failure is held and asked again until etcd is back, then answered
/// (`terminate.hold_reads_when_storage_fails`, the only hold here); one held past its client's
/// `?timeout=` gets the replicas' own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_every_replica_fails_on_its_storage_is_held_until_etcd_is_back() {
    let mut bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .configure(|c| {
            c.terminate.hold_reads_when_storage_fails = Duration::from_secs(60);
            c.health.fall = 1000;
        })
        .start();
    for sim in &bed.sims {
        bed.kg.wait_state(&sim.name, "ready", T);
    }
    assert!(bed.etcd.as_mut().unwrap().stop(T), "etcd stopped");
    let read = request(bed.kg.listen, &bed.pki);
    let impatient = request_to(
        bed.kg.listen,
        &bed.pki,
        "/api/v1/namespaces/default/configmaps?timeout=2s",
    );
    let retried = r#"kubegate_request_retries_total{reason="storage_failed"}"#;
    wait_for("reads asked again after storage failures", T, || {
        (bed.kg.metric(retried) >= 4.0).then_some(())
    });
    assert_eq!(impatient.await.unwrap(), 500, "the replicas' answer");
    assert!(!read.is_finished(), "answered while etcd was away");
    assert_eq!(
        bed.kg.state(&bed.sims[0].name).as_deref(),
        Some("ready"),
        "held as a storage outage, not for want of a ready replica"
    );
    bed.etcd.as_mut().unwrap().restart().unwrap();
    assert_eq!(read.await.unwrap(), 200);
    let kg = &bed.kg;
    assert_eq!(kg.metric(r#"kubegate_holds_total{outcome="ready"}"#), 1.0);
    assert_eq!(
        kg.metric(r#"kubegate_holds_total{outcome="timed_out"}"#),
        1.0
    );
}
