//! The `Retry-After` a priority level's rejections carry, adapted to how many it rejects
//! (`dropped_requests_tracker.go`): it starts at 1 s, doubles (up to 32 s, at most once per
//! `Retry-After` seconds) while the last `Retry-After` seconds saw at least three times that
//! many rejections, and goes down by one while they saw fewer than it.

/// The longest `Retry-After`.
const MAX_RETRY_AFTER: i64 = 32;

/// One level's rejections per second, and the `Retry-After` they lead to.
#[derive(Debug)]
pub struct RetryAfter {
    /// Earlier seconds' counts, oldest first, as far back as they are still needed.
    history: Vec<(i64, i64)>,
    /// The current second and its count.
    current: (i64, i64),
    retry_after: i64,
    /// When `retry_after` last went up.
    raised_at: i64,
}

impl Default for RetryAfter {
    fn default() -> RetryAfter {
        RetryAfter {
            history: Vec::new(),
            current: (0, 0),
            retry_after: 1,
            raised_at: 0,
        }
    }
}

impl RetryAfter {
    /// The `Retry-After` to send now, in seconds.
    pub fn seconds(&self) -> i64 {
        self.retry_after
    }

    /// Counts one rejection at `unix` (seconds).
    pub fn rejected(&mut self, unix: i64) {
        if self.current.0 == unix {
            self.current.1 += 1;
            return;
        }
        self.remember(self.current);
        self.current = (unix, 1);
        self.adapt(unix);
    }

    fn remember(&mut self, second: (i64, i64)) {
        self.history.push(second);
        let keep = (2 * self.retry_after).min(MAX_RETRY_AFTER);
        let stale = self
            .history
            .iter()
            .take_while(|(t, _)| second.0 - t > keep)
            .count();
        self.history.drain(..stale);
    }

    /// Over `[unix - retry_after, unix)`.
    fn adapt(&mut self, unix: i64) {
        let dropped: i64 = self
            .history
            .iter()
            .rev()
            .take_while(|(t, _)| unix - t <= self.retry_after)
            .filter(|(t, _)| *t < unix)
            .map(|(_, n)| n)
            .sum();
        if unix - self.raised_at >= self.retry_after && dropped >= 3 * self.retry_after {
            self.retry_after = (2 * self.retry_after).min(MAX_RETRY_AFTER);
            self.raised_at = unix;
        } else if dropped < self.retry_after && self.retry_after > 1 {
            self.retry_after -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_doubles_under_steady_rejections_and_comes_down_one_by_one() {
        let mut r = RetryAfter::default();
        assert_eq!(r.seconds(), 1);
        // Ten rejections a second: 1 → 2 → 4 → 8, each rise at least its own seconds apart.
        let mut seen = vec![];
        for t in 100..130 {
            for _ in 0..10 {
                r.rejected(t);
            }
            seen.push(r.seconds());
        }
        assert_eq!(seen[0], 1, "{seen:?}");
        assert!(
            seen.windows(2).all(|w| w[1] == w[0] || w[1] == 2 * w[0]),
            "{seen:?}"
        );
        assert!(seen.contains(&2) && seen.contains(&4), "{seen:?}");
        let top = *seen.last().unwrap();
        assert!((4..=MAX_RETRY_AFTER).contains(&top), "{seen:?}");
        // Then one rejection now and then: down by one each time.
        r.rejected(200);
        assert_eq!(r.seconds(), top - 1);
        r.rejected(300);
        assert_eq!(r.seconds(), top - 2);
    }

    #[test]
    fn it_never_passes_thirty_two_seconds() {
        let mut r = RetryAfter::default();
        for t in 0..2000 {
            for _ in 0..200 {
                r.rejected(t);
            }
        }
        assert_eq!(r.seconds(), MAX_RETRY_AFTER);
    }
}
