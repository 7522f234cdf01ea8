//! Watch continuity in terminate mode: a watch whose replica goes away continues on another
//! replica in the same response, without a gap or a repeat (real replicas on one etcd).
//!
//! 1. `json_and_protobuf_watches_continue_across_restarts_and_a_crash`: watches in both
//!    encodings, over HTTP/2 and HTTP/1.1, see every object created during a rolling restart
//!    of the replicas and a SIGKILL, once each, in order.
//! 2. `a_watch_that_cannot_resume_gets_the_apiservers_410`: the position was compacted away
//!    meanwhile: the client gets the ERROR event an apiserver sends, and its stream ends.
//! 3. `watches_leave_a_draining_replica_before_it_goes`: they move when its drain starts.
//! 4. `a_frozen_replicas_requests_and_watches_move_on`: kubegate ends what runs on a replica it
//!    found down (its connections stay open otherwise): reads are retried, watches resume.
//! 5. `a_replica_restarted_after_a_watchs_position_does_not_end_the_watch`: a replica whose
//!    watch cache begins after a watch's position says 410; another replica serves it.
//! 6. `a_replica_back_from_a_restart_gets_its_share_of_the_watches`: watches move to it live.
//! 7. `kubegate_drain_moves_a_replicas_watches_before_its_restart`: `kubegate drain --wait`
//!    returns once the replica holds nothing; its restart then moves nothing; `undrain` gives
//!    it its share back.
//! 8. `a_replica_whose_cache_lags_its_etcd_does_not_end_a_watch`: its "Too large resource
//!    version" is taken to another replica.
//! 9. `a_quiet_watch_outlives_a_rolling_restart_on_its_bookmarks`: bookmarks carry the watch
//!    cache's progress; resumed from them, a watch that heard no event since before every
//!    replica restarted needs no relist.
//! 10. `a_quiet_watch_leaves_a_draining_replica_with_a_fresh_position`: a position older than
//!     every other replica's cache is brought up to date on the replica it leaves.
//! 11. `a_busy_watch_leaves_a_draining_replica_on_its_next_event`: one that hears events
//!     often waits for the next on the replica it leaves, which takes no new request.

use kubegate_e2e::*;
use std::collections::HashMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// Three replicas on one etcd (each started with `args`), kubegate terminating in front with
/// a drain long enough that watches visibly leave a draining replica before its deadline.
fn cluster(args: &[&str]) -> Started {
    Cluster::new()
        .replicas(3)
        .etcd()
        .terminate()
        .sim_args(args)
        .configure(|cfg| cfg.drain.timeout = secs(30))
        .start()
}

/// Creates configmap `name`. A create in flight on a replica that crashes is ambiguous (502:
/// "it may have been applied"), and kubegate rightly does not send it again; this client then
/// does what a careful one does: looks the object up, and creates it only if it is not there.
async fn create(conn: &mut Conn, name: &str) {
    create_in(conn, "default", name).await
}

/// [`create`] in namespace `ns`.
async fn create_in(conn: &mut Conn, ns: &str, name: &str) {
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"a":"b"}}}}"#
    );
    for _ in 0..3 {
        let r = conn
            .post(&format!("/api/v1/namespaces/{ns}/configmaps"), &body)
            .await
            .expect("create answered");
        if r.status == 201 {
            return;
        }
        assert_eq!(r.status, 502, "create {name}: {}", r.text());
        let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
        let found = conn.get(&path).await.expect("get answered");
        if found.status == 200 {
            return;
        }
        assert_eq!(found.status, 404, "get {name}: {}", found.text());
    }
    panic!("create {name}: three ambiguous answers");
}

/// The list's resourceVersion, where the watches start.
async fn list_version(conn: &mut Conn) -> String {
    let r = conn.get(CONFIGMAPS).await.unwrap();
    r.resource_version()
}

/// Watches in flight per backend, from kubegate's metrics.
fn watches_on(kg: &Kubegate, sims: &[Sim]) -> HashMap<String, f64> {
    sims.iter()
        .map(|s| {
            let series = format!(
                "kubegate_backend_long_running_requests{{backend=\"{}\"}}",
                s.name
            );
            (s.name.clone(), kg.metric(&series))
        })
        .collect()
}

/// `n` JSON watches of `path` through kubegate, each on a connection of its own (kept beside
/// it: the watch lasts as long as its connection).
async fn open_watches(kg: &Kubegate, pki: &Pki, path: &str, n: usize) -> Vec<(Watch, Conn)> {
    let mut watches = Vec::new();
    for _ in 0..n {
        let mut c = kg.connect(pki, true).await.unwrap();
        let w = c.watch(path, false).await.unwrap();
        assert_eq!(w.status, 200, "{path}");
        watches.push((w, c));
    }
    watches
}

/// `n` JSON watches of namespace `ns` through kubegate from now on, each on a connection of
/// its own, once kubegate holds them all.
async fn watches_from_now(
    kg: &Kubegate,
    pki: &Pki,
    sims: &[Sim],
    writer: &mut Conn,
    ns: &str,
    n: usize,
) -> Vec<(Watch, Conn)> {
    let from = list_version(writer).await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={from}");
    let watches = open_watches(kg, pki, &path, n).await;
    wait_for(&format!("{n} watches open"), T, || {
        (watches_on(kg, sims).values().sum::<f64>() == n as f64).then_some(())
    });
    watches
}

/// One JSON watch of namespace `ns` through kubegate from now on, and the index of the
/// replica holding it.
async fn one_watch(
    kg: &Kubegate,
    pki: &Pki,
    sims: &[Sim],
    writer: &mut Conn,
    ns: &str,
) -> (Vec<(Watch, Conn)>, usize) {
    let watches = watches_from_now(kg, pki, sims, writer, ns, 1).await;
    let held = watches_on(kg, sims);
    let holder = sims.iter().position(|s| held[&s.name] > 0.0).unwrap();
    (watches, holder)
}

/// The watch's next event that is not a bookmark.
async fn next_object(w: &mut Watch) -> WatchEvent {
    loop {
        let e = w.next(T).await.unwrap().expect("an event");
        if e.kind != "BOOKMARK" {
            return e;
        }
    }
}

/// Asserts that `e` is the creation of object `name`.
fn assert_added(e: &WatchEvent, name: &str) {
    assert_eq!((e.kind.as_str(), e.name.as_str()), ("ADDED", name), "{e:?}");
}

/// Asserts that every watch's next event is the creation of object `name`.
async fn each_hears_added(watches: &mut [(Watch, Conn)], name: &str) {
    for (i, (w, _)) in watches.iter_mut().enumerate() {
        let e = w.next(T).await.unwrap().expect("an event");
        assert_eq!(
            (e.kind.as_str(), e.name.as_str()),
            ("ADDED", name),
            "watch {i}: {e:?}"
        );
    }
}

/// Asserts that every watch hears `created` next, every object once, in order.
async fn each_hears_in_order(watches: &mut [(Watch, Conn)], created: &[String]) {
    for (i, (w, _)) in watches.iter_mut().enumerate() {
        let mut seen = Vec::new();
        while seen.len() < created.len() {
            match w.next(T).await {
                Ok(Some(e)) => seen.push(e.name),
                other => panic!("watch {i} ended or stalled after {seen:?}: {other:?}"),
            }
        }
        assert_eq!(seen, created, "watch {i}: every object once, in order");
    }
}

/// Restarts `sim` as an operator would (SIGTERM, a clean exit, started again) and waits
/// until kubegate finds it ready.
fn restart_gracefully(kg: &Kubegate, sim: &mut Sim) {
    sim.signal(libc::SIGTERM);
    exits_cleanly(sim);
    sim.restart();
    kg.wait_state(&sim.name, "ready", T);
}

/// Restarts every replica but `holder` (`restart_gracefully`): their watch caches then begin
/// after any position the holder's watches have.
fn restart_all_but(kg: &Kubegate, sims: &mut [Sim], holder: usize) {
    for (i, sim) in sims.iter_mut().enumerate() {
        if i != holder {
            restart_gracefully(kg, sim);
        }
    }
}

/// Waits for `sim` to exit, and asserts it exited cleanly.
fn exits_cleanly(sim: &mut Sim) {
    let status = sim.wait_exit(T);
    assert!(status.success(), "{}: {status:?}", sim.name);
}

/// Asserts that kubegate ended no watch for `reason` (its `kubegate_watches_ended_total`).
fn no_watch_ended(kg: &Kubegate, reason: &str) {
    let series = format!(r#"kubegate_watches_ended_total{{reason="{reason}"}}"#);
    assert_eq!(kg.metric(&series), 0.0, "{series}");
}

/// Waits until the one watch has left `holder` for another replica.
fn wait_watch_moved_off(kg: &Kubegate, sims: &[Sim], holder: &str) {
    wait_for("the watch to leave the draining replica", T, || {
        let on = watches_on(kg, sims);
        (on[holder] == 0.0 && on.values().sum::<f64>() == 1.0).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_protobuf_watches_continue_across_restarts_and_a_crash() {
    let mut bed = cluster(&["--shutdown-delay-duration", "2s"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}");
    // JSON over HTTP/2 and HTTP/1.1, protobuf over HTTP/2.
    let mut watches = Vec::new();
    for (h2, protobuf) in [(true, false), (false, false), (true, true)] {
        let mut c = kg.connect(pki, h2).await.unwrap();
        let w = c.watch(&path, protobuf).await.unwrap();
        assert_eq!(w.status, 200);
        assert_eq!(w.is_protobuf(), protobuf);
        watches.push((c, w, Vec::<WatchEvent>::new()));
    }
    wait_for("three watches open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 3.0).then_some(())
    });

    let mut created = Vec::new();
    let mut n = 0;
    let mut next = |created: &mut Vec<String>| {
        n += 1;
        let name = format!("c{n:03}");
        created.push(name.clone());
        name
    };
    for _ in 0..3 {
        create(&mut writer, &next(&mut created)).await;
    }
    // A rolling restart: each replica is shut down (SIGTERM) and started again, with writes
    // before and after each.
    for sim in sims.iter_mut() {
        sim.signal(libc::SIGTERM);
        create(&mut writer, &next(&mut created)).await;
        exits_cleanly(sim);
        create(&mut writer, &next(&mut created)).await;
        sim.restart();
        kg.wait_state(&sim.name, "ready", T);
        create(&mut writer, &next(&mut created)).await;
    }
    // A crash of a replica holding watches.
    let held = watches_on(kg, sims);
    let victim = sims
        .iter()
        .position(|s| held[&s.name] > 0.0)
        .expect("some replica holds the watches");
    sims[victim].kill();
    for _ in 0..3 {
        create(&mut writer, &next(&mut created)).await;
    }

    for (i, (_, w, seen)) in watches.iter_mut().enumerate() {
        while seen.len() < created.len() {
            match w.next(T).await {
                Ok(Some(e)) => seen.push(e),
                other => panic!(
                    "watch {i} ended or stalled after {} events: {other:?}",
                    seen.len()
                ),
            }
        }
        let names: Vec<&str> = seen.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, created, "watch {i}: every object once, in order");
        assert!(
            seen.iter().all(|e| e.kind == "ADDED"),
            "watch {i}: {seen:?}"
        );
        let versions: Vec<u64> = seen
            .iter()
            .map(|e| e.resource_version.parse().unwrap())
            .collect();
        assert!(
            versions.windows(2).all(|p| p[0] < p[1]),
            "watch {i}: {versions:?}"
        );
    }
    let resumed: f64 = ["ended", "failed", "drained"]
        .iter()
        .map(|c| kg.metric(&format!("kubegate_watch_resumes_total{{cause=\"{c}\"}}")))
        .sum();
    assert!(resumed >= 3.0, "{resumed} resumes");
    assert_eq!(kg.metric("kubegate_watches_open"), 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_cannot_resume_gets_the_apiservers_410() {
    // No bookmarks meanwhile: the watch's position stays where it started.
    let mut bed = cluster(&["--bookmark-interval", "1h"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    // A namespace nothing happens in: no event moves the position.
    let mut c = kg.connect(pki, true).await.unwrap();
    let mut w = c
        .watch(
            &format!("/api/v1/namespaces/quiet/configmaps?watch=1&resourceVersion={from}"),
            false,
        )
        .await
        .unwrap();
    wait_for("the watch open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 1.0).then_some(())
    });
    // Elsewhere the store moves on, and etcd compacts the watch's position away.
    for i in 0..5 {
        create(&mut writer, &format!("busy-{i}")).await;
    }
    let now = list_version(&mut writer).await;
    let compacted = bed.etcd.as_ref().unwrap().compact(now.parse().unwrap());
    assert!(compacted.starts_with("HTTP/1.1 200"), "{compacted}");
    // The watch's replica goes away: it cannot resume, and says so as the apiserver does.
    let held = watches_on(kg, sims);
    let victim = sims.iter().position(|s| held[&s.name] > 0.0).unwrap();
    sims[victim].kill();
    let e = w.next(T).await.unwrap().expect("an event");
    assert_eq!((e.kind.as_str(), e.code), ("ERROR", Some(410)), "{e:?}");
    assert_eq!(
        w.next(T).await.unwrap(),
        None,
        "the stream ends after the ERROR"
    );
    wait_for("the 410 counted", T, || {
        (kg.metric(r#"kubegate_watches_ended_total{reason="expired"}"#) == 1.0).then_some(())
    });
}

/// A quiet watch's position predates a replica's restart: that replica's watch cache begins
/// at its start, so it answers the position with 410 (as an apiserver's cacher does), while a
/// replica up longer still serves it. kubegate holds such a 410 back and asks the replicas
/// that have not said it: new watches from the old position, and a watch moved off a crashed
/// replica, go on without an ERROR; no client relists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_after_a_watchs_position_does_not_end_the_watch() {
    let mut bed = cluster(&["--watch-cache", "--bookmark-interval", "1h"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    let path = format!("/api/v1/namespaces/quiet/configmaps?watch=1&resourceVersion={from}");
    let mut watches = open_watches(kg, pki, &path, 1).await;
    wait_for("the first watch open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 1.0).then_some(())
    });
    // The store moves on elsewhere; then a replica that holds no watch restarts: its cache
    // begins after the watch's position.
    for i in 0..3 {
        create(&mut writer, &format!("busy-{i}")).await;
    }
    let held = watches_on(kg, sims);
    let holder = sims.iter().position(|s| held[&s.name] > 0.0).unwrap();
    let restarted = (holder + 1) % sims.len();
    sims[restarted].restart();
    let mut direct = sims[restarted].connect(pki, false).await.unwrap();
    // Its watch cache starts after its port opens (`restart` waits for the port only): until
    // then a watch gets 500, a window a loaded machine makes long enough to see.
    let deadline = std::time::Instant::now() + T;
    let r = loop {
        let r = direct
            .get(&path.replace("watch=1", "watch=1&timeoutSeconds=1"))
            .await
            .unwrap();
        let starting = r.text().contains("the watch cache has not started");
        if !starting || std::time::Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        r.text().contains("too old resource version"),
        "the restarted replica serves the old position: {}",
        r.text()
    );
    // New watches from the old position: the restarted replica holds none, so at least one is
    // offered to it first.
    watches.extend(open_watches(kg, pki, &path, 2).await);
    wait_for("the three watches open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 3.0).then_some(())
    });
    wait_for(
        "a 410 from the restarted replica taken elsewhere",
        T,
        || (kg.metric(r#"kubegate_watch_resumes_total{cause="expired"}"#) >= 1.0).then_some(()),
    );
    // The first watch's replica crashes: its watches move, wherever they land.
    sims[holder].kill();
    create_in(&mut writer, "quiet", "q1").await;
    each_hears_added(&mut watches, "q1").await;
    no_watch_ended(kg, "expired");
}

/// A replica whose watch cache lags its etcd cannot serve a position newer than its cache:
/// after its wait it answers "Too large resource version". kubegate holds that answer back and
/// asks another replica; no client sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_cache_lags_its_etcd_does_not_end_a_watch() {
    let bed = cluster(&["--watch-cache", "--bookmark-interval", "1h"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let lagging = &sims[0];
    lagging.set_cache("lagging");
    for i in 0..3 {
        create(&mut writer, &format!("busy-{i}")).await;
    }
    let from = list_version(&mut writer).await;
    let path = format!("/api/v1/namespaces/lag/configmaps?watch=1&resourceVersion={from}");
    let mut direct = lagging.connect(pki, false).await.unwrap();
    let r = direct
        .get(&path.replace("watch=1", "watch=1&timeoutSeconds=10"))
        .await
        .unwrap();
    assert!(
        r.text().contains("Too large resource version"),
        "the lagging replica serves the new position: {}",
        r.text()
    );
    // Three watches over three replicas holding none: one is offered to the lagging replica.
    let mut watches = open_watches(kg, pki, &path, 3).await;
    wait_for("the lagging replica's answer taken elsewhere", T, || {
        (kg.metric(r#"kubegate_watch_resumes_total{cause="cache_behind"}"#) >= 1.0).then_some(())
    });
    wait_for("the three watches on the other replicas", T, || {
        let on = watches_on(kg, sims);
        (on[&lagging.name] == 0.0 && on.values().sum::<f64>() == 3.0).then_some(())
    });
    create_in(&mut writer, "lag", "l1").await;
    each_hears_added(&mut watches, "l1").await;
    no_watch_ended(kg, "error");
    lagging.set_cache("ready");
}

/// A quiet watch (a kubelet's of its own pods) hears no event for long; its bookmarks carry
/// the watch cache's progress, which other objects' changes move. Resumed from its last
/// bookmark, it is served by replicas whose caches begin after its last event: a rolling
/// restart of every replica ends it nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_outlives_a_rolling_restart_on_its_bookmarks() {
    let mut bed = cluster(&[
        "--watch-cache",
        "--bookmark-interval",
        "1s",
        "--shutdown-delay-duration",
        "1s",
    ]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    let path = format!(
        "/api/v1/namespaces/quiet/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={from}"
    );
    let mut watches = open_watches(kg, pki, &path, 1).await;
    let (w, _) = &mut watches[0];
    for (i, sim) in sims.iter_mut().enumerate() {
        // Elsewhere the store moves on; the quiet watch hears of it only by its bookmarks.
        create(&mut writer, &format!("busy-{i}")).await;
        let now: u64 = list_version(&mut writer).await.parse().unwrap();
        let deadline = std::time::Instant::now() + T;
        loop {
            let e = w.next(T).await.unwrap().expect("a bookmark");
            assert_eq!(e.kind, "BOOKMARK", "{e:?}");
            if e.resource_version.parse::<u64>().unwrap() >= now {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no bookmark at {now} or later: {e:?}"
            );
        }
        restart_gracefully(kg, sim);
    }
    // Every replica's cache now begins after the watch's last event, and still it goes on.
    create_in(&mut writer, "quiet", "q1").await;
    assert_added(&next_object(w).await, "q1");
    no_watch_ended(kg, "expired");
}

/// A quiet watch's position can be older than the caches of every replica that came back
/// since (its bookmarks come once a minute). Before it leaves a replica that still answers,
/// kubegate asks that replica for a fresh position (a bookmark before a short deadline), so
/// the replicas that came back serve it: no 410, no relist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_leaves_a_draining_replica_with_a_fresh_position() {
    let mut bed = cluster(&[
        "--watch-cache",
        "--bookmark-interval",
        "1h",
        "--shutdown-delay-duration",
        "5s",
    ]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let (mut watches, holder) = one_watch(kg, pki, sims, &mut writer, "quiet").await;
    // The store moves on elsewhere, and the two other replicas restart: their caches begin
    // after the watch's position, which it heard nothing to move.
    for i in 0..3 {
        create(&mut writer, &format!("busy-{i}")).await;
    }
    restart_all_but(kg, sims, holder);
    // The holder shuts down (serving 5 s more): the watch leaves it.
    let holder_name = sims[holder].name.clone();
    sims[holder].signal(libc::SIGTERM);
    wait_watch_moved_off(kg, sims, &holder_name);
    assert!(kg.metric(r#"kubegate_watch_positions_freshened_total{by="bookmark"}"#) >= 1.0);
    create_in(&mut writer, "quiet", "q1").await;
    let e = watches[0].0.next(T).await.unwrap().expect("an event");
    assert_added(&e, "q1");
    no_watch_ended(kg, "expired");
    exits_cleanly(&mut sims[holder]);
}

/// A watch that hears events often, leaving a replica while the others came back after its
/// position, stays on its stream for its next event rather than ask the replica for a
/// bookmark: here the draining replica answers every new request 429 (as an apiserver with
/// `--shutdown-send-retry-after` does), so that no bookmark could be asked, and only the
/// event can carry the watch across with no 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_watch_leaves_a_draining_replica_on_its_next_event() {
    let mut bed = cluster(&[
        "--watch-cache",
        "--bookmark-interval",
        "1h",
        "--shutdown-delay-duration",
        "0s",
        "--shutdown-send-retry-after",
    ]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let (mut watches, holder) = one_watch(kg, pki, sims, &mut writer, "busy").await;
    // Events close together: the watch hears something often.
    let mut expected = Vec::new();
    for i in 0..3 {
        let name = format!("before-{i}");
        create_in(&mut writer, "busy", &name).await;
        expected.push(name);
    }
    let (w, _) = &mut watches[0];
    for name in &expected {
        assert_added(&next_object(w).await, name);
    }
    // The two other replicas restart: their caches begin after the watch's position.
    restart_all_but(kg, sims, holder);
    // The holder shuts down, refusing new requests; its watch stream goes on.
    let holder_name = sims[holder].name.clone();
    sims[holder].signal(libc::SIGTERM);
    kg.wait_state(&holder_name, "not_ready", T);
    create_in(&mut writer, "busy", "during").await;
    assert_added(&next_object(&mut watches[0].0).await, "during");
    wait_watch_moved_off(kg, sims, &holder_name);
    create_in(&mut writer, "busy", "after").await;
    assert_added(&next_object(&mut watches[0].0).await, "after");
    assert_eq!(
        kg.metric(r#"kubegate_watch_positions_freshened_total{by="next_event"}"#),
        1.0
    );
    no_watch_ended(kg, "expired");
    exits_cleanly(&mut sims[holder]);
}

/// A replica back from a restart holds no watch until its share is moved to it: the others,
/// holding more than theirs, give some up, live, each watch from its client's last position.
/// Every watch still sees every object once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_from_a_restart_gets_its_share_of_the_watches() {
    let mut bed = cluster(&["--shutdown-delay-duration", "2s"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let mut watches = watches_from_now(kg, pki, sims, &mut writer, "default", 12).await;
    let mut created = Vec::new();
    for i in 0..2 {
        let name = format!("before-{i}");
        create(&mut writer, &name).await;
        created.push(name);
    }
    // The third replica restarts: its watches move off as it drains; back, it holds none.
    let back = sims[2].name.clone();
    restart_gracefully(kg, &mut sims[2]);
    for i in 0..2 {
        let name = format!("between-{i}");
        create(&mut writer, &name).await;
        created.push(name);
    }
    // Its share comes to it: 12 watches over 3 replicas, 4 each.
    let share = wait_for("the share moved to the replica back", T, || {
        let on = watches_on(kg, sims);
        (on[&back] >= 3.0 && on.values().all(|&n| n <= 5.0)).then_some(on)
    });
    for i in 0..2 {
        let name = format!("after-{i}");
        create(&mut writer, &name).await;
        created.push(name);
    }
    each_hears_in_order(&mut watches, &created).await;
    let moved = kg.metric(r#"kubegate_watch_resumes_total{cause="moved"}"#);
    assert!(moved >= 3.0, "{moved} moves for {share:?}");
}

/// Runs `kubegate ARGS --admin ADMIN` (a drain call), its exit status and output.
fn kubegate_cli(kg: &Kubegate, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin("kubegate"))
        .args(args)
        .arg("--admin")
        .arg(kg.admin.to_string())
        .output()
        .unwrap();
    let text = said(&out);
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubegate_drain_moves_a_replicas_watches_before_its_restart() {
    let mut bed = cluster(&["--shutdown-delay-duration", "2s"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &mut bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}");
    let mut watches = open_watches(kg, pki, &path, 9).await;
    wait_for("the watches open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 9.0).then_some(())
    });
    let held = watches_on(kg, sims);
    let target = sims
        .iter()
        .position(|s| held[&s.name] > 0.0)
        .expect("a replica holds watches");
    let name = sims[target].name.clone();
    let mut created = Vec::new();
    create(&mut writer, "before").await;
    created.push("before".to_string());

    // A browser cannot ask for a drain, even on loopback.
    let from_browser = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(kg.admin).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "POST /backends/{name}/drain HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(from_browser.starts_with("HTTP/1.1 403"), "{from_browser}");
    let (ok, out) = kubegate_cli(kg, &["drain", "nobody"]);
    assert!(!ok && out.contains("404"), "{out}");

    // Drained, the replica gives up every watch without a break, and `--wait` says so.
    let (ok, out) =
        tokio::task::block_in_place(|| kubegate_cli(kg, &["drain", &name, "--wait", "60s"]));
    assert!(ok, "{out}");
    assert!(out.contains("holds no long-running request"), "{out}");
    let on = watches_on(kg, sims);
    assert_eq!((on[&name], on.values().sum::<f64>()), (0.0, 9.0), "{on:?}");
    let table = kg.backends();
    let row = table.iter().find(|b| b["name"] == name.as_str()).unwrap();
    assert_eq!(row["drained_by_operator"], true, "{row}");
    // New watches go elsewhere too.
    let more = open_watches(kg, pki, &path, 3).await;
    wait_for("the new watches open", T, || {
        (watches_on(kg, sims).values().sum::<f64>() == 12.0).then_some(())
    });
    assert_eq!(watches_on(kg, sims)[&name], 0.0);
    watches.extend(more);

    // Its restart moves nothing.
    let resumed = |kg: &Kubegate| {
        ["ended", "failed", "drained", "expired"]
            .iter()
            .map(|c| kg.metric(&format!("kubegate_watch_resumes_total{{cause=\"{c}\"}}")))
            .sum::<f64>()
    };
    let before = resumed(kg);
    restart_gracefully(kg, &mut sims[target]);
    assert_eq!(resumed(kg), before, "a watch moved at the restart");
    create(&mut writer, "between").await;
    created.push("between".to_string());

    // Undrained, it gets its share back.
    let (ok, out) = kubegate_cli(kg, &["undrain", &name]);
    assert!(ok && out.contains("undrained"), "{out}");
    wait_for("the share back on the undrained replica", T, || {
        (watches_on(kg, sims)[&name] >= 3.0).then_some(())
    });
    create(&mut writer, "after").await;
    created.push("after".to_string());
    // Every watch (the later ones too: they watch from the same position) saw every object
    // once, in order.
    each_hears_in_order(&mut watches, &created).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_leave_a_draining_replica_before_it_goes() {
    // A replica that serves on for two minutes after SIGTERM (/readyz failing meanwhile).
    let bed = cluster(&["--shutdown-delay-duration", "120s"]);
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let mut watches = watches_from_now(kg, pki, sims, &mut writer, "default", 6).await;
    let held = watches_on(kg, sims);
    let target = sims.iter().find(|s| held[&s.name] > 0.0).unwrap();
    target.signal(libc::SIGTERM);
    // kubegate sees the shutdown on its next probe and moves the watches at once, long before
    // the drain deadline (30 s) or the replica's exit (120 s).
    wait_for("the watches to leave the draining replica", T, || {
        (watches_on(kg, sims)[&target.name] == 0.0).then_some(())
    });
    assert_eq!(watches_on(kg, sims).values().sum::<f64>(), 6.0);
    assert!(kg.metric(r#"kubegate_watch_resumes_total{cause="drained"}"#) >= 1.0);
    // And they still see what happens.
    create(&mut writer, "after-the-move").await;
    each_hears_added(&mut watches, "after-the-move").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replicas_requests_and_watches_move_on() {
    let bed = Cluster::new()
        .replicas(3)
        .etcd()
        .terminate()
        .configure(|cfg| cfg.balance = kubegate_config::BalancePolicy::RoundRobin)
        .start();
    let (kg, pki, sims) = (&bed.kg, &bed.pki, &bed.sims);
    let mut writer = kg.connect(pki, true).await.unwrap();
    let from = list_version(&mut writer).await;
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}");
    let mut watches = open_watches(kg, pki, &path, 3).await;
    wait_for("a watch on each replica", T, || {
        watches_on(kg, sims)
            .values()
            .all(|n| *n == 1.0)
            .then_some(())
    });
    // A read held by replica-1, which then freezes: its TCP connections stay open, so only
    // kubegate (probes time out: down, close) can end what runs on it.
    sims[0].set_latency_ms(60_000);
    let slow = loop {
        let mut c = kg.connect(pki, true).await.unwrap();
        let before = kg.metric(r#"kubegate_backend_requests_in_flight{backend="replica-1"}"#);
        let task = tokio::spawn(async move { c.get(CONFIGMAPS).await });
        let held = wait_for("the read answered or held", T, || {
            let now = kg.metric(r#"kubegate_backend_requests_in_flight{backend="replica-1"}"#);
            if now > before {
                Some(true)
            } else {
                task.is_finished().then_some(false)
            }
        });
        if held {
            break task;
        }
    };
    sims[0].signal(libc::SIGSTOP);
    kg.wait_state("replica-1", "down", T);
    let r = slow.await.unwrap().expect("the read is answered");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.replica(), "replica-1");
    create(&mut writer, "after-the-freeze").await;
    each_hears_added(&mut watches, "after-the-freeze").await;
    sims[0].signal(libc::SIGCONT);
}
