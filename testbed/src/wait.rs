//! Waiting on a condition with a deadline: the only way the test bed waits (never a fixed
//! sleep that hopes the condition holds by then).

use std::fmt;
use std::time::{Duration, Instant};

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(20);

/// A condition did not hold within its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    what: String,
    limit: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.limit, self.what
        )
    }
}

impl std::error::Error for TimedOut {}

/// Looks at `f` until it returns `Some`, or `limit` passed; `what` names the condition in the
/// error.
pub fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, TimedOut> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(TimedOut {
                what: what.to_string(),
                limit,
            });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_returns_its_value_and_one_that_never_does_times_out() {
        let mut n = 0;
        let v = wait_until("the third look", Duration::from_secs(10), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(v, Ok(3));
        let e = wait_until::<()>("nothing", Duration::from_millis(50), || None).unwrap_err();
        assert_eq!(e.to_string(), "timed out after 50ms waiting for nothing");
    }
}
