//! The rapid reset rule (CVE-2023-44487): an HTTP/2 client that opens streams and resets them
//! at once makes the server start work (here: pick a backend, prepare headers, perhaps dial)
//! for requests it never has to wait for, without ever reaching `max_concurrent_streams`.
//!
//! As Envoy does (its "premature reset" rule): once a connection has opened at least
//! `terminate.rapid_reset_min_streams` streams, it is closed when more than half of them were
//! reset by the client within [`PREMATURE`] of opening. A client that cancels a watch or a
//! slow LIST now and then is nowhere near that; one whose streams are mostly cancelled is.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A stream the client resets sooner than this counts as premature.
pub const PREMATURE: Duration = Duration::from_secs(1);

/// One client connection's streams and how many ended by a premature reset.
pub struct ResetWatch {
    min_streams: u32,
    streams: AtomicU32,
    premature: AtomicU32,
    tripped: Notify,
}

/// One stream of the connection; dropped without [`Stream::finish`] means the client reset it.
pub struct Stream {
    watch: Arc<ResetWatch>,
    opened: Instant,
    finished: bool,
}

impl ResetWatch {
    /// The rule for a connection, off when `min_streams` is 0.
    pub fn new(min_streams: u32) -> Arc<ResetWatch> {
        Arc::new(ResetWatch {
            min_streams,
            streams: AtomicU32::new(0),
            premature: AtomicU32::new(0),
            tripped: Notify::new(),
        })
    }

    /// Counts a stream the client opened.
    pub fn opened(self: &Arc<Self>) -> Stream {
        self.streams.fetch_add(1, Ordering::Relaxed);
        Stream {
            watch: self.clone(),
            opened: Instant::now(),
            finished: false,
        }
    }

    /// Completes once the connection broke the rule.
    pub async fn tripped(&self) {
        self.tripped.notified().await
    }

    fn reset_early(&self) {
        let premature = self.premature.fetch_add(1, Ordering::Relaxed) + 1;
        let streams = self.streams.load(Ordering::Relaxed);
        if self.min_streams > 0 && streams >= self.min_streams && premature * 2 > streams {
            // A stored permit: the connection's loop sees it even if it is not waiting now.
            self.tripped.notify_one();
        }
    }
}

impl Stream {
    /// The stream was answered: its response head went to the client.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.finished && self.opened.elapsed() < PREMATURE {
            self.watch.reset_early();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn tripped(w: &ResetWatch) -> bool {
        tokio::time::timeout(Duration::from_millis(10), w.tripped())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn mostly_reset_streams_trip_the_rule_once_enough_were_opened() {
        let w = ResetWatch::new(100);
        for _ in 0..99 {
            drop(w.opened());
        }
        assert!(!tripped(&w).await, "fewer than min_streams streams");
        drop(w.opened());
        assert!(tripped(&w).await, "100 streams, all reset at once");
    }

    #[tokio::test]
    async fn answered_streams_and_a_few_cancels_never_trip_it() {
        let w = ResetWatch::new(100);
        for i in 0..1000 {
            let s = w.opened();
            if i % 3 == 0 {
                drop(s); // a third cancelled: a client giving up on slow LISTs
            } else {
                s.finish();
            }
        }
        assert!(!tripped(&w).await);
    }

    #[tokio::test]
    async fn zero_turns_the_rule_off() {
        let w = ResetWatch::new(0);
        for _ in 0..1000 {
            drop(w.opened());
        }
        assert!(!tripped(&w).await);
    }
}
