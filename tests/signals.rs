//! Terminate mode acts only on what the apiserver itself said: an answer a handler wrote after
//! processing, or a workload's answer passed on through the apiserver, reaches the client once
//! and steers nothing, however much it looks like one of the apiserver's own (real `kubegate`
//! and `kubegate-sim` processes; the replicas count every request they receive).
//!
//! 1. `an_eviction_a_disruption_budget_blocks_reaches_the_replicas_once`: `kubectl drain`'s
//!    429 (a JSON `Status` carrying priority and fairness's headers) is not APF's rejection.
//! 2. `a_webhooks_429_after_processing_reaches_the_replicas_once`.
//! 3. `a_proxied_pods_503_shutting_down_reaches_the_replicas_once`: the pod's words are not the
//!    apiserver's.
//!
//! Priority and fairness's own rejection is still sent to another replica: `tests/apf.rs`.

use kubegate_e2e::*;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default","labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"web"}]}}"#;

/// Two replicas on one etcd, kubegate terminating in front, and an admin connection.
async fn two_replicas() -> (Started, Conn) {
    let bed = Cluster::new().replicas(2).etcd().terminate().start();
    let admin = Conn::open(bed.kg.listen, &bed.pki, true).await.unwrap();
    (bed, admin)
}

/// A count of every replica's `/state`, together.
fn received(bed: &Started, what: &str) -> u64 {
    bed.sims.iter().map(|s| s.counted(what)).sum()
}

/// What kubegate counted of acting on answers: APF rejections seen, and attempts sent to
/// another replica for any reason.
fn acted_on(kg: &Kubegate) -> (f64, f64) {
    (
        kg.metric_sum("kubegate_apf_rejections_total"),
        kg.metric_sum("kubegate_request_retries_total"),
    )
}

/// POSTs `body` to `path` and asserts it was created.
async fn created(admin: &mut Conn, path: &str, body: &str) {
    let r = admin.post(path, body).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_a_disruption_budget_blocks_reaches_the_replicas_once() {
    let (bed, mut admin) = two_replicas().await;
    created(&mut admin, "/api/v1/namespaces/default/pods", POD).await;
    let budget = r#"{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"web"},"spec":{"maxUnavailable":0,"selector":{"matchLabels":{"app":"web"}}}}"#;
    created(
        &mut admin,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        budget,
    )
    .await;
    let before = (received(&bed, "evictions_received"), acted_on(&bed.kg));
    let eviction = r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-0","namespace":"default"}}"#;
    for _ in 0..3 {
        let r = admin
            .post("/api/v1/namespaces/default/pods/web-0/eviction", eviction)
            .await
            .unwrap();
        // The apiserver's answer, as it gave it: priority and fairness admitted the request
        // (its headers are there) and the handler refused it.
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(r.text().contains("DisruptionBudget"), "{}", r.text());
        assert!(r.header("x-kubernetes-pf-prioritylevel-uid").is_some());
    }
    assert_eq!(
        received(&bed, "evictions_received"),
        before.0 + 3,
        "each eviction reached one replica once"
    );
    assert_eq!(
        acted_on(&bed.kg),
        before.1,
        "nothing retried, no level steered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_429_after_processing_reaches_the_replicas_once() {
    let (bed, mut admin) = two_replicas().await;
    for s in &bed.sims {
        s.fault("/admission?resource=configmaps&state=deny429&webhook=quota.example.com");
    }
    let before = (received(&bed, "writes_received"), acted_on(&bed.kg));
    let r = admin
        .post(CONFIGMAPS, r#"{"metadata":{"name":"denied"}}"#)
        .await
        .unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("quota.example.com"), "{}", r.text());
    assert_eq!(received(&bed, "writes_received"), before.0 + 1);
    assert_eq!(acted_on(&bed.kg), before.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_pods_503_shutting_down_reaches_the_replicas_once() {
    let (bed, mut admin) = two_replicas().await;
    created(&mut admin, "/api/v1/namespaces/default/pods", POD).await;
    for s in &bed.sims {
        s.fault("/pod-answer?status=503&body=web-0%20is%20shutting%20down");
    }
    // A tenant's pod answering 429 as priority and fairness would, too.
    let before = (received(&bed, "proxied_received"), acted_on(&bed.kg));
    for method in ["POST", "GET"] {
        let r = admin
            .request(
                method,
                "/api/v1/namespaces/default/pods/web-0/proxy/ready",
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.status, 503, "{method}: {}", r.text());
        assert_eq!(r.text(), "web-0 is shutting down");
    }
    for s in &bed.sims {
        s.fault("/pod-answer?status=429&body=Too%20many%20requests%2C%20please%20try%20again%20later.%0A");
    }
    let r = admin
        .request(
            "POST",
            "/api/v1/namespaces/default/pods/web-0/proxy/work",
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        received(&bed, "proxied_received"),
        before.0 + 3,
        "each proxied request reached one replica once"
    );
    assert_eq!(acted_on(&bed.kg), before.1);
    // Both replicas still get new requests: nothing took one for shutting down.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = admin.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200);
        seen.insert(r.replica());
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}
