//! The per-backend health state machine of the design's state table.
//!
//! | state | new connections | open connections |
//! |---|---|---|
//! | `unknown` | no | — |
//! | `ready` | yes | kept |
//! | `not_ready` | no | kept until the drain deadline |
//! | `down` | no | closed at once |
//! | `removed` | no | drained, then forgotten |
//!
//! All transitions are decided here, in [`HealthTracker::observe`] (probe results) and
//! [`HealthTracker::remove`] (dropped from the configuration). Each backend has exactly one
//! tracker, owned by the pool for as long as the backend's address is configured: a rename or a
//! change of probe settings keeps its counts and its flap damping.

use std::fmt;

/// How soon the next probe of a backend should start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// After `interval`.
    Normal,
    /// After `fast_interval`: a `ready` backend failed a probe and the failure is being
    /// confirmed.
    Fast,
}

/// Where one backend stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BackendState {
    /// Configured, not yet `rise` passing probes.
    Unknown = 0,
    /// `/readyz` passes: gets new connections.
    Ready = 1,
    /// Answers, but `/readyz` fails (starting, shutting down, etcd lost) or its certificate is
    /// not trusted: no new connections, open ones drain.
    NotReady = 2,
    /// Probes cannot connect or time out (crashed, frozen, partitioned): open connections are
    /// closed at once.
    Down = 3,
    /// Dropped from the configuration: drained like `NotReady`, then forgotten.
    Removed = 4,
}

impl BackendState {
    /// Every state, in metric order.
    pub const ALL: [BackendState; 5] = [
        BackendState::Unknown,
        BackendState::Ready,
        BackendState::NotReady,
        BackendState::Down,
        BackendState::Removed,
    ];

    /// The label used in metrics, logs and `/debug/backends`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendState::Unknown => "unknown",
            BackendState::Ready => "ready",
            BackendState::NotReady => "not_ready",
            BackendState::Down => "down",
            BackendState::Removed => "removed",
        }
    }

    /// Inverse of `as u8`, for states kept in an atomic.
    pub fn from_u8(v: u8) -> BackendState {
        match v {
            1 => BackendState::Ready,
            2 => BackendState::NotReady,
            3 => BackendState::Down,
            4 => BackendState::Removed,
            _ => BackendState::Unknown,
        }
    }
}

impl fmt::Display for BackendState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one probe means for the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeSignal {
    /// `/readyz` answered 200.
    Pass,
    /// The backend answered but is not fit for traffic (non-200, untrusted certificate).
    /// `shutting_down` is the authoritative `[-]shutdown` answer.
    Fail {
        /// The verbose body held `[-]shutdown`.
        shutting_down: bool,
    },
    /// No answer: refused, reset, timed out.
    Unreachable,
}

/// A state change, reported once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: BackendState,
    /// State after.
    pub to: BackendState,
}

/// The counts that decide transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Passing probes in a row before a backend is `ready`.
    pub rise: u32,
    /// Failing probes in a row before a `ready` backend is taken out.
    pub fall: u32,
    /// The most passing probes a flapping backend is asked for. Each time a backend falls out of
    /// `ready` within `stable_probes` of entering it, the passes it needs to return double, up to
    /// this. At or below `rise`, flapping is not damped.
    pub max_rise: u32,
    /// Probes a backend must stay `ready` for its next fall not to count as a flap.
    pub stable_probes: u32,
}

impl Thresholds {
    /// Plain thresholds without flap damping.
    pub fn new(rise: u32, fall: u32) -> Thresholds {
        Thresholds {
            rise,
            fall,
            max_rise: 0,
            stable_probes: 0,
        }
    }
}

/// Counts consecutive results and decides the state of one backend.
#[derive(Debug, Clone)]
pub struct HealthTracker {
    state: BackendState,
    passes: u32,
    failures: u32,
    thresholds: Thresholds,
    /// Probes seen since the backend last entered `ready`.
    ready_probes: u32,
    /// Passing probes needed to (re)enter `ready`: `rise`, raised while the backend flaps.
    rise_needed: u32,
}

impl HealthTracker {
    /// A new backend: `unknown` until `rise` probes pass.
    pub fn new(thresholds: Thresholds) -> HealthTracker {
        let thresholds = HealthTracker::sane(thresholds);
        HealthTracker {
            state: BackendState::Unknown,
            passes: 0,
            failures: 0,
            ready_probes: 0,
            rise_needed: thresholds.rise,
            thresholds,
        }
    }

    /// Starts from `state` with no history (tests of one arrow of the state table).
    #[cfg(test)]
    pub(crate) fn resume(state: BackendState, thresholds: Thresholds) -> HealthTracker {
        let mut t = HealthTracker::new(thresholds);
        t.state = state;
        // No history: a resumed `ready` backend counts as stable.
        t.ready_probes = u32::MAX;
        t
    }

    fn sane(thresholds: Thresholds) -> Thresholds {
        Thresholds {
            rise: thresholds.rise.max(1),
            fall: thresholds.fall.max(1),
            ..thresholds
        }
    }

    /// Applies new thresholds (a reload changed `health`), keeping the state, the counts in
    /// progress and the flap damping earned so far (capped by the new `max_rise`, and at least
    /// the new `rise`).
    pub fn set_thresholds(&mut self, thresholds: Thresholds) {
        let t = HealthTracker::sane(thresholds);
        let damped = self.rise_needed.min(t.max_rise.max(t.rise));
        self.rise_needed = damped.max(t.rise);
        self.thresholds = t;
    }

    /// The current state.
    pub fn state(&self) -> BackendState {
        self.state
    }

    /// Passing probes in a row the backend needs to (re)enter `ready`: `rise`, or more while it
    /// flaps.
    pub fn rise_needed(&self) -> u32 {
        self.rise_needed
    }

    /// A `ready` backend failed its last probe but not yet `fall` of them: the checker probes
    /// sooner, so that a real failure is confirmed quickly.
    pub fn confirming_failure(&self) -> bool {
        self.state == BackendState::Ready && self.failures > 0
    }

    /// How soon the next probe should come.
    pub fn pace(&self) -> Pace {
        if self.confirming_failure() {
            Pace::Fast
        } else {
            Pace::Normal
        }
    }

    /// Feeds one probe result; returns the transition it caused, if any.
    pub fn observe(&mut self, signal: ProbeSignal) -> Option<Transition> {
        use BackendState::*;
        match signal {
            ProbeSignal::Pass => {
                self.passes = self.passes.saturating_add(1);
                self.failures = 0;
            }
            ProbeSignal::Fail { .. } | ProbeSignal::Unreachable => {
                self.failures = self.failures.saturating_add(1);
                self.passes = 0;
            }
        }
        if self.state == Ready {
            self.ready_probes = self.ready_probes.saturating_add(1);
        }
        let fell = self.failures >= self.thresholds.fall;
        let next = match (self.state, signal) {
            // ## Removed => (Removed): terminal, probes no longer matter.
            (Removed, _) => Removed,
            // ## any => (Ready) after `rise` passes in a row (more while it flaps).
            (s, ProbeSignal::Pass) if s != Ready && self.passes >= self.rise_needed => Ready,
            (s, ProbeSignal::Pass) => s,
            // ## any => (NotReady) at once: a shutting-down apiserver will not recover.
            (
                _,
                ProbeSignal::Fail {
                    shutting_down: true,
                },
            ) => NotReady,
            // ## Down => (NotReady): it answers again, so it is alive; no need to wait `fall`.
            (Down, ProbeSignal::Fail { .. }) => NotReady,
            // ## Unknown | Ready => (NotReady) after `fall` failures in a row.
            (Unknown | Ready, ProbeSignal::Fail { .. }) if fell => NotReady,
            (s, ProbeSignal::Fail { .. }) => s,
            // ## Unknown | Ready | NotReady => (Down) after `fall` unanswered probes in a row.
            (_, ProbeSignal::Unreachable) if fell => Down,
            (s, ProbeSignal::Unreachable) => s,
        };
        if self.state == Ready && next != Ready {
            self.damp(signal);
        }
        if next == Ready && self.state != Ready {
            self.ready_probes = 0;
        }
        self.move_to(next)
    }

    /// Sets the passes needed to return after leaving `ready`. A planned shutdown is not a flap:
    /// the restarted apiserver comes back at `rise`. A backend that was ready for a while also
    /// starts over at `rise`; one that fell again soon after returning needs twice as many.
    fn damp(&mut self, signal: ProbeSignal) {
        let t = self.thresholds;
        let planned = signal
            == ProbeSignal::Fail {
                shutting_down: true,
            };
        self.rise_needed =
            if planned || t.max_rise <= t.rise || self.ready_probes >= t.stable_probes {
                t.rise
            } else {
                self.rise_needed.saturating_mul(2).min(t.max_rise)
            };
    }

    /// The backend was dropped from the configuration.
    pub fn remove(&mut self) -> Option<Transition> {
        self.move_to(BackendState::Removed)
    }

    fn move_to(&mut self, next: BackendState) -> Option<Transition> {
        if next == self.state {
            return None;
        }
        let t = Transition {
            from: self.state,
            to: next,
        };
        self.state = next;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::BackendState::*;
    use super::*;

    const PASS: ProbeSignal = ProbeSignal::Pass;
    const FAIL: ProbeSignal = ProbeSignal::Fail {
        shutting_down: false,
    };
    const SHUTDOWN: ProbeSignal = ProbeSignal::Fail {
        shutting_down: true,
    };
    const GONE: ProbeSignal = ProbeSignal::Unreachable;

    /// Feeds signals and returns the state after each one.
    fn run(mut t: HealthTracker, signals: &[ProbeSignal]) -> Vec<BackendState> {
        signals
            .iter()
            .map(|s| {
                t.observe(*s);
                t.state()
            })
            .collect()
    }

    /// A tracker resumed in `state`, rise and fall 2.
    fn resumed(state: BackendState) -> HealthTracker {
        HealthTracker::resume(state, Thresholds::new(2, 2))
    }

    fn ready() -> HealthTracker {
        resumed(Ready)
    }

    #[test]
    fn unknown_to_ready_after_rise_passes() {
        assert_eq!(
            run(HealthTracker::new(Thresholds::new(2, 2)), &[PASS, PASS]),
            [Unknown, Ready]
        );
    }

    #[test]
    fn a_failure_resets_the_rise_count() {
        assert_eq!(
            run(
                HealthTracker::new(Thresholds::new(2, 3)),
                &[PASS, FAIL, PASS, PASS]
            ),
            [Unknown, Unknown, Unknown, Ready]
        );
    }

    #[test]
    fn unknown_to_not_ready_after_fall_failures() {
        assert_eq!(
            run(HealthTracker::new(Thresholds::new(2, 2)), &[FAIL, FAIL]),
            [Unknown, NotReady]
        );
    }

    #[test]
    fn unknown_to_down_after_fall_unreachable() {
        assert_eq!(
            run(HealthTracker::new(Thresholds::new(2, 2)), &[GONE, GONE]),
            [Unknown, Down]
        );
    }

    #[test]
    fn ready_to_not_ready_after_fall_failures() {
        assert_eq!(run(ready(), &[FAIL, FAIL]), [Ready, NotReady]);
    }

    #[test]
    fn ready_to_not_ready_at_once_on_shutdown() {
        let mut t = ready();
        assert_eq!(
            t.observe(SHUTDOWN),
            Some(Transition {
                from: Ready,
                to: NotReady
            })
        );
    }

    #[test]
    fn ready_to_down_after_fall_unreachable() {
        assert_eq!(run(ready(), &[GONE, GONE]), [Ready, Down]);
    }

    #[test]
    fn mixed_failures_count_together_and_the_last_decides() {
        assert_eq!(run(ready(), &[FAIL, GONE]), [Ready, Down]);
        assert_eq!(run(ready(), &[GONE, FAIL]), [Ready, NotReady]);
    }

    #[test]
    fn not_ready_to_down_when_it_stops_answering() {
        assert_eq!(run(resumed(NotReady), &[GONE, GONE]), [NotReady, Down]);
    }

    #[test]
    fn not_ready_to_ready_after_rise_passes() {
        assert_eq!(run(resumed(NotReady), &[PASS, PASS]), [NotReady, Ready]);
    }

    #[test]
    fn down_to_not_ready_as_soon_as_it_answers() {
        assert_eq!(run(resumed(Down), &[FAIL]), [NotReady]);
    }

    #[test]
    fn down_to_ready_after_rise_passes() {
        assert_eq!(run(resumed(Down), &[PASS, PASS]), [Down, Ready]);
    }

    #[test]
    fn removed_is_terminal() {
        let mut t = ready();
        assert_eq!(
            t.remove(),
            Some(Transition {
                from: Ready,
                to: Removed
            })
        );
        assert_eq!(run(t, &[PASS, PASS, GONE, GONE]), [Removed; 4]);
    }

    #[test]
    fn a_transition_is_reported_once() {
        let mut t = ready();
        assert!(t.observe(FAIL).is_none());
        assert!(t.observe(FAIL).is_some());
        assert!(t.observe(FAIL).is_none());
    }

    fn damped() -> HealthTracker {
        HealthTracker::resume(
            Ready,
            Thresholds {
                rise: 2,
                fall: 2,
                max_rise: 8,
                stable_probes: 10,
            },
        )
    }

    /// Takes a ready tracker out with `fall` failures and returns the passes it then needs.
    fn fall_out(t: &mut HealthTracker, signal: ProbeSignal) -> u32 {
        t.observe(signal);
        t.observe(signal);
        assert_ne!(t.state(), Ready);
        t.rise_needed()
    }

    fn bring_back(t: &mut HealthTracker) {
        for _ in 0..t.rise_needed() {
            t.observe(PASS);
        }
        assert_eq!(t.state(), Ready);
    }

    /// A [`damped`] tracker ready again after one fall.
    fn back_after_a_fall() -> HealthTracker {
        let mut t = damped();
        fall_out(&mut t, FAIL);
        bring_back(&mut t);
        t
    }

    /// Passes [`damped`]'s `stable_probes` in a row.
    fn stay_ready(t: &mut HealthTracker) {
        for _ in 0..10 {
            t.observe(PASS);
        }
    }

    #[test]
    fn a_first_fall_after_a_stable_period_needs_only_rise() {
        let mut t = damped();
        stay_ready(&mut t);
        assert_eq!(fall_out(&mut t, FAIL), 2);
    }

    #[test]
    fn falling_again_soon_after_returning_doubles_the_passes_needed() {
        let mut t = damped();
        let mut needed = vec![];
        for _ in 0..4 {
            needed.push(fall_out(&mut t, FAIL));
            bring_back(&mut t);
        }
        // Resumed as ready without history: the first fall is not a flap.
        assert_eq!(needed, [2, 4, 8, 8]);
    }

    #[test]
    fn a_flapping_backend_stays_out_until_it_passes_rise_needed_in_a_row() {
        let mut t = back_after_a_fall();
        fall_out(&mut t, FAIL);
        assert_eq!(run(t.clone(), &[PASS, PASS, PASS]), [NotReady; 3]);
        assert_eq!(run(t, &[PASS, PASS, PASS, PASS]).last(), Some(&Ready));
    }

    #[test]
    fn crashing_soon_after_returning_is_a_flap_too() {
        let mut t = back_after_a_fall();
        assert_eq!(fall_out(&mut t, GONE), 4);
        assert_eq!(t.state(), Down);
    }

    #[test]
    fn staying_ready_for_stable_probes_resets_the_damping() {
        let mut t = back_after_a_fall();
        fall_out(&mut t, FAIL);
        bring_back(&mut t);
        assert_eq!(t.rise_needed(), 4);
        stay_ready(&mut t);
        assert_eq!(fall_out(&mut t, FAIL), 2);
    }

    #[test]
    fn a_planned_shutdown_is_not_a_flap() {
        let mut t = back_after_a_fall();
        assert_eq!(fall_out(&mut t, FAIL), 4);
        bring_back(&mut t);
        t.observe(SHUTDOWN);
        assert_eq!((t.state(), t.rise_needed()), (NotReady, 2));
    }

    #[test]
    fn without_max_rise_there_is_no_damping() {
        let mut t = ready();
        for _ in 0..3 {
            assert_eq!(fall_out(&mut t, FAIL), 2);
            bring_back(&mut t);
        }
    }

    #[test]
    fn only_a_ready_backend_that_failed_is_being_confirmed() {
        let mut t = ready();
        assert!(!t.confirming_failure());
        t.observe(FAIL);
        assert!(t.confirming_failure());
        t.observe(PASS);
        assert!(!t.confirming_failure());
        t.observe(FAIL);
        t.observe(FAIL);
        assert!(
            !t.confirming_failure(),
            "not ready: nothing left to confirm"
        );
    }

    #[test]
    fn new_thresholds_keep_the_state_the_counts_and_the_damping() {
        let mut t = back_after_a_fall();
        assert_eq!(fall_out(&mut t, FAIL), 4);
        t.observe(PASS);
        // A reload raises fall and keeps damping on: the pass in progress and the 4 stay.
        t.set_thresholds(Thresholds {
            rise: 2,
            fall: 3,
            max_rise: 8,
            stable_probes: 10,
        });
        assert_eq!((t.state(), t.rise_needed()), (NotReady, 4));
        assert_eq!(run(t.clone(), &[PASS, PASS]), [NotReady, NotReady]);
        assert_eq!(run(t.clone(), &[PASS, PASS, PASS]).last(), Some(&Ready));
        // Turning damping off brings the need down to rise.
        t.set_thresholds(Thresholds::new(2, 3));
        assert_eq!(t.rise_needed(), 2);
    }

    #[test]
    fn a_ready_backend_failing_once_is_probed_at_the_fast_pace() {
        let mut t = ready();
        assert_eq!(t.pace(), Pace::Normal);
        t.observe(FAIL);
        assert_eq!(t.pace(), Pace::Fast);
    }

    #[test]
    fn state_round_trips_through_u8() {
        for s in BackendState::ALL {
            assert_eq!(BackendState::from_u8(s as u8), s);
        }
    }
}
