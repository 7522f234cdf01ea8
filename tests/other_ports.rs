//! Another port of the same replicas (konnectivity-server's 8132, RKE2's supervisor's 9345)
//! behind a passthrough listener of its own (`backend_port`), sharing the cluster's replicas
//! and their readiness.
//!
//! 1. `another_port_follows_the_replicas_and_its_own_probe`: each replica's host runs a
//!    service on a second port; its listener spreads connections over both hosts, passes over
//!    a replica whose `/readyz` fails (the replica's readiness decides), and, with
//!    `backend_probe: tcp`, over one whose service is down while its apiserver stays ready —
//!    which is not ejected, nor its connects counted, for it. With every service down, the
//!    replicas are still tried (the connects fail), never refused as not ready.

use kubegate_config::{ListenerSpec, PortProbe};
use kubegate_e2e::*;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(30);

/// A service on `addr` that says `name` on every connection, then echoes.
async fn service(addr: SocketAddr, name: &'static str) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let _ = s.write_all(format!("{name}\n").as_bytes()).await;
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}

/// The name of the service one connection through `listen` reaches, its echo checked.
async fn reached(listen: SocketAddr) -> Option<String> {
    let mut s = tokio::time::timeout(T, TcpStream::connect(listen))
        .await
        .ok()?
        .ok()?;
    s.write_all(b"ping").await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while !got.ends_with(b"ping") {
        let n = tokio::time::timeout(T, s.read(&mut buf)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(got).ok()?;
    Some(text.lines().next()?.to_string())
}

/// The services reached by `n` connections through `listen`.
async fn spread(listen: SocketAddr, n: usize) -> HashSet<String> {
    let mut seen = HashSet::new();
    for _ in 0..n {
        if let Some(name) = reached(listen).await {
            seen.insert(name);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_port_follows_the_replicas_and_its_own_probe() {
    // Two hosts (loopback addresses), each an apiserver and a service on one port.
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (api_port, service_port) = (free_port(), free_port());
    let hosts = ["127.0.0.21", "127.0.0.22"];
    let sims: Vec<Sim> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let options = SimOptions {
                address: Some(SocketAddr::new(host.parse().unwrap(), api_port)),
                ..Default::default()
            };
            Sim::start(&pki, &format!("replica-{}", i + 1), options)
        })
        .collect();
    let at = |i: usize| SocketAddr::new(hosts[i].parse().unwrap(), service_port);
    let one = service(at(0), "service-1").await;
    let two = service(at(1), "service-2").await;
    let refs: Vec<&Sim> = sims.iter().collect();
    let mut config = KubegateConfig::new(&refs);
    let other = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut konnectivity = ListenerSpec::passthrough(other);
    konnectivity.backend_port = Some(service_port);
    konnectivity.backend_probe = Some(PortProbe::Tcp);
    config.listeners.push(konnectivity);
    let kg = Kubegate::start(&pki, &config);
    for s in &sims {
        kg.wait_state(&s.name, "ready", T);
    }

    // Both hosts' services take connections.
    wait_for("both services reached", T, || {
        let seen = futures_block(spread(other, 8));
        (seen.len() == 2).then_some(())
    });
    // The apiserver listener still reaches the apiservers.
    let mut api = Conn::open(kg.listen, &pki, true).await.unwrap();
    assert_eq!(api.get("/version").await.unwrap().status, 200);

    // replica-1's /readyz fails: its host's service gets no new connection either.
    sims[0].force_check("etcd", true);
    kg.wait_state("replica-1", "not_ready", T);
    wait_for("only service-2 reached", T, || {
        let seen = futures_block(spread(other, 6));
        (seen == HashSet::from(["service-2".to_string()])).then_some(())
    });
    sims[0].force_check("etcd", false);
    kg.wait_state("replica-1", "ready", T);

    // replica-2's service goes down while its apiserver stays ready: passed over, and the
    // replica is not ejected for it.
    two.abort();
    let _ = two.await;
    wait_for("service-2 passed over", T, || {
        let seen = futures_block(spread(other, 6));
        (seen == HashSet::from(["service-1".to_string()])).then_some(())
    });
    // No connect is tried on the dead port any more: the probe passes it over; and its
    // failures are the port's, not the apiserver's.
    let failed = kg.metric_sum("kubegate_backend_port_connect_errors_total");
    assert!(failed >= 1.0);
    assert_eq!(
        spread(other, 6).await,
        HashSet::from(["service-1".to_string()])
    );
    assert_eq!(
        kg.metric_sum("kubegate_backend_port_connect_errors_total"),
        failed
    );
    assert_eq!(kg.metric_sum("kubegate_backend_connect_errors_total"), 0.0);
    assert_eq!(kg.metric("kubegate_connect_retries_total"), 0.0);
    let replica_2 = kg
        .backends()
        .into_iter()
        .find(|b| b["name"] == "replica-2")
        .unwrap();
    assert_eq!(
        (replica_2["state"].as_str(), replica_2["ejected"].as_bool()),
        (Some("ready"), Some(false))
    );
    assert_eq!(api.get("/version").await.unwrap().status, 200);

    // Both services down: still tried (last), so the connection fails on the connects, not
    // for want of a ready replica.
    one.abort();
    let _ = one.await;
    assert_eq!(reached(other).await, None);
    wait_for("a connect failure counted", T, || {
        (kg.refused("connect_failed") >= 1.0).then_some(())
    });
    assert_eq!(kg.refused("no_ready_backend"), 0.0);
}

/// Runs `f` to completion from a synchronous wait (a test's `wait_for` polls).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
