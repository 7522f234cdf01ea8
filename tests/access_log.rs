//! The access log: one line a request, saying who asked what, of which replica, with what
//! answer.
//!
//! 1. `the_access_log_says_who_asked_what_of_which_replica`.

use kubegate_e2e::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// The access log: one line per request naming the certificate's user, what was asked (verb,
/// resource, namespace, name), the replica that answered, the status and the bytes sent;
/// switched to text by a reload; held to `max_per_second`, the excess counted, never queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_says_who_asked_what_of_which_replica() {
    use kubegate_config::AccessLogFormat;
    let bed = terminating(2, &[], |cfg| {
        cfg.terminate.access_log.format = AccessLogFormat::Json;
    });
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut conn = Conn::open_as_user(kg.listen, pki, "dev", "dev-user", &["dev", "ops"]).await;
    let agent = [("User-Agent", "access-test/1")];
    let list = conn.send("GET", CONFIGMAPS, &agent, None).await.unwrap();
    assert_eq!(list.status, 200);
    let missing = conn
        .send(
            "GET",
            "/apis/apps/v1/namespaces/kube-system/deployments/nothing-here",
            &agent,
            None,
        )
        .await
        .unwrap();
    assert_eq!(missing.status, 404);
    let mut anonymous = Conn::open_anonymous(kg.listen, pki, false).await.unwrap();
    let r = anonymous
        .get_with_token(CONFIGMAPS, "tok-ops", "access-test/1")
        .await
        .unwrap();
    assert_eq!(r.status, 200);

    let lines = wait_for("three access log lines", T, || {
        let lines = kg.access_lines("access-test/1");
        (lines.len() >= 3).then_some(lines)
    });
    let names: Vec<&str> = sims.iter().map(|s| s.name.as_str()).collect();
    let list_line = &lines[0];
    assert_eq!(list_line["user"], "dev-user", "{list_line}");
    assert_eq!(list_line["groups"], serde_json::json!(["dev", "ops"]));
    assert_eq!(list_line["identity"], "client_certificate");
    assert_eq!(list_line["verb"], "list");
    assert_eq!(list_line["api_group"], "");
    assert_eq!(list_line["resource"], "configmaps");
    assert_eq!(list_line["namespace"], "default");
    assert_eq!(list_line["status"], 200);
    assert_eq!(list_line["protocol"], "h2");
    assert_eq!(list_line["bytes"].as_u64(), Some(list.body.len() as u64));
    assert_eq!(list_line["replica"], list.replica().as_str());
    assert!(names.contains(&list_line["replica"].as_str().unwrap()));
    assert!(list_line["client"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    let missing_line = &lines[1];
    assert_eq!(missing_line["verb"], "get");
    assert_eq!(missing_line["api_group"], "apps");
    assert_eq!(missing_line["resource"], "deployments");
    assert_eq!(missing_line["name"], "nothing-here");
    assert_eq!(missing_line["status"], 404);
    let token_line = &lines[2];
    assert_eq!(token_line["identity"], "bearer_token");
    assert_eq!(token_line["protocol"], "http/1.1");
    // Named by a TokenReview: the user and groups the apiserver gave the token.
    assert_eq!(token_line["user"], "ops-bot", "{token_line}");
    assert_eq!(
        token_line["groups"],
        serde_json::json!(["ops", "system:authenticated"])
    );
    assert!(
        !kg.log().contains("tok-ops"),
        "a credential reached the log"
    );

    // A reload switches to text, one line a second: a burst is mostly dropped and counted.
    let mut config = bed.config.clone();
    config.terminate.access_log.format = AccessLogFormat::Text;
    config.terminate.access_log.max_per_second = 1;
    kg.rewrite(&config);
    let deadline = std::time::Instant::now() + T;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no text line after the reload"
        );
        let r = conn
            .send("GET", "/version", &[("User-Agent", "access-test/2")], None)
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        let text = kg.log();
        if text
            .lines()
            .any(|l| l.contains("user_agent=access-test/2") && l.contains(" verb=get "))
        {
            break;
        }
        tokio::time::sleep(ms(50)).await;
    }
    let deadline = std::time::Instant::now() + T;
    while kg.metric("kubegate_access_log_dropped_total") == 0.0 {
        assert!(std::time::Instant::now() < deadline, "no line dropped");
        for _ in 0..20 {
            let r = conn
                .send("GET", "/version", &[("User-Agent", "access-test/3")], None)
                .await
                .unwrap();
            assert_eq!(r.status, 200);
        }
    }
}
