//! End-to-end tests of version-skew routing in terminate mode: real `kubegate` and
//! `kubegate-sim` replicas at two Kubernetes versions (1.33, serving `resource.k8s.io/v1beta1`
//! by `--runtime-config`; 1.34, serving `resource.k8s.io/v1` and not v1beta1), one etcd,
//! and real kubectl.
//!
//! 1. `a_rolling_upgrade_never_answers_404_for_what_discovery_showed`: the replicas are
//!    upgraded one by one while a client reads discovery through kubegate and at once uses the
//!    group-version it found, and kubectl gets the new resource by its new group-version:
//!    no 404, no failure; the replicas' versions and group-versions are on `/metrics` and
//!    `/debug/backends`.
//! 2. `without_skew_routing_a_replica_that_lacks_the_group_version_answers_404`: the control:
//!    with `terminate.version_skew.routing: false`, requests for the group-version only one
//!    replica serves meet the others' 404; reloaded with routing on, they no longer do.
//! 3. `a_replica_re_added_while_its_old_self_drains_is_read_once`: a reload removes a replica
//!    whose passthrough connection keeps it draining, and the next adds it back: kubegate reads
//!    what the new member serves once, not at each look while the old one drains.

use kubegate_e2e::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Flags of a replica before the upgrade.
fn old() -> Vec<String> {
    args(&[
        "--binary-version",
        "1.33.4",
        "--runtime-config",
        "resource.k8s.io/v1beta1=true",
    ])
}

/// Flags of a replica after it.
fn new() -> Vec<String> {
    args(&["--binary-version", "1.34.1"])
}

/// Three replicas at 1.33 on one etcd, kubegate terminating in front.
fn before_the_upgrade() -> Cluster {
    Cluster::new()
        .replicas(3)
        .etcd()
        .terminate()
        .sim_args(&old().iter().map(String::as_str).collect::<Vec<_>>())
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

const CLAIMS: &str = "namespaces/default/resourceclaims";

/// Waits until kubegate has learned that replica `name` reports a version starting with
/// `version`.
fn wait_learned(kg: &Kubegate, name: &str, version: &str) {
    wait_for(
        &format!("kubegate to learn {name} is {version}"),
        Duration::from_secs(60),
        || {
            kg.backends().into_iter().find(|b| {
                b["name"] == name
                    && b["state"] == "ready"
                    && b["version"]
                        .as_str()
                        .is_some_and(|v| v.starts_with(version))
            })
        },
    );
}

/// Upgrades (or downgrades) one replica the way an operator does: SIGTERM, wait for it to
/// end, start the other version on the same address.
fn restart_as(sim: &mut Sim, flags: Vec<String>) {
    sim.signal(libc::SIGTERM);
    sim.wait_exit(Duration::from_secs(60));
    sim.restart_with(flags);
}

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/kubectl");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps",
        bin.display()
    );
    Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(["--request-timeout", "20s"])
        .args(args)
        .output()
        .unwrap()
}

/// What the discovering client saw: per group-version used, the statuses it got.
type Seen = Arc<Mutex<BTreeMap<String, BTreeMap<u16, u32>>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_never_answers_404_for_what_discovery_showed() {
    let mut bed = before_the_upgrade().start();
    let kg = &bed.kg;
    for s in &bed.sims {
        wait_learned(kg, &s.name, "v1.33.4");
    }
    // Published on /metrics within a second of being learned.
    wait_for(
        "replica-2's group-versions on /metrics",
        Duration::from_secs(30),
        || {
            (kg.metric(r#"kubegate_backend_serves{backend="replica-2",group_version="resource.k8s.io/v1beta1"}"#) == 1.0)
            .then_some(())
        },
    );
    let mut admin = kg.connect(&bed.pki, true).await.unwrap();
    let created = admin
        .post(&format!("/apis/resource.k8s.io/v1beta1/{CLAIMS}"), r#"{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceClaim","metadata":{"name":"gpu"}}"#)
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());

    // The client: discovery, then at once the group-version it shows, as client-go does.
    let seen: Seen = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (seen, stop) = (seen.clone(), stop.clone());
        let mut conn = kg.connect(&bed.pki, true).await.unwrap();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let group = conn.get("/apis/resource.k8s.io").await.unwrap();
                assert_eq!(group.status, 200, "{}", group.text());
                let group: serde_json::Value = serde_json::from_slice(&group.body).unwrap();
                let gv = group["preferredVersion"]["groupVersion"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let r = conn.get(&format!("/apis/{gv}/{CLAIMS}/gpu")).await.unwrap();
                if r.status == 200 {
                    let obj = r.json();
                    assert_eq!(
                        obj["apiVersion"],
                        gv.as_str(),
                        "served in the version asked"
                    );
                } else {
                    eprintln!("{gv}: {} {}", r.status, r.text());
                }
                *seen
                    .lock()
                    .unwrap()
                    .entry(gv)
                    .or_default()
                    .entry(r.status)
                    .or_default() += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // kubectl, once the new group-version exists, asks for it by name throughout.
    let kubeconfig = bed.pki.kubeconfig(&format!("https://{}", kg.listen));
    let cache = bed.dir.path().join("kubectl-cache");
    let before = kubectl(
        &kubeconfig,
        &cache,
        &["get", "resourceclaims.v1beta1.resource.k8s.io"],
    );
    assert!(
        before.status.success(),
        "{}",
        String::from_utf8_lossy(&before.stderr)
    );

    let mut kubectl_runs: Option<(std::thread::JoinHandle<Vec<String>>, Arc<AtomicBool>)> = None;
    let names: Vec<String> = bed.sims.iter().map(|s| s.name.clone()).collect();
    for (i, name) in names.iter().enumerate() {
        restart_as(&mut bed.sims[i], new());
        wait_learned(&bed.kg, name, "v1.34.1");
        if kubectl_runs.is_none() {
            let stop = Arc::new(AtomicBool::new(false));
            let (kc, cache, stop2): (PathBuf, PathBuf, _) =
                (kubeconfig.clone(), cache.clone(), stop.clone());
            kubectl_runs = Some((
                std::thread::spawn(move || {
                    let mut failures = Vec::new();
                    let mut runs = 0;
                    while !stop2.load(Ordering::Relaxed) || runs < 3 {
                        let out = kubectl(
                            &kc,
                            &cache,
                            &[
                                "get",
                                "resourceclaims.v1.resource.k8s.io",
                                "gpu",
                                "-o",
                                "name",
                            ],
                        );
                        runs += 1;
                        if !out.status.success() {
                            failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                        }
                    }
                    failures
                }),
                stop,
            ));
        }
        // Some traffic while the replicas differ.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    let (runs, stop_kubectl) = kubectl_runs.unwrap();
    stop_kubectl.store(true, Ordering::Relaxed);
    let failures = tokio::task::spawn_blocking(move || runs.join().unwrap())
        .await
        .unwrap();
    assert!(failures.is_empty(), "kubectl failed: {failures:#?}");

    let seen = seen.lock().unwrap().clone();
    eprintln!("statuses by group-version: {seen:?}");
    for (gv, statuses) in &seen {
        assert_eq!(
            statuses.keys().collect::<Vec<_>>(),
            [&200],
            "{gv}: every request for a group-version discovery showed is answered 200"
        );
    }
    assert!(seen.contains_key("resource.k8s.io/v1beta1"), "{seen:?}");
    assert!(seen.contains_key("resource.k8s.io/v1"), "{seen:?}");
    let kg = &bed.kg;
    assert!(
        kg.metric(r#"kubegate_version_skew_routed_total{cluster="default",group_version="resource.k8s.io/v1"}"#)
            >= 1.0,
        "requests were kept off the replicas without v1"
    );
    assert!(
        kg.metric(
            r#"kubegate_version_skew_routed_total{cluster="default",group_version="discovery"}"#
        ) >= 1.0
    );
    // After the upgrade every replica serves v1 and none v1beta1.
    wait_for("v1beta1's series to go", Duration::from_secs(30), || {
        (kg.metric(
            r#"kubegate_backend_serves{backend="replica-3",group_version="resource.k8s.io/v1"}"#,
        ) == 1.0
            && !kg.admin_body("/metrics").lines().any(|l| {
                l.starts_with("kubegate_backend_serves{")
                    && l.contains(r#"group_version="resource.k8s.io/v1beta1""#)
            }))
        .then_some(())
    });
    let view = kg.backends();
    assert!(view.iter().all(|b| b["apis"] == "learned"), "{view:#?}");
    assert!(view.iter().all(|b| b["group_versions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|gv| gv == "resource.k8s.io/v1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_skew_routing_a_replica_that_lacks_the_group_version_answers_404() {
    let mut bed = before_the_upgrade()
        .configure(|c| c.terminate.version_skew.routing = false)
        .start();
    restart_as(&mut bed.sims[0], new());
    wait_learned(&bed.kg, "replica-1", "v1.34.1");
    for s in &bed.sims[1..] {
        wait_learned(&bed.kg, &s.name, "v1.33.4");
    }
    let kg = &bed.kg;
    let mut conn = kg.connect(&bed.pki, true).await.unwrap();
    let path = format!("/apis/resource.k8s.io/v1/{CLAIMS}");
    let mut statuses = BTreeMap::<u16, u32>::new();
    for _ in 0..12 {
        *statuses
            .entry(conn.get(&path).await.unwrap().status)
            .or_default() += 1;
    }
    assert!(
        statuses.get(&404).is_some_and(|n| *n > 0) && statuses.get(&200).is_some_and(|n| *n > 0),
        "spread over all three, the two 1.33 replicas answer 404: {statuses:?}"
    );

    let mut config = bed.config.clone();
    config.terminate.version_skew.routing = true;
    kg.rewrite(&config);
    wait_for("the reload", Duration::from_secs(30), || {
        (kg.metric(r#"kubegate_config_reloads_total{result="success"}"#) >= 1.0).then_some(())
    });
    for _ in 0..12 {
        let r = conn.get(&path).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-kubegate-sim-replica"), Some("replica-1"));
    }
    // What no replica serves goes where it would have gone: the apiserver answers.
    let r = conn
        .get(&format!("/apis/resource.k8s.io/v1alpha3/{CLAIMS}"))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_re_added_while_its_old_self_drains_is_read_once() {
    let passthrough = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .configure(move |c| {
            c.listeners
                .push(kubegate_config::ListenerSpec::passthrough(passthrough));
            c.drain.timeout = Duration::from_secs(120);
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    // A connection to replica-2 keeps its old self draining once it is removed.
    let mut open = Vec::new();
    while !open
        .iter()
        .any(|c| kubegate_e2e::replicas::served_by(&bed.sims, c) == "replica-2")
    {
        assert!(open.len() < 8, "the balancer never chose replica-2");
        let mut c = Conn::open(passthrough, pki, false).await.unwrap();
        assert_eq!(c.get("/version").await.unwrap().status, 200);
        open.push(c);
    }
    let members = |state: &str| {
        kg.backends()
            .into_iter()
            .filter(|b| b["name"] == "replica-2" && b["state"] == state)
            .collect::<Vec<_>>()
    };
    let mut without = bed.config.clone();
    without
        .backends
        .retain(|b| b.name.as_deref() != Some("replica-2"));
    kg.rewrite(&without);
    wait_for("replica-2 to drain", Duration::from_secs(30), || {
        (members("removed").len() == 1).then_some(())
    });
    kg.rewrite(&bed.config);
    wait_for(
        "replica-2 to be ready again, its version known",
        Duration::from_secs(60),
        || {
            let ready = members("ready");
            (ready.len() == 1 && !ready[0]["version"].is_null()).then_some(())
        },
    );
    assert_eq!(members("removed").len(), 1, "the old one still drains");
    let reads = || {
        kg.log()
            .lines()
            .filter(|l| l.contains("learned the replica's version") && l.contains("replica-2"))
            .count()
    };
    let before = reads();
    // Twelve of the versions task's looks (a quarter second each): the draining member made
    // each of them read the new one again.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            !members("ready")[0]["version"].is_null(),
            "what it serves stays known"
        );
    }
    assert!(reads() <= before + 1, "read again and again: {}", kg.log());
    drop(open);
}
