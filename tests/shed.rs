//! Rules put in force at run time (`kubegate shed`, `kubegate unshed`): real `kubegate` and
//! `kubegate-sim` processes, the CLI against the admin endpoint, clients with certificates
//! of their own.
//!
//! 1. `a_shed_turns_a_sender_away_spares_the_reserve_survives_a_restart_and_ends`: a service
//!    account's LISTs are answered 429 with the rule's `Retry-After` from the shed on, its
//!    other verbs and other users pass; a rule as wide as `system:authenticated` sheds a
//!    user but never `system:masters` or the controller manager; the rules survive a restart
//!    of kubegate (`terminate.shed_state_file`); `unshed` and an expiry give the senders back;
//!    a rule that does more than reject or names no sender, and a call from a browser, are
//!    refused.
//! 2. `a_rule_written_to_the_cluster_is_in_force_at_every_gateway_and_outlives_an_outage`:
//!    two kubegates in front of one cluster (two replicas sharing etcd) follow its shed object;
//!    `kubegate shed --kubeconfig` (through one of them) writes a rule, and both answer its
//!    user 429 with `Retry-After`, other users and `system:masters` served, a rule naming the
//!    reserve refused by the command; both replicas
//!    stopped, one kubegate restarted meanwhile still turns the user away (its state file);
//!    the replicas back, `kubegate unshed --kubeconfig` gives the user back at both.
//! 3. `the_runaway_of_a_rejected_level_is_held_back_on_its_own_and_let_go_once_it_calms`
//!    (`terminate.auto_shed`): three service accounts in `workload-low`, one costing it far
//!    more; `kubegate check --auto-shed` names it; a replica's flow control rejects the level
//!    and the runaway (only) is answered 429 by kubegate, shown in `/debug/shed` and counted;
//!    the level calms and it is let go.
//! 4. `reads_waiting_at_a_replica_when_their_sender_is_shed_are_cut_off_and_writes_are_not`:
//!    a service account's LIST and CREATE and another user's LIST wait at a slowed replica;
//!    the shed answers the LIST 429 at once (the replica counts it abandoned), the CREATE and
//!    the other user's LIST are answered by the replica.

use kubegate_e2e::*;
use std::process::{Command, Output};
use std::time::Duration;

const AGENT: &str = "system:serviceaccount:telemetry:agent";

/// `kubegate ARGS --admin ADMIN`.
fn kubegate(args: &[&str], admin: std::net::SocketAddr) -> Output {
    Command::new(bin("kubegate"))
        .args(args)
        .args(["--admin", &admin.to_string()])
        .output()
        .unwrap()
}

fn succeeded(out: Output) -> String {
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Connections through `kg` as the agent, a user, the controller manager and an
/// administrator (`system:masters`).
async fn senders(kg: &Kubegate, pki: &Pki) -> (Conn, Conn, Conn, Conn) {
    let listen = kg.listen;
    let agent = Conn::open_as_user(listen, pki, "agent", AGENT, &["system:serviceaccounts"]).await;
    let dev = Conn::open_as_user(listen, pki, "dev", "dev-user", &["dev"]).await;
    let kcm = Conn::open_as_user(listen, pki, "kcm", "system:kube-controller-manager", &[]).await;
    let admin = Conn::open(listen, pki, true).await.unwrap();
    (agent, dev, kcm, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shed_turns_a_sender_away_spares_the_reserve_survives_a_restart_and_ends() {
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("shed.json");
    let kept = state_file.clone();
    let mut bed = Cluster::new()
        .terminate()
        .configure(move |cfg| cfg.terminate.shed_state_file = Some(kept.clone()))
        .start();
    let (mut agent, mut dev, mut kcm, mut admin) = senders(&bed.kg, &bed.pki).await;

    // Its LISTs are turned away, at once, with the rule's Retry-After; its GETs pass.
    let said = succeeded(kubegate(
        &[
            "shed",
            "agent-lists",
            "--service-account",
            "telemetry:agent",
            "--verb",
            "list",
            "--retry-after",
            "30s",
            "--for",
            "10m",
        ],
        bed.kg.admin,
    ));
    assert!(
        said.starts_with("agent-lists: in force; 1 run-time rules"),
        "{said}"
    );
    let r = agent.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("30"));
    assert!(r.text().contains("agent-lists"), "{}", r.text());
    assert_eq!(
        agent
            .get(&format!("{CONFIGMAPS}/missing"))
            .await
            .unwrap()
            .status,
        404
    );
    assert_eq!(dev.get(CONFIGMAPS).await.unwrap().status, 200);

    // As wide as every authenticated user: a user is shed, the reserve is not.
    succeeded(kubegate(
        &["shed", "everyone", "--group", "system:authenticated"],
        bed.kg.admin,
    ));
    assert_eq!(dev.get(CONFIGMAPS).await.unwrap().status, 429);
    assert_eq!(
        admin.get(CONFIGMAPS).await.unwrap().status,
        200,
        "system:masters"
    );
    assert_eq!(
        kcm.get(CONFIGMAPS).await.unwrap().status,
        200,
        "a controller"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&bed.kg.admin_body("/debug/shed")).unwrap();
    let names: Vec<&str> = listed["gateway"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["everyone", "agent-lists"], "the newest first");

    // A rule that does more than reject, and a call from a browser, are refused.
    let limit = r#"{"name":"x","match":{"users":["dev-user"]},"limit":{"max_in_flight":1}}"#;
    let refused = plain_post(bed.kg.admin, "/shed", "", limit);
    assert!(
        refused.starts_with("HTTP/1.1 422") && refused.contains("only rejects"),
        "{refused}"
    );
    let nobody = r#"{"name":"x","match":{"verbs":["list"]},"reject":{}}"#;
    let refused = plain_post(bed.kg.admin, "/shed", "", nobody);
    assert!(
        refused.starts_with("HTTP/1.1 422") && refused.contains("names who"),
        "{refused}"
    );
    let reject = r#"{"name":"x","match":{"users":["dev-user"]},"reject":{}}"#;
    let browser = plain_post(
        bed.kg.admin,
        "/shed",
        "Origin: http://evil.example\r\n",
        reject,
    );
    assert!(browser.starts_with("HTTP/1.1 403"), "{browser}");

    // kubegate restarts: the rules are read back before any request is served (before its
    // replica is even found ready).
    assert!(state_file.exists());
    bed.kg.proc.signal(libc::SIGTERM);
    bed.kg.proc.wait_exit(Duration::from_secs(60));
    bed.kg = Kubegate::start(&bed.pki, &bed.config);
    let (mut agent, mut dev, _, _) = senders(&bed.kg, &bed.pki).await;
    assert_eq!(agent.get(CONFIGMAPS).await.unwrap().status, 429);
    assert_eq!(dev.get(CONFIGMAPS).await.unwrap().status, 429);
    bed.kg
        .wait_state("replica-1", "ready", Duration::from_secs(60));

    // Removed, the user is served again; a name in force no more is a 404.
    succeeded(kubegate(&["unshed", "everyone"], bed.kg.admin));
    assert_eq!(dev.get(CONFIGMAPS).await.unwrap().status, 200);
    let gone = kubegate(&["unshed", "everyone"], bed.kg.admin);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("404"),
        "{gone:?}"
    );

    // A rule ends on its own.
    succeeded(kubegate(
        &["shed", "brief", "--user", "dev-user", "--for", "2s"],
        bed.kg.admin,
    ));
    assert_eq!(dev.get(CONFIGMAPS).await.unwrap().status, 429);
    let mut served = false;
    for _ in 0..120 {
        if dev.get(CONFIGMAPS).await.unwrap().status == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(served, "the rule outlived its 2 s");
    assert_eq!(
        agent.get(CONFIGMAPS).await.unwrap().status,
        429,
        "the other rule stays"
    );
}

/// Asks `conn` for `path` until it answers `status` (or the deadline passes): how long that
/// took.
async fn until_answered(conn: &mut Conn, path: &str, status: u16) -> Duration {
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(60) {
        if conn.get(path).await.unwrap().status == status {
            return began.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} was not answered {status} within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_written_to_the_cluster_is_in_force_at_every_gateway_and_outlives_an_outage() {
    let state = tempfile::tempdir().unwrap();
    let state_a = state.path().join("a.json");
    let kept = state_a.clone();
    let mut bed = Cluster::new()
        .terminate()
        .replicas(2)
        .etcd()
        .configure(move |cfg| {
            cfg.terminate.shed_state_file = Some(kept.clone());
            cfg.terminate.shed_object = Some("kube-system/kubegate-shed".into());
        })
        .start();
    let mut second = bed.config.clone();
    second.terminate.shed_state_file = Some(state.path().join("b.json"));
    let b = Kubegate::start(&bed.pki, &second);
    for s in &bed.sims {
        b.wait_state(&s.name, "ready", Duration::from_secs(60));
    }
    // The operator's kubeconfig points at a gateway, as behind a VIP.
    let kubeconfig = bed.pki.kubeconfig(&format!("https://{}", b.listen));
    let cli = |args: &[&str]| {
        Command::new(bin("kubegate"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .unwrap()
    };
    let (mut agent_a, mut dev_a, _, mut admin_a) = senders(&bed.kg, &bed.pki).await;
    let (mut agent_b, mut dev_b, _, _) = senders(&b, &bed.pki).await;
    assert_eq!(agent_a.get(CONFIGMAPS).await.unwrap().status, 200);

    // A rule that names the agent, and one that names an administrator: system:masters stays
    // served unless a rule names the group.
    let said = succeeded(cli(&[
        "shed",
        "agent",
        "--service-account",
        "telemetry:agent",
        "--retry-after",
        "20s",
        "--for",
        "10m",
    ]));
    assert!(
        said.starts_with("agent: written to kube-system/kubegate-shed"),
        "{said}"
    );
    let said = succeeded(cli(&["shed", "admin", "--user", "kubernetes-admin"]));
    assert!(said.contains("2 rules there"), "{said}");
    let at_a = until_answered(&mut agent_a, CONFIGMAPS, 429).await;
    let at_b = until_answered(&mut agent_b, CONFIGMAPS, 429).await;
    eprintln!("shed in force {at_a:?} (a) and {at_b:?} (b) after the command returned");
    let r = agent_b.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.header("retry-after"), Some("20"), "{}", r.text());
    assert!(r.text().contains("shed:cluster:agent"), "{}", r.text());
    assert_eq!(dev_a.get(CONFIGMAPS).await.unwrap().status, 200);
    assert_eq!(dev_b.get(CONFIGMAPS).await.unwrap().status, 200);
    assert_eq!(
        admin_a.get(CONFIGMAPS).await.unwrap().status,
        200,
        "system:masters"
    );
    let listed: serde_json::Value = serde_json::from_str(&b.admin_body("/debug/shed")).unwrap();
    let names: Vec<&str> = listed["clusters"]["default"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "agent"], "{listed}");
    let metrics = b.admin_body("/metrics");
    assert!(
        metrics.contains("kubegate_shed_object_rules{cluster=\"default\"} 2"),
        "{metrics}"
    );
    let page = b.admin_body("/");
    assert!(
        page.contains("Turned away now") && page.contains("cluster default's shed object"),
        "{page}"
    );

    // A rule the gateways would refuse is never written: one that names no sender, one that
    // names the reserve (only a gateway's own endpoint may).
    let refused = cli(&["shed", "nobody", "--verb", "list"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("names who"),
        "{refused:?}"
    );
    let refused = cli(&["shed", "masters", "--group", "system:masters"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("only a gateway's own"),
        "{refused:?}"
    );

    // Every replica stops; kubegate a restarts meanwhile: the rule read back from its state
    // file turns the agent away before any replica is back.
    for s in &mut bed.sims {
        s.kill();
    }
    bed.kg.proc.signal(libc::SIGTERM);
    bed.kg.proc.wait_exit(Duration::from_secs(60));
    bed.kg = Kubegate::start(&bed.pki, &bed.config);
    let (mut agent_a, mut dev_a, _, _) = senders(&bed.kg, &bed.pki).await;
    let r = agent_a.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("20"));
    for s in &mut bed.sims {
        s.restart();
    }
    for s in &bed.sims {
        bed.kg.wait_state(&s.name, "ready", Duration::from_secs(60));
        b.wait_state(&s.name, "ready", Duration::from_secs(60));
    }
    assert_eq!(dev_a.get(CONFIGMAPS).await.unwrap().status, 200);
    assert_eq!(agent_a.get(CONFIGMAPS).await.unwrap().status, 429);

    // Removed from the cluster: the agent is served again at both; a second removal is a 404.
    succeeded(cli(&["unshed", "agent"]));
    let at_a = until_answered(&mut agent_a, CONFIGMAPS, 200).await;
    let at_b = until_answered(&mut agent_b, CONFIGMAPS, 200).await;
    eprintln!("unshed in force {at_a:?} (a) and {at_b:?} (b) after the command returned");
    let gone = cli(&["unshed", "agent"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("404"),
        "{gone:?}"
    );
}

/// `kubegate check --config FILE --auto-shed`'s output.
fn preview(config: &std::path::Path) -> String {
    succeeded(
        Command::new(bin("kubegate"))
            .args(["check", "--config"])
            .arg(config)
            .arg("--auto-shed")
            .output()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runaway_of_a_rejected_level_is_held_back_on_its_own_and_let_go_once_it_calms() {
    let bed = Cluster::new()
        .terminate()
        .replicas(2)
        .configure(|cfg| {
            cfg.terminate.auto_shed.enabled = true;
            cfg.terminate.auto_shed.factor = 3;
        })
        .start();
    let listen = bed.kg.listen;
    let sa = &["system:serviceaccounts"];
    let mut agent = Conn::open_as_user(listen, &bed.pki, "agent", AGENT, sa).await;
    let peers = [
        "system:serviceaccount:telemetry:peer",
        "system:serviceaccount:app:web",
    ];
    let mut peer = Conn::open_as_user(listen, &bed.pki, "peer", peers[0], sa).await;
    let mut web = Conn::open_as_user(listen, &bed.pki, "web", peers[1], sa).await;
    // All three fall into workload-low; the agent costs it far more than its peers.
    for _ in 0..60 {
        assert_eq!(agent.get(CONFIGMAPS).await.unwrap().status, 200);
    }
    for _ in 0..3 {
        assert_eq!(peer.get(CONFIGMAPS).await.unwrap().status, 200);
        assert_eq!(web.get(CONFIGMAPS).await.unwrap().status, 200);
    }
    // Nothing is troubled yet: no one is held back, and the check says whom it would.
    let said = preview(&bed.kg.config_path);
    assert!(
        said.contains(&format!("would hold back {AGENT}")) && !said.contains("troubled now"),
        "{said}"
    );
    assert!(
        !said.contains(&format!("would hold back {}", peers[0])),
        "{said}"
    );

    // A replica's flow control rejects the level: the agent is held back, its peers are not.
    bed.sims[0].saturate_level("workload-low", Some(3));
    // The agent goes on sending ten times what each peer does.
    let began = std::time::Instant::now();
    let mut held_back = 0;
    while held_back < 5 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the agent was not held back: {}",
            bed.kg.admin_body("/debug/shed/auto")
        );
        for _ in 0..10 {
            let r = agent.get(CONFIGMAPS).await.unwrap();
            if r.status == 429 && r.text().contains("terminate.auto_shed") {
                assert!(r.header("retry-after").is_some());
                held_back += 1;
            }
        }
        for conn in [&mut peer, &mut web] {
            let r = conn.get(CONFIGMAPS).await.unwrap();
            assert!(
                !r.text().contains("terminate.auto_shed"),
                "a peer: {}",
                r.text()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shown: serde_json::Value = serde_json::from_str(&bed.kg.admin_body("/debug/shed")).unwrap();
    assert_eq!(shown["auto"]["default"][0]["sender"], AGENT, "{shown}");
    assert!(preview(&bed.kg.config_path).contains("troubled now"));
    let page = bed.kg.admin_body("/");
    assert!(
        page.contains("Held back (auto_shed)") && page.contains(AGENT),
        "{page}"
    );
    let metrics = bed.kg.admin_body("/metrics");
    assert!(
        metrics.contains("kubegate_auto_shed_held_back_total{cluster=\"default\"} 1"),
        "{metrics}"
    );

    // The level calms: the agent is let go and served.
    bed.sims[0].saturate_level("workload-low", None);
    let calmed = std::time::Instant::now();
    loop {
        let shown: serde_json::Value =
            serde_json::from_str(&bed.kg.admin_body("/debug/shed")).unwrap();
        if shown["auto"].as_object().is_some_and(|a| a.is_empty()) {
            break;
        }
        assert!(
            calmed.elapsed() < Duration::from_secs(60),
            "still held back: {shown}"
        );
        let _ = agent.get(CONFIGMAPS).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(agent.get(CONFIGMAPS).await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_waiting_at_a_replica_when_their_sender_is_shed_are_cut_off_and_writes_are_not() {
    const T: Duration = Duration::from_secs(60);
    let bed = Cluster::new().terminate().start();
    let (listen, pki) = (bed.kg.listen, &bed.pki);
    let mut agent =
        Conn::open_as_user(listen, pki, "agent", AGENT, &["system:serviceaccounts"]).await;
    let mut dev = Conn::open_as_user(listen, pki, "dev", "dev-user", &["dev"]).await;
    let mut writer = agent.share();
    for c in [&mut agent, &mut writer, &mut dev] {
        c.set_request_timeout(Duration::from_secs(120));
    }
    // From here each request waits at the replica before it is handled (as behind a queue):
    // the rule comes while they wait; uncut, each is answered after the wait.
    bed.sims[0].set_latency_ms(5_000);
    let in_flight = || bed.kg.metric_sum("kubegate_backend_requests_in_flight");
    let before = in_flight();
    let read = tokio::spawn(async move { agent.get(CONFIGMAPS).await.unwrap() });
    let write = tokio::spawn(async move {
        let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"agent-report"}}"#;
        writer.post(CONFIGMAPS, cm).await.unwrap()
    });
    let other = tokio::spawn(async move { dev.get(CONFIGMAPS).await.unwrap() });
    wait_for("the three requests at the replica", T, || {
        (in_flight() >= before + 3.0).then_some(())
    });
    let abandoned = bed.sims[0].counted("requests_abandoned");

    succeeded(kubegate(
        &[
            "shed",
            "agent",
            "--service-account",
            "telemetry:agent",
            "--retry-after",
            "30s",
        ],
        bed.kg.admin,
    ));
    let r = read.await.unwrap();
    assert_eq!(r.status, 429, "the waiting LIST is cut off: {}", r.text());
    assert_eq!(r.header("retry-after"), Some("30"));
    assert!(
        r.text().contains("shed:agent") && r.text().contains("came into force while"),
        "{}",
        r.text()
    );
    assert_eq!(
        bed.kg
            .metric(r#"kubegate_shed_cut_off_total{cluster="default"}"#),
        1.0
    );
    wait_for("the replica to let the LIST go", T, || {
        (bed.sims[0].counted("requests_abandoned") > abandoned).then_some(())
    });
    let w = write.await.unwrap();
    assert_eq!(
        w.status,
        201,
        "a write may have been applied: never cut off: {}",
        w.text()
    );
    let o = other.await.unwrap();
    assert_eq!(
        o.status,
        200,
        "another user's read is answered: {}",
        o.text()
    );
    assert_eq!(
        bed.kg
            .metric(r#"kubegate_shed_cut_off_total{cluster="default"}"#),
        1.0,
        "only the shed sender's read"
    );
}
