//! Backends from the cluster: replicas on 127.0.0.1–4 sharing one port and one etcd, each
//! keeping the `default/kubernetes` EndpointSlice with the apiserver's lease reconciler;
//! kubegate seeded with one of them.
//!
//! 1. `kubegate_follows_the_kubernetes_endpoint_slices`: the seed leads to all three; a fourth
//!    replica is found and used; one shut down is drained and removed; kubegate restarted with
//!    its seed gone still serves from its state file.
//! 2. `a_reload_adds_and_removes_a_cluster_that_discovers_its_replicas`: a cluster with
//!    `discovery` added by a reload finds its replicas beside a running cluster; removed by the
//!    next, it is forgotten with what it found.

use kubegate_e2e::*;
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// A test's directory, its PKI, the etcd its replicas share and the port each listens on
/// (at its own 127.0.0.n).
fn hosts() -> (tempfile::TempDir, Pki, Etcd, u16) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let etcd = etcd(dir.path());
    (dir, pki, etcd, free_port())
}

/// Replica `n`, at 127.0.0.n:`port`.
fn replica(pki: &Pki, etcd: &Etcd, n: u8, port: u16) -> Sim {
    Sim::start(
        pki,
        &format!("replica-{n}"),
        SimOptions {
            etcd: Some(etcd.url()),
            address: Some(SocketAddr::from(([127, 0, 0, n], port))),
            ..Default::default()
        },
    )
}

/// Backends kubegate lists, as (address, source, state).
fn listed(kg: &Kubegate) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = kg
        .backends()
        .iter()
        .map(|b| {
            (
                b["address"].as_str().unwrap().to_string(),
                b["source"].as_str().unwrap().to_string(),
                b["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn ready(kg: &Kubegate, addresses: &[SocketAddr]) -> bool {
    let l = listed(kg);
    l.len() == addresses.len()
        && addresses.iter().all(|a| {
            l.iter()
                .any(|(addr, _, state)| *addr == a.to_string() && state == "ready")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubegate_follows_the_kubernetes_endpoint_slices() {
    let (dir, pki, etcd, port) = hosts();
    let mut sims: Vec<Sim> = (1..=3).map(|n| replica(&pki, &etcd, n, port)).collect();
    let addr = |n: u8| SocketAddr::from(([127, 0, 0, n], port));

    let seed = &sims[0];
    let mut cfg = KubegateConfig::new(&[seed]);
    let state = dir.path().join("backends.json");
    cfg.discovery = Some(kubegate_config::DiscoveryConfig {
        kubeconfig: pki.kubeconfig(&format!("https://{}", seed.addr)),
        state_file: Some(state.clone()),
        debounce: secs(1),
    });
    let mut kg = Kubegate::start(&pki, &cfg);

    // The seed leads to the other two.
    wait_for("all three replicas ready", T, || {
        ready(&kg, &[addr(1), addr(2), addr(3)]).then_some(())
    });
    let l = listed(&kg);
    assert_eq!(l[0].1, "static", "{l:?}");
    assert_eq!(l[1].1, "discovered", "{l:?}");
    assert_eq!(l[2].1, "discovered", "{l:?}");
    assert_eq!(kg.metric("kubegate_discovered_backends"), 2.0);

    // A fourth replica joins the cluster: found, probed, used.
    sims.push(replica(&pki, &etcd, 4, port));
    wait_for("the fourth replica ready", T, || {
        ready(&kg, &[addr(1), addr(2), addr(3), addr(4)]).then_some(())
    });

    // One shuts down: it leaves the slice, and kubegate drains and removes it.
    sims[1].signal(libc::SIGTERM);
    wait_for("replica-2 removed", T, || {
        ready(&kg, &[addr(1), addr(3), addr(4)]).then_some(())
    });
    assert!(kg.log().contains("apiserver left the endpoint slices"));
    // The state file is written after the pool changed, not at the same instant.
    let remembered = wait_for("the state file without replica-2", T, || {
        let text = std::fs::read_to_string(&state).ok()?;
        (!text.contains(&addr(2).to_string())).then_some(text)
    });
    assert!(remembered.contains(&addr(4).to_string()), "{remembered}");

    // kubegate restarts while its seed is gone: the state file still leads to the others.
    kg.proc.signal(libc::SIGTERM);
    assert!(kg.proc.wait_exit(T).success());
    sims[0].kill();
    let kg = Kubegate::start(&pki, &cfg);
    wait_for("the remembered replicas ready", T, || {
        let l = listed(&kg);
        [addr(3), addr(4)]
            .iter()
            .all(|a| {
                l.iter().any(|(x, source, state)| {
                    *x == a.to_string() && source == "discovered" && state == "ready"
                })
            })
            .then_some(())
    });
    let mut c = kg.connect(&pki, true).await.unwrap();
    let r = c.get(CONFIGMAPS).await.unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_a_cluster_that_discovers_its_replicas() {
    let (_dir, pki, etcd, port) = hosts();
    let sims: Vec<Sim> = (1..=2).map(|n| replica(&pki, &etcd, n, port)).collect();
    let addr = |n: u8| SocketAddr::from(([127, 0, 0, n], port));
    let other = Sim::start(&pki, "other", SimOptions::default());
    let mut cfg = KubegateConfig::new(&[]);
    cfg.clusters = vec![cluster_spec(
        "a",
        &["a.example"],
        &pki,
        &[&other],
        &cfg.health,
    )];
    let kg = Kubegate::start(&pki, &cfg);
    kg.wait_state("other", "ready", T);

    // Added by a reload, seeded with replica-1: it finds replica-2.
    let mut b = cluster_spec("b", &["b.example"], &pki, &[&sims[0]], &cfg.health);
    b.discovery = Some(kubegate_config::DiscoveryConfig {
        kubeconfig: pki.kubeconfig(&format!("https://{}", sims[0].addr)),
        state_file: None,
        debounce: secs(1),
    });
    cfg.clusters.push(b);
    kg.rewrite(&cfg);
    wait_for("b's replicas found and ready", T, || {
        ready(&kg, &[addr(1), addr(2), other.addr]).then_some(())
    });
    assert_eq!(
        kg.metric(r#"kubegate_config_reloads_total{result="success"}"#),
        1.0
    );
    let found: Vec<_> = kg
        .backends()
        .into_iter()
        .filter(|b| b["address"] == addr(2).to_string())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["source"], "discovered", "{found:?}");
    assert_eq!(found[0]["cluster"], "b", "{found:?}");
    assert_eq!(kg.metric("kubegate_discovered_backends"), 1.0);

    // Removed by the next: what it found goes with it; cluster a is untouched.
    cfg.clusters.truncate(1);
    kg.rewrite(&cfg);
    wait_for("b forgotten", T, || ready(&kg, &[other.addr]).then_some(()));
    assert_eq!(
        kg.metric(r#"kubegate_config_reloads_total{result="success"}"#),
        2.0
    );
    wait_for("b's series gone", T, || {
        (!kg.admin_body("/metrics").contains(r#"cluster="b""#)).then_some(())
    });
    // What b's discovery found is no longer counted.
    assert_eq!(kg.metric("kubegate_discovered_backends"), 0.0);
}
