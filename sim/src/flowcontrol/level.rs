//! One priority level on one replica: its seats, its queues and what waits in them
//! (`queueset.go`, in miniature). A request that finds enough seats free and nobody queued
//! executes at once; otherwise it joins the shortest of the queues its flow is dealt
//! (shuffle sharding) and waits, at most the queue wait limit, for seats; queues are served
//! in turn. A full queue, a level that does not queue (`catch-all`), or a wait past the limit
//! rejects the request: it was never processed.

use super::bootstrap::LevelSpec;
use super::retry_after::RetryAfter;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Why a request was rejected (the `reason` label of `rejected_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RejectReason {
    /// Its queue was full.
    QueueFull,
    /// No seat was free and the level does not queue.
    ConcurrencyLimit,
    /// It waited past the queue wait limit.
    TimeOut,
}

impl RejectReason {
    /// As the metric names it.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue-full",
            RejectReason::ConcurrencyLimit => "concurrency-limit",
            RejectReason::TimeOut => "time-out",
        }
    }
}

/// What a level counted for one flow schema.
#[derive(Debug, Default, Clone)]
pub struct SchemaCounts {
    /// Seats of its requests executing now.
    pub executing_seats: usize,
    /// Its requests waiting in queues now.
    pub in_queue: usize,
    /// Requests dispatched (executed), ever.
    pub dispatched: u64,
    /// Requests rejected, ever, by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Requests whose client went away while they waited.
    pub cancelled: u64,
}

struct Waiter {
    id: u64,
    seats: usize,
    schema: &'static str,
    /// Given its seats when dispatched: a waiter that goes away after that drops them with the
    /// channel, and they return to the level.
    wake: oneshot::Sender<Seats>,
}

#[derive(Default)]
struct State {
    executing_seats: usize,
    executing_requests: usize,
    queues: Vec<VecDeque<Waiter>>,
    /// The queue served next.
    turn: usize,
    next_id: u64,
    /// Traffic the gateway does not see holds every seat and fills every queue (a fault).
    saturated: bool,
    /// The fault's own `Retry-After`, in place of the adapted one.
    pinned_retry_after: Option<i64>,
    by_schema: BTreeMap<&'static str, SchemaCounts>,
    retry_after: RetryAfter,
}

/// A priority level's runtime state.
pub struct Level {
    /// Its configuration.
    pub spec: &'static LevelSpec,
    /// Its object's UID.
    pub uid: String,
    /// Its seats on this replica (`nominalConcurrencyLimit`).
    pub seats: usize,
    wait_limit: Duration,
    /// A fault: how long each request waits in the level's queues, behind traffic the
    /// gateway does not see, before it competes for a seat (ms; 0: none).
    queued_ms: std::sync::atomic::AtomicU64,
    state: Mutex<State>,
}

/// What the level says of itself, for `/metrics` and the debug dump.
#[derive(Debug, Clone)]
pub struct LevelReport {
    /// Requests executing.
    pub executing_requests: usize,
    /// Requests waiting.
    pub waiting: usize,
    /// Queues with a request in them.
    pub active_queues: usize,
    /// Per flow schema.
    pub by_schema: BTreeMap<&'static str, SchemaCounts>,
}

/// A rejection: the level's name and the `Retry-After` to send.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub reason: RejectReason,
    /// Seconds.
    pub retry_after: i64,
}

/// Seats held by an executing request, given back when dropped.
pub struct Seats {
    level: Arc<Level>,
    seats: usize,
    schema: &'static str,
}

impl Drop for Seats {
    fn drop(&mut self) {
        if self.seats == 0 {
            // Given back already by whoever emptied it.
            return;
        }
        let mut state = self.level.state.lock().expect("level lock");
        state.executing_seats -= self.seats;
        state.executing_requests -= 1;
        state
            .by_schema
            .entry(self.schema)
            .or_default()
            .executing_seats -= self.seats;
        self.level.dispatch(&mut state);
    }
}

impl Level {
    /// A level with `seats` seats whose requests wait in queue at most `wait_limit`.
    pub fn new(spec: &'static LevelSpec, seats: usize, wait_limit: Duration) -> Level {
        let state = State {
            queues: (0..spec.queues).map(|_| VecDeque::new()).collect(),
            ..State::default()
        };
        Level {
            spec,
            uid: super::bootstrap::uid(spec.name),
            seats,
            wait_limit,
            queued_ms: Default::default(),
            state: Mutex::new(state),
        }
    }

    /// Admits a request of `flow` (a hash of its schema and distinguisher) costing `width`
    /// seats: at once, after a wait in queue, or not at all.
    pub async fn admit(
        self: &Arc<Self>,
        schema: &'static str,
        flow: u64,
        width: usize,
    ) -> Result<Seats, Rejected> {
        let width = width.clamp(1, self.seats.max(1));
        let queued = self.queued_ms.load(std::sync::atomic::Ordering::Relaxed);
        if queued > 0 {
            tokio::time::sleep(Duration::from_millis(queued)).await;
        }
        let (id, mut woken) = {
            let mut state = self.state.lock().expect("level lock");
            if state.saturated {
                let reason = if self.spec.queues == 0 {
                    RejectReason::ConcurrencyLimit
                } else {
                    RejectReason::QueueFull
                };
                return Err(self.reject(&mut state, schema, reason));
            }
            let queued = state.queues.iter().any(|q| !q.is_empty());
            if !queued && state.executing_seats + width <= self.seats {
                return Ok(self.execute(&mut state, schema, width));
            }
            if self.spec.queues == 0 {
                return Err(self.reject(&mut state, schema, RejectReason::ConcurrencyLimit));
            }
            let queue = self.shortest_in_hand(&state, flow);
            if state.queues[queue].len() >= self.spec.queue_length_limit {
                return Err(self.reject(&mut state, schema, RejectReason::QueueFull));
            }
            let (wake, woken) = oneshot::channel();
            state.next_id += 1;
            let id = state.next_id;
            state.queues[queue].push_back(Waiter {
                id,
                seats: width,
                schema,
                wake,
            });
            state.by_schema.entry(schema).or_default().in_queue += 1;
            (id, woken)
        };
        // Dropped while waiting (the client went away): the waiter stays queued with its
        // receiver gone, and `dispatch` counts it cancelled when its turn comes.
        if let Ok(Ok(seats)) = tokio::time::timeout(self.wait_limit, &mut woken).await {
            return Ok(seats);
        }
        let mut state = self.state.lock().expect("level lock");
        let still_queued = state.queues.iter_mut().find_map(|q| {
            let at = q.iter().position(|w| w.id == id)?;
            q.remove(at)
        });
        match still_queued {
            Some(_) => {
                state.by_schema.entry(schema).or_default().in_queue -= 1;
                Err(self.reject(&mut state, schema, RejectReason::TimeOut))
            }
            // Dispatched as the wait ran out: its seats are in the channel.
            None => Ok(woken
                .try_recv()
                .expect("a dispatched waiter was sent its seats")),
        }
    }

    /// Starts or ends the saturating fault; `retry_after` pins the rejections' `Retry-After`
    /// meanwhile (as a level under a long flood would ask).
    pub fn saturate(&self, saturated: bool, retry_after: Option<i64>) {
        let mut state = self.state.lock().expect("level lock");
        state.saturated = saturated;
        state.pinned_retry_after = retry_after.filter(|_| saturated);
    }

    /// Starts (`Some`) or ends the queueing fault: each request waits that long first.
    pub fn queue(&self, wait: Option<Duration>) {
        let ms = wait.map_or(0, |w| w.as_millis().max(1) as u64);
        self.queued_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// What it holds and counted.
    pub fn report(&self) -> LevelReport {
        let state = self.state.lock().expect("level lock");
        LevelReport {
            executing_requests: state.executing_requests,
            waiting: state.queues.iter().map(VecDeque::len).sum(),
            active_queues: state.queues.iter().filter(|q| !q.is_empty()).count(),
            by_schema: state.by_schema.clone(),
        }
    }

    fn execute(self: &Arc<Self>, state: &mut State, schema: &'static str, width: usize) -> Seats {
        state.executing_seats += width;
        state.executing_requests += 1;
        let counts = state.by_schema.entry(schema).or_default();
        counts.executing_seats += width;
        counts.dispatched += 1;
        Seats {
            level: self.clone(),
            seats: width,
            schema,
        }
    }

    fn reject(&self, state: &mut State, schema: &'static str, reason: RejectReason) -> Rejected {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        state.retry_after.rejected(unix);
        *state
            .by_schema
            .entry(schema)
            .or_default()
            .rejected
            .entry(reason)
            .or_default() += 1;
        Rejected {
            reason,
            retry_after: state
                .pinned_retry_after
                .unwrap_or_else(|| state.retry_after.seconds()),
        }
    }

    /// The shortest of the `hand_size` queues dealt to `flow` (the first on a tie).
    fn shortest_in_hand(&self, state: &State, flow: u64) -> usize {
        let n = state.queues.len();
        let mut hand: Vec<usize> = Vec::with_capacity(self.spec.hand_size);
        let mut deck = flow;
        while hand.len() < self.spec.hand_size.min(n) {
            let card = (deck % n as u64) as usize;
            deck = deck.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 1;
            if !hand.contains(&card) {
                hand.push(card);
            }
        }
        hand.into_iter()
            .min_by_key(|&q| state.queues[q].len())
            .unwrap_or(0)
    }

    /// Starts queued requests, queue by queue in turn, while their seats are free.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        let n = state.queues.len();
        let mut idle_turns = 0;
        while idle_turns < n {
            let q = state.turn % n;
            state.turn = (state.turn + 1) % n;
            let Some(head) = state.queues[q].front() else {
                idle_turns += 1;
                continue;
            };
            idle_turns = 0;
            if state.executing_seats + head.seats > self.seats && state.executing_requests > 0 {
                // Its turn stays: the same queue is looked at first next time.
                state.turn = q;
                return;
            }
            let w = state.queues[q].pop_front().expect("a head");
            let counts = state.by_schema.entry(w.schema).or_default();
            counts.in_queue -= 1;
            if w.wake.is_closed() {
                counts.cancelled += 1;
                continue;
            }
            let seats = self.execute(state, w.schema, w.seats);
            if let Err(seats) = w.wake.send(seats) {
                // Gone between the check and the send: undone here, under the lock its drop
                // would take.
                let mut seats = seats;
                seats.seats = 0;
                let counts = state.by_schema.entry(w.schema).or_default();
                counts.executing_seats -= w.seats;
                counts.dispatched -= 1;
                counts.cancelled += 1;
                state.executing_seats -= w.seats;
                state.executing_requests -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcontrol::bootstrap::LEVELS;

    fn level(name: &str, seats: usize, wait: Duration) -> Arc<Level> {
        let spec = LEVELS.iter().find(|l| l.name == name).unwrap();
        Arc::new(Level::new(spec, seats, wait))
    }

    /// A request of `flow` costing `width` seats, admitted on a task of its own, returned
    /// once it waits in `l`'s queues: the seats it gets, once it gets them.
    async fn queued(
        l: &Arc<Level>,
        flow: u64,
        width: usize,
    ) -> tokio::task::JoinHandle<Result<usize, Rejected>> {
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.admit("s", flow, width).await.map(|s| s.seats) }
        });
        while l.report().waiting == 0 {
            tokio::task::yield_now().await;
        }
        waiting
    }

    #[tokio::test]
    async fn a_request_waits_for_a_seat_and_gets_it_when_one_is_given_back() {
        let l = level("workload-low", 2, Duration::from_secs(30));
        let a = l.admit("s", 1, 1).await.unwrap();
        let _b = l.admit("s", 2, 1).await.unwrap();
        let waiting = queued(&l, 3, 1).await;
        assert!(!waiting.is_finished());
        drop(a);
        waiting.await.unwrap().unwrap();
        let r = l.report();
        assert_eq!(r.by_schema["s"].dispatched, 3);
        assert_eq!(r.waiting, 0);
    }

    #[tokio::test]
    async fn a_full_queue_a_level_without_queues_and_a_long_wait_reject() {
        let catch_all = level("catch-all", 1, Duration::from_secs(30));
        let _held = catch_all.admit("c", 1, 1).await.unwrap();
        let e = catch_all.admit("c", 1, 1).await.err().unwrap();
        assert_eq!(e.reason, RejectReason::ConcurrencyLimit);

        let low = level("workload-low", 1, Duration::from_millis(50));
        let _held = low.admit("s", 1, 1).await.unwrap();
        let e = low.admit("s", 1, 1).await.err().unwrap();
        assert_eq!(e.reason, RejectReason::TimeOut);
        assert_eq!(e.retry_after, 1);

        low.saturate(true, None);
        let e = low.admit("s", 2, 1).await.err().unwrap();
        assert_eq!(e.reason, RejectReason::QueueFull);
        let r = low.report();
        assert_eq!(r.by_schema["s"].rejected[&RejectReason::TimeOut], 1);
        assert_eq!(r.by_schema["s"].rejected[&RejectReason::QueueFull], 1);
    }

    #[tokio::test]
    async fn a_waiter_gone_after_its_dispatch_gives_its_seats_back() {
        let l = level("workload-low", 1, Duration::from_secs(30));
        let held = l.admit("s", 1, 1).await.unwrap();
        let waiting = queued(&l, 2, 1).await;
        // Dispatched (its seats sent into its channel) before it runs again; then gone.
        drop(held);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(l.report().executing_requests, 0);
        assert!(l.admit("s", 3, 1).await.is_ok(), "the seat came back");
    }

    #[tokio::test]
    async fn a_wide_request_waits_for_all_its_seats() {
        let l = level("workload-low", 4, Duration::from_secs(30));
        let one = l.admit("s", 1, 1).await.unwrap();
        let wide = queued(&l, 2, 4).await;
        drop(one);
        assert_eq!(wide.await.unwrap().unwrap(), 4);
    }
}
