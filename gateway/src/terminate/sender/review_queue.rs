//! A cluster's TokenReview slots, shared fairly by the clients' sources (an IPv4 address, or
//! an IPv6 /64 — what one host can hold —, however many connections each opens): at most
//! `max_in_flight` reviews under way; a request that finds them busy waits in its source's
//! queue, and each slot freed goes to the next source in turn, its oldest waiter, handed over
//! under the lock, so that no request that arrives later takes it first. A flood from one
//! address (forty connections of never-seen tokens) then delays another address's new token
//! by at most one review per busy source.
//!
//! A quarter of the slots (at least one, when there are two or more) is kept for renewals —
//! tokens kubegate named before whose names are due for review — and renewals are served
//! before any new token, in turn by source too: a client kubegate already knows keeps its
//! name whatever strangers send, and one source's many names do not hold up another's. Each
//! source also starts at most [`PER_SOURCE_RATE`] reviews of new tokens a second (a burst of
//! [`PER_SOURCE_BURST`]) and has at most [`PER_SOURCE_WAITING`] of each kind waiting; beyond,
//! a request is not reviewed (its caller decides what that means). Sources are forgotten once
//! idle and refilled; beyond [`MAX_SOURCES`] at once, new tokens of new sources share one more
//! (a flood of addresses takes a share, not the table), while renewals — only ever of names
//! kubegate gave — keep their own.
//!
//! Waiters that left (their deadline passed) are skipped when their turn comes, and pruned
//! from a source's queue when it is full, so that no request costs a walk of every queue.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Reviews of new tokens one source may start per second, once its burst is spent.
pub const PER_SOURCE_RATE: f64 = 20.0;
/// Reviews of new tokens one source may start at once before its rate applies.
pub const PER_SOURCE_BURST: f64 = 40.0;
/// Requests of one source that may wait for a slot at once, of each kind.
pub const PER_SOURCE_WAITING: usize = 16;
/// Sources remembered (their rate's state and queues), at most; beyond, one more is shared by
/// every new source.
pub const MAX_SOURCES: usize = 4096;

/// The source every address beyond [`MAX_SOURCES`] shares.
const OVERFLOW: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// One cluster's review slots and who waits for them.
#[derive(Default)]
pub struct ReviewQueue {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_flight: u32,
    /// `max_in_flight` as the last request asked (a reload may change it).
    max_in_flight: u32,
    /// Sources with renewals waiting, in turn: served before any new token.
    renewal_turns: VecDeque<IpAddr>,
    /// Sources with new tokens waiting, in turn.
    new_turns: VecDeque<IpAddr>,
    sources: HashMap<IpAddr, Source>,
    /// When idle sources were last looked for (at most once a second: the walk is of every
    /// source).
    swept: Option<Instant>,
}

struct Source {
    /// Its waiters of each kind ([`Waiting`] as index), and whether it is in that kind's turns.
    queues: [Queue; 2],
    /// Reviews of new tokens it may start now, and when that was counted.
    bucket: (f64, Instant),
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<oneshot::Sender<Slot>>,
    in_turns: bool,
}

/// What kind of review a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A token kubegate named before, due for review again.
    Renewal = 0,
    /// A token kubegate has not named.
    New = 1,
}

/// A review slot: given back (to the next waiter) when dropped.
pub struct Slot {
    queue: Option<Arc<ReviewQueue>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.release();
        }
    }
}

/// The source `addr` counts toward: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or the
/// /64 of an IPv6 one — one host is given a /64 and picks any address in it.
pub fn source_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

impl ReviewQueue {
    /// A slot for a review of `waiting`'s kind for a request from `addr`, within
    /// `max_in_flight` and by `deadline`; `None` when none could be had (its source is over
    /// its rate or queue, or the deadline passed).
    pub async fn acquire(
        self: &Arc<Self>,
        addr: IpAddr,
        waiting: Waiting,
        max_in_flight: u32,
        deadline: tokio::time::Instant,
    ) -> Option<Slot> {
        let rx = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.max_in_flight = max_in_flight;
            // A renewal counts toward its own source, the table full or not: renewals come
            // only from tokens kubegate named, and a known client keeps its turn.
            let source = match waiting {
                Waiting::Renewal => source_of(addr),
                Waiting::New => state.source(source_of(addr), Instant::now()),
            };
            if waiting == Waiting::New {
                state.take_from_bucket(source, Instant::now())?;
            }
            // Slots free for those already waiting go to them first: after that, a free slot
            // of this kind means nobody this request would pass waits.
            self.hand_over(&mut state);
            if state.in_flight < limit(waiting, max_in_flight) {
                state.in_flight += 1;
                return Some(self.slot());
            }
            let (tx, rx) = oneshot::channel();
            state.enqueue(source, waiting, tx)?;
            rx
        };
        // A slot handed over after the deadline lies in the dropped receiver and is given
        // back with it.
        tokio::time::timeout_at(deadline, rx).await.ok()?.ok()
    }

    fn slot(self: &Arc<Self>) -> Slot {
        Slot {
            queue: Some(self.clone()),
        }
    }

    /// A slot was given back: handed to the next waiter, or freed.
    fn release(self: &Arc<Self>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.in_flight -= 1;
        self.hand_over(&mut state);
    }

    /// Hands free slots to waiters: renewals first, then new tokens while fewer than their
    /// limit are under way, each kind by source in turn. Waiters that left are skipped.
    fn hand_over(self: &Arc<Self>, state: &mut State) {
        let max = state.max_in_flight;
        loop {
            let next = if state.in_flight >= limit(Waiting::Renewal, max) {
                None
            } else if let Some(tx) = state.next_in_turn(Waiting::Renewal) {
                Some(tx)
            } else if state.in_flight < limit(Waiting::New, max) {
                state.next_in_turn(Waiting::New)
            } else {
                None
            };
            let Some(next) = next else {
                return;
            };
            state.in_flight += 1;
            if let Err(mut unwanted) = next.send(self.slot()) {
                // Its waiter is gone (its deadline passed): the next one.
                unwanted.queue = None;
                state.in_flight -= 1;
            }
        }
    }

    /// Reviews under way now.
    #[cfg(test)]
    fn in_flight(&self) -> u32 {
        self.state.lock().unwrap().in_flight
    }
}

/// How many slots a review of `waiting`'s kind may fill of `max`: all for a renewal, all but
/// the renewals' quarter for a new token.
fn limit(waiting: Waiting, max: u32) -> u32 {
    match waiting {
        Waiting::Renewal => max,
        Waiting::New if max >= 2 => max - (max / 4).max(1),
        Waiting::New => max,
    }
}

impl State {
    /// The source a request from `source` counts toward: itself, or — the table full of
    /// sources that are not idle — the one every newcomer shares.
    fn source(&mut self, source: IpAddr, now: Instant) -> IpAddr {
        if self.sources.contains_key(&source) || self.sources.len() < MAX_SOURCES {
            return source;
        }
        if self
            .swept
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1))
        {
            self.swept = Some(now);
            self.forget_idle_sources(now);
        }
        if self.sources.len() < MAX_SOURCES {
            source
        } else {
            OVERFLOW
        }
    }

    /// Takes one review from `source`'s rate; `None` when it has none left now.
    fn take_from_bucket(&mut self, source: IpAddr, now: Instant) -> Option<()> {
        let s = self
            .sources
            .entry(source)
            .or_insert_with(|| Source::new(now));
        let (tokens, at) = s.bucket;
        let tokens = (tokens + now.saturating_duration_since(at).as_secs_f64() * PER_SOURCE_RATE)
            .min(PER_SOURCE_BURST);
        if tokens < 1.0 {
            s.bucket = (tokens, now);
            return None;
        }
        s.bucket = (tokens - 1.0, now);
        Some(())
    }

    /// Puts `tx` in `source`'s queue of `waiting`'s kind (and the source in that kind's
    /// turns); `None` when the queue is full of waiters still there.
    fn enqueue(
        &mut self,
        source: IpAddr,
        waiting: Waiting,
        tx: oneshot::Sender<Slot>,
    ) -> Option<()> {
        let s = self
            .sources
            .entry(source)
            .or_insert_with(|| Source::new(Instant::now()));
        let q = &mut s.queues[waiting as usize];
        if q.waiting.len() >= PER_SOURCE_WAITING {
            q.waiting.retain(|tx| !tx.is_closed());
            if q.waiting.len() >= PER_SOURCE_WAITING {
                return None;
            }
        }
        q.waiting.push_back(tx);
        if !q.in_turns {
            q.in_turns = true;
            match waiting {
                Waiting::Renewal => self.renewal_turns.push_back(source),
                Waiting::New => self.new_turns.push_back(source),
            }
        }
        Some(())
    }

    /// Forgets sources with nobody waiting whose rate has refilled. One still in a kind's
    /// turns stays until its turn comes (its waiters all left): then a source is in the turns
    /// at most once, and the turns are bounded by the table.
    fn forget_idle_sources(&mut self, now: Instant) {
        let refill = Duration::from_secs_f64(PER_SOURCE_BURST / PER_SOURCE_RATE);
        self.sources.retain(|_, s| {
            s.queues.iter().any(|q| q.in_turns)
                || now.saturating_duration_since(s.bucket.1) < refill
        });
    }

    /// The oldest waiter of `waiting`'s kind of the next source in turn (that source goes to
    /// the back of the turns while it has more).
    fn next_in_turn(&mut self, waiting: Waiting) -> Option<oneshot::Sender<Slot>> {
        let turns = match waiting {
            Waiting::Renewal => &mut self.renewal_turns,
            Waiting::New => &mut self.new_turns,
        };
        while let Some(source) = turns.pop_front() {
            let Some(s) = self.sources.get_mut(&source) else {
                continue;
            };
            let q = &mut s.queues[waiting as usize];
            let Some(tx) = q.waiting.pop_front() else {
                q.in_turns = false;
                continue;
            };
            if q.waiting.is_empty() {
                q.in_turns = false;
            } else {
                turns.push_back(source);
            }
            return Some(tx);
        }
        None
    }
}

impl Source {
    fn new(now: Instant) -> Source {
        Source {
            queues: Default::default(),
            bucket: (PER_SOURCE_BURST, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    fn soon() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn new_tokens_leave_a_quarter_of_the_slots_to_renewals() {
        assert_eq!(limit(Waiting::New, 16), 12);
        assert_eq!(limit(Waiting::Renewal, 16), 16);
        assert_eq!(limit(Waiting::New, 2), 1);
        assert_eq!(limit(Waiting::New, 1), 1);
    }

    /// With every slot of `kind` within `max` taken, `flood` requests of `kind` from source 1
    /// wait, then one from source 2; the slot is freed: the sources in the order served (each
    /// reviewed at once, its slot going back as it is recorded).
    async fn served_in_turn(kind: Waiting, max: u32, flood: usize) -> Vec<u8> {
        let q = Arc::new(ReviewQueue::default());
        let held = q.acquire(ip(1), kind, max, soon()).await.unwrap();
        let served = Arc::new(Mutex::new(Vec::new()));
        let wait = |source: u8| {
            let (q, served) = (q.clone(), served.clone());
            tokio::spawn(async move {
                let slot = q.acquire(ip(source), kind, max, soon()).await;
                assert!(slot.is_some(), "source {source} is served");
                served.lock().unwrap().push(source);
            })
        };
        let waiting = |source: u8| {
            q.state
                .lock()
                .unwrap()
                .sources
                .get(&ip(source))
                .map_or(0, |s| s.queues[kind as usize].waiting.len())
        };
        let mut tasks: Vec<_> = (0..flood).map(|_| wait(1)).collect();
        while waiting(1) < flood {
            tokio::task::yield_now().await;
        }
        tasks.push(wait(2));
        while waiting(2) < 1 {
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(q.in_flight(), 0);
        let order = served.lock().unwrap().clone();
        order
    }

    /// A flood from one address queues behind the slots; another address's first request is
    /// served after at most one of the flood's, not after all that arrived before it.
    #[tokio::test]
    async fn a_newcomer_from_another_source_is_served_before_the_floods_next() {
        // Two slots: one for new tokens, one kept for renewals.
        let order = served_in_turn(Waiting::New, 2, 5).await;
        assert_eq!(order.len(), 6);
        assert_eq!(order[1], 2, "{order:?}");
    }

    /// One source's many renewals do not hold up another's: renewals too go by source in turn.
    #[tokio::test]
    async fn renewals_take_turns_by_source() {
        let order = served_in_turn(Waiting::Renewal, 1, 4).await;
        assert_eq!(order.len(), 5);
        assert_eq!(order[1], 2, "{order:?}");
    }

    #[tokio::test]
    async fn a_source_starts_reviews_at_its_rate_and_queues_a_bounded_number() {
        let q = Arc::new(ReviewQueue::default());
        let past = tokio::time::Instant::now();
        let mut held = Vec::new();
        for _ in 0..PER_SOURCE_BURST as usize {
            held.extend(q.acquire(ip(1), Waiting::New, 1000, soon()).await);
        }
        assert_eq!(held.len(), PER_SOURCE_BURST as usize);
        assert!(
            q.acquire(ip(1), Waiting::New, 1000, past).await.is_none(),
            "over its rate"
        );
        assert!(q.acquire(ip(2), Waiting::New, 1000, soon()).await.is_some());
    }

    #[tokio::test]
    async fn a_slot_handed_to_a_waiter_that_left_is_given_back() {
        let q = Arc::new(ReviewQueue::default());
        let held = q.acquire(ip(1), Waiting::New, 1, soon()).await.unwrap();
        let late = q
            .acquire(
                ip(2),
                Waiting::New,
                1,
                tokio::time::Instant::now() + Duration::from_millis(20),
            )
            .await;
        assert!(late.is_none(), "its deadline passed");
        drop(held);
        assert_eq!(q.in_flight(), 0, "handed to nobody: free");
        assert!(q.acquire(ip(3), Waiting::New, 1, soon()).await.is_some());
    }

    #[test]
    fn a_host_is_one_source_whatever_address_of_its_own_it_picks() {
        let v6 = |s: &str| source_of(s.parse().unwrap());
        assert_eq!(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
        assert_eq!(
            v6("2001:db8:1:2::1"),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            v6("::ffff:127.0.0.9"),
            ip(9),
            "IPv4-mapped: the IPv4 address"
        );
        assert_ne!(source_of(ip(1)), source_of(ip(2)));
    }

    /// Waiters whose deadline passed hold up nobody: a slot freed after they left is there for
    /// the next request at once.
    #[tokio::test]
    async fn waiters_that_left_are_skipped_not_served() {
        let q = Arc::new(ReviewQueue::default());
        let held = q.acquire(ip(1), Waiting::New, 1, soon()).await.unwrap();
        let shortly = || tokio::time::Instant::now() + Duration::from_millis(10);
        for n in 2..6 {
            assert!(q.acquire(ip(n), Waiting::New, 1, shortly()).await.is_none());
        }
        drop(held);
        assert_eq!(q.in_flight(), 0);
        let past = tokio::time::Instant::now();
        assert!(
            q.acquire(ip(9), Waiting::New, 1, past).await.is_some(),
            "the slot is free: no wait"
        );
    }

    /// Beyond the table's bound, new sources share one: counted, queued and rated together,
    /// never refused for want of room.
    #[tokio::test]
    async fn sources_beyond_the_bound_share_one() {
        let q = Arc::new(ReviewQueue::default());
        let mut held = Vec::new();
        for i in 0..MAX_SOURCES as u32 {
            let addr = IpAddr::from((0x0a00_0000u32 + i).to_be_bytes());
            held.extend(q.acquire(addr, Waiting::New, 100_000, soon()).await);
        }
        assert_eq!(held.len(), MAX_SOURCES);
        let past = tokio::time::Instant::now();
        let mut overflow = 0;
        for i in 0..(PER_SOURCE_BURST as u32 + 10) {
            let addr = IpAddr::from((0x0b00_0000u32 + i).to_be_bytes());
            overflow += usize::from(q.acquire(addr, Waiting::New, 100_000, past).await.is_some());
        }
        assert_eq!(
            overflow, PER_SOURCE_BURST as usize,
            "one burst for all of them"
        );
        assert_eq!(q.state.lock().unwrap().sources.len(), MAX_SOURCES + 1);
    }
}
