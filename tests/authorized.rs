//! Every client that shares another request's answer — a read joining one in flight, a watch
//! fed from a shared one, of its own sender or another's — is served only with an identity
//! valid now and an authorization decided lately (real `kubegate` and `kubegate-sim`
//! processes over one etcd; the replicas revoke tokens through their fault port).
//!
//! 1. `across_senders_a_follower_gets_none_of_the_leads_audit_id_and_a_revoked_one_gets_401`
//! 2. `a_revoked_tokens_new_watch_gets_401_while_its_twin_is_still_fed`: its own fed watch
//!    ends at once, another sender's watch of the same feed goes on.
//! 3. `a_watch_joining_a_feed_authorized_longer_ago_than_the_review_ttl_is_reviewed_first`

use kubegate_e2e::*;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

/// Two replicas over one etcd, kubegate terminating in front, tokens `tok-a` (token-user-a)
/// and `tok-b` (token-user-b), a token's name reviewed again after a second, configured by
/// `more`.
fn sharing(more: impl FnOnce(&mut KubegateConfig) + 'static) -> Started {
    Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .tokens(DEV_TOKENS)
        .configure(|cfg| {
            cfg.terminate.token_review.ttl = Duration::from_secs(1);
            cfg.terminate.access_review.timeout = Duration::from_secs(5);
            cfg.terminate.version_skew.refresh = Duration::from_secs(3600);
        })
        .configure(more)
        .start()
}

/// An HTTP/2 connection through `bed`'s kubegate as `user` of `system:masters`.
async fn as_user(bed: &Started, user: &str) -> Conn {
    Conn::open_as_user(bed.kg.listen, &bed.pki, user, user, &["system:masters"]).await
}

/// An HTTP/2 connection through `bed`'s kubegate without a client certificate.
async fn anonymous(bed: &Started) -> Conn {
    Conn::open_anonymous(bed.kg.listen, &bed.pki, true)
        .await
        .unwrap()
}

/// A watch of `path` with bearer `token`.
async fn watch_with_token(conn: &mut Conn, path: &str, token: &str) -> Lines {
    let bearer = format!("Bearer {token}");
    conn.stream_with(path, &[("Authorization", bearer.as_str())])
        .await
        .unwrap()
}

/// A GET of `path` with bearer `token`.
async fn with_token(conn: &mut Conn, path: &str, token: &str) -> Response {
    let bearer = format!("Bearer {token}");
    conn.send("GET", path, &[("Authorization", bearer.as_str())], None)
        .await
        .unwrap()
}

/// Revokes `token` on every replica.
fn revoke(bed: &Started, token: &str) {
    for s in &bed.sims {
        s.revoke_token(token);
    }
}

/// A read of `path` by `user`, in flight at a replica (slowed) when this returns.
async fn read_in_flight(
    bed: &Started,
    user: &str,
    path: &str,
) -> tokio::task::JoinHandle<Response> {
    let mut conn = as_user(bed, user).await;
    let path = path.to_string();
    let before = bed.kg.metric_sum("kubegate_backend_requests_in_flight");
    let lead = tokio::spawn(async move { conn.get(&path).await.unwrap() });
    wait_for(&format!("{user}'s read in flight"), T, || {
        (bed.kg.metric_sum("kubegate_backend_requests_in_flight") > before).then_some(())
    });
    lead
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_senders_a_follower_gets_none_of_the_leads_audit_id_and_a_revoked_one_gets_401() {
    let bed = sharing(|cfg| {
        cfg.terminate.join_reads.enabled = true;
        cfg.terminate.join_reads.across_senders = true;
        cfg.terminate.access_review.ttl = Duration::from_secs(300);
        // Long enough for a read to join alice's with the name and the review in hand.
        cfg.terminate.token_review.ttl = Duration::from_secs(5);
    });
    for s in &bed.sims {
        s.set_latency_ms(1000);
    }
    let path = format!("{CONFIGMAPS}?resourceVersion=0");
    let mut follower = anonymous(&bed).await;
    let joined_reads = || {
        bed.kg
            .metric(r#"kubegate_reads_joined_total{cluster="default"}"#)
    };
    // A token client joins alice's read (the first tries may go alone while kubegate names
    // the token and reviews its access): the answer, and nothing of alice's request.
    let mut tries = 0;
    let (led, joined) = loop {
        tries += 1;
        assert!(tries <= 10, "the token's read never joined alice's");
        let before = joined_reads();
        let lead = read_in_flight(&bed, "alice", &path).await;
        let r = with_token(&mut follower, &path, "tok-a").await;
        let led = lead.await.unwrap();
        assert_eq!((led.status, r.status), (200, 200), "{}", r.text());
        if joined_reads() > before {
            break (led, r);
        }
    };
    assert!(led.header("audit-id").is_some());
    assert_eq!(joined.body, led.body);
    for own in [
        "audit-id",
        "x-kubernetes-pf-prioritylevel-uid",
        "x-kubernetes-pf-flowschema-uid",
    ] {
        assert!(
            joined
                .header(own)
                .is_none_or(|v| Some(v) != led.header(own)),
            "the lead's {own} crossed"
        );
    }
    // Revoked: once kubegate reviews the token again (its name lives 5 s), the token's
    // reads get the apiserver's 401, never alice's answer.
    revoke(&bed, "tok-a");
    let deadline = Instant::now() + T;
    loop {
        let lead = read_in_flight(&bed, "alice", &path).await;
        let r = with_token(&mut follower, &path, "tok-a").await;
        assert_eq!(lead.await.unwrap().status, 200);
        if r.status == 401 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            Instant::now() < deadline,
            "the revoked token was still served"
        );
    }
    for _ in 0..3 {
        let lead = read_in_flight(&bed, "alice", &path).await;
        let r = with_token(&mut follower, &path, "tok-a").await;
        assert_eq!(r.status, 401, "once refused, never served: {}", r.text());
        assert_eq!(lead.await.unwrap().status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_new_watch_gets_401_while_its_twin_is_still_fed() {
    let bed = sharing(|cfg| {
        cfg.terminate.shared_watches.enabled = true;
        cfg.terminate.shared_watches.across_senders = true;
        cfg.terminate.access_review.ttl = Duration::from_secs(300);
    });
    let mut admin = as_user(&bed, "admin").await;
    let watch = admin.watch_after_list(CONFIGMAPS).await;
    // tok-b's watch opens the feed; tok-a's is fed from it.
    let mut b = anonymous(&bed).await;
    let mut a = anonymous(&bed).await;
    let mut b_watch = watch_with_token(&mut b, &watch, "tok-b").await;
    assert_eq!(b_watch.status, 200);
    wait_for("tok-b's feed open", T, || {
        (bed.kg.metric("kubegate_shared_watch_feeds") >= 1.0).then_some(())
    });
    let mut a_watch = watch_with_token(&mut a, &watch, "tok-a").await;
    assert_eq!(a_watch.status, 200);
    wait_for("tok-a fed", T, || {
        (bed.kg.metric("kubegate_shared_watches") >= 2.0).then_some(())
    });
    let upstream_watches: u64 = bed.sims.iter().map(Sim::watches_open).sum();
    assert_eq!(upstream_watches, 1, "one upstream watch feeds both");

    revoke(&bed, "tok-a");
    // tok-a's next watch, once its name is reviewed again: the apiserver's 401.
    let mut again = anonymous(&bed).await;
    let deadline = Instant::now() + T;
    loop {
        let r = watch_with_token(&mut again, &watch, "tok-a").await;
        if r.status == 401 {
            break;
        }
        // Fed still, within the second its name lives: a stream to let go.
        assert_eq!(r.status, 200);
        assert!(Instant::now() < deadline, "the revoked token was still fed");
        drop(r);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its fed watch ends at once; tok-b's goes on.
    let ended = a_watch.next(T).await.unwrap();
    assert!(ended.is_none(), "tok-a's fed watch ended: {ended:?}");
    assert!(bed.kg.metric("kubegate_shared_watches_revoked_total") >= 1.0);
    let r = admin
        .post(CONFIGMAPS, r#"{"metadata":{"name":"after"}}"#)
        .await
        .unwrap();
    assert_eq!(r.status, 201);
    let event = b_watch.next_json(T).await;
    assert_eq!(event["object"]["metadata"]["name"], "after", "{event}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_joining_a_feed_authorized_longer_ago_than_the_review_ttl_is_reviewed_first() {
    let bed = sharing(|cfg| {
        cfg.terminate.shared_watches.enabled = true;
        cfg.terminate.access_review.ttl = Duration::from_secs(1);
    });
    let mut alice = as_user(&bed, "alice").await;
    let watch = alice.watch_after_list(CONFIGMAPS).await;
    let reviews = || -> u64 { bed.sims.iter().map(Sim::access_reviews_received).sum() };
    let before = reviews();
    let first = alice.stream(&watch).await.unwrap();
    assert_eq!(first.status, 200);
    wait_for("alice's feed open", T, || {
        (bed.kg.metric("kubegate_shared_watch_feeds") >= 1.0).then_some(())
    });
    // At once, the feed's own authorization is fresh: fed without a review.
    let mut conn = as_user(&bed, "alice").await;
    let second = conn.stream(&watch).await.unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(bed.kg.metric("kubegate_shared_watches"), 2.0);
    assert_eq!(
        reviews(),
        before,
        "no review while the feed's authorization is fresh"
    );
    // Longer than the review TTL (1 s) after the feed opened, the same sender's watch is
    // fed only after a SubjectAccessReview allowed it. (What is awaited is the TTL itself.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut late = as_user(&bed, "alice").await;
    let third = late.stream(&watch).await.unwrap();
    assert_eq!(third.status, 200);
    assert_eq!(bed.kg.metric("kubegate_shared_watches"), 3.0);
    assert_eq!(reviews(), before + 1, "one review before it was fed");
    drop((first, second, third));
}
