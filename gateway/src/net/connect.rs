//! The one loop that places new work on a backend, whatever the work is: a passthrough
//! connection (a TCP connect), a terminate-mode request (a stream on an HTTP/2 connection), an
//! upgrade (a TLS and HTTP/1.1 connect).
//!
//! While no backend is ready, the work first waits for one (`hold.rs`). Each round loads the
//! routing table (lock-free), takes its candidates under the `no_ready_backend` policy, picks
//! one not tried yet by the work's load signal, and tries it. A failure that the work says
//! allows it goes to another backend, up to `connect.attempts` backends. A failed connect is
//! reported through [`connect_failed`]: counted, logged, and the backend skipped by the
//! balancer for [`PASSIVE_EJECTION`] with a probe asked for now.

use crate::net::hold::HeldBy;
use crate::state::{Backend, Cluster, Gateway, Generation};
use crate::telemetry::ConnectError;
use kubegate_config::BalancePolicy;
use kubegate_pool::{pick, Candidates};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// How long a backend whose connect failed is skipped by the balancer before a probe decides.
pub const PASSIVE_EJECTION: Duration = Duration::from_secs(2);

/// One kind of work, as the loop places it.
pub trait Attempt {
    /// What a successful attempt gives.
    type Output;
    /// How an attempt failed.
    type Failure: Copy;

    /// The load signal backends are compared by under `policy`, for this work.
    fn load(&self, policy: BalancePolicy) -> fn(&Backend) -> u64;

    /// Tries `backend`.
    fn attempt(
        &mut self,
        backend: &Arc<Backend>,
    ) -> impl Future<Output = Result<Self::Output, Self::Failure>> + Send;

    /// Backends the first attempt passes over while another candidate is left (later ones
    /// may go to them).
    fn avoid_first(&self) -> &[SocketAddr] {
        &[]
    }

    /// Whether another backend may be tried after `failure`.
    fn may_try_another(&self, failure: Self::Failure) -> bool;

    /// Another backend is about to be tried after `failure`.
    fn retrying(&mut self, failure: Self::Failure);

    /// The longest the work's client waits for it, when it says so (a request's
    /// `?timeout=`): a hold while no backend is ready ends by then.
    fn waits_at_most(&self) -> Option<Duration> {
        None
    }

    /// The count of held work of the work's client connection, whose share of the holds it
    /// takes (`hold.rs`); `None` when a connection is one piece of work.
    fn connection_holds(&self) -> Option<&AtomicUsize> {
        None
    }
}

/// Why no backend took the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unplaced<F> {
    /// No backend could be picked at all: none ready and the policy gave none, or every
    /// candidate was in `tried` already.
    NoBackend,
    /// The last attempt failed so, and no other backend was tried after it.
    Failed(F),
}

/// Places `work` on a backend of `cluster` not in `tried` (each backend tried is added to it).
pub async fn place<A: Attempt>(
    gw: &Gateway,
    generation: &Generation,
    cluster: &Cluster,
    work: &mut A,
    tried: &mut Vec<SocketAddr>,
) -> Result<(Arc<Backend>, A::Output), Unplaced<A::Failure>> {
    let pool = cluster.pool();
    // With none of the cluster's backends ready, the work may wait for one first.
    let held_by = HeldBy {
        cluster,
        connection: work.connection_holds(),
    };
    if pool.routing().ready.is_empty() {
        // Boxed: only work that finds none ready pays for the wait's future.
        Box::pin(super::hold::until_ready(
            gw,
            generation,
            held_by,
            work.waits_at_most(),
        ))
        .await;
    }
    let c = &generation.config;
    let (policy, attempts, no_ready) = (c.balance, c.connect.attempts, c.no_ready_backend);
    let load = work.load(policy);
    let mut last = None;
    for _ in 0..attempts {
        let table = pool.routing();
        let candidates = match table.candidates(no_ready) {
            Candidates::Ready(c) => c,
            Candidates::Fallback(c) => {
                gw.metrics().net.fallback.inc();
                c
            }
            Candidates::None => break,
        };
        let first = last.is_none() && !work.avoid_first().is_empty();
        let preferred = first
            .then(|| {
                let passed_over = [tried.as_slice(), work.avoid_first()].concat();
                pick(policy, candidates, &passed_over, pool.cursor(), &load)
            })
            .flatten();
        let Some(backend) =
            preferred.or_else(|| pick(policy, candidates, tried, pool.cursor(), &load))
        else {
            break;
        };
        tried.push(backend.address);
        if let Some(failure) = last {
            work.retrying(failure);
        }
        match work.attempt(&backend).await {
            Ok(output) => return Ok((backend, output)),
            Err(failure) => {
                last = Some(failure);
                if !work.may_try_another(failure) {
                    break;
                }
            }
        }
    }
    Err(last.map_or(Unplaced::NoBackend, Unplaced::Failed))
}

/// A connect to `backend` failed with `error`: counted by reason, logged, and the backend
/// skipped by the balancer for [`PASSIVE_EJECTION`] (while others remain) with a probe asked
/// for now, so that its state follows within one probe. `purpose` says what the connection
/// was for in the log.
pub fn connect_failed(gw: &Gateway, backend: &Backend, error: &io::Error, purpose: &str) {
    let name = backend.info().name.clone();
    let reason = ConnectError::of(error);
    gw.metrics().net.connect_error(&name, reason);
    tracing::warn!(backend = %name, reason = reason.as_str(), error = %error, purpose, "connect to backend failed");
    backend.failed_passively(PASSIVE_EJECTION);
}
