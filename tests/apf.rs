//! Terminate mode and each replica's API Priority and Fairness: real `kubegate` and
//! `kubegate-sim` processes, a client with a service account's certificate (its requests
//! fall into `workload-low`), and that level saturated on a replica by traffic that does not
//! pass through kubegate (the simulator's fault port).
//!
//! 1. `a_replica_rejecting_a_level_gets_few_of_its_requests_and_no_client_sees_its_429`
//! 2. `when_every_replica_rejects_the_client_gets_the_shortest_retry_after_after_one_try_each`
//! 3. `a_replica_queueing_a_level_gets_few_of_its_requests`

use kubegate_e2e::*;
use std::collections::HashMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

const LEVEL: &str = "x-kubernetes-pf-prioritylevel-uid";
const SCHEMA: &str = "x-kubernetes-pf-flowschema-uid";

/// Two replicas behind kubegate in terminate mode, and a connection through it as a service
/// account.
async fn service_account_through_kubegate() -> (Started, Conn) {
    let bed = Cluster::new().replicas(2).terminate().start();
    let sa = service_account(&bed).await;
    (bed, sa)
}

/// A connection through `bed`'s kubegate as a service account (its requests fall into
/// `workload-low`).
async fn service_account(bed: &Started) -> Conn {
    Conn::open_as_user(
        bed.kg.listen,
        &bed.pki,
        "sa",
        "system:serviceaccount:default:app",
        &["system:serviceaccounts"],
    )
    .await
}

/// APF's rejections each replica answered, as kubegate counted them, by replica.
fn rejections(kg: &Kubegate) -> HashMap<String, f64> {
    ["replica-1", "replica-2"]
        .into_iter()
        .map(|r| {
            let n = kg
                .admin_body("/metrics")
                .lines()
                .filter(|l| {
                    l.starts_with(&format!(r#"kubegate_apf_rejections_total{{backend="{r}""#))
                })
                .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                .sum();
            (r.to_string(), n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_rejecting_a_level_gets_few_of_its_requests_and_no_client_sees_its_429() {
    let (bed, mut sa) = service_account_through_kubegate().await;
    let kg = &bed.kg;
    // Its flow's level is learned from an answer; the headers reach the client.
    let first = sa.get(CONFIGMAPS).await.unwrap();
    assert_eq!(first.status, 200);
    assert!(first.header(SCHEMA).is_some() && first.header(LEVEL).is_some());
    let level = first.header(LEVEL).unwrap().to_string();

    bed.sims[0].saturate_level("workload-low", Some(30));
    let mut answered_by = HashMap::<String, usize>::new();
    for i in 0..40 {
        let r = if i % 4 == 3 {
            // Writes too: a rejection was never processed.
            let body = format!(r#"{{"metadata":{{"name":"cm-{i}"}}}}"#);
            sa.post(CONFIGMAPS, &body).await.unwrap()
        } else {
            sa.get(CONFIGMAPS).await.unwrap()
        };
        assert!(
            r.status == 200 || r.status == 201,
            "{} {}",
            r.status,
            r.text()
        );
        assert_eq!(r.header(LEVEL), Some(level.as_str()));
        *answered_by.entry(r.replica()).or_default() += 1;
    }
    assert_eq!(answered_by.get("replica-2"), Some(&40), "{answered_by:?}");
    // Its Retry-After (30 s) keeps the saturated replica out for the level: it was tried once
    // (or twice, had a request raced the first rejection).
    let rejected = rejections(kg);
    assert!((1.0..=2.0).contains(&rejected["replica-1"]), "{rejected:?}");
    assert_eq!(rejected["replica-2"], 0.0);
    // Each flow (the LISTs, the creates) is placed freely until its level is known and the
    // replica found rejecting it: at most two requests each.
    let steered = kg.metric(&format!(
        r#"kubegate_apf_steered_total{{priority_level="{level}"}}"#
    ));
    assert!(steered >= 36.0, "{steered}");
    assert!(kg.metric(r#"kubegate_request_retries_total{reason="apf_rejected"}"#) >= 1.0);
    // The status page says why.
    let status = kg.admin_body("/");
    assert!(
        status.contains(&format!("flow control rejecting priority level {level}")),
        "{status}"
    );

    // Another level is not held off the replica: an administrator's requests (exempt) still
    // go to both.
    let mut admin = kg.connect(&bed.pki, true).await.unwrap();
    let mut replicas = std::collections::HashSet::new();
    for _ in 0..10 {
        replicas.insert(admin.get(CONFIGMAPS).await.unwrap().replica());
    }
    assert_eq!(replicas.len(), 2, "{replicas:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_replica_rejects_the_client_gets_the_shortest_retry_after_after_one_try_each() {
    let (bed, mut sa) = service_account_through_kubegate().await;
    let kg = &bed.kg;
    assert_eq!(sa.get(CONFIGMAPS).await.unwrap().status, 200);
    bed.sims[0].saturate_level("workload-low", Some(8));
    bed.sims[1].saturate_level("workload-low", Some(3));
    let r = sa.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.text(), "Too many requests, please try again later.\n");
    assert_eq!(
        r.header("retry-after"),
        Some("3"),
        "the shorter wait of the two"
    );
    assert!(
        r.header(LEVEL).is_some() && r.header(SCHEMA).is_some(),
        "never stripped"
    );
    let rejected = rejections(kg);
    assert_eq!(rejected["replica-1"], 1.0, "{rejected:?}");
    assert_eq!(rejected["replica-2"], 1.0, "{rejected:?}");

    // Both known to reject: the next request still gets one try on each, no more.
    let r = sa.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429);
    let rejected = rejections(kg);
    assert_eq!(
        rejected["replica-1"] + rejected["replica-2"],
        4.0,
        "{rejected:?}"
    );

    // Calm again: served.
    bed.sims[0].saturate_level("workload-low", None);
    bed.sims[1].saturate_level("workload-low", None);
    assert_eq!(sa.get(CONFIGMAPS).await.unwrap().status, 200);
}

/// One replica's `workload-low` queues every request for 2 s (no rejection): it holds far more
/// of the level's requests in flight than the other, which runs them at once, and gets few of
/// them — under round robin, which alone would give it every other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_queueing_a_level_gets_few_of_its_requests() {
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .configure(|c| c.balance = kubegate_config::BalancePolicy::RoundRobin)
        .start();
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(service_account(&bed).await);
    }
    // The flow's level is learned from an answer.
    let first = clients[0].get(CONFIGMAPS).await.unwrap();
    assert_eq!(first.status, 200);
    let level = first.header(LEVEL).unwrap().to_string();
    bed.sims[0].queue_level("workload-low", Some(2000));
    let sent: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let mut answered_by = Vec::new();
                for _ in 0..5 {
                    let r = c.get(CONFIGMAPS).await.unwrap();
                    assert_eq!(r.status, 200, "{}", r.text());
                    answered_by.push(r.replica());
                }
                answered_by
            })
        })
        .collect();
    let mut answered_by = HashMap::<String, usize>::new();
    for s in sent {
        for replica in s.await.unwrap() {
            *answered_by.entry(replica).or_default() += 1;
        }
    }
    let queueing = answered_by.get("replica-1").copied().unwrap_or(0);
    assert!(
        queueing <= 12,
        "round robin alone gives it about 20: {answered_by:?}"
    );
    let steered = bed.kg.metric(&format!(
        r#"kubegate_apf_steered_total{{priority_level="{level}"}}"#
    ));
    assert!(steered >= 1.0, "{steered} {answered_by:?}");
    // What the queue adds shows in the level's latency on the queueing replica.
    let backends: serde_json::Value =
        serde_json::from_str(&bed.kg.admin_body("/debug/backends")).unwrap();
    let latency = |name: &str| {
        let b = backends
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name);
        b.unwrap()["level_latency_ms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l[0] == level.as_str())
            .unwrap()[1]
            .as_f64()
            .unwrap()
    };
    assert!(latency("replica-1") >= 250.0, "{backends}");
    assert!(latency("replica-2") < latency("replica-1"), "{backends}");
}

/// A replica passed over for holding more of a level's requests (queueing them) is still where
/// a retry goes: the request sent first to the replica with fewest, which rejects it, is
/// answered by the crowded one, never 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_may_go_to_a_replica_the_first_attempt_passed_over() {
    let (bed, mut sa) = service_account_through_kubegate().await;
    let kg = &bed.kg;
    let first = sa.get(CONFIGMAPS).await.unwrap();
    let level = first.header(LEVEL).unwrap().to_string();
    // replica-2 queues the level for 6 s; replica-1 rejects it, asking for 1 s.
    bed.sims[1].queue_level("workload-low", Some(6000));
    bed.sims[0].saturate_level("workload-low", Some(1));
    let mut queued = Vec::new();
    for _ in 0..2 {
        let mut c = service_account(&bed).await;
        queued.push(tokio::spawn(async move {
            c.get(CONFIGMAPS).await.unwrap().status
        }));
    }
    // Both wait on replica-2; replica-1's Retry-After has passed, so it holds none and is
    // no longer known to reject.
    let replica = |name: &str| {
        let backends: serde_json::Value =
            serde_json::from_str(&kg.admin_body("/debug/backends")).unwrap();
        backends
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .cloned()
            .unwrap()
    };
    let ready = || {
        assert!(
            queued.iter().all(|q| !q.is_finished()),
            "a request meant to queue was answered at once (replica-1's 429, not retried)"
        );
        let on_2 =
            replica("replica-2")["level_requests_in_flight"] == serde_json::json!([[level, 2]]);
        let free = replica("replica-1")["rejecting_levels"] == serde_json::json!([]);
        (on_2 && free).then_some(())
    };
    wait_for("two requests queued on replica-2, replica-1 free", T, ready);
    let r = sa.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.replica(), "replica-2");
    for q in queued {
        assert_eq!(q.await.unwrap(), 200);
    }
}
