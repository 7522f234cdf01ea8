//! What each replica's flow control (API Priority and Fairness) says, read from its answers:
//! the priority level a request falls into, learned from the `X-Kubernetes-PF-PriorityLevel-UID`
//! header its earlier twins were answered with; a replica that rejects a level (APF's 429,
//! sent before any handler ran) is left out for that level's requests until its `Retry-After`
//! has passed, and a request's first attempt passes over one holding more of the level's
//! requests in flight than another (its queues for the level fill); and a rejected request
//! goes once more to another replica within a retry budget of about a tenth of the requests
//! sent, so that a hot replica cannot double the load on the others.
//!
//! A request's flow, as far as kubegate can tell, is who sends it, its verb and its resource:
//! what the apiserver's flow schemas match on. Requests with one [`FlowKey`] fall into one
//! level on every replica of a cluster (the configuration objects are shared through etcd).
//!
//! Only answers the apiserver classified carry a level, and it classifies after
//! authentication: a flood of bogus tokens (answered 401) teaches nothing. An authenticated
//! client can still make flows without end (a resource name per request, answered 404 but
//! classified), so the table keeps two generations: a flow asked for within the last
//! [`MAX_FLOWS`] new ones survives, and churn pushes out only flows nobody uses.

mod levels;

pub use levels::PriorityLevels;

use crate::state::{Backend, Pool};
use crate::terminate::upstream::replicas::PerReplica;
use http::HeaderMap;
use kubegate_health::BackendState;
use kubegate_wire::classify::RequestInfo;
use kubegate_wire::identity::UserInfo;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The response header naming the priority level's UID.
pub const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

/// The most new flows a generation holds: at most twice as many are remembered per cluster.
const MAX_FLOWS: usize = 16_384;
/// The most distinct levels remembered per cluster (an apiserver has about ten).
const MAX_LEVELS: usize = 64;

/// Who sends a request, what verb, which resource: what decides its priority level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey(u64);

/// Who a request is sent as.
pub enum Sender<'a> {
    /// A user kubegate named (a certificate's, a reviewed token's).
    User(&'a UserInfo),
    /// A bearer token kubegate passes on without naming it.
    Token(&'a str),
    /// No credentials.
    Anonymous,
}

impl FlowKey {
    /// The flow of a request of `info` sent as `sender`.
    pub fn of(sender: Sender<'_>, info: &RequestInfo<'_>) -> FlowKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match sender {
            Sender::User(u) => (0u8, &u.user, &u.groups).hash(&mut h),
            Sender::Token(t) => (1u8, t).hash(&mut h),
            Sender::Anonymous => 2u8.hash(&mut h),
        }
        (info.rbac_verb, info.target.api_group, info.target.resource).hash(&mut h);
        FlowKey(h.finish())
    }
}

/// Per cluster, all that kubegate knows of its replicas' flow control: the level each flow
/// was last answered under, each replica's levels (those it rejects, each one's requests in
/// flight and latency), and the retry budget.
pub struct Flows {
    learned: Mutex<Learned>,
    replicas: PerReplica<PriorityLevels>,
    budget: RetryBudget,
}

#[derive(Default)]
struct Learned {
    /// Flows learned or asked for since `older` was set aside.
    recent: HashMap<FlowKey, Arc<str>>,
    /// The generation before: a flow found here moves back to `recent`.
    older: HashMap<FlowKey, Arc<str>>,
    /// Each level's UID once, shared by the flows in it.
    levels: Vec<Arc<str>>,
}

impl Learned {
    /// The level of `flow`, kept for another generation since it is in use.
    fn get(&mut self, flow: FlowKey) -> Option<Arc<str>> {
        if let Some(level) = self.recent.get(&flow) {
            return Some(level.clone());
        }
        let level = self.older.remove(&flow)?;
        self.insert(flow, level.clone());
        Some(level)
    }

    fn insert(&mut self, flow: FlowKey, level: Arc<str>) {
        if self.recent.len() >= MAX_FLOWS && !self.recent.contains_key(&flow) {
            self.older = std::mem::take(&mut self.recent);
            self.older.remove(&flow);
        }
        self.recent.insert(flow, level);
    }
}

impl Default for Flows {
    fn default() -> Flows {
        Flows {
            learned: Mutex::default(),
            replicas: PerReplica::default(),
            budget: RetryBudget::new(0.1, 10.0),
        }
    }
}

impl Flows {
    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The level `flow` was last answered under, if known.
    pub fn level_of(&self, flow: FlowKey) -> Option<Arc<str>> {
        self.learned().get(flow)
    }

    /// Reads the level of an answer to `flow` from its `headers`; returns it, and whether
    /// the cluster's answers named it for the first time.
    pub fn learn(&self, flow: FlowKey, headers: &HeaderMap) -> Option<(Arc<str>, bool)> {
        let uid = headers.get(PRIORITY_LEVEL_UID)?.to_str().ok()?;
        let mut learned = self.learned();
        if let Some(known) = learned.get(flow).filter(|l| &**l == uid) {
            return Some((known, false));
        }
        let (level, first) = match learned.levels.iter().find(|l| &***l == uid) {
            Some(l) => (l.clone(), false),
            None if learned.levels.len() < MAX_LEVELS => {
                let l: Arc<str> = uid.into();
                learned.levels.push(l.clone());
                (l, true)
            }
            None => return None,
        };
        learned.insert(flow, level.clone());
        Some((level, first))
    }

    /// The levels of the replica at `address`.
    pub fn replica(&self, address: SocketAddr) -> Arc<PriorityLevels> {
        self.replicas.of(address)
    }

    /// The levels of the replica at `address`, if any request of a known level went to it.
    pub fn known(&self, address: SocketAddr) -> Option<Arc<PriorityLevels>> {
        self.replicas.known(address)
    }

    /// Forgets the replicas not at `addresses` (the pool's now).
    pub fn keep_only(&self, addresses: &[SocketAddr]) {
        self.replicas.keep_only(addresses);
    }

    /// What a request of `level` should avoid, among `pool`'s ready backends not in `tried`.
    pub fn steer(&self, pool: &Pool, level: &str, tried: &[SocketAddr]) -> Steering {
        let backends = pool.backends();
        let open =
            |b: &&Arc<Backend>| b.state() == BackendState::Ready && !tried.contains(&b.address);
        // A replica no request of a known level went to rejects none and holds none.
        let levels: Vec<(&Arc<Backend>, Option<Arc<PriorityLevels>>)> = backends
            .iter()
            .filter(open)
            .map(|b| (b, self.known(b.address)))
            .collect();
        let rejects =
            |l: &Option<Arc<PriorityLevels>>| l.as_ref().is_some_and(|l| l.rejects(level));
        let (rejecting, serving): (Vec<_>, Vec<_>) = levels.iter().partition(|(_, l)| rejects(l));
        if serving.is_empty() {
            return Steering {
                rejecting: Vec::new(),
                crowded: Vec::new(),
            };
        }
        let in_flight: Vec<u32> = serving
            .iter()
            .map(|(_, l)| l.as_ref().map_or(0, |l| l.in_flight(level)))
            .collect();
        Steering {
            rejecting: rejecting.iter().map(|(b, _)| b.address).collect(),
            crowded: serving
                .iter()
                .zip(crowded(&in_flight))
                .filter(|(_, crowded)| *crowded)
                .map(|((b, _), _)| b.address)
                .collect(),
        }
    }

    /// A request is sent: it adds to the retry budget.
    pub fn sent(&self) {
        self.budget.deposit();
    }

    /// Whether the budget allows one more attempt of a rejected request (taking it).
    pub fn may_retry(&self) -> bool {
        self.budget.withdraw()
    }
}

/// Retries earned by requests sent: each adds `ratio` of one, up to `cap` kept, and a retry
/// takes one whole. Starts full, so that the first rejections after a calm are retried.
struct RetryBudget {
    /// Thousandths of a retry.
    balance: AtomicI64,
    deposit: i64,
    cap: i64,
}

impl RetryBudget {
    fn new(ratio: f64, cap: f64) -> RetryBudget {
        RetryBudget {
            balance: AtomicI64::new((cap * 1000.0) as i64),
            deposit: (ratio * 1000.0) as i64,
            cap: (cap * 1000.0) as i64,
        }
    }

    fn deposit(&self) {
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b < self.cap).then(|| (b + self.deposit).min(self.cap))
            });
    }

    fn withdraw(&self) -> bool {
        self.balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b >= 1000).then_some(b - 1000)
            })
            .is_ok()
    }
}

/// The `Retry-After` of a rejection, in seconds (1 when it gives none or none readable).
pub fn retry_after(headers: &HeaderMap) -> Duration {
    let secs = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    Duration::from_secs(secs.min(600))
}

/// What a request of a level should avoid, among `pool`'s ready backends not in `tried`.
pub struct Steering {
    /// Those rejecting the level, while another is not: placed as tried for every attempt.
    pub rejecting: Vec<SocketAddr>,
    /// Of the others, those crowded for the level ([`crowded`]): passed over for the first
    /// attempt only, so that a retry after any failure may still go to them.
    pub crowded: Vec<SocketAddr>,
}

/// Of replicas holding `in_flight` requests of one level each, those crowded for it: holding
/// more than the fewest. A replica whose flow control queues the level holds its requests
/// longer, so more of them; placing each request where fewest are is placing it where the
/// level has room, the way `least-connections` does for requests of every kind.
pub fn crowded(in_flight: &[u32]) -> Vec<bool> {
    let fewest = in_flight.iter().copied().min().unwrap_or(0);
    in_flight.iter().map(|n| *n > fewest).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn answered_under(level: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(PRIORITY_LEVEL_UID, HeaderValue::from_str(level).unwrap());
        h
    }

    #[test]
    fn a_flows_level_is_learned_from_its_answers_and_shared() {
        let flows = Flows::default();
        let (a, b) = (FlowKey(1), FlowKey(2));
        assert_eq!(flows.level_of(a), None);
        assert_eq!(flows.learn(a, &HeaderMap::new()), None);
        let (la, first) = flows.learn(a, &answered_under("uid-low")).unwrap();
        assert!(first, "the level is new to the cluster");
        let (lb, again) = flows.learn(b, &answered_under("uid-low")).unwrap();
        assert!(!again);
        assert!(Arc::ptr_eq(&la, &lb), "one level, kept once");
        assert_eq!(flows.level_of(a).as_deref(), Some("uid-low"));
        flows.learn(a, &answered_under("uid-high"));
        assert_eq!(flows.level_of(a).as_deref(), Some("uid-high"));
    }

    #[test]
    fn what_is_learned_is_bounded() {
        let flows = Flows::default();
        for i in 0..(3 * MAX_FLOWS as u64 + 10) {
            flows.learn(FlowKey(i), &answered_under(&format!("uid-{}", i % 100)));
        }
        let learned = flows.learned();
        assert!(learned.recent.len() <= MAX_FLOWS);
        assert!(learned.older.len() <= MAX_FLOWS);
        assert_eq!(learned.levels.len(), MAX_LEVELS);
    }

    #[test]
    fn a_flow_in_use_outlives_a_churn_of_new_ones_and_an_unused_one_does_not() {
        let flows = Flows::default();
        let (hot, cold) = (FlowKey(u64::MAX), FlowKey(u64::MAX - 1));
        flows.learn(hot, &answered_under("uid-hot"));
        flows.learn(cold, &answered_under("uid-cold"));
        for i in 0..(10 * MAX_FLOWS as u64) {
            flows.learn(FlowKey(i), &answered_under("uid-churn"));
            if i % (MAX_FLOWS as u64 / 2) == 0 {
                assert_eq!(flows.level_of(hot).as_deref(), Some("uid-hot"), "at {i}");
            }
        }
        assert_eq!(flows.level_of(hot).as_deref(), Some("uid-hot"));
        assert_eq!(flows.level_of(cold), None);
    }

    #[test]
    fn the_budget_allows_a_tenth_of_the_requests_sent_once_its_start_is_spent() {
        let budget = RetryBudget::new(0.1, 10.0);
        let mut retried = 0;
        while budget.withdraw() {
            retried += 1;
        }
        assert_eq!(retried, 10, "it starts full");
        for _ in 0..1000 {
            budget.deposit();
            if budget.withdraw() {
                retried += 1;
            }
        }
        assert_eq!(retried, 10 + 100);
    }

    #[test]
    fn a_replica_is_crowded_for_a_level_above_the_fewest() {
        assert_eq!(crowded(&[]), Vec::<bool>::new());
        assert_eq!(crowded(&[0, 0, 0]), [false, false, false]);
        assert_eq!(crowded(&[2, 0]), [true, false]);
        assert_eq!(crowded(&[3, 1, 1]), [true, false, false]);
        assert_eq!(crowded(&[9, 4, 3]), [true, true, false]);
        assert_eq!(
            crowded(&[50, 50]),
            [false, false],
            "ties are the balancer's"
        );
    }

    #[test]
    fn a_retry_after_is_read_in_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), Duration::from_secs(1));
        h.insert(http::header::RETRY_AFTER, HeaderValue::from_static("8"));
        assert_eq!(retry_after(&h), Duration::from_secs(8));
    }
}
