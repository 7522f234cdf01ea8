//! Terminate mode reads every request as the apiserver reads it (issue: "See every request as
//! the apiserver sees it"): real `kubegate` and `kubegate-sim` processes. Rules here send what
//! they take to a replica that is not ready, with `fallback: none`, so a request a rule takes
//! is answered 503 naming the rule, and one it does not take is answered by the other replica.
//!
//! 1. `every_way_around_a_rule_is_read_as_the_apiserver_reads_it`: percent-encoded paths,
//!    `?watch=yes` and encoded keys, a named GET with `?watch`, a stray `Upgrade` header, an
//!    encoded non-resource path, `service_accounts: ["*"]` against a certificate user; targets
//!    the apiserver refuses are refused by kubegate, never forwarded.
//! 2. `a_watch_ends_at_its_time_across_moves`: `timeoutSeconds` is kept across a resume on
//!    another replica, and a watch without it ends after `terminate.min_request_timeout`.
//! 3. `a_group_version_no_replica_serves_is_not_retried`.
//! 4. `token_clients_are_named_by_a_token_review_and_ruled`: a service account's token client
//!    is limited by a `service_accounts` rule while a certificate client beside it is not; one
//!    review serves many requests; a revoked token's name is forgotten at the apiserver's 401;
//!    a refused review leaves the client unnamed, never blocked.
//! 5. `a_flood_of_bogus_tokens_neither_switches_rules_off_nor_evicts_names`: other
//!    connections' distinct bogus tokens do not starve a limited client's review nor let it
//!    pass unlimited, and a name reviewed before the flood is kept.
//! 6. `client_certificates_are_read_as_the_apiserver_reads_them`: a name that cannot travel as
//!    a header is refused with 401, and a certificate's UID attribute reaches the apiserver
//!    as `X-Remote-Uid`.

use kubegate_e2e::*;
use std::time::{Duration, Instant};

/// The message of a `Status` answer.
fn message(r: &Response) -> String {
    serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|s| s["message"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether rule `name` took the response's request (503 naming it).
fn taken_by(r: &Response, name: &str) -> bool {
    r.status == 503 && message(r).contains(&format!("{name:?}"))
}

const RULES: &str = r#"
- {name: secrets, match: {resources: [secrets]}, backends: [replica-2], fallback: none}
- {name: watches, match: {verbs: [watch]}, backends: [replica-2], fallback: none}
- {name: deletes, match: {verbs: [delete], resources: [pods]}, backends: [replica-2], fallback: none}
- {name: version, match: {non_resource_urls: [/version]}, backends: [replica-2], fallback: none}
- {name: not-system, match: {verbs: [list], resources: [pods], namespaces: ["-kube-system"]}, backends: [replica-2], fallback: none}
- {name: any-sa, match: {verbs: [list], resources: [configmaps], service_accounts: ["*"]}, backends: [replica-2], fallback: none}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_around_a_rule_is_read_as_the_apiserver_reads_it() {
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .dispatch(RULES)
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    bed.sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", Duration::from_secs(30));
    let mut h2 = kg.connect(pki, true).await.unwrap();
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"b"}}"#;
    let r = h2.post(CONFIGMAPS, cm).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text());

    let taken = [
        // Go decodes the path before RequestInfoFactory splits it.
        ("GET", "/api/v1/namespaces/default/secret%73", "secrets"),
        ("DELETE", "/api/v1/namespaces/default/pods%2Fp", "deletes"),
        ("GET", "/vers%69on", "version"),
        ("GET", "/api/v1/namespaces/default/pods", "not-system"),
        // Any `watch` value but a missing key, 0 or false; keys decoded.
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=yes",
            "watches",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?watch",
            "watches",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?w%61tch=1",
            "watches",
        ),
    ];
    for (method, path, rule) in taken {
        let r = h2.request(method, path, None).await.unwrap();
        assert!(
            taken_by(&r, rule),
            "{method} {path}: {} {}",
            r.status,
            r.text()
        );
    }
    // Not the rules' to take, as the apiserver reads them: answered by replica-1.
    let passed = [
        // An encoded namespace excluded by name.
        "/api/v1/namespaces/kube%2Dsystem/pods",
        // watch=0 or false is a list.
        "/api/v1/namespaces/default/configmaps?watch=0&watch=1",
        // A certificate user is no service account, whatever `*` says.
        CONFIGMAPS,
    ];
    for path in passed {
        let r = h2.get(path).await.unwrap();
        assert_eq!(
            (r.status, r.replica()),
            (200, "replica-1".into()),
            "{path}: {}",
            r.text()
        );
    }
    // A named GET with ?watch=1 is a get: the object, whole (not a watch's stream).
    let r = h2
        .get("/api/v1/namespaces/default/configmaps/c?watch=1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let object = r.json();
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["data"]["a"], "b");

    // A stray Upgrade on a DELETE is an ordinary request: the rule's backends and fallback.
    let mut h1 = kg.connect(pki, false).await.unwrap();
    let r = h1
        .send(
            "DELETE",
            "/api/v1/namespaces/default/pods/p",
            &[("Connection", "Upgrade"), ("Upgrade", "foo")],
            None,
        )
        .await
        .unwrap();
    assert!(taken_by(&r, "deletes"), "{} {}", r.status, r.text());

    // What the apiserver refuses before any handler is refused here, never forwarded.
    let r = h2.get("/api/v1/namespaces/default/pods%zz").await.unwrap();
    kubegates_own(&r, 400, "");
    let r = h2.get("/api/v1/watch").await.unwrap();
    kubegates_own(&r, 500, "RequestInfo");
    assert!(kg.metric(r#"kubegate_requests_failed_total{reason="bad_request"}"#) >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_at_its_time_across_moves() {
    let bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .configure(|c| c.terminate.min_request_timeout = secs(3))
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let mut conn = kg.connect(pki, true).await.unwrap();
    let (started, mut watch) = watch_from_now(&mut conn, "&timeoutSeconds=6").await;
    // Move it: its replica starts failing, and kubegate resumes it on the other one.
    let resumes = r#"kubegate_watch_resumes_total{cause="drained"}"#;
    let first = wait_for("the watch on a replica", Duration::from_secs(10), || {
        bed.sims.iter().position(|s| {
            kg.metric(&format!(
                "kubegate_backend_long_running_requests{{backend=\"{}\"}}",
                s.name
            )) >= 1.0
        })
    });
    bed.sims[first].force_check("etcd", true);
    wait_for("the watch moved", Duration::from_secs(30), || {
        (kg.metric(resumes) >= 1.0).then_some(())
    });
    // It ends when the client said, counted from its start, not from the move.
    ends_by_itself(&mut watch, started, Duration::from_secs(5)).await;
    bed.sims[first].force_check("etcd", false);
    // Without timeoutSeconds: min_request_timeout (3 s) times [1, 2).
    let (started, mut watch) = watch_from_now(&mut conn, "").await;
    ends_by_itself(&mut watch, started, Duration::from_millis(2500)).await;
    assert!(kg.metric(r#"kubegate_watches_ended_total{reason="timeout"}"#) >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_version_no_replica_serves_is_not_retried() {
    let bed = Cluster::new().replicas(2).terminate().start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    wait_for(
        "every replica's discovery read",
        Duration::from_secs(30),
        || {
            bed.sims
                .iter()
                .all(|s| {
                    kg.metric(&format!(
                        "kubegate_backend_serves{{backend=\"{}\",group_version=\"v1\"}}",
                        s.name
                    )) == 1.0
                })
                .then_some(())
        },
    );
    let mut conn = kg.connect(pki, true).await.unwrap();
    for _ in 0..10 {
        let r = conn.get("/apis/apps/v99/deployments").await.unwrap();
        assert_eq!(r.status, 404, "{}", r.text());
        assert_ne!(r.replica(), "<none>", "the apiserver's own answer");
    }
    assert_eq!(
        kg.metric(r#"kubegate_request_retries_total{reason="not_served"}"#),
        0.0
    );
}

const SA: &str = "system:serviceaccount:ci:runner";
const SA_GROUPS: &str = "system:serviceaccounts,system:serviceaccounts:ci";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_clients_are_named_by_a_token_review_and_ruled() {
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .tokens(&[("ci-token", SA, SA_GROUPS)])
        .dispatch("- {name: ci, match: {service_accounts: [\"ci:*\"]}, limit: {rate: 1, burst: 2}}")
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let lists = CONFIGMAPS;
    let bearer = [("Authorization", "Bearer ci-token")];
    let mut ci = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    let mut passed = 0;
    let refused = loop {
        let r = ci.send("GET", lists, &bearer, None).await.unwrap();
        if r.status != 200 {
            break r;
        }
        passed += 1;
        assert!(passed < 20, "the token client was never limited");
    };
    assert!(passed >= 2, "{passed}");
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(message(&refused).contains(r#""ci""#), "{}", refused.text());
    // A certificate client beside it is not the rule's.
    let mut admin = kg.connect(pki, true).await.unwrap();
    for _ in 0..5 {
        assert_eq!(admin.get(lists).await.unwrap().status, 200);
    }
    // One review named the token for every request.
    assert_eq!(
        kg.metric(r#"kubegate_token_reviews_total{result="named"}"#),
        1.0
    );
    // A token the apiserver does not accept stays unnamed (its requests get the apiserver's
    // 401), reviewed once.
    let bogus = [("Authorization", "Bearer not-a-token")];
    for _ in 0..3 {
        let r = ci.send("GET", lists, &bogus, None).await.unwrap();
        assert_eq!(r.status, 401, "{}", r.text());
    }
    assert_eq!(
        kg.metric(r#"kubegate_token_reviews_total{result="rejected"}"#),
        1.0
    );
    assert_eq!(kg.metric("kubegate_token_review_cache_entries"), 2.0);
    assert!(!kg.log().contains("ci-token"), "a token is never logged");

    // The token is revoked (its service account deleted): the apiserver's 401 for it makes
    // kubegate forget its name at once, so the next request is reviewed again (and rejected)
    // rather than ruled under a name the token no longer has for the rest of its TTL.
    for sim in &bed.sims {
        sim.revoke_token("ci-token");
    }
    // Until the rule lets one through (it may still be over its rate): the apiserver's 401.
    for tries in 1.. {
        let r = ci.send("GET", lists, &bearer, None).await.unwrap();
        if r.status == 401 {
            break;
        }
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(tries < 10, "the rule never let the revoked token through");
        // As client-go does: after the answer's Retry-After.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let r = ci.send("GET", lists, &bearer, None).await.unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(
        kg.metric(r#"kubegate_token_reviews_total{result="rejected"}"#),
        2.0,
        "the revoked token was reviewed again"
    );

    // Reviews refused (kubegate's user lacks system:auth-delegator): the client goes unnamed,
    // served, never limited by a rule that names senders.
    let unbound = Cluster::new()
        .terminate()
        .tokens(&[("ci-token", SA, SA_GROUPS)])
        .sim_args(&["--authorization-token-reviewers", "someone-else"])
        .dispatch("- {name: ci, match: {service_accounts: [\"ci:*\"]}, limit: {rate: 1, burst: 2}}")
        .start();
    let mut ci = Conn::open_anonymous(unbound.kg.listen, &unbound.pki, true)
        .await
        .unwrap();
    for _ in 0..6 {
        let r = ci.send("GET", lists, &bearer, None).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        unbound
            .kg
            .metric(r#"kubegate_token_reviews_total{result="failed"}"#)
            >= 1.0
    );
    wait_for("the warning", Duration::from_secs(10), || {
        unbound
            .kg
            .log()
            .contains("system:auth-delegator")
            .then_some(())
    });
}

/// A flood of distinct bogus tokens from other connections: the limited service account's
/// first burst is still limited (its review is not starved, and a request kubegate could not
/// name in time is never let through as if no rule named it), and a user named before the
/// flood stays named (unknown tokens never evict named ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bogus_tokens_neither_switches_rules_off_nor_evicts_names() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    const FLOODERS: usize = 8;
    const MAX_ENTRIES: u32 = 50;
    let bed = Cluster::new()
        .terminate()
        .tokens(&[
            ("ci-token", SA, SA_GROUPS),
            ("early-token", "early-bot", "ops"),
        ])
        .dispatch(
            "- {name: ci, match: {service_accounts: [\"ci:*\"]}, limit: {rate: 0.2, burst: 1}}",
        )
        .configure(move |c| {
            // Small enough for the flood to fill: before, a full table forgot an arbitrary
            // eighth, named tokens included, and the flood took every review.
            c.terminate.token_review.max_entries = MAX_ENTRIES;
            c.terminate.token_review.max_in_flight = 2;
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let lists = CONFIGMAPS;
    let named = || kg.metric(r#"kubegate_token_reviews_total{result="named"}"#);
    // Named before the flood.
    let mut early = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    let early_bearer = [("Authorization", "Bearer early-token")];
    let r = early.send("GET", lists, &early_bearer, None).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(named(), 1.0);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut flood = Vec::new();
    for f in 0..FLOODERS {
        let mut conn = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
        let (stop, sent) = (stop.clone(), sent.clone());
        flood.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let bogus = format!("Bearer bogus-{f}-{i}");
                let r = conn
                    .send("GET", lists, &[("Authorization", bogus.as_str())], None)
                    .await
                    .expect("the flood's own requests are answered");
                assert!(matches!(r.status, 401 | 429), "{} {}", r.status, r.text());
                sent.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    wait_for("the flood under way", Duration::from_secs(30), || {
        (sent.load(Ordering::Relaxed) >= 2 * FLOODERS).then_some(())
    });
    // The limited client's first burst, while the flood runs.
    let mut ci = Conn::open_anonymous(kg.listen, pki, true).await.unwrap();
    let bearer = [("Authorization", "Bearer ci-token")];
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = ci.send("GET", lists, &bearer, None).await.unwrap();
        statuses.push(r.status);
    }
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!(
        limited >= 3,
        "the limited client passed during the flood: {statuses:?}"
    );
    // The flood goes on past the table's bound.
    let rejected = || kg.metric(r#"kubegate_token_reviews_total{result="rejected"}"#);
    wait_for(
        "the flood past the table's bound",
        Duration::from_secs(60),
        || (rejected() > f64::from(MAX_ENTRIES) * 1.5).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let named_before = named();
    let r = early.send("GET", lists, &early_bearer, None).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        named(),
        named_before,
        "early-bot was reviewed again: its name was evicted"
    );
    assert!(
        kg.metric("kubegate_token_review_cache_entries") <= f64::from(2 * MAX_ENTRIES),
        "each table stays within its bound"
    );
    println!(
        "FIGURE token-flood sent={} rejected={} ci={statuses:?}",
        sent.load(Ordering::Relaxed),
        rejected()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_read_as_the_apiserver_reads_them() {
    let bed = Cluster::new().terminate().start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    // A name with a control character cannot reach the apiserver as written: 401, not
    // anonymous, not another name.
    let mut conn = Conn::open_as_user(kg.listen, pki, "ctl", "alice\u{7}admin", &["dev"]).await;
    let r = conn.get(CONFIGMAPS).await.unwrap();
    kubegates_own(&r, 401, "cannot be passed on");
    // An untrusted client's X-Real-Ip never reaches the apiserver's audit log.
    let mut conn = kg.connect(pki, true).await.unwrap();
    let r = conn
        .send("GET", "/version", &[("X-Real-Ip", "203.0.113.66")], None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-kubegate-sim-real-ip"), None);
    // A certificate's UID attribute reaches the apiserver as `X-Remote-Uid` (1.33+); a UID
    // the client sends itself never does.
    let (crt, key) = pki.client_with_uid("with-uid", "carol", "u-7f3a");
    let mut conn = Conn::open_as(kg.listen, pki, true, &crt, &key)
        .await
        .unwrap();
    let r = conn
        .self_subject_review(&[("X-Remote-Uid", "mallory")])
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let info = &r.json()["status"]["userInfo"];
    assert_eq!(
        (info["username"].as_str(), info["uid"].as_str()),
        (Some("carol"), Some("u-7f3a"))
    );
    let mut conn = kg.connect(pki, true).await.unwrap();
    let r = conn
        .self_subject_review(&[("X-Remote-Uid", "mallory")])
        .await
        .unwrap();
    let info = &r.json()["status"]["userInfo"];
    assert_eq!(info["uid"], serde_json::Value::Null, "{info}");
}

/// `r` is kubegate's own answer (no replica saw the request): `status`, its text saying
/// `saying`.
fn kubegates_own(r: &Response, status: u16, saying: &str) {
    assert_eq!(
        (r.status, r.replica()),
        (status, "<none>".into()),
        "{}",
        r.text()
    );
    assert!(r.text().contains(saying), "{}", r.text());
}

/// A watch of ConfigMaps from now (`resourceVersion=0`) with `more` of a query, and when it
/// was asked for.
async fn watch_from_now(conn: &mut Conn, more: &str) -> (Instant, Lines) {
    let started = Instant::now();
    let path = format!("{CONFIGMAPS}?watch=1&resourceVersion=0{more}");
    let watch = conn.stream(&path).await.unwrap();
    assert_eq!(watch.status, 200);
    (started, watch)
}

/// Waits for `watch` to end cleanly by itself, no sooner than `least` after `started` (and
/// well before a stuck watch's 30 s).
async fn ends_by_itself(watch: &mut Lines, started: Instant, least: Duration) {
    let end = watch.next(Duration::from_secs(60)).await;
    let took = started.elapsed();
    assert!(matches!(end, Ok(None)), "{end:?}");
    assert!(
        took >= least && took < Duration::from_secs(30),
        "ended after {took:?}"
    );
}
