//! Leader election through the gateway, as kube-controller-manager and kube-scheduler run it:
//! two candidates compete for a `coordination.k8s.io/v1` Lease with client-go's
//! `tools/leaderelection` (lease 15 s, renew deadline 10 s, retry period 2 s), each over an
//! HTTP/2 connection of its own that behaves as client-go's: requests time out after the renew
//! deadline (kube-controller-manager sets its leader-election client's timeout to it) and are
//! cancelled, the connection is kept, and only HTTP/2 pings (after 30 s without reads, 15 s to
//! answer) give a dead connection up.
//!
//! `tryAcquireOrRenew` as client-go has it: a leader whose lease is still valid first updates
//! the Lease optimistically with the resourceVersion it last saw; otherwise (or when that
//! fails) it GETs the Lease, creates it if missing, refuses while another holder's lease is
//! valid, and UPDATEs it with the resourceVersion it read. The leader renews every retry period,
//! each renewal retried every retry period until the renew deadline; past it, the leader stops
//! leading (kube-controller-manager exits) and starts over as a candidate.
//!
//! What the report counts: the longest gap between two successful writes of the Lease, and the
//! leaderships lost (renewals that failed past the renew deadline), with leader changes beside.

use crate::client::{Client, ClientTls, ErrorClass};
use crate::record::Recorder;
use crate::traffic::{tokio_util_like::Stop, Target, NAMESPACE};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// kube-controller-manager's and kube-scheduler's `--leader-elect-lease-duration`.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// `--leader-elect-renew-deadline`.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// `--leader-elect-retry-period`.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor` for acquiring.
const JITTER: f64 = 1.2;
/// The Lease the candidates compete for (with a suffix when several elections share a store).
pub const LEASE: &str = "loadtest-leader";

/// What happened to the leadership, in ms since the run began.
#[derive(Debug, Default, Clone)]
pub struct LeaderLog {
    /// Successful writes of the Lease by a leader (acquisitions and renewals).
    pub renewals: Vec<u64>,
    /// Leaderships lost: (when, who) — a renewal that kept failing past the renew deadline.
    pub lost: Vec<(u64, String)>,
    /// Acquisitions: (when, who).
    pub acquired: Vec<(u64, String)>,
}

/// The leader log of a run, shared by its candidates.
#[derive(Default)]
pub struct Leadership {
    log: Mutex<LeaderLog>,
    /// The replica that answered the leader's last successful write (`replica-N` as N - 1).
    leader_replica: Mutex<Option<usize>>,
}

impl Leadership {
    fn with<T>(&self, f: impl FnOnce(&mut LeaderLog) -> T) -> T {
        f(&mut self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Everything so far.
    pub fn log(&self) -> LeaderLog {
        self.with(|l| l.clone())
    }

    /// The replica the leader renewed through last, if it renewed yet.
    pub fn leader_replica(&self) -> Option<usize> {
        *self
            .leader_replica
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn renewed_through(&self, replica: Option<usize>) {
        if replica.is_some() {
            *self
                .leader_replica
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = replica;
        }
    }
}

/// The Lease's spec as the candidate last saw it; any change of it (a renewal included) is
/// a sign of life of its holder, as client-go compares the raw record.
#[derive(Debug, Clone, Default, PartialEq)]
struct Record {
    holder: String,
    lease_seconds: u64,
    acquire: String,
    renew: String,
    transitions: u64,
}

impl Record {
    fn of(lease: &Value) -> Record {
        let spec = &lease["spec"];
        Record {
            holder: spec["holderIdentity"].as_str().unwrap_or_default().into(),
            lease_seconds: spec["leaseDurationSeconds"].as_u64().unwrap_or(0),
            acquire: spec["acquireTime"].as_str().unwrap_or_default().into(),
            renew: spec["renewTime"].as_str().unwrap_or_default().into(),
            transitions: spec["leaseTransitions"].as_u64().unwrap_or(0),
        }
    }
}

/// One candidate: its connection and client-go's `LeaderElector` state.
struct Candidate {
    name: String,
    /// The Lease's name.
    lease_name: String,
    addr: SocketAddr,
    tls: ClientTls,
    conn: Option<Client>,
    observed: Record,
    observed_at: Instant,
    /// The Lease object last read or written (its resourceVersion goes with an update).
    lease: Option<Value>,
    /// The replica that answered the last request.
    replica: Option<usize>,
}

/// A `metav1.MicroTime` as the API writes it.
fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

fn lease_path(name: Option<&str>) -> String {
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base,
    }
}

impl Candidate {
    fn is_leader(&self) -> bool {
        self.observed.holder == self.name
    }

    fn lease_valid(&self) -> bool {
        self.observed_at + Duration::from_secs(self.observed.lease_seconds) > Instant::now()
    }

    fn observe(&mut self, lease: Value) {
        self.observed = Record::of(&lease);
        self.observed_at = Instant::now();
        self.lease = Some(lease);
    }

    /// One request with client-go's transport behaviour: a request that times out is
    /// cancelled and its connection kept; a broken connection is dialled again next time.
    async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        deadline: Instant,
    ) -> Result<(u16, Value), ErrorClass> {
        let deadline = deadline.min(Instant::now() + RENEW_DEADLINE);
        if self.conn.as_ref().is_none_or(Client::closed) {
            let dial = Client::connect(self.addr, &self.tls, true);
            self.conn = Some(
                tokio::time::timeout_at(deadline.into(), dial)
                    .await
                    .map_err(|_| ErrorClass::Timeout)??,
            );
        }
        let conn = self.conn.as_mut().expect("connected");
        match tokio::time::timeout_at(deadline.into(), conn.send(method, path, body)).await {
            Err(_) => Err(ErrorClass::Timeout),
            Ok(Err(e)) => {
                self.conn = None;
                Err(e)
            }
            Ok(Ok(r)) => {
                self.replica = r.replica;
                Ok((
                    r.status,
                    serde_json::from_slice(&r.body).unwrap_or(Value::Null),
                ))
            }
        }
    }

    /// The Lease this candidate would write now.
    fn wanted(&self, transitions: u64, acquire: Option<&str>) -> Value {
        let now = micro_time(SystemTime::now());
        let mut lease = self.lease.clone().unwrap_or_else(|| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": self.lease_name, "namespace": NAMESPACE}})
        });
        lease["spec"] = json!({
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_DURATION.as_secs(),
            "acquireTime": acquire.map(str::to_string).unwrap_or_else(|| now.clone()),
            "renewTime": now,
            "leaseTransitions": transitions,
        });
        lease
    }

    /// client-go's `tryAcquireOrRenew`, every request before `deadline`.
    async fn try_acquire_or_renew(&mut self, deadline: Instant) -> bool {
        // 1. The leader's fast path: update with the version last seen.
        if self.is_leader() && self.lease_valid() {
            let lease = self.wanted(
                self.observed.transitions,
                Some(&self.observed.acquire.clone()),
            );
            if let Ok((200, written)) = self
                .request(
                    "PUT",
                    &lease_path(Some(&self.lease_name)),
                    Some(&lease.to_string()),
                    deadline,
                )
                .await
            {
                self.observe(written);
                return true;
            }
        }
        // 2. Read it, create it if missing.
        let current = match self
            .request("GET", &lease_path(Some(&self.lease_name)), None, deadline)
            .await
        {
            Ok((200, lease)) => lease,
            Ok((404, _)) => {
                self.lease = None;
                let lease = self.wanted(0, None);
                return self
                    .write("POST", &lease_path(None), &lease, 201, deadline)
                    .await;
            }
            _ => return false,
        };
        // 3. Another holder's valid lease: not ours to take.
        if Record::of(&current) != self.observed {
            self.observe(current.clone());
        } else {
            self.lease = Some(current);
        }
        if !self.observed.holder.is_empty() && self.lease_valid() && !self.is_leader() {
            return false;
        }
        // 4. Take or renew it with the version just read.
        let lease = if self.is_leader() {
            self.wanted(
                self.observed.transitions,
                Some(&self.observed.acquire.clone()),
            )
        } else {
            self.wanted(self.observed.transitions + 1, None)
        };
        let path = lease_path(Some(&self.lease_name));
        self.write("PUT", &path, &lease, 200, deadline).await
    }

    /// Writes `lease` (`method` at `path`); true, with what was written observed, when it
    /// was answered `written` (201 for a create, 200 for an update).
    async fn write(
        &mut self,
        method: &str,
        path: &str,
        lease: &Value,
        written: u16,
        deadline: Instant,
    ) -> bool {
        match self
            .request(method, path, Some(&lease.to_string()), deadline)
            .await
        {
            Ok((status, stored)) if status == written => {
                self.observe(stored);
                true
            }
            _ => false,
        }
    }
}

/// Two candidates for [`LEASE`] through `target`, as two kube-controller-managers on two
/// nodes, logging into `log` on `rec`'s clock; each runs until `stop`.
pub fn two_candidates(
    target: &Target,
    log: &Arc<Leadership>,
    rec: &Arc<Recorder>,
    stop: &Stop,
) -> Vec<tokio::task::JoinHandle<()>> {
    ["candidate-a", "candidate-b"]
        .into_iter()
        .map(|name| {
            let clock = rec.clone();
            tokio::spawn(candidate(
                name.into(),
                LEASE.into(),
                target.addr,
                target.tls.clone(),
                log.clone(),
                move || clock.now_ms(),
                stop.clone(),
            ))
        })
        .collect()
}

/// Runs candidate `name` for Lease `lease` against the gateway at `addr` until `stop`,
/// logging into `log` with `now` (ms since the run began).
pub async fn candidate(
    name: String,
    lease: String,
    addr: SocketAddr,
    tls: ClientTls,
    log: Arc<Leadership>,
    now: impl Fn() -> u64 + Send + 'static,
    stop: Stop,
) {
    let fresh = |name: &str| Candidate {
        name: name.to_string(),
        lease_name: lease.clone(),
        addr,
        tls: tls.clone(),
        conn: None,
        observed: Record::default(),
        observed_at: Instant::now(),
        lease: None,
        replica: None,
    };
    let mut c = fresh(&name);
    while !stop.stopped() {
        // Acquire: try now, then every retry period with jitter.
        let far = || Instant::now() + Duration::from_secs(3600);
        let acquired = loop {
            if stop.stopped() {
                return;
            }
            if c.try_acquire_or_renew(far()).await {
                break true;
            }
            let pause = RETRY_PERIOD.mul_f64(1.0 + fastrand::f64() * JITTER);
            sleep_or_stop(pause, &stop).await;
        };
        if !acquired {
            return;
        }
        let at = now();
        log.with(|l| {
            l.acquired.push((at, name.clone()));
            l.renewals.push(at);
        });
        log.renewed_through(c.replica);
        // Renew: every retry period, each renewal retried until the renew deadline.
        loop {
            sleep_or_stop(RETRY_PERIOD, &stop).await;
            if stop.stopped() {
                return;
            }
            let deadline = Instant::now() + RENEW_DEADLINE;
            let renewed = loop {
                if c.try_acquire_or_renew(deadline).await {
                    break true;
                }
                let next = Instant::now() + RETRY_PERIOD;
                if next >= deadline || stop.stopped() {
                    break false;
                }
                tokio::time::sleep_until(next.into()).await;
            };
            if stop.stopped() {
                return;
            }
            let at = now();
            if renewed {
                log.with(|l| l.renewals.push(at));
                log.renewed_through(c.replica);
            } else {
                // kube-controller-manager exits here and is restarted: a new elector.
                log.with(|l| l.lost.push((at, name.clone())));
                c = fresh(&name);
                break;
            }
        }
    }
}

async fn sleep_or_stop(d: Duration, stop: &Stop) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.stopped() {
        tokio::time::sleep((end - Instant::now()).min(Duration::from_millis(200))).await;
    }
}

/// The leadership figures of a run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LeaderReport {
    /// The longest time between two successful writes of the Lease (or from the last one to
    /// the end of the run), ms.
    pub longest_gap_ms: u64,
    /// Leaderships lost: renewals that failed past the renew deadline (ms, candidate).
    pub lost: Vec<(u64, String)>,
    /// Times the Lease changed holder after the first acquisition.
    pub changes: usize,
}

impl LeaderReport {
    /// The figures of `log` between `from_ms` (traffic began) and `end_ms`.
    pub fn of(log: &LeaderLog, from_ms: u64, end_ms: u64) -> LeaderReport {
        let mut writes: Vec<u64> = log
            .renewals
            .iter()
            .copied()
            .filter(|t| *t <= end_ms)
            .collect();
        writes.sort_unstable();
        let mut longest = 0;
        let mut last = writes.first().copied().unwrap_or(from_ms).max(from_ms);
        for &w in writes.iter().filter(|w| **w >= from_ms) {
            longest = longest.max(w - last);
            last = w;
        }
        longest = longest.max(end_ms.saturating_sub(last));
        let holders: Vec<&String> = log.acquired.iter().map(|(_, who)| who).collect();
        LeaderReport {
            longest_gap_ms: longest,
            lost: log
                .lost
                .iter()
                .filter(|(t, _)| *t <= end_ms)
                .cloned()
                .collect(),
            changes: holders.windows(2).filter(|w| w[0] != w[1]).count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_and_changes_come_from_the_log() {
        let log = LeaderLog {
            renewals: vec![1_000, 3_000, 5_000, 17_000, 19_000],
            lost: vec![(15_000, "a".into())],
            acquired: vec![(1_000, "a".into()), (17_000, "b".into())],
        };
        let r = LeaderReport::of(&log, 2_000, 20_000);
        assert_eq!(r.longest_gap_ms, 12_000);
        assert_eq!(r.lost.len(), 1);
        assert_eq!(r.changes, 1);
        // Nothing written for the last 13 s of a run: that gap counts too.
        let r = LeaderReport::of(&log, 2_000, 32_000);
        assert_eq!(r.longest_gap_ms, 32_000 - 19_000);
    }
}
