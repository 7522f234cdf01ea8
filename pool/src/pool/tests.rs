//! The pool's decisions, state × event → order, under paused time: no sockets, no checkers,
//! probes fed by hand.

use super::*;
use crate::test_support::{EventLog, TestPlanes};
use kubegate_health::UnreachableReason;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

fn pool(drain: DrainConfig) -> (Arc<Pool<TestPlanes>>, Arc<EventLog>) {
    let events = Arc::new(EventLog::default());
    let settings = PoolSettings {
        thresholds: Thresholds::new(2, 2),
        drain,
        probe_interval: INTERVAL,
    };
    let pool = Pool::new(settings, None, events.clone(), |_| TestPlanes::default());
    (pool, events)
}

fn drains(timeout: u64, failing: u64) -> DrainConfig {
    DrainConfig {
        timeout: Duration::from_secs(timeout),
        failing_timeout: Duration::from_secs(failing),
    }
}

fn spec(port: u16, name: &str) -> BackendSpec {
    BackendSpec {
        name: Some(name.into()),
        address: format!("127.0.0.1:{port}").parse().unwrap(),
        health_address: None,
        other_addresses: Vec::new(),
    }
}

/// Probes of one backend are this far apart (`health.interval`).
const INTERVAL: Duration = Duration::from_secs(1);

/// A probe that started now, by the test's paused clock.
fn record(outcome: ProbeOutcome) -> ProbeRecord {
    static BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(tokio::time::Instant::now);
    ProbeRecord {
        at: SystemTime::UNIX_EPOCH + (tokio::time::Instant::now() - base),
        latency: Duration::from_millis(1),
        outcome,
    }
}

fn pass() -> ProbeOutcome {
    ProbeOutcome::Passed
}

fn fail(check: &str) -> ProbeOutcome {
    ProbeOutcome::Failed {
        status: 500,
        failing_checks: vec![check.into()],
        shutting_down: check == "shutdown",
    }
}

fn gone() -> ProbeOutcome {
    ProbeOutcome::Unreachable(UnreachableReason::Refused, "refused".into())
}

/// Feeds probes to the only backend named `name`.
fn probe(pool: &Pool<TestPlanes>, name: &str, outcomes: &[ProbeOutcome]) {
    let b = find(pool, name);
    for o in outcomes {
        pool.observe(&b, &record(o.clone()));
    }
}

fn find(pool: &Pool<TestPlanes>, name: &str) -> Arc<Backend<TestPlanes>> {
    pool.backends()
        .into_iter()
        .find(|b| b.info().name == name)
        .unwrap_or_else(|| panic!("no backend {name}"))
}

fn ready_backend(pool: &Pool<TestPlanes>, port: u16, name: &str) -> Arc<Backend<TestPlanes>> {
    pool.add(&spec(port, name));
    probe(pool, name, &[pass(), pass()]);
    let b = find(pool, name);
    assert_eq!(b.state(), BackendState::Ready);
    b
}

/// Lets spawned tasks whose timers fired run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Paused time moves on by `d`, then the tasks it woke run.
async fn advance(d: Duration) {
    tokio::time::sleep(d).await;
    settle().await;
}

fn events_of(log: &EventLog, prefixes: &[&str]) -> Vec<String> {
    log.lines()
        .into_iter()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_new_backend_enters_routing_after_rise_passes() {
    let (pool, events) = pool(drains(30, 0));
    pool.add(&spec(1, "a"));
    assert_eq!(find(&pool, "a").state(), BackendState::Unknown);
    probe(&pool, "a", &[pass()]);
    assert!(pool.routing().ready.is_empty());
    probe(&pool, "a", &[pass()]);
    assert_eq!(pool.routing().ready.len(), 1);
    assert_eq!(
        events_of(&events, &["added", "state", "routing"]),
        ["added a unknown", "state a unknown -> ready", "routing 1"]
    );
}

#[tokio::test(start_paused = true)]
async fn down_closes_open_work_at_once() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    b.planes().set_open(4);
    probe(&pool, "a", &[gone(), gone()]);
    assert_eq!(b.state(), BackendState::Down);
    assert_eq!(b.planes().closes(), [(CloseReason::BackendDown, 4)]);
    assert_eq!(
        events_of(&events, &["state", "closed", "drain"]),
        [
            "state a unknown -> ready",
            "state a ready -> down",
            "closed a backend_down 4"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_backend_drains_until_the_failing_timeout() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    b.planes().set_open(3);
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    assert_eq!(b.state(), BackendState::NotReady);
    assert_eq!(pool.routing().ready.len(), 1, "no new work goes there");
    // The failure is a's own once the other passes a probe that started an interval after
    // a's first failure (own_failure.rs); only then is the drain ordered.
    assert_eq!(b.planes().drains.load(Ordering::SeqCst), 0);
    advance(Duration::from_millis(600)).await;
    probe(&pool, "other", &[pass()]);
    settle().await;
    assert_eq!(
        b.planes().drains.load(Ordering::SeqCst),
        0,
        "too soon to tell"
    );
    advance(Duration::from_millis(500)).await;
    probe(&pool, "other", &[pass()]);
    settle().await;
    assert_eq!(b.planes().drains.load(Ordering::SeqCst), 1);
    advance(Duration::from_millis(4_900)).await;
    assert!(b.planes().closes().is_empty(), "closed before the deadline");
    advance(Duration::from_millis(200)).await;
    assert_eq!(b.planes().closes(), [(CloseReason::DrainTimeout, 3)]);
    assert_eq!(
        events_of(&events, &["drain", "closed"]),
        ["drain a", "closed a drain_timeout 3"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutting_down_backend_drains_until_the_drain_timeout() {
    let (pool, _) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    b.planes().set_open(2);
    // One `[-]shutdown` answer is enough.
    probe(&pool, "a", &[fail("shutdown")]);
    assert_eq!(b.state(), BackendState::NotReady);
    advance(Duration::from_secs(29)).await;
    assert!(b.planes().closes().is_empty());
    advance(Duration::from_secs(2)).await;
    assert_eq!(b.planes().closes(), [(CloseReason::DrainTimeout, 2)]);
}

#[tokio::test(start_paused = true)]
async fn with_no_other_backend_ready_the_drain_waits_for_one() {
    let (pool, events) = pool(drains(30, 0));
    let b = ready_backend(&pool, 1, "a");
    b.planes().set_open(3);
    // etcd lost everywhere: there is nowhere better for a's work to go.
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    assert_eq!(b.state(), BackendState::NotReady);
    advance(Duration::from_secs(60)).await;
    assert_eq!(
        b.planes().drains.load(Ordering::SeqCst),
        0,
        "no drain ordered"
    );
    assert!(b.planes().closes().is_empty(), "nothing closed");
    // Another backend becomes ready, a witness (it never failed): the drain begins, with its
    // whole deadline (0 s here).
    pool.add(&spec(2, "other"));
    probe(&pool, "other", &[pass(), pass()]);
    settle().await;
    assert_eq!(b.planes().drains.load(Ordering::SeqCst), 1);
    advance(Duration::from_millis(10)).await;
    assert_eq!(b.planes().closes(), [(CloseReason::DrainTimeout, 3)]);
    assert_eq!(
        events_of(&events, &["drain", "closed"]),
        ["drain a", "closed a drain_timeout 3"]
    );
}

/// etcd goes away under every backend, their checks failing a moment apart: nobody's clients
/// are moved (each would only move to a backend about to fail the same way), and nothing is
/// closed when they all recover, one a moment ahead of the other.
#[tokio::test(start_paused = true)]
async fn a_failure_every_backend_shares_moves_nobody() {
    let (pool, events) = pool(drains(30, 0));
    let names = ["a", "b", "c"];
    for (i, n) in names.iter().enumerate() {
        ready_backend(&pool, i as u16 + 1, n).planes().set_open(5);
    }
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    advance(Duration::from_millis(500)).await;
    probe(&pool, "b", &[fail("etcd"), fail("etcd")]);
    advance(Duration::from_millis(300)).await;
    // c's first probe after a's failure still passes (its check has not flipped yet), too
    // soon to count...
    probe(&pool, "c", &[pass()]);
    advance(Duration::from_millis(700)).await;
    // ...and by the time one could, it fails too.
    probe(&pool, "c", &[fail("etcd"), fail("etcd")]);
    for _ in 0..5 {
        advance(INTERVAL).await;
        for n in names {
            probe(&pool, n, &[fail("etcd")]);
        }
    }
    // etcd returns: c recovers first, a and b a probe later.
    probe(&pool, "c", &[pass(), pass()]);
    advance(Duration::from_millis(400)).await;
    probe(&pool, "a", &[fail("etcd")]);
    advance(Duration::from_millis(400)).await;
    probe(&pool, "a", &[pass(), pass()]);
    probe(&pool, "b", &[pass(), pass()]);
    advance(Duration::from_secs(5)).await;
    for n in names {
        let b = find(&pool, n);
        assert_eq!(b.state(), BackendState::Ready, "{n}");
        assert_eq!(b.planes().drains.load(Ordering::SeqCst), 0, "{n} drained");
        assert!(b.planes().closes().is_empty(), "{n} closed");
    }
    assert!(events_of(&events, &["drain", "closed"]).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_drain_is_called_off_when_the_backend_is_ready_again() {
    let (pool, _) = pool(drains(30, 0));
    let b = ready_backend(&pool, 1, "a");
    b.planes().set_open(2);
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    probe(&pool, "a", &[pass(), pass()]);
    assert_eq!(b.state(), BackendState::Ready);
    settle().await;
    assert_eq!(b.planes().drains.load(Ordering::SeqCst), 0);
    assert!(b.planes().closes().is_empty());
    assert_eq!(b.planes().open(), 2);
}

#[tokio::test(start_paused = true)]
async fn returning_to_ready_calls_the_drain_off() {
    let (pool, _) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    b.planes().set_open(2);
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    probe(&pool, "a", &[pass(), pass()]);
    assert_eq!(b.state(), BackendState::Ready);
    advance(Duration::from_secs(10)).await;
    assert!(b.planes().closes().is_empty(), "{:?}", b.planes().closes());
    assert_eq!(b.planes().open(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_drain_without_open_work_closes_nothing_later() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    advance(Duration::from_secs(10)).await;
    assert!(b.planes().closes().is_empty());
    assert!(events_of(&events, &["drain", "closed"]).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_removed_backend_without_work_is_forgotten_at_once() {
    let (pool, events) = pool(drains(30, 5));
    ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "b");
    pool.remove(&spec(1, "a"));
    assert_eq!(pool.backends().len(), 1);
    assert_eq!(pool.routing().ready.len(), 1);
    assert_eq!(
        events_of(&events, &["state a", "forgotten"]),
        [
            "state a unknown -> ready",
            "state a ready -> removed",
            "forgotten a"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_removed_backend_is_forgotten_when_its_work_ends_before_the_deadline() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    b.planes().set_open(1);
    pool.remove(&spec(1, "a"));
    assert_eq!(b.state(), BackendState::Removed);
    assert_eq!(pool.routing().ready.len(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pool.backends().len(), 2, "still draining");
    b.planes().set_open(0);
    b.work_ended();
    settle().await;
    assert_eq!(pool.backends().len(), 1, "forgotten once its work ended");
    assert!(b.planes().closes().is_empty(), "nothing had to be closed");
    assert!(events.lines().contains(&"forgotten a".to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_removed_backend_is_closed_at_the_deadline_then_forgotten() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    b.planes().set_open(2);
    pool.remove(&spec(1, "a"));
    advance(Duration::from_secs(31)).await;
    assert_eq!(b.planes().closes(), [(CloseReason::DrainTimeout, 2)]);
    // The test planes drop their work when closed; real ones report it as it ends.
    b.work_ended();
    settle().await;
    assert_eq!(pool.backends().len(), 1);
    assert_eq!(
        events_of(&events, &["closed", "forgotten"]),
        ["closed a drain_timeout 2", "forgotten a"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retired_pool_drains_every_backend_without_waiting_for_another_to_be_ready() {
    let (pool, events) = pool(drains(30, 5));
    let busy = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "b");
    busy.planes().set_open(1);
    pool.retire();
    assert!(pool.routing().ready.is_empty(), "no new work");
    // b had nothing open: forgotten at once; a drains, though no backend is ready.
    assert_eq!(pool.backends().len(), 1);
    advance(Duration::from_secs(31)).await;
    assert_eq!(busy.planes().closes(), [(CloseReason::DrainTimeout, 1)]);
    busy.work_ended();
    settle().await;
    assert!(pool.backends().is_empty());
    assert_eq!(
        events_of(&events, &["forgotten"]),
        ["forgotten b", "forgotten a"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_name_still_configured_keeps_its_series_when_its_old_self_is_forgotten() {
    let (pool, events) = pool(drains(30, 5));
    let old = ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "other");
    old.planes().set_open(1);
    pool.remove(&spec(1, "a"));
    // Re-added at the same address while the old one drains: a new backend, unknown.
    pool.add(&spec(1, "a"));
    assert_eq!(pool.backends().len(), 3);
    old.planes().set_open(0);
    old.work_ended();
    settle().await;
    let left = pool.backends();
    assert_eq!(left.len(), 2);
    assert_eq!(find(&pool, "a").state(), BackendState::Unknown);
    assert!(!events.lines().contains(&"forgotten a".to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_did_not_run_changes_nothing() {
    let (pool, events) = pool(drains(30, 5));
    let b = ready_backend(&pool, 1, "a");
    let before = b.last_probe().unwrap().at;
    for _ in 0..5 {
        probe(
            &pool,
            "a",
            &[ProbeOutcome::NotRun("Too many open files".into())],
        );
    }
    assert_eq!(b.state(), BackendState::Ready);
    assert_eq!(b.last_probe().unwrap().at, before);
    assert_eq!(events_of(&events, &["probed a not_run"]).len(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_reload_keeps_state_counts_and_flap_damping() {
    let (pool, _) = pool(drains(30, 0));
    let damped = Thresholds {
        rise: 2,
        fall: 2,
        max_rise: 8,
        stable_probes: 100,
    };
    let settings = |t| PoolSettings {
        thresholds: t,
        drain: drains(30, 0),
        probe_interval: INTERVAL,
    };
    pool.reconfigure(settings(damped), None);
    let b = ready_backend(&pool, 1, "a");
    // Resumed without history, the first fall is not a flap; the second, right after
    // returning, is.
    probe(&pool, "a", &[fail("etcd"), fail("etcd"), pass(), pass()]);
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    assert_eq!(b.passes_to_ready(), 4);
    probe(&pool, "a", &[pass()]);
    // A health reload (say, fall 3): nothing restarts.
    pool.reconfigure(settings(Thresholds { fall: 3, ..damped }), None);
    assert_eq!(
        (b.state(), b.passes_to_ready()),
        (BackendState::NotReady, 4)
    );
    probe(&pool, "a", &[pass(), pass()]);
    assert_eq!(b.state(), BackendState::NotReady, "3 of 4 passes");
    probe(&pool, "a", &[pass()]);
    assert_eq!(b.state(), BackendState::Ready);
}

#[tokio::test(start_paused = true)]
async fn a_rename_keeps_the_backend_and_its_state() {
    let (pool, events) = pool(drains(30, 0));
    let b = ready_backend(&pool, 1, "a");
    pool.update(&spec(1, "renamed"));
    let after = find(&pool, "renamed");
    assert!(Arc::ptr_eq(&b, &after));
    assert_eq!(after.state(), BackendState::Ready);
    assert!(events
        .lines()
        .contains(&"renamed a renamed ready".to_string()));
}

#[tokio::test(start_paused = true)]
async fn not_ready_backends_are_the_fallback_and_shutting_down_ones_the_last_resort() {
    let (pool, _) = pool(drains(30, 0));
    ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "b");
    probe(&pool, "a", &[fail("etcd"), fail("etcd")]);
    probe(&pool, "b", &[fail("shutdown")]);
    let table = pool.routing();
    assert!(table.ready.is_empty());
    let fallback: Vec<_> = table
        .fallback
        .iter()
        .map(|b| b.info().name.clone())
        .collect();
    assert_eq!(fallback, ["a"]);
    use kubegate_config::NoReadyBackendPolicy;
    assert!(matches!(
        table.candidates(NoReadyBackendPolicy::Alive),
        crate::Candidates::Fallback(f) if f.len() == 1
    ));
    assert!(matches!(
        table.candidates(NoReadyBackendPolicy::Refuse),
        crate::Candidates::None
    ));
    // `a` starts shutting down without a change of state: it leaves the fallback set, and
    // with every answering backend shutting down, they are the last resort.
    drop(table);
    probe(&pool, "a", &[fail("shutdown")]);
    let table = pool.routing();
    assert!(table.fallback.is_empty());
    assert!(matches!(
        table.candidates(NoReadyBackendPolicy::Alive),
        crate::Candidates::Fallback(f) if f.len() == 2
    ));
    assert!(matches!(
        table.candidates(NoReadyBackendPolicy::Refuse),
        crate::Candidates::None
    ));
    // One that stops answering is not even that.
    drop(table);
    probe(&pool, "b", &[gone(), gone()]);
    assert!(matches!(
        pool.routing().candidates(NoReadyBackendPolicy::Alive),
        crate::Candidates::Fallback(f) if f.len() == 1
    ));
}

#[tokio::test(start_paused = true)]
async fn an_operator_drained_backend_gets_new_work_only_when_every_ready_one_is_drained() {
    use kubegate_config::NoReadyBackendPolicy;
    let (pool, _) = pool(drains(30, 0));
    ready_backend(&pool, 1, "a");
    ready_backend(&pool, 2, "b");
    let names = |pool: &Pool<TestPlanes>| match pool
        .routing()
        .candidates(NoReadyBackendPolicy::Refuse)
    {
        crate::Candidates::Ready(r) => r.iter().map(|b| b.info().name.clone()).collect::<Vec<_>>(),
        _ => panic!("ready backends expected"),
    };
    assert!(pool.drain_by_operator("a", true));
    assert!(find(&pool, "a").drained_by_operator());
    assert_eq!(names(&pool), ["b"]);
    // Still ready: kubegate's own readiness counts it.
    assert_eq!(pool.routing().ready.len(), 2);
    // Every ready backend drained: they take the work rather than nobody.
    assert!(pool.drain_by_operator("b", true));
    assert_eq!(names(&pool), ["a", "b"]);
    assert!(pool.drain_by_operator("a", false));
    assert_eq!(names(&pool), ["a"]);
    // A drained backend that fails and comes back is still drained.
    probe(&pool, "b", &[fail("etcd"), fail("etcd"), pass(), pass()]);
    assert_eq!(find(&pool, "b").state(), BackendState::Ready);
    assert_eq!(names(&pool), ["a"]);
    assert!(!pool.drain_by_operator("nobody", true));
}

#[tokio::test(start_paused = true)]
async fn failing_checks_are_reported_when_they_change() {
    let (pool, events) = pool(drains(30, 0));
    ready_backend(&pool, 1, "a");
    probe(&pool, "a", &[fail("etcd"), fail("etcd"), pass()]);
    assert_eq!(
        events_of(&events, &["failing"]),
        ["failing a [] -> [\"etcd\"]", "failing a [\"etcd\"] -> []"]
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_everything_and_waits_for_idle() {
    let (pool, events) = pool(drains(30, 0));
    let a = ready_backend(&pool, 1, "a");
    let b = ready_backend(&pool, 2, "b");
    a.planes().set_open(2);
    b.planes().set_open(1);
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.idle().await })
    };
    settle().await;
    assert!(!waiter.is_finished());
    assert_eq!(pool.close_all(CloseReason::ShutdownGrace), 3);
    a.work_ended();
    settle().await;
    assert!(waiter.is_finished());
    assert_eq!(
        events_of(&events, &["closed"]),
        ["closed a shutdown_grace 2", "closed b shutdown_grace 1"]
    );
}
