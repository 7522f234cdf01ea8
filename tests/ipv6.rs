//! kubegate over IPv6: listeners, replicas and probes on `::1`.
//!
//! 1. `both_planes_serve_and_balance_over_ipv6_loopback`: two replicas on `::1` are probed
//!    ready; passthrough spreads connections and terminate mode requests over both, and the
//!    apiserver learns the client's IPv6 address (`X-Forwarded-For: ::1`).
//! 2. `a_listener_on_both_families_names_each_client_in_its_own`: a listener on `[::]` takes
//!    IPv4 and IPv6 clients, and an IPv4 client is named `127.0.0.1`, not `::ffff:127.0.0.1`.

use kubegate_e2e::*;
use std::collections::HashSet;

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
