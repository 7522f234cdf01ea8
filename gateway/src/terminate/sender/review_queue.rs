//! A cluster's TokenReview slots, shared fairly by the clients' sources (their IP addresses,
//! however many connections each opens): at most `max_in_flight` reviews under way; a request
//! that finds them busy waits in its source's queue, and each slot freed goes to the next
//! source in turn, its oldest waiter, handed over under the lock, so that no request that
//! arrives later takes it first. A flood from one address (forty connections of never-seen
//! tokens) then delays another address's new token by at most one review per busy source.
//!
//! A quarter of the slots (at least one, when there are two or more) is kept for renewals —
//! tokens kubegate named before whose names are due for review — and renewals are served
//! before any new token: a client kubegate already knows keeps its name whatever strangers
//! send. Each source also starts at most [`PER_SOURCE_RATE`] reviews a second (a burst of
//! [`PER_SOURCE_BURST`]) and has at most [`PER_SOURCE_WAITING`] waiting; beyond, a request is
//! not reviewed (its caller decides what that means). Sources are forgotten once idle and
//! refilled, and at most [`MAX_SOURCES`] are kept, so the table is bounded.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Reviews one source may start per second, once its burst is spent.
pub const PER_SOURCE_RATE: f64 = 20.0;
/// Reviews one source may start at once before its rate applies.
pub const PER_SOURCE_BURST: f64 = 40.0;
/// Requests of one source that may wait for a slot at once.
pub const PER_SOURCE_WAITING: usize = 16;
/// Sources remembered (their rate's state), at most.
pub const MAX_SOURCES: usize = 4096;

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
    /// Renewals waiting, oldest first: served before any new token.
    renewals: VecDeque<oneshot::Sender<Slot>>,
    /// Sources with new tokens waiting, in turn.
    turns: VecDeque<IpAddr>,
    sources: HashMap<IpAddr, Source>,
}

struct Source {
    waiting: VecDeque<oneshot::Sender<Slot>>,
    /// Reviews it may start now, and when that was counted.
    bucket: (f64, Instant),
}

/// What kind of review a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A token kubegate named before, due for review again.
    Renewal,
    /// A token kubegate has not named.
    New,
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

impl ReviewQueue {
    /// A slot for a review of `waiting`'s kind for `source`, within `max_in_flight` and by
    /// `deadline`; `None` when none could be had (the source is over its rate or queue, or the
    /// deadline passed).
    pub async fn acquire(
        self: &Arc<Self>,
        source: IpAddr,
        waiting: Waiting,
        max_in_flight: u32,
        deadline: tokio::time::Instant,
    ) -> Option<Slot> {
        let rx = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if waiting == Waiting::New {
                state.take_from_bucket(source, Instant::now())?;
            }
            state.forget_gone();
            // Nobody this request would pass is waiting: a renewal passes new tokens.
            let ahead = match waiting {
                Waiting::Renewal => !state.renewals.is_empty(),
                Waiting::New => !state.renewals.is_empty() || !state.turns.is_empty(),
            };
            if !ahead && state.in_flight < limit(waiting, max_in_flight) {
                state.in_flight += 1;
                return Some(self.slot());
            }
            let (tx, rx) = oneshot::channel();
            match waiting {
                Waiting::Renewal => state.renewals.push_back(tx),
                Waiting::New => {
                    let s = state.sources.get_mut(&source)?;
                    if s.waiting.len() >= PER_SOURCE_WAITING {
                        return None;
                    }
                    if s.waiting.is_empty() {
                        state.turns.push_back(source);
                    }
                    state
                        .sources
                        .get_mut(&source)
                        .expect("just found")
                        .waiting
                        .push_back(tx);
                }
            }
            state.max_in_flight = max_in_flight;
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

    /// A slot was given back: handed to the next waiter (renewals first, then the next source
    /// in turn), or freed.
    fn release(self: &Arc<Self>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.in_flight -= 1;
        let max = state.max_in_flight;
        loop {
            let next = if let Some(tx) = state.renewals.pop_front() {
                tx
            } else if state.in_flight < limit(Waiting::New, max) {
                match state.next_in_turn() {
                    Some(tx) => tx,
                    None => return,
                }
            } else {
                return;
            };
            state.in_flight += 1;
            let slot = Slot {
                queue: Some(self.clone()),
            };
            if let Err(mut unwanted) = next.send(slot) {
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
    /// Takes one review from `source`'s rate; `None` when it has none left now.
    fn take_from_bucket(&mut self, source: IpAddr, now: Instant) -> Option<()> {
        if !self.sources.contains_key(&source) && self.sources.len() >= MAX_SOURCES {
            self.forget_idle_sources(now);
            if self.sources.len() >= MAX_SOURCES {
                return None;
            }
        }
        let s = self.sources.entry(source).or_insert(Source {
            waiting: VecDeque::new(),
            bucket: (PER_SOURCE_BURST, now),
        });
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

    /// Forgets waiters that went away (their deadline passed), and sources left with none.
    fn forget_gone(&mut self) {
        self.renewals.retain(|tx| !tx.is_closed());
        let sources = &mut self.sources;
        self.turns.retain(|source| {
            let Some(s) = sources.get_mut(source) else {
                return false;
            };
            s.waiting.retain(|tx| !tx.is_closed());
            !s.waiting.is_empty()
        });
    }

    /// Forgets sources with nobody waiting whose rate has refilled.
    fn forget_idle_sources(&mut self, now: Instant) {
        let refill = Duration::from_secs_f64(PER_SOURCE_BURST / PER_SOURCE_RATE);
        self.sources.retain(|_, s| {
            !s.waiting.is_empty() || now.saturating_duration_since(s.bucket.1) < refill
        });
    }

    /// The oldest waiter of the next source in turn (that source goes to the back of the
    /// turns while it has more).
    fn next_in_turn(&mut self) -> Option<oneshot::Sender<Slot>> {
        while let Some(source) = self.turns.pop_front() {
            let Some(s) = self.sources.get_mut(&source) else {
                continue;
            };
            let Some(tx) = s.waiting.pop_front() else {
                continue;
            };
            if !s.waiting.is_empty() {
                self.turns.push_back(source);
            }
            return Some(tx);
        }
        None
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

    /// A flood from one address queues behind the slots; another address's first request is
    /// served after at most one of the flood's, not after all that arrived before it.
    #[tokio::test]
    async fn a_newcomer_from_another_source_is_served_before_the_floods_next() {
        let q = Arc::new(ReviewQueue::default());
        // Two slots: one for new tokens, one kept for renewals.
        let max = 2;
        let first = q.acquire(ip(1), Waiting::New, max, soon()).await.unwrap();
        let served = Arc::new(Mutex::new(Vec::new()));
        let waiter = |source: u8, name: &'static str| {
            let (q, served) = (q.clone(), served.clone());
            tokio::spawn(async move {
                let slot = q.acquire(ip(source), Waiting::New, max, soon()).await;
                assert!(slot.is_some(), "{name} is served");
                // Reviewed at once: the slot goes back as it is recorded.
                served.lock().unwrap().push(name);
            })
        };
        let waiting = |source: u8| {
            q.state
                .lock()
                .unwrap()
                .sources
                .get(&ip(source))
                .map_or(0, |s| s.waiting.len())
        };
        let mut tasks = Vec::new();
        for _ in 0..5 {
            tasks.push(waiter(1, "flood"));
        }
        while waiting(1) < 5 {
            tokio::task::yield_now().await;
        }
        tasks.push(waiter(2, "newcomer"));
        while waiting(2) < 1 {
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .unwrap()
                .unwrap();
        }
        let order = served.lock().unwrap().clone();
        assert_eq!(order.len(), 6);
        assert_eq!(order[1], "newcomer", "{order:?}");
        assert_eq!(q.in_flight(), 0);
    }

    #[tokio::test]
    async fn renewals_take_the_kept_slots_and_go_first() {
        let q = Arc::new(ReviewQueue::default());
        let max = 4;
        let mut news = Vec::new();
        for i in 0..3 {
            news.extend(q.acquire(ip(i + 1), Waiting::New, max, soon()).await);
        }
        assert_eq!(news.len(), 3);
        // New tokens may not take the fourth slot; a renewal does, at once.
        let shortly = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(q.acquire(ip(9), Waiting::New, max, shortly).await.is_none());
        let renewal = q.acquire(ip(9), Waiting::Renewal, max, soon()).await;
        assert!(renewal.is_some());
        assert_eq!(q.in_flight(), 4);
        // A renewal waiting is served before a new token waiting.
        let order = Arc::new(Mutex::new(Vec::new()));
        let wait = |w: Waiting, name: &'static str| {
            let (q, order) = (q.clone(), order.clone());
            tokio::spawn(async move {
                let slot = q.acquire(ip(7), w, max, soon()).await;
                order.lock().unwrap().push(name);
                slot
            })
        };
        let new = wait(Waiting::New, "new");
        tokio::task::yield_now().await;
        let renewing = wait(Waiting::Renewal, "renewal");
        while q.state.lock().unwrap().renewals.is_empty() {
            tokio::task::yield_now().await;
        }
        drop(news.pop());
        let renewed = renewing.await.unwrap();
        assert!(renewed.is_some());
        // New tokens fill at most three slots: with the two renewals holding theirs, a
        // new token waits until fewer than three are taken.
        drop(news.pop());
        assert!(!new.is_finished());
        drop(renewal);
        assert!(new.await.unwrap().is_some());
        assert_eq!(*order.lock().unwrap(), ["renewal", "new"]);
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
}
