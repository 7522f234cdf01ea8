//! kubegate over IPv6: listeners, replicas and probes on `::1`.
//!
//! 1. `both_planes_serve_and_balance_over_ipv6_loopback`: two replicas on `::1` are probed
//!    ready; passthrough spreads connections and terminate mode requests over both, and the
//!    apiserver learns the client's IPv6 address (`X-Forwarded-For: ::1`).
//! 2. `a_listener_on_both_families_names_each_client_in_its_own`: a listener on `[::]` takes
//!    IPv4 and IPv6 clients, and an IPv4 client is named `127.0.0.1`, not `::ffff:127.0.0.1`.
//! 3. `a_replica_of_two_addresses_loses_one_and_stays_in_service`: in both planes, a replica
//!    configured at an address that is a relay to it (as its other family would be) and at its
//!    own (`other_addresses`); the relay goes away: kubegate probes the replica at its other
//!    address, moves its new work there, the replica never leaves ready, and it serves on.
//! 4. `in_a_network_of_its_own_a_dual_stack_replica_loses_its_ipv6_address_and_serves_on`: in
//!    a network namespace of the test's own, a replica bound on both families of a node with
//!    an IPv4 and an IPv6 address, configured at its IPv6 address and its IPv4 one; the IPv6
//!    address is deleted from the node: the replica stays ready, its work moves to IPv4, and
//!    kubegate serves on.

use kubegate_e2e::*;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_planes_serve_and_balance_over_ipv6_loopback() {
    for terminate in [false, true] {
        let mut cluster = Cluster::new().replicas(2).over_ipv6();
        if terminate {
            cluster = cluster.terminate();
        }
        let bed = cluster.start();
        let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
        assert!(kg.listen.is_ipv6() && sims.iter().all(|s| s.addr.is_ipv6()));
        let mut seen = HashSet::new();
        for _ in 0..8 {
            let mut conn = Conn::open(kg.listen, pki, terminate).await.unwrap();
            let r = conn.get("/version").await.unwrap();
            assert_eq!(r.status, 200, "terminate {terminate}: {}", r.text());
            if terminate {
                assert_eq!(r.header("x-kubegate-sim-forwarded-for"), Some("::1"));
                seen.insert(r.replica());
            } else {
                let by = sims.iter().find(|s| s.cert_der == conn.peer()).unwrap();
                seen.insert(by.name.clone());
            }
        }
        assert_eq!(
            seen.len(),
            2,
            "terminate {terminate}: both replicas served: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_both_families_names_each_client_in_its_own() {
    let bed = Cluster::new()
        .replicas(1)
        .terminate()
        .configure(|c| c.listeners[0].address = "[::]:6443".parse().unwrap())
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let port = kg.listen.port();
    for (client, named) in [("127.0.0.1", "127.0.0.1"), ("::1", "::1")] {
        let to = std::net::SocketAddr::new(client.parse().unwrap(), port);
        let mut conn = Conn::open(to, pki, true).await.unwrap();
        let r = conn.get("/version").await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-kubegate-sim-forwarded-for"), Some(named));
    }
}

/// A TCP relay from an address of its own to `to`, until `stop`.
struct Relay {
    listen: SocketAddr,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    /// On 127.0.0.2 (another loopback address), relaying to `to`.
    fn start(to: SocketAddr) -> Relay {
        let std_listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let listen = std_listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let kept = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let relayed = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                kept.lock().unwrap().push(relayed.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Relay { listen, tasks }
    }

    /// The address goes away: nothing listens there, and its connections are closed.
    fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// Backend `name`'s row of `/debug/backends`.
fn backend_row(kg: &Kubegate, name: &str) -> serde_json::Value {
    kg.backends()
        .into_iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("{name} in /debug/backends"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_of_two_addresses_loses_one_and_stays_in_service() {
    const T: Duration = Duration::from_secs(60);
    for terminate in [false, true] {
        let relay: Arc<Mutex<Option<Relay>>> = Arc::default();
        let made = relay.clone();
        let mut cluster = Cluster::new().configure(move |cfg| {
            let own = cfg.backends[0].address;
            let r = Relay::start(own);
            cfg.backends[0].address = r.listen;
            cfg.backends[0].other_addresses = vec![own];
            *made.lock().unwrap() = Some(r);
        });
        if terminate {
            cluster = cluster.terminate();
        }
        let bed = cluster.start();
        let (kg, pki, sim) = (&bed.kg, &bed.pki, &bed.sims[0]);
        let relay = relay.lock().unwrap().take().unwrap();
        let row = backend_row(kg, "replica-1");
        assert_eq!(row["address_in_use"], relay.listen.to_string(), "{row}");
        let mut conn = Conn::open(kg.listen, pki, terminate).await.unwrap();
        assert_eq!(conn.get("/version").await.unwrap().status, 200);

        relay.stop();
        let own = sim.addr.to_string();
        wait_for("new work to go to the replica's other address", T, || {
            (backend_row(kg, "replica-1")["address_in_use"] == own.as_str()).then_some(())
        });
        assert_eq!(kg.state("replica-1").as_deref(), Some("ready"));
        let left_ready = kg.metric(
            r#"kubegate_backend_state_transitions_total{backend="replica-1",from="ready",to="not_ready"}"#,
        ) + kg.metric(
            r#"kubegate_backend_state_transitions_total{backend="replica-1",from="ready",to="down"}"#,
        );
        assert_eq!(
            left_ready, 0.0,
            "terminate {terminate}: the replica never left ready"
        );
        let mut conn = Conn::open(kg.listen, pki, terminate).await.unwrap();
        let r = conn.get("/version").await.unwrap();
        assert_eq!(r.status, 200, "terminate {terminate}: {}", r.text());
    }
}

/// A network namespace of the test's own, entered by the calling thread: the test's runtime
/// runs on that thread alone (`#[tokio::test]`'s default), so its sockets and every process
/// it starts are in the namespace. Its loopback is up with an IPv4 and an IPv6 address of a
/// node besides `127.0.0.1` and `::1`. Deleted when dropped (after what runs in it).
struct OwnNetwork {
    name: String,
}

impl OwnNetwork {
    const V4: &str = "10.213.0.1";
    const V6: &str = "fd00:213::1";

    fn enter() -> OwnNetwork {
        use std::os::fd::AsRawFd;
        let name = format!("kubegate-test-{}", std::process::id());
        run_ok(std::process::Command::new("ip").args(["netns", "add", &name]));
        // Deleted however the rest goes.
        let net = OwnNetwork { name };
        let ns = std::fs::File::open(format!("/var/run/netns/{}", net.name)).unwrap();
        // SAFETY: setns on a descriptor we own; it changes this thread's network namespace only.
        let entered = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
        let ip = |args: &[&str]| run_ok(std::process::Command::new("ip").args(args));
        ip(&["link", "set", "lo", "up"]);
        ip(&["addr", "add", &format!("{}/32", Self::V4), "dev", "lo"]);
        ip(&[
            "-6",
            "addr",
            "add",
            &format!("{}/128", Self::V6),
            "dev",
            "lo",
            "nodad",
        ]);
        net
    }

    /// The node loses its IPv6 address.
    fn lose_v6(&self) {
        run_ok(std::process::Command::new("ip").args([
            "-6",
            "addr",
            "del",
            &format!("{}/128", Self::V6),
            "dev",
            "lo",
        ]));
    }
}

impl Drop for OwnNetwork {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[tokio::test]
async fn in_a_network_of_its_own_a_dual_stack_replica_loses_its_ipv6_address_and_serves_on() {
    const T: Duration = Duration::from_secs(60);
    let net = OwnNetwork::enter();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let port = free_port();
    let sim = Sim::start(
        &pki,
        "replica-1",
        SimOptions {
            address: Some(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))),
            ..Default::default()
        },
    );
    let v6: SocketAddr = format!("[{}]:{port}", OwnNetwork::V6).parse().unwrap();
    let v4: SocketAddr = format!("{}:{port}", OwnNetwork::V4).parse().unwrap();
    let mut config = KubegateConfig::new(&[&sim]);
    config.backends[0].address = v6;
    config.backends[0].other_addresses = vec![v4];
    let kg = Kubegate::start(&pki, &config);
    kg.wait_state("replica-1", "ready", T);
    assert_eq!(
        backend_row(&kg, "replica-1")["address_in_use"],
        v6.to_string()
    );
    let mut conn = Conn::open(kg.listen, &pki, false).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);

    net.lose_v6();
    wait_for("new work to go to the replica's IPv4 address", T, || {
        (backend_row(&kg, "replica-1")["address_in_use"] == v4.to_string().as_str()).then_some(())
    });
    assert_eq!(kg.state("replica-1").as_deref(), Some("ready"));
    let left_ready = kg.metric(
        r#"kubegate_backend_state_transitions_total{backend="replica-1",from="ready",to="not_ready"}"#,
    ) + kg.metric(
        r#"kubegate_backend_state_transitions_total{backend="replica-1",from="ready",to="down"}"#,
    );
    assert_eq!(left_ready, 0.0, "the replica never left ready");
    let mut conn = Conn::open(kg.listen, &pki, false).await.unwrap();
    let r = conn.get("/version").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    drop(kg);
    drop(sim);
}
