//! End-to-end tests of terminate mode's `dispatch:` rules: real `kubegate` and `kubegate-sim`
//! processes, clients with certificates of their own. Which replica answered is read from the
//! simulator's `X-Kubegate-Sim-Replica` header.
//!
//! 1. `rules_route_by_who_and_what_and_fall_back_as_configured`: a user's LISTs go to the
//!    rule's replica, its other requests anywhere; with that replica not ready they go to the
//!    others (`fallback: all`), and after a reload to `fallback: none` they are answered 503.
//! 2. `a_limited_identity_gets_429_with_retry_after_and_watches_hold_no_slot`: a rate and a
//!    max-in-flight limit answer 429 with a `Status` and `Retry-After`; a watch holds its slot
//!    only while it is established; other users are not limited.
//! 3. `check_names_a_bad_rule_with_its_position`.
//! 4. `a_rule_that_rejects_sheds_its_sender_until_it_expires`: a `reject` rule answers its
//!    sender 429 with its `Retry-After` before any replica sees the request; an expired one
//!    takes nothing; other senders pass.

use kubegate_config::Fallback;
use kubegate_e2e::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_route_by_who_and_what_and_fall_back_as_configured() {
    let bed = Cluster::new()
        .replicas(3)
        .terminate()
        .dispatch("- name: dev-lists\n  match: {verbs: [list], users: [dev-user]}\n  backends: [replica-3]\n")
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut dev = Conn::open_as_user(kg.listen, pki, "dev", "dev-user", &["dev"]).await;
    let mut lists = HashSet::new();
    let mut gets = HashSet::new();
    for _ in 0..9 {
        let r = dev.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        lists.insert(r.replica());
        let r = dev.get("/version").await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        gets.insert(r.replica());
    }
    assert_eq!(lists, HashSet::from(["replica-3".to_string()]));
    assert!(gets.len() >= 2, "other requests go anywhere: {gets:?}");
    // Someone else's LISTs are not the rule's.
    let mut admin = kg.connect(pki, true).await.unwrap();
    let others: HashSet<String> = {
        let mut s = HashSet::new();
        for _ in 0..9 {
            s.insert(admin.get(CONFIGMAPS).await.unwrap().replica());
        }
        s
    };
    assert!(others.len() >= 2, "{others:?}");
    assert!(
        kg.metric(r#"kubegate_dispatch_requests_total{cluster="default",rule="dev-lists"}"#) >= 9.0
    );

    // The rule's replica not ready: fallback all sends its LISTs to the others.
    bed.sims[2].force_check("etcd", true);
    kg.wait_state("replica-3", "not_ready", Duration::from_secs(30));
    let r = dev.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.replica(), "replica-3");
    assert!(
        kg.metric(r#"kubegate_dispatch_fallback_total{cluster="default",rule="dev-lists"}"#) >= 1.0
    );

    // Reloaded with fallback none: 503 from kubegate, naming the rule.
    let mut config = bed.config.clone();
    config.dispatch[0].fallback = Fallback::None;
    kg.rewrite(&config);
    let deadline = Instant::now() + Duration::from_secs(30);
    let r = loop {
        let r = dev.get(CONFIGMAPS).await.unwrap();
        if r.status == 503 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the reload took no effect: {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(r.text().contains("dev-lists"), "{}", r.text());
    assert!(kg.metric(r#"kubegate_requests_failed_total{reason="no_rule_backend"}"#) >= 1.0);
    // Other requests are untouched.
    assert_eq!(dev.get("/version").await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_identity_gets_429_with_retry_after_and_watches_hold_no_slot() {
    let bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .dispatch(concat!(
            "- name: ci\n  match: {users: [ci-bot]}\n  limit: {rate: 1, burst: 2}\n",
            "- name: one-at-a-time\n  match: {users: [watcher]}\n  limit: {max_in_flight: 1}\n",
        ))
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);

    // The rate: the burst of two passes, then 429 with a Status and Retry-After (a slow
    // machine may earn a token back meanwhile: asked until refused).
    let mut ci = Conn::open_as_user(kg.listen, pki, "ci", "ci-bot", &["ci"]).await;
    let mut passed = 0;
    let refused = loop {
        let r = ci.get(CONFIGMAPS).await.unwrap();
        if r.status != 200 {
            break r;
        }
        passed += 1;
        assert!(passed < 20, "never limited");
    };
    assert!(passed >= 2, "the burst is 2: {passed} passed");
    let refused = &refused;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    let status: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    assert!(
        kg.metric(r#"kubegate_dispatch_limited_total{cluster="default",limit="rate",rule="ci"}"#)
            >= 1.0
    );
    // The connection is fine: after Retry-After, the next request passes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ci.get(CONFIGMAPS).await.unwrap().status, 200);
    // Another user is not limited.
    let mut admin = kg.connect(pki, true).await.unwrap();
    for _ in 0..5 {
        assert_eq!(admin.get(CONFIGMAPS).await.unwrap().status, 200);
    }

    // max_in_flight 1: an open watch holds no slot once established...
    let mut w = Conn::open_as_user(kg.listen, pki, "watcher", "watcher", &["dev"]).await;
    let watch = w.stream(&format!("{CONFIGMAPS}?watch=1")).await.unwrap();
    assert_eq!(watch.status, 200);
    let mut other = Conn::open_as_user(kg.listen, pki, "watcher", "watcher", &["dev"]).await;
    assert_eq!(other.get(CONFIGMAPS).await.unwrap().status, 200);
    // ...while a slow request does: the second one meanwhile is refused.
    for s in &bed.sims {
        s.set_latency_ms(5000);
    }
    let slow = tokio::spawn(async move { w.get(CONFIGMAPS).await.unwrap().status });
    let in_flight = r#"kubegate_dispatch_in_flight{cluster="default",rule="one-at-a-time"}"#;
    wait_for(
        "the slow request in flight",
        Duration::from_secs(10),
        || (kg.metric(in_flight) == 1.0).then_some(()),
    );
    let refused = other.get(CONFIGMAPS).await.unwrap();
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.text().contains("one-at-a-time"),
        "{}",
        refused.text()
    );
    assert_eq!(slow.await.unwrap(), 200);
    assert!(
        kg.metric(r#"kubegate_dispatch_limited_total{cluster="default",limit="in_flight",rule="one-at-a-time"}"#)
            >= 1.0
    );
    // The watch is still open, and holds no slot.
    assert_eq!(
        kg.metric(r#"kubegate_dispatch_in_flight{cluster="default",rule="one-at-a-time"}"#),
        0.0
    );
    drop(watch);
}

#[test]
fn check_names_a_bad_rule_with_its_position() {
    let text = |pki: &Pki| {
        let fp = pki.front_proxy();
        let (crt, key) = pki.serving("kubegate");
        let rules = "dispatch:\n  - match:\n      verbs: [list, fetch]\n    backends: [a, b]\n";
        let backends = "  - name: a\n    address: 127.0.0.1:7001\n";
        terminate_yaml(pki, (&crt, &key), (&fp.cert, &fp.key), backends, rules)
    };
    assert_check_refuses(
        text,
        &[
            ("19:21", "unknown verb \"fetch\""),
            ("20:19", "no backend is named \"b\""),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_rejects_sheds_its_sender_until_it_expires() {
    let past =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() - Duration::from_secs(60));
    let bed = Cluster::new()
        .terminate()
        .dispatch(&format!(
            concat!(
                "- name: shed-agent\n  match: {{service_accounts: [\"telemetry:agent\"]}}\n",
                "  reject: {{retry_after: 30s}}\n",
                "- name: shed-over\n  match: {{users: [ci-bot]}}\n  reject: {{}}\n",
                "  expires: \"{past}\"\n",
            ),
            past = past
        ))
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut agent = Conn::open_as_user(
        kg.listen,
        pki,
        "agent",
        "system:serviceaccount:telemetry:agent",
        &["system:serviceaccounts"],
    )
    .await;
    let r = agent.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("30"));
    let status = r.json();
    assert_eq!(status["reason"], "TooManyRequests");
    assert!(
        status["message"].as_str().unwrap().contains("shed-agent"),
        "{status}"
    );
    assert_eq!(
        kg.metric(
            r#"kubegate_dispatch_limited_total{cluster="default",limit="rejected",rule="shed-agent"}"#
        ),
        1.0
    );
    // The replica never saw it.
    assert_eq!(kg.metric_sum("kubegate_requests_total"), 0.0);
    // The expired rule takes nothing; another sender passes.
    let mut ci = Conn::open_as_user(kg.listen, pki, "ci", "ci-bot", &["ci"]).await;
    assert_eq!(ci.get(CONFIGMAPS).await.unwrap().status, 200);
    let mut admin = kg.connect(pki, true).await.unwrap();
    assert_eq!(admin.get(CONFIGMAPS).await.unwrap().status, 200);
    // `kubegate check` warns of the expired rule at its position, and the file is still
    // valid.
    let out = std::process::Command::new(bin("kubegate"))
        .args(["check", "--config"])
        .arg(&kg.config_path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("warning: this time has passed: the rule takes no request"),
        "{said}"
    );
}
