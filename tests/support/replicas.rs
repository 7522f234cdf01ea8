//! Replicas behind a passthrough kubegate, and which replica a client connection reached (from
//! the certificate it presented): what the passthrough tests share.

use crate::client::Conn;
use crate::kubegate::Kubegate;
use crate::sim::{Sim, SimOptions};
use kubegate_testbed::Pki;
use std::collections::HashMap;
use std::time::Duration;

/// `n` simulated replicas, `replica-1` to `replica-n`, with `pki`'s certificates.
pub fn sims(pki: &Pki, n: usize) -> Vec<Sim> {
    sims_with(pki, n, SimOptions::default)
}

/// `n` simulated replicas, `replica-1` to `replica-n`, with `pki`'s certificates, each
/// started with what `options` makes.
pub fn sims_with(pki: &Pki, n: usize, options: impl Fn() -> SimOptions) -> Vec<Sim> {
    (1..=n)
        .map(|i| Sim::start(pki, &format!("replica-{i}"), options()))
        .collect()
}

/// Which replica served a connection, from the certificate it presented.
pub fn served_by<'a>(sims: &'a [Sim], conn: &Conn) -> &'a str {
    sims.iter()
        .find(|s| s.cert_der == conn.peer())
        .map(|s| s.name.as_str())
        .expect("peer certificate is one of the replicas'")
}

/// Waits until kubegate finds every one of `sims` ready.
pub fn wait_all_ready(kg: &Kubegate, sims: &[Sim]) {
    for s in sims {
        kg.wait_state(&s.name, "ready", Duration::from_secs(30));
    }
}

/// Opens `n` connections through kubegate, each proven with a request; returns them.
pub async fn open(kg: &Kubegate, pki: &Pki, n: usize) -> Vec<Conn> {
    let mut conns = Vec::new();
    for _ in 0..n {
        let mut c = kg
            .connect(pki, false)
            .await
            .expect("connect through kubegate");
        assert_eq!(c.get("/version").await.unwrap().status, 200);
        conns.push(c);
    }
    conns
}

/// How many of `conns` each replica of `sims` serves.
pub fn count<'a>(sims: &'a [Sim], conns: &[Conn]) -> HashMap<&'a str, usize> {
    let mut m = HashMap::new();
    for c in conns {
        *m.entry(served_by(sims, c)).or_insert(0) += 1;
    }
    m
}
