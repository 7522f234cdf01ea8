//! The last backend state transitions, for the status page: when, which backend, from what to
//! what, and the failing `/readyz` checks that went with it. Bounded: the newest [`KEPT`].

use kubegate_health::BackendState;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

/// Transitions kept.
pub const KEPT: usize = 32;

/// One transition.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it happened.
    pub at: SystemTime,
    /// The backend's name.
    pub backend: String,
    /// State before.
    pub from: BackendState,
    /// State after.
    pub to: BackendState,
}

/// The newest transitions, newest first.
#[derive(Default)]
pub struct Transitions(Mutex<VecDeque<Recorded>>);

impl Transitions {
    /// Records a transition now.
    pub fn record(&self, backend: &str, from: BackendState, to: BackendState) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.push_front(Recorded {
            at: SystemTime::now(),
            backend: backend.to_string(),
            from,
            to,
        });
        kept.truncate(KEPT);
    }

    /// The newest transitions, newest first.
    pub fn newest(&self) -> Vec<Recorded> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_are_kept_newest_first() {
        let t = Transitions::default();
        for i in 0..KEPT + 3 {
            t.record(
                &format!("b{i}"),
                BackendState::Ready,
                BackendState::NotReady,
            );
        }
        let newest = t.newest();
        assert_eq!(newest.len(), KEPT);
        assert_eq!(newest[0].backend, format!("b{}", KEPT + 2));
    }
}
