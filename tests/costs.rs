//! Who costs the apiservers what (`telemetry::costs`), read from a real kubegate in terminate
//! mode in front of two replicas: `/debug/senders`, the status page, `kubegate status --top`
//! and the top senders' metrics.
//!
//! 1. `the_costliest_sender_is_named_first_with_what_it_cost`: a service account LISTing in a
//!    loop (one replica's flow control rejecting its level, one watch open) beside a quiet
//!    user: named first by apiserver time, with its requests, LISTs, bytes, open watch and the
//!    rejection it met counted as they happened.
//! 2. `a_flood_of_distinct_user_agents_is_folded_and_the_heavy_one_stays_named`: 4,000 user
//!    agents, each once, past the table's 1,000 names a slot: the rest are counted as
//!    `(others)`, nothing is lost, and a user agent sent often is still named.

use kubegate_e2e::*;
use std::time::Duration;

const RUNAWAY: &str = "system:serviceaccount:telemetry:agent";

/// `/debug/senders` with `query`, as JSON.
fn senders(kg: &Kubegate, query: &str) -> serde_json::Value {
    let body = kg.admin_body(&format!("/debug/senders{query}"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The row of `list` named `name`.
fn row<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name} in {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_costliest_sender_is_named_first_with_what_it_cost() {
    const RUNS: usize = 30;
    let bed = Cluster::new().replicas(2).terminate().start();
    let kg = &bed.kg;
    let mut runaway = Conn::open_as_user(
        kg.listen,
        &bed.pki,
        "agent",
        RUNAWAY,
        &["system:serviceaccounts"],
    )
    .await;
    let mut quiet = Conn::open_as_user(kg.listen, &bed.pki, "dev", "dev-user", &["dev"]).await;
    for i in 0..5 {
        let body = format!(
            r#"{{"metadata":{{"name":"cm-{i}"}},"data":{{"k":"{}"}}}}"#,
            "v".repeat(4000)
        );
        let r = runaway.post(CONFIGMAPS, &body).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
    }
    // Its level learned, one replica rejects it: the LISTs that meet the rejection are
    // retried on the other replica, and the rejection is counted for the sender.
    bed.sims[0].saturate_level("workload-low", Some(30));
    let mut listed = 0;
    for _ in 0..RUNS {
        let r = runaway.get(CONFIGMAPS).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        listed += r.body.len();
    }
    for _ in 0..3 {
        assert_eq!(quiet.get("/version").await.unwrap().status, 200);
    }
    let mut watch = runaway
        .share()
        .watch(&format!("{CONFIGMAPS}?watch=true"), false)
        .await
        .unwrap();
    assert_eq!(watch.status, 200);

    // The watch shows once its upstream watch is open.
    let report = wait_for("the watch to be counted", Duration::from_secs(30), || {
        let report = senders(kg, "");
        (report["senders"][0]["open_watches"] == 1).then_some(report)
    });
    assert_eq!(report["window"], "1m");
    assert_eq!(report["sort"], "time");
    let first = &report["senders"][0];
    assert_eq!(first["name"], RUNAWAY, "{report}");
    assert_eq!(first["identity"], "client_certificate");
    assert_eq!(first["requests"], (5 + RUNS + 1) as u64, "{first}");
    assert_eq!(first["lists"], RUNS as u64, "{first}");
    assert!(first["apiserver_micros"].as_u64().unwrap() > 0, "{first}");
    let bytes = first["bytes"].as_u64().unwrap();
    assert!(
        bytes >= listed as u64,
        "{bytes} < the {listed} bytes of LISTs answered"
    );
    assert!(first["rejections"].as_u64().unwrap() >= 1, "{first}");
    let dev = row(&report["senders"], "dev-user");
    assert_eq!(dev["requests"], 3);
    assert_eq!(dev["lists"], 0);
    // By requests over ten minutes, the same order; the quiet user's agent is its own row.
    let ten = senders(kg, "?window=10m&sort=requests&n=1");
    assert_eq!(ten["senders"].as_array().unwrap().len(), 1);
    assert_eq!(ten["senders"][0]["name"], RUNAWAY);
    // A query it cannot read is refused, and says why.
    let bad = kg.admin_get("/debug/senders?window=1h").unwrap();
    assert!(
        bad.starts_with("HTTP/1.1 400") && bad.contains("1m or 10m"),
        "{bad}"
    );

    // The top senders' metrics, set at the scrape.
    let series = format!(
        r#"kubegate_top_sender_requests{{identity="client_certificate",sender="{RUNAWAY}"}}"#
    );
    assert_eq!(kg.metric(&series), (5 + RUNS + 1) as f64);
    assert!(kg.metric_sum("kubegate_top_sender_apiserver_seconds") > 0.0);

    // The status page and `kubegate status --top`.
    let page = kg.admin_body("/?sort=requests");
    assert!(page.contains("Who costs what, last minute"), "{page}");
    assert!(page.contains("Requests ▾"), "ordered by requests: {page}");
    let out = std::process::Command::new(bin("kubegate"))
        .args(["status", "--top", "--admin", &kg.admin.to_string()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("Who costs what over the last 1m, by time"),
        "{table}"
    );
    assert!(lines[2].starts_with("SENDER"), "{table}");
    assert!(
        lines[3].starts_with(RUNAWAY),
        "the costliest first: {table}"
    );

    // The watch ends: no longer counted as open.
    drop(watch.next(Duration::from_millis(1)).await);
    drop(watch);
    wait_for("the watch to be let go", Duration::from_secs(30), || {
        (senders(kg, "")["senders"][0]["open_watches"] == 0).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_distinct_user_agents_is_folded_and_the_heavy_one_stays_named() {
    const FLOOD: usize = 4000;
    const TASKS: usize = 4;
    let bed = Cluster::new().terminate().start();
    let kg = &bed.kg;
    let conn = kg.connect(&bed.pki, true).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let mut conn = conn.share();
        tasks.push(tokio::spawn(async move {
            for i in (t..FLOOD).step_by(TASKS) {
                let agent = format!("flood/{i:05}");
                let r = conn
                    .send("GET", "/version", &[("User-Agent", agent.as_str())], None)
                    .await
                    .unwrap();
                assert_eq!(r.status, 200);
                if i % 25 == 0 {
                    let heavy = [("User-Agent", "heavy/1.0")];
                    let r = conn.send("GET", CONFIGMAPS, &heavy, None).await.unwrap();
                    assert_eq!(r.status, 200);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Over ten minutes: one-minute slots of at most 1,000 names each. 4,000 names fit only
    // if the flood took over four minutes; here it takes seconds.
    let report = senders(kg, "?window=10m&sort=requests&n=20000");
    let agents = report["user_agents"].as_array().unwrap();
    assert!(
        agents.len() < FLOOD,
        "{} rows: nothing folded",
        agents.len()
    );
    let others = row(&report["user_agents"], "(others)");
    let folded = others["requests"].as_u64().unwrap();
    assert!(folded >= (FLOOD + 1 - agents.len()) as u64, "{folded}");
    let heavy = row(&report["user_agents"], "heavy/1.0");
    assert_eq!(
        heavy["requests"],
        (FLOOD / 25) as u64,
        "sent often: never folded"
    );
    assert_eq!(heavy["lists"], (FLOOD / 25) as u64);
    let counted: u64 = agents.iter().map(|r| r["requests"].as_u64().unwrap()).sum();
    assert_eq!(
        counted,
        (FLOOD + FLOOD / 25) as u64,
        "every request counted once"
    );
}
