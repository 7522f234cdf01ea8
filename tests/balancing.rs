//! How kubegate spreads client connections over the ready replicas (passthrough): real
//! `kubegate` and `kubegate-sim` processes on loopback with certificates made per test.
//!
//! 1. `spreads_connections_by_policy`: least-connections, round-robin and power-of-two.

use kubegate_config::BalancePolicy;
use kubegate_e2e::replicas::{count, open, sims, wait_all_ready};
use kubegate_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spreads_connections_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sims = sims(&pki, 3);
    for (policy, n) in [
        (BalancePolicy::LeastConnections, 30),
        (BalancePolicy::RoundRobin, 30),
        (BalancePolicy::PowerOfTwo, 60),
    ] {
        let mut cfg = KubegateConfig::new(&sims.iter().collect::<Vec<_>>());
        cfg.balance = policy;
        let kg = Kubegate::start(&pki, &cfg);
        wait_all_ready(&kg, &sims);
        let conns = open(&kg, &pki, n).await;
        let per = count(&sims, &conns);
        let (min, max) = (
            sims.iter()
                .map(|s| per.get(s.name.as_str()).copied().unwrap_or(0))
                .min()
                .unwrap(),
            per.values().copied().max().unwrap(),
        );
        match policy {
            // Held connections with rotating ties: exactly even.
            BalancePolicy::LeastConnections | BalancePolicy::RoundRobin => {
                assert_eq!((min, max), (n / 3, n / 3), "{policy:?}: {per:?}")
            }
            // Two random choices, the emptier wins: never far from even.
            _ => assert!(max - min <= 6 && min > 0, "{policy:?}: {per:?}"),
        }
        for s in &sims {
            let series = format!("kubegate_backend_connections{{backend=\"{}\"}}", s.name);
            assert_eq!(
                kg.metric(&series) as usize,
                per[s.name.as_str()],
                "{series}"
            );
        }
    }
}
