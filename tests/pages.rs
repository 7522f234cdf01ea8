//! Paginated LISTs: the simulator pages as the apiserver does (KEP-4988's snapshots in its
//! watch cache), and kubegate sends a LIST's continue pages to the replica that served its
//! first page.
//!
//! 1. `continue_pages_read_nothing_from_etcd_through_kubegate_and_a_third_round_robin`: 300
//!    objects in pages of 30 while a replica restarts after the first page: sent round robin
//!    (what a per-request balancer does) the restarted replica reads its pages from etcd; through
//!    kubegate every page goes to the first page's replica and comes from its cache.
//!    A watch cache answers `resourceVersion=0` whole.
//! 2. `a_compacted_continue_page_is_410_expired_with_a_token_that_goes_on`: as etcd3's store
//!    answers it (`handleCompactedErrorForPaging`); a first page at a compacted exact revision
//!    is 410 without one, and a token that is none 400.

use kubegate_e2e::*;
use serde_json::Value;
use std::collections::HashSet;

const LIST: &str = "/api/v1/namespaces/pages/configmaps";

/// `n` configmaps in namespace `pages`, written straight to `sim`.
async fn seed(sim: &Sim, pki: &Pki, n: usize) {
    let mut conn = sim.connect(pki, true).await.unwrap();
    for i in 0..n {
        let body = format!(r#"{{"metadata":{{"name":"cm-{i:04}"}},"data":{{"i":"{i}"}}}}"#);
        let r = conn.send("POST", LIST, &[], Some(&body)).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
    }
}

/// A change elsewhere: the store's revision moves past a first page's.
async fn write_elsewhere(sim: &Sim, pki: &Pki, name: &str) {
    let mut conn = sim.connect(pki, true).await.unwrap();
    let body = format!(r#"{{"metadata":{{"name":"{name}"}}}}"#);
    let r = conn
        .send(
            "POST",
            "/api/v1/namespaces/other/configmaps",
            &[],
            Some(&body),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
}

/// One page: its answer as JSON and the replica that served it.
async fn page(conn: &mut Conn, query: &str) -> (Value, String) {
    let r = conn.get(&format!("{LIST}?{query}")).await.unwrap();
    assert_eq!(r.status, 200, "{query}: {}", r.text());
    (serde_json::from_slice(&r.body).unwrap(), r.replica())
}

/// Its continue token, if more follow.
fn next(list: &Value) -> Option<String> {
    list["metadata"]["continue"].as_str().map(str::to_string)
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Each replica's continue pages: (from its cache, from storage).
fn continue_pages(sims: &[Sim]) -> Vec<(u64, u64)> {
    sims.iter()
        .map(|s| {
            (
                s.counted("continue_pages_from_cache"),
                s.counted("continue_pages_from_storage"),
            )
        })
        .collect()
}

/// Three replicas on one etcd, with watch caches, kubegate in front, 300 objects.
async fn paged_cluster() -> Started {
    let bed = Cluster::new()
        .replicas(3)
        .etcd()
        .terminate()
        .sim_args(&["--watch-cache"])
        .start();
    seed(&bed.sims[0], &bed.pki, 300).await;
    bed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_pages_read_nothing_from_etcd_through_kubegate_and_a_third_round_robin() {
    // Round robin, straight to the replicas: the first page from replica-1, then replica-3
    // restarts after a change, and the continue pages go 2, 3, 1, 2, 3, ...
    let mut bed = paged_cluster().await;
    let mut conn = bed.sims[0].connect(&bed.pki, true).await.unwrap();
    let (first, _) = page(&mut conn, "limit=30").await;
    write_elsewhere(&bed.sims[0], &bed.pki, "moved-1").await;
    bed.sims[2].restart();
    let before = continue_pages(&bed.sims);
    let mut seen: Vec<String> = names(&first);
    let mut token = next(&first);
    let mut turn = 1;
    while let Some(t) = token {
        let mut conn = bed.sims[turn % 3].connect(&bed.pki, true).await.unwrap();
        let (list, _) = page(&mut conn, &format!("limit=30&continue={t}")).await;
        seen.extend(names(&list));
        token = next(&list);
        turn += 1;
    }
    assert_eq!(
        seen.iter().collect::<HashSet<_>>().len(),
        300,
        "every object once"
    );
    let after = continue_pages(&bed.sims);
    let from_storage: Vec<u64> = (0..3).map(|i| after[i].1 - before[i].1).collect();
    assert_eq!(
        from_storage,
        [0, 0, 3],
        "the restarted replica reads its three pages from etcd: {after:?}"
    );
    drop(bed);

    // Through kubegate on one connection: the first page's replica serves every page, from
    // its cache, across the restart of another replica.
    let mut bed = paged_cluster().await;
    let mut conn = Conn::open(bed.kg.listen, &bed.pki, true).await.unwrap();
    let (first, holder) = page(&mut conn, "limit=30").await;
    write_elsewhere(&bed.sims[0], &bed.pki, "moved-2").await;
    let other = bed.sims.iter().position(|s| s.name != holder).unwrap();
    bed.sims[other].restart();
    let before = continue_pages(&bed.sims);
    let mut seen = names(&first);
    let mut token = next(&first);
    let mut pages = 1;
    while let Some(t) = token {
        let (list, replica) = page(&mut conn, &format!("limit=30&continue={t}")).await;
        assert_eq!(
            replica,
            holder,
            "page {} went to the first page's replica",
            pages + 1
        );
        assert!(list["metadata"]["remainingItemCount"].is_u64() || next(&list).is_none());
        seen.extend(names(&list));
        token = next(&list);
        pages += 1;
    }
    assert_eq!(
        (pages, seen.iter().collect::<HashSet<_>>().len()),
        (10, 300)
    );
    let after = continue_pages(&bed.sims);
    let holder_at = bed.sims.iter().position(|s| s.name == holder).unwrap();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(
            a.1, b.1,
            "no page from etcd on {}: {after:?}",
            bed.sims[i].name
        );
    }
    assert_eq!(after[holder_at].0 - before[holder_at].0, 9, "{after:?}");
    assert_eq!(
        bed.kg
            .metric(r#"kubegate_continue_pages_total{to="first_page_replica"}"#),
        9.0
    );
    // A watch cache answers `resourceVersion=0` whole, whatever the limit (client-go's
    // reflector lists so first).
    let (whole, _) = page(&mut conn, "limit=30&resourceVersion=0").await;
    assert_eq!((names(&whole).len(), next(&whole)), (300, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_continue_page_is_410_expired_with_a_token_that_goes_on() {
    let bed = Cluster::new().replicas(1).etcd().start();
    let (sim, pki) = (&bed.sims[0], &bed.pki);
    seed(sim, pki, 30).await;
    let mut conn = sim.connect(pki, true).await.unwrap();
    let (first, _) = page(&mut conn, "limit=10").await;
    assert_eq!(first["metadata"]["remainingItemCount"], 20);
    write_elsewhere(sim, pki, "moved").await;
    let now: i64 = {
        let r = conn
            .get("/api/v1/namespaces/other/configmaps")
            .await
            .unwrap();
        r.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let answer = bed.etcd.as_ref().unwrap().compact(now);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let r = conn
        .get(&format!(
            "{LIST}?limit=10&continue={}",
            next(&first).unwrap()
        ))
        .await
        .unwrap();
    assert_eq!(r.status, 410, "{}", r.text());
    let status = r.json();
    assert_eq!(status["reason"], "Expired");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .contains("inconsistent list"));
    // Its token goes on from the same key, at the newest revision.
    let token = next(&status).expect("a token to go on");
    let (rest, _) = page(&mut conn, &format!("limit=10&continue={token}")).await;
    assert_eq!(names(&rest).first().map(String::as_str), Some("cm-0010"));
    assert_eq!(sim.counted("continue_pages_expired"), 1);
    // A first page at a compacted exact revision: 410, no token.
    let r = conn
        .get(&format!("{LIST}?limit=10&resourceVersion={}", now - 2))
        .await
        .unwrap();
    assert_eq!(r.status, 410, "{}", r.text());
    assert!(r
        .text()
        .contains("The resourceVersion for the provided list is too old."));
    // A token that is none: 400.
    let bad = conn
        .get(&format!("{LIST}?limit=10&continue=bm9uZQ"))
        .await
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text());
}
